//===- Raise.h - Raising exported idioms to dtc ops -------------*- C++ -*-===//
//
// Exporters decompose fused ops (GELU, scaled-dot-product attention) into
// elementwise math. These patterns find the decompositions in the imported
// dtc IR and rebuild the fused op, so later stages see one attention op
// with a causal flag instead of a matmul/mask/softmax/matmul chain.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_ONNX_RAISE_H
#define DTC_FRONTENDS_ONNX_RAISE_H

#include "mlir/IR/PatternMatch.h"

#include <optional>

namespace dtc::onnx {

/// `x * 0.5 * (1 + erf(x / sqrt(2)))` in any operand order -> dtc.gelu.
void populateRaiseGeluPatterns(mlir::RewritePatternSet &patterns);

/// `softmax((q*s1) @ (kT*s2) [+ causal mask]) @ v` -> dtc.attention.
void populateRaiseAttentionPatterns(mlir::RewritePatternSet &patterns);

/// RMSNorm, decomposed LayerNorm, SiLU and HF repeat_kv (GQA) -> dtc
/// rms_norm, layer_norm, silu and attention with fewer kv heads.
void populateRaiseNormPatterns(mlir::RewritePatternSet &patterns);

/// Mamba's selective scan unrolled over the positions (h_i = a_i * h_{i-1}
/// + x_i, each read out against c_i, stacked) -> dtc.selective_scan.
void populateRaiseScanPatterns(mlir::RewritePatternSet &patterns);

/// Applies all sets to `op` (a module or function) until nothing changes,
/// then records on `op` the attention left unraised (`softmax(...) @ v`
/// that dtc.attention cannot express, ModernBERT's bidirectional local
/// layers) as `dtc.unraised_attention`, the locations of those matmuls:
/// a model description counting dtc.attention ops would miss those layers.
mlir::LogicalResult raiseIdioms(mlir::Operation *op);

/// The `softmax(...) @ v` products under `op` (a softmax, or its NaN guard,
/// as the matmul's left operand).
llvm::SmallVector<mlir::Location> findUnraisedAttention(mlir::Operation *op);

/// The value of a splat floating-point dtc.constant, or nullopt.
std::optional<double> getSplatFloat(mlir::Value value);

/// True if `a` and `b` agree to a relative tolerance (for exported constants
/// like 1.4142135 vs sqrt(2)).
bool isClose(double a, double b, double relTol = 1e-5);

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_RAISE_H
