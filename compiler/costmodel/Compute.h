//===- Compute.h - Kernel time on one GPU -----------------------*- C++ -*-===//
//
// A roofline with an achievable-efficiency curve: a GEMM takes the longer of
// its FLOPs at the shape-dependent efficiency and its bytes at achievable
// HBM bandwidth; streaming (element-wise, norm, softmax) kernels take their
// bytes moved.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_COMPUTE_H
#define DTC_COMPILER_COSTMODEL_COMPUTE_H

#include "compiler/costmodel/Cluster.h"

namespace dtc {

/// Fraction of peak a GEMM of C[M,N] += A[M,K] B[K,N] reaches. A small
/// dimension leaves tiles partly empty, too few tiles for the SMs, or a short
/// main loop against the fixed prologue/epilogue; one half-size constant
/// stands for all three.
double gemmEfficiency(double m, double n, double k, const Cluster &cluster);

/// Fraction of peak a fused (FlashAttention-style) attention kernel reaches:
/// the GEMM curve over the two sequence lengths, times hd / (hd + 32) for
/// the head dimension, which sets its inner loops' length (FlashAttention-2
/// reports 50-73% of A100 peak from head dim 64 to 128), times the
/// cluster's attentionEfficiency (1 on the presets; `dtc calibrate` measures
/// it). Not calibrated on GPUs: no calibration row used a fused kernel.
double fusedAttentionEfficiency(double queries, double keys, double headDim,
                                const Cluster &cluster);

/// Seconds for `batch` independent GEMMs of one shape with `type` inputs.
double gemmTime(double m, double n, double k, double batch, DType type,
                const Cluster &cluster);

/// Forward, input-gradient and weight-gradient GEMM times of one linear
/// layer Y[M,N] = X[M,K] W[K,N].
struct LinearTimes {
  double forward = 0;
  double backward = 0;  ///< dX[M,K] = dY W^T plus dW[K,N] = X^T dY.
  double inputGrad = 0; ///< The dX part of backward alone.
};
LinearTimes linearTimes(double m, double n, double k, double batch, DType type,
                        const Cluster &cluster);

/// Seconds for a memory-bound kernel moving `bytes` through HBM.
double streamTime(double bytes, const Cluster &cluster);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_COMPUTE_H
