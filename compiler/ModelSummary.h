//===- ModelSummary.h - what a model is, in numbers -------------*- C++ -*-===//

#ifndef DTC_COMPILER_MODELSUMMARY_H
#define DTC_COMPILER_MODELSUMMARY_H

#include "compiler/costmodel/Spec.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtc {

/// Plain numbers about a model, read once from its IR, so that the cost
/// model and planner never touch MLIR.
struct ModelSummary {
  std::string name;
  int64_t params = 0;           ///< Elements of the distinct trained tensors.
  int64_t parameterTensors = 0; ///< Distinct trained dtc.parameter names.
  /// Names of the trained and of the frozen tensors (buffers, --frozen), in
  /// order of first use.
  std::vector<std::string> trained, frozen;
  int64_t frozenElements = 0;
  /// Parameters of the export's graph signature it has no tensor of
  /// (`dtc.not_exported`: tied under another name, or dropped because
  /// forward never reads them).
  std::vector<std::string> notExported;
  /// The batch the export fixed (`dtc.fixed_batch`), and why it is every
  /// micro-batch (`dtc.fixed_batch_reason`; empty: it re-binds, as
  /// `dtc.rebound_batch` was).
  std::optional<int64_t> fixedBatch;
  std::string fixedBatchReason;
  int64_t tokensPerStep = 0; ///< Tokens in one forward of @main.
  double forwardFlops = 0;   ///< Matmul and attention FLOPs of @main.
  /// Transformer blocks of @main (passes/TransformerBlocks.h) and how many
  /// differ in structure; 0 when it is not a stack of blocks.
  int64_t blocks = 0, distinctBlocks = 0;
  /// Training FLOPs per token: forward + backward (2x forward), no recompute.
  double flopsPerToken() const {
    return tokensPerStep ? 3 * forwardFlops / tokensPerStep : 0;
  }
};

/// Summarizes `module`'s @main function.
ModelSummary summarizeModel(mlir::ModuleOp module, llvm::StringRef name);

/// Reads the transformer structure the cost model prices from raised dtc IR:
/// vocabulary and width from the token embedding, layers from the attention
/// ops, heads from their operands, the MLP width from the activation's input,
/// a gated MLP from silu(x) * y. Fails, saying what is missing, for a graph
/// that is not a stack of transformer blocks.
llvm::Expected<TransformerSpec> extractTransformerSpec(mlir::ModuleOp module,
                                                       llvm::StringRef name);

} // namespace dtc

#endif // DTC_COMPILER_MODELSUMMARY_H
