//===- ModelSummary.cpp - what a model is, in numbers ---------------------===//

#include "compiler/ModelSummary.h"

#include "dialects/dtc/DtcOps.h"
#include "passes/OpCost.h"
#include "passes/TransformerBlocks.h"
#include "runtime/support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace dtc {
ModelSummary summarizeModel(ModuleOp module, llvm::StringRef name) {
  ModelSummary summary;
  summary.name = name.str();
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return summary;

  // Tokens: the elements of the first integer (token id) input; else, for
  // a [batch, seq, features] input, batch x seq; else (images, tables) the
  // samples of the batch dim.
  for (Type type : main.getArgumentTypes()) {
    auto tensor = cast<RankedTensorType>(type);
    if (isa<IntegerType>(tensor.getElementType())) {
      summary.tokensPerStep = tensor.getNumElements();
      break;
    }
  }
  if (!summary.tokensPerStep && main.getNumArguments() > 0) {
    auto tensor = cast<RankedTensorType>(main.getArgumentTypes().front());
    ArrayRef<int64_t> shape = tensor.getShape();
    summary.tokensPerStep = shape.size() == 3 ? shape[0] * shape[1]
                            : shape.empty()   ? 1
                                              : shape[0];
  }

  std::vector<TransformerBlock> blocks = findTransformerBlocks(main);
  summary.blocks = static_cast<int64_t>(blocks.size());
  for (auto [i, block] : llvm::enumerate(blocks))
    summary.distinctBlocks += block.sameAs == i;

  llvm::StringSet<> seen;
  main.walk([&](Operation *op) {
    if (auto param = dyn_cast<mlir::dtc::ParameterOp>(op)) {
      if (seen.insert(param.getName()).second) {
        int64_t elements = param.getType().getNumElements();
        if (param.getFrozen()) {
          summary.frozen.push_back(param.getName().str());
          summary.frozenElements += elements;
        } else {
          summary.trained.push_back(param.getName().str());
          summary.params += elements;
          ++summary.parameterTensors;
        }
      }
    } else {
      // GEMMs and attention, priced as the cost model prices them.
      summary.forwardFlops += opWork(op).modelFlops();
    }
  });
  if (auto fixed = module->getAttrOfType<IntegerAttr>("dtc.fixed_batch"))
    summary.fixedBatch = fixed.getInt();
  if (auto reason = module->getAttrOfType<StringAttr>("dtc.fixed_batch_reason"))
    summary.fixedBatchReason = reason.getValue().str();
  // State the computation folded at import (a causal mask, RoPE's
  // inv_freq): kept and saved, never trained.
  if (auto entries = module->getAttrOfType<ArrayAttr>("dtc.state_dict"))
    for (Attribute attr : entries)
      if (auto entry = dyn_cast<DictionaryAttr>(attr))
        if (auto key = entry.getAs<StringAttr>("name");
            key && seen.insert(key.getValue()).second) {
          summary.frozen.push_back(key.getValue().str());
          if (auto type = entry.getAs<TypeAttr>("type"))
            if (auto tensor = dyn_cast<RankedTensorType>(type.getValue()))
              summary.frozenElements += tensor.getNumElements();
        }
  if (auto names = module->getAttrOfType<ArrayAttr>("dtc.not_exported"))
    for (auto name : names.getAsValueRange<StringAttr>())
      summary.notExported.push_back(name.str());
  return summary;
}

/// `op`'s streaming bytes per token (none for a GEMM, attention or a free
/// op), floats apart from the rest.
static StreamPerToken streamPerToken(Operation *op, double tokens) {
  KernelWork one = opWork(op, 1), two = opWork(op, 2);
  if (one.kind != KernelWork::Kind::Stream)
    return {};
  return {(two.bytes - one.bytes) / tokens,
          (2 * one.bytes - two.bytes) / tokens};
}

/// The kernels of the first block's halves and of the edges, streaming
/// ones per token of the residual stream; none where the blocks or the
/// point between a block's attention and MLP are not found.
static std::optional<IrKernels> measureStreams(func::FuncOp main) {
  std::vector<TransformerBlock> blocks = findTransformerBlocks(main);
  if (blocks.empty())
    return std::nullopt;
  SmallVector<Operation *> ops;
  for (Operation &op : main.getBody().front().without_terminator())
    ops.push_back(&op);
  const TransformerBlock &first = blocks.front();
  double tokens = 0;
  std::optional<unsigned> attention, mid;
  for (unsigned i = first.begin; i < first.end && !attention; ++i)
    if (attentionShape(ops[i]))
      attention = i;
  for (const SingleCrossing &point : findSingleCrossings(ops)) {
    auto type = dyn_cast<RankedTensorType>(point.value.getType());
    if (point.index == first.begin && type && type.getRank() > 0)
      tokens = static_cast<double>(type.getNumElements()) /
               static_cast<double>(type.getShape().back());
    if (attention && !mid && point.index > *attention &&
        point.index < first.end)
      mid = point.index;
  }
  if (!mid || tokens <= 0)
    return std::nullopt;
  IrKernels streams;
  auto half = [&](unsigned begin, unsigned end, int &gemms) {
    std::optional<unsigned> firstGemm, lastGemm;
    for (unsigned i = begin; i < end; ++i)
      if (opWork(ops[i]).kind == KernelWork::Kind::Gemm) {
        firstGemm = firstGemm.value_or(i);
        lastGemm = i;
        ++gemms;
      }
    IrKernels::Half result;
    for (unsigned i = begin; i < end; ++i) {
      bool split = firstGemm && i > *firstGemm && i < *lastGemm;
      (split ? result.split : result.whole) += streamPerToken(ops[i], tokens);
    }
    return result;
  };
  int attentionGemms = 0, mlpGemms = 0;
  streams.attention = half(first.begin, *mid, attentionGemms);
  streams.mlp = half(*mid, first.end, mlpGemms);
  // Q, K, V and the output projection; gate, up and down.
  streams.separateQkv = attentionGemms >= 4;
  streams.separateGateUp = mlpGemms >= 3;
  for (unsigned i = 0; i < first.begin; ++i)
    streams.embedding += streamPerToken(ops[i], tokens);
  for (unsigned i = blocks.back().end; i < ops.size(); ++i)
    streams.output += streamPerToken(ops[i], tokens);
  for (Operation *op : ops)
    streams.modelFlopsPerToken += opWork(op).modelFlops() / tokens;
  return streams;
}

llvm::Expected<TransformerSpec> extractTransformerSpec(ModuleOp module,
                                                       llvm::StringRef name) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return badInput("{0}: no @main function", name);
  TransformerSpec spec;
  spec.name = name.str();
  mlir::dtc::EmbeddingOp embedding;
  SmallVector<AttentionShape> attentions;
  Operation *activation = nullptr;
  main.walk([&](Operation *op) {
    if (auto e = dyn_cast<mlir::dtc::EmbeddingOp>(op); e && !embedding)
      embedding = e;
    else if (std::optional<AttentionShape> a = attentionShape(op))
      attentions.push_back(*a);
    else if (!activation &&
             isa<mlir::dtc::GeluOp, mlir::dtc::SiluOp, mlir::dtc::ReluOp>(op))
      activation = op;
  });
  if (!embedding)
    return badInput("{0}: no token embedding found; the planner models "
                    "transformers (an embedding, attention blocks, an MLP)",
                    name);
  if (attentions.empty())
    return badInput("{0}: no attention found; the planner models "
                    "transformers (an embedding, attention blocks, an MLP)",
                    name);
  if (!activation)
    return badInput("{0}: no MLP activation (gelu, silu, relu) found", name);
  // Attention the importer could not raise (ModernBERT's bidirectional
  // local layers): the blocks counted above are not all of the model's.
  if (auto unraised =
          module->getAttrOfType<ArrayAttr>("dtc.unraised_attention");
      unraised && !unraised.empty()) {
    std::string where;
    llvm::raw_string_ostream os(where);
    os << cast<LocationAttr>(unraised[0]);
    return badInput("{0}: {1} attention layer{2} raised and {3} that "
                    "dtc.attention cannot express (first at {4})",
                    name, attentions.size(), attentions.size() == 1 ? "" : "s",
                    unraised.size(), where);
  }

  auto table = embedding.getTable().getType();
  spec.vocab = table.getDimSize(0);
  spec.hidden = table.getDimSize(1);
  spec.layers = attentions.size();
  const AttentionShape &first = attentions.front();
  spec.heads = first.heads;
  spec.seqLen = first.seqLen;
  spec.kvHeads = first.kvHeads;
  spec.causal = first.causal;
  auto hidden = cast<RankedTensorType>(activation->getOperand(0).getType());
  spec.ffnHidden = hidden.getShape().back();
  // SwiGLU: silu(gate) * up.
  spec.gatedMlp = isa<mlir::dtc::SiluOp>(activation) &&
                  llvm::any_of(activation->getUsers(), [](Operation *user) {
                    return isa<mlir::dtc::MulOp>(user);
                  });
  // Mixture of experts: the first layer's router sets the spec's.
  main.walk([&](mlir::dtc::MoeRouteOp route) {
    spec.experts = route.getLogits().getType().getDimSize(2);
    spec.topK = route.getTopK();
    // The expert buffer [b, E, C, h] is computed and exchanged whole.
    spec.expertRowsPerToken =
        static_cast<double>(spec.experts * route.getCapacity()) /
        static_cast<double>(route.getLogits().getType().getDimSize(1));
    return WalkResult::interrupt();
  });
  // Tied: the output projection, a contraction other than a lookup, reads
  // the embedding table itself.
  Value tableValue = embedding.getTable();
  spec.tiedEmbeddings = llvm::any_of(tableValue.getUsers(), [](Operation *u) {
    return u->hasTrait<mlir::dtc::traits::SumReductions>() &&
           !u->hasTrait<mlir::dtc::traits::RowLookup>();
  });
  if (!spec.moe())
    spec.irKernels = measureStreams(main);
  return spec;
}
} // namespace dtc
