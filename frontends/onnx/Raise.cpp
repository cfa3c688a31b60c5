//===- Raise.cpp - Raising exported idioms to dtc ops ---------------------===//

#include "frontends/onnx/Raise.h"

#include "dialects/dtc/DtcOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

using namespace mlir;
namespace d = mlir::dtc;

namespace dtc::onnx {

std::optional<double> getSplatFloat(Value value) {
  auto constant = value.getDefiningOp<mlir::dtc::ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || !isa<FloatType>(dense.getElementType()) || !dense.isSplat())
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

bool isClose(double a, double b, double relTol) {
  return std::fabs(a - b) <= relTol * std::max(std::fabs(a), std::fabs(b));
}

LogicalResult raiseIdioms(Operation *op) {
  RewritePatternSet patterns(op->getContext());
  populateRaiseGeluPatterns(patterns);
  populateRaiseAttentionPatterns(patterns);
  populateRaiseNormPatterns(patterns);
  return applyPatternsGreedily(op, std::move(patterns));
}

} // namespace dtc::onnx
