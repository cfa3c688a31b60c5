//===- HostEval.h - Evaluating ONNX nodes on the host -----------*- C++ -*-===//
//
// The importer's constant evaluator, and the ONNX shape rules it shares with
// the lowering to dtc ops (Slice, Reshape, Split, ... resolve their
// arguments the same way whether the data is known or computed).
//
// Every function reports a problem by returning nullopt/false and setting
// `error` to a message without context; the importer adds file and node.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_ONNX_HOSTEVAL_H
#define DTC_FRONTENDS_ONNX_HOSTEVAL_H

#include "frontends/onnx/HostTensor.h"

#include "onnx/onnx_pb.h"

namespace dtc::onnx {

/// Resolves a possibly negative `axis` of a rank-`rank` value.
std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank,
                                     std::string &error);

/// Numpy broadcast of two shapes.
std::optional<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                std::string &error);

/// A strided slice of every dim: element `start + i * step` for `i` in
/// `[0, count)`.
struct SliceDims {
  llvm::SmallVector<int64_t> starts, steps, counts;
};
/// ONNX Slice's clamping rules; `axes` and `steps` may be empty (defaults).
std::optional<SliceDims>
resolveSlice(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> starts,
             llvm::ArrayRef<int64_t> ends, llvm::ArrayRef<int64_t> axes,
             llvm::ArrayRef<int64_t> steps, std::string &error);

/// ONNX Reshape's target: 0 copies the input dim (unless `allowZero`), -1 is
/// inferred.
std::optional<llvm::SmallVector<int64_t>>
resolveReshape(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> target,
               bool allowZero, std::string &error);

/// Unsqueeze's result shape.
std::optional<llvm::SmallVector<int64_t>>
unsqueezeShape(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> axes,
               std::string &error);
/// Squeeze's result shape; empty `axes` removes every size-1 dim.
std::optional<llvm::SmallVector<int64_t>>
squeezeShape(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> axes,
             std::string &error);

/// Split's chunk sizes along `axis` (size `dimSize`) into `numOutputs`:
/// `sizes` when given, else num_outputs' rule (ceil-sized chunks, the last
/// one smaller), else equal parts.
std::optional<llvm::SmallVector<int64_t>>
resolveSplit(int64_t dimSize, std::optional<llvm::ArrayRef<int64_t>> sizes,
             int64_t numOutputs, bool ceilChunks, std::string &error);

/// Reduction axes: sorted, unique, non-negative. Empty `axes` means all dims
/// unless `noopWithEmptyAxes` (then the result is empty: no reduction).
std::optional<llvm::SmallVector<int64_t>>
resolveReduceAxes(llvm::ArrayRef<int64_t> axes, int64_t rank,
                  bool noopWithEmptyAxes, std::string &error);

/// Inputs of a node the evaluator runs on; null for omitted optional inputs.
using HostInputs = llvm::ArrayRef<const HostTensor *>;

/// True if evaluateNode implements `opType` (default domain).
bool canEvaluateOnHost(llvm::StringRef opType);

/// Evaluates `node` on known inputs. Returns nullopt with `error` set if the
/// node is invalid (bad axis, shapes that do not broadcast, ...).
std::optional<llvm::SmallVector<HostTensor>>
evaluateNode(const ::onnx::NodeProto &node, HostInputs inputs,
             std::string &error);

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_HOSTEVAL_H
