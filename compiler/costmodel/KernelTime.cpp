//===- KernelTime.cpp - Seconds of one kernel on a cluster ----------------===//

#include "compiler/costmodel/KernelTime.h"

#include "compiler/costmodel/Compute.h"

using namespace dtc;

double dtc::kernelSeconds(const KernelWork &work, DType type,
                          const Cluster &cluster) {
  switch (work.kind) {
  case KernelWork::Kind::Free:
  case KernelWork::Kind::Comm:
    return 0;
  case KernelWork::Kind::Gemm:
    return gemmTime(work.m, work.n, work.k, work.batch, type, cluster);
  case KernelWork::Kind::Attention: {
    double rate = cluster.peakFlops(type) *
                  fusedAttentionEfficiency(work.queries, work.keys,
                                           work.headDim, cluster);
    double seconds = rate > 0 ? work.executedFlops / rate : 0;
    return work.gradient ? seconds * cluster.attentionBackwardRatio : seconds;
  }
  case KernelWork::Kind::Stream:
    return streamTime(work.bytes, cluster);
  }
  return 0;
}

double dtc::backwardKernelSeconds(const KernelWork &work, DType type,
                                  const Cluster &cluster) {
  switch (work.kind) {
  case KernelWork::Kind::Free:
  case KernelWork::Kind::Comm:
    return 0;
  case KernelWork::Kind::Gemm:
    return linearTimes(work.m, work.n, work.k, work.batch, type, cluster)
        .backward;
  case KernelWork::Kind::Attention: {
    KernelWork gradient = work;
    gradient.gradient = true;
    return kernelSeconds(gradient, type, cluster);
  }
  case KernelWork::Kind::Stream:
    return 2 * kernelSeconds(work, type, cluster);
  }
  return 0;
}
