//===- Compute.cpp - Kernel time on one GPU -------------------------------===//

#include "compiler/costmodel/Compute.h"

#include <algorithm>

using namespace dtc;

double dtc::gemmEfficiency(double m, double n, double k,
                           const Cluster &cluster) {
  if (m <= 0 || n <= 0 || k <= 0)
    return cluster.gemmPeakEfficiency;
  return cluster.gemmPeakEfficiency /
         (1 + cluster.gemmHalfSize * (1 / m + 1 / n + 1 / k));
}

double dtc::fusedAttentionEfficiency(double queries, double keys,
                                     double headDim, const Cluster &cluster) {
  if (queries <= 0 || keys <= 0 || headDim <= 0)
    return cluster.gemmPeakEfficiency;
  return cluster.attentionEfficiency * cluster.gemmPeakEfficiency /
         (1 + cluster.gemmHalfSize * (1 / queries + 1 / keys)) * headDim /
         (headDim + 32);
}

double dtc::gemmTime(double m, double n, double k, double batch, DType type,
                     const Cluster &cluster) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0)
    return 0;
  double flops = 2 * m * n * k * batch;
  double efficiency = gemmEfficiency(m, n, k, cluster) *
                      (type == DType::FP8 ? cluster.fp8GemmEfficiency : 1);
  double compute = flops / (cluster.peakFlops(type) * efficiency);
  double bytes =
      static_cast<double>(dtypeBytes(type)) * batch * (m * k + k * n + m * n);
  return std::max(compute, streamTime(bytes, cluster));
}

LinearTimes dtc::linearTimes(double m, double n, double k, double batch,
                             DType type, const Cluster &cluster) {
  LinearTimes times;
  times.forward = gemmTime(m, n, k, batch, type, cluster);
  times.inputGrad = gemmTime(m, k, n, batch, type, cluster);
  times.backward = times.inputGrad + gemmTime(k, n, m, batch, type, cluster);
  return times;
}

double dtc::streamTime(double bytes, const Cluster &cluster) {
  return bytes / (cluster.hbmBytesPerSecond * cluster.memoryEfficiency);
}
