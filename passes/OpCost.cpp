//===- OpCost.cpp - What a dtc op costs, read from the IR -----------------===//

#include "passes/OpCost.h"

#include "dialects/dtc/DtcCollectiveOps.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace dtc;

static TensorDesc describe(mlir::Type type, int64_t floatBytes) {
  TensorDesc desc;
  // A started collective's handle carries the tensor it delivers.
  if (auto async = llvm::dyn_cast<mlir::dtc::AsyncType>(type))
    type = async.getValueType();
  auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape()) {
    // Async tokens and the like move nothing.
    desc.elementBytes = 0;
    return desc;
  }
  desc.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
  mlir::Type element = tensor.getElementType();
  if (llvm::isa<mlir::FloatType>(element) && floatBytes > 0)
    desc.elementBytes = floatBytes;
  else if (element.isIntOrFloat())
    desc.elementBytes =
        std::max<int64_t>(element.getIntOrFloatBitWidth() / 8, 1);
  return desc;
}

KernelDesc dtc::kernelDescOf(mlir::Operation *op, int64_t floatBytes) {
  KernelDesc desc;
  desc.op = op->getName().getStringRef();
  for (mlir::Type type : op->getOperandTypes())
    desc.inputs.push_back(describe(type, floatBytes));
  for (mlir::Type type : op->getResultTypes())
    desc.outputs.push_back(describe(type, floatBytes));
  desc.transposeLhs = op->hasAttr("transpose_lhs");
  desc.transposeRhs = op->hasAttr("transpose_rhs");
  desc.causal = op->hasAttr("causal");
  return desc;
}

KernelWork dtc::opWork(mlir::Operation *op, int64_t floatBytes) {
  return kernelWork(kernelDescOf(op, floatBytes));
}
