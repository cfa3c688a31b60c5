//===- BatchRebind.h - A fixed-batch export at another batch --*- C++ -*-===//
//
// A graph exported with a fixed batch B (every graph input's dim 0 the
// number B) has B baked into its shape constants: Reshape and Expand
// targets, Slice bounds, a CLS token or an attention mask expanded to the
// batch. BatchRebinder lets the importer import it at another batch b. It
// follows the batch from the graph inputs node by node and
//  - rewrites the constant shape operands of batch-carrying values
//    (Reshape and Expand targets, Slice bounds over the batch) from B to b;
//  - slices a batch-free operand the export expanded to B where it meets
//    the batch (the CLS token, an attention mask), when it is provably the
//    same along that axis (expanded from size 1, or known and checked);
//  - stops, naming the node, wherever the batch does not provably flow:
//    an op with no rule for it, an axis that mixes the batch with another
//    dim, a reduction over it that is not the scalar loss.
// Which axis of a value carries the batch is read off its shapes: its shape
// at B (from a reference import at the exported batch) against its shape at
// b. One axis of size B*m at B and b*m at b carries the batch (outermost,
// inner factor m); equal shapes are batch-free; anything else stops the
// re-binding. As b != B changes only what the batch reaches, a dim that
// equals B by coincidence (B = 2 and 2 heads, B = 8 and 8 positions) is
// never taken for it.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_ONNX_BATCHREBIND_H
#define DTC_FRONTENDS_ONNX_BATCHREBIND_H

#include "frontends/onnx/HostTensor.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

namespace onnx {
class NodeProto;
} // namespace onnx

namespace dtc::onnx::detail {

class ModelImporter;

/// One value as the reference import at the exported batch computed it.
struct ValueAtExportedBatch {
  llvm::SmallVector<int64_t, 4> shape;
  /// Its elements where known on the host (shape arithmetic, masks).
  std::shared_ptr<const HostTensor> known;
};
using ValuesAtExportedBatch = llvm::StringMap<ValueAtExportedBatch>;

/// Where a value carries the batch: its dim `axis` is the batch times
/// `inner`, the batch outermost.
struct BatchAxis {
  int64_t axis = 0;
  int64_t inner = 1;
  bool operator==(const BatchAxis &o) const {
    return axis == o.axis && inner == o.inner;
  }
};

class BatchRebinder {
public:
  BatchRebinder(int64_t exportedBatch, int64_t batch,
                ValuesAtExportedBatch atExportedBatch)
      : exportedBatch(exportedBatch), batch(batch),
        atExported(std::move(atExportedBatch)) {}

  /// A graph input of rank > 0: it carries the batch in dim 0.
  void addGraphInput(llvm::StringRef name);
  /// The node to import in place of the importer's current node: a copy
  /// whose constant shape operands are re-bound and whose batch-free
  /// operands that meet the batch are sliced to it, or the node itself.
  llvm::Expected<const ::onnx::NodeProto *> prepare(ModelImporter &importer);
  /// After the importer imported `node` (prepare's answer): classifies its
  /// outputs and checks them against what the op does with the batch.
  llvm::Error classifyOutputs(ModelImporter &importer,
                              const ::onnx::NodeProto &node);
  /// Every graph output carries the batch, scaled (a scalar loss excepted).
  llvm::Error checkGraphOutputs(ModelImporter &importer);

private:
  std::optional<BatchAxis> batchAxisOf(llvm::StringRef name) const;
  const ValueAtExportedBatch *exported(llvm::StringRef name) const;
  /// True if the batch-free value `name` is the same along `axis`.
  bool isUniformAlong(ModelImporter &importer, llvm::StringRef name,
                      int64_t axis) const;

  // Rewrites of prepare(), each on the node copy `node`.
  llvm::Error rebindReshapeTarget(ModelImporter &importer,
                                  ::onnx::NodeProto &node, bool &changed);
  llvm::Error rebindExpandTarget(ModelImporter &importer,
                                 ::onnx::NodeProto &node, bool &changed);
  llvm::Error rebindSliceBounds(ModelImporter &importer,
                                ::onnx::NodeProto &node, bool &changed);
  /// Broadcasting ops, MatMul's batch dims and Concat's other dims: the
  /// batch-free operands sized B*m where the batch is b*m.
  llvm::Error sliceMeetingOperands(ModelImporter &importer,
                                   ::onnx::NodeProto &node, bool &changed);
  /// Defines a known tensor or a dtc value under a fresh name and makes
  /// input `index` of `node` read it.
  void replaceInput(ModelImporter &importer, ::onnx::NodeProto &node, int index,
                    llvm::StringRef suffix, HostTensor known);
  void replaceInput(ModelImporter &importer, ::onnx::NodeProto &node, int index,
                    llvm::StringRef suffix, mlir::Value value);

  /// Where the op puts the batch of its batch-carrying inputs in output
  /// `index`: nullopt for a batch-free output (a reduction over the batch);
  /// an error where the op has no rule or mixes the batch with other dims.
  llvm::Expected<std::optional<BatchAxis>>
  expectedOutputAxis(ModelImporter &importer, const ::onnx::NodeProto &node,
                     int index);
  /// The node and output expectedOutputAxis looks at (BatchRebind.cpp).
  struct OutputQuery;
  // The rules of expectedOutputAxis that take more than a few lines.
  /// Elementwise ops (and CastLike of a batch-carrying input): where their
  /// inputs broadcast the batch to.
  llvm::Expected<std::optional<BatchAxis>>
  elementwiseOutputAxis(OutputQuery &q);
  /// CumSum: the batch stays, unless it sums along it.
  llvm::Expected<std::optional<BatchAxis>> cumSumOutputAxis(OutputQuery &q);
  /// Reductions: the batch stays (dims before it kept or dropped), or is
  /// reduced away.
  llvm::Expected<std::optional<BatchAxis>> reduceOutputAxis(OutputQuery &q);
  /// Transpose: the batch moves where the perm sends it.
  llvm::Expected<std::optional<BatchAxis>> transposeOutputAxis(OutputQuery &q);
  /// Reshape-like ops: where the reshape at the exported batch kept it.
  llvm::Expected<std::optional<BatchAxis>> reshapeOutputAxis(OutputQuery &q);
  /// MatMul: the batch in either operand's batch or row/column dims.
  llvm::Expected<std::optional<BatchAxis>> matMulOutputAxis(OutputQuery &q);
  /// Concat, Expand, Slice, Split and Tile: the batch dim, kept whole.
  llvm::Expected<std::optional<BatchAxis>> shapeOpOutputAxis(OutputQuery &q);
  /// Gather: the batch of its data or of its indices.
  llvm::Expected<std::optional<BatchAxis>> gatherOutputAxis(OutputQuery &q);
  /// A SplitToSequence has no shape: its parts carry the batch where its
  /// input does, when it splits another dim.
  llvm::Error classifySequence(ModelImporter &importer,
                               const ::onnx::NodeProto &node);
  /// Which dims of a batch-free dtc value are the same along their length,
  /// by the op that made it (Expand from size 1, elementwise ops of such).
  void recordUniformAxes(ModelImporter &importer,
                         const ::onnx::NodeProto &node);

  int64_t exportedBatch, batch;
  ValuesAtExportedBatch atExported;
  llvm::StringMap<BatchAxis> batchAxes;
  /// Batch-free values computed by reducing over the batch (the loss).
  llvm::StringSet<> batchReduced;
  llvm::StringMap<llvm::SmallVector<bool, 4>> uniformAxes;
  /// The rewritten nodes (the importer keeps pointers to them).
  std::deque<::onnx::NodeProto> rewritten;
  int64_t renamed = 0;
};

} // namespace dtc::onnx::detail

#endif // DTC_FRONTENDS_ONNX_BATCHREBIND_H
