//===- ModelSummary.cpp - what a model is, in numbers ---------------------===//

#include "compiler/ModelSummary.h"

#include "dialects/dtc/DtcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

static int64_t product(ArrayRef<int64_t> dims) {
  int64_t result = 1;
  for (int64_t d : dims)
    result *= d;
  return result;
}

namespace dtc {
ModelSummary summarizeModel(ModuleOp module, llvm::StringRef name) {
  ModelSummary summary;
  summary.name = name.str();
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return summary;

  // Tokens: the elements of the first integer (token id) input, else the
  // leading dims of the first input.
  for (Type type : main.getArgumentTypes()) {
    auto tensor = cast<RankedTensorType>(type);
    if (isa<IntegerType>(tensor.getElementType())) {
      summary.tokensPerStep = tensor.getNumElements();
      break;
    }
  }
  if (!summary.tokensPerStep && main.getNumArguments() > 0) {
    auto tensor = cast<RankedTensorType>(main.getArgumentTypes().front());
    summary.tokensPerStep = product(tensor.getShape().drop_back());
  }

  llvm::StringSet<> seen;
  main.walk([&](Operation *op) {
    if (auto param = dyn_cast<mlir::dtc::ParameterOp>(op)) {
      if (seen.insert(param.getName()).second) {
        summary.params += param.getType().getNumElements();
        ++summary.parameterTensors;
      }
    } else if (auto matmul = dyn_cast<mlir::dtc::MatmulOp>(op)) {
      // 2 * (output elements) * k.
      auto lhs = matmul.getLhs().getType();
      int64_t k = matmul.getTransposeLhs() ? lhs.getDimSize(lhs.getRank() - 2)
                                           : lhs.getDimSize(lhs.getRank() - 1);
      summary.forwardFlops +=
          2.0 * matmul.getOutput().getType().getNumElements() * k;
    } else if (auto attention = dyn_cast<mlir::dtc::AttentionOp>(op)) {
      // q.k^T and p.v, each 2*b*h*s*t*d; counted in full even when causal,
      // the convention of Megatron-LM's model-FLOPs formula.
      auto q = attention.getQuery().getType().getShape();
      auto k = attention.getKey().getType().getShape();
      auto v = attention.getValue().getType().getShape();
      summary.forwardFlops += 2.0 * q[0] * q[1] * q[2] * k[2] * (q[3] + v[3]);
    }
  });
  return summary;
}
} // namespace dtc
