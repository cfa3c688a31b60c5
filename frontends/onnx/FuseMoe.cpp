//===- FuseMoe.cpp - Hugging Face sparse MoE blocks -> one MoE node -------===//
//
// The block as transformers' MixtralSparseMoeBlock (and Qwen2/3-MoE's) writes
// it, and PyTorch's TorchScript exporter records it:
//
//   x2 = Reshape(x, [-1, h]);  logits = MatMul(x2, gate^T)
//   weights, chosen = TopK(Softmax(logits), k)
//   [weights /= ReduceSum(weights)]                  (norm_topk_prob)
//   mask = Transpose(OneHot(chosen, E), [2, 1, 0])   [E, k, rows]
//   for e in 0..E-1:
//     slot, row = NonZero(mask[e])
//     y = (silu(x2[row] W1_e^T) * (x2[row] W3_e^T)) W2_e^T
//     acc = acc + ScatterElements(0, row, y * weights[row, slot])
//
// The dynamo exporter writes the same block with `Equal(chosen[..., None],
// Range(E))` for the one-hot mask, GatherND for the row and weight picks
// and `ScatterND(acc, row, y * w, reduction = add)` for the accumulation;
// both forms match.
//
// transformers 5 writes the experts batched (experts_implementation
// "batched_mm", over stacked [E, ., .] weights), and the dynamo exporter
// records that as
//
//   weights, chosen = TopK(Softmax(logits), k) [/ ReduceSum]
//                  or TopK(logits, k), then Softmax over the k (= the same
//                     top-k probabilities, renormalized)
//   rows = repeat_interleave(x2, k)                              [rows k, h]
//   g = bmm(GatherND(W1, chosen[:, None]), rows) [+ GatherND(b1, chosen)]
//   a = silu(g[:, :f]) * g[:, f:]          (Mixtral, Qwen, OLMoE, Granite)
//    or GPT-OSS's clamped GLU over the interleaved g[:, 0::2], g[:, 1::2]
//   y = bmm(GatherND(W2, chosen), a) [+ GatherND(b2, chosen)]
//   out = ReduceSum(Reshape(y * weights[:, None], [rows, k, h]), 1)
//
// which becomes the MoE node with activation_type "swiglu" and fc1 holding
// gate and value fused (swiglu_fusion 2 or 1).
//
// Matching keys on the router, on the expert index of each `mask[e]` gather
// and on the expert MLP; the plumbing between them (index arithmetic,
// expands, casts) is checked only for where it leads, so exporter versions
// that spell it differently still match. Everything the block computed is
// then dead and removed.
//
// Along the data path the matcher follows single readers node by node, so
// no-ops there would hide the block. An export without the ONNX optimizer
// (dynamo, optimize=False) is full of them: identity Transposes of the
// stacked weights, the choices expanded onto their own shape and concatenated
// alone, chunk() as SplitToSequence + SequenceAt, the same Squeeze twice.
// canonicalizeGraph (CanonicalizeGraph.h) rewrites those to the optimized
// spelling first, which keeps this matcher to one form per meaning.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/FuseMoe.h"

#include "frontends/onnx/CanonicalizeGraph.h"
#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/OnnxUtils.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>

using namespace dtc::onnx;
using namespace dtc::onnx::detail;
using ::onnx::NodeProto;

namespace {

/// One expert projection's weight as the graph reads it.
struct ExpertWeight {
  std::string initializer;
  /// Read through Transpose(perm [1, 0]): stored [out, in], torch's layout.
  bool storedOutIn = false;
};

/// One expert's step of the accumulation: the node whose output is the
/// accumulator after it, and the accumulator it read.
struct Accumulation {
  const NodeProto *out = nullptr;
  std::string in;
};

/// The matched parts of one block.
struct Block {
  const NodeProto *topK = nullptr;
  std::string input;  // [b, s, h] (or [rows, h]) hidden states
  std::string logits; // [rows, E]
  int64_t experts = 0, k = 0;
  bool normalize = false;
  std::vector<ExpertWeight> w1, w2, w3; // per expert
  const NodeProto *output = nullptr;    // the last accumulation
};

/// One projection of transformers 5's batched experts: the stacked weight
/// the expert index gathers from and its optional bias.
struct BatchedProjection {
  std::string weight;
  /// bmm(rows, W[e]): stored [E, in, out], not torch Linear's [E, out, in].
  bool storedInOut = false;
  std::string bias; // [E, out], or empty
};

/// The matched parts of one transformers 5 batched-experts block.
struct BatchedBlock {
  const NodeProto *topK = nullptr;
  std::string input, logits;
  int64_t k = 0;
  bool normalize = false;
  BatchedProjection fc1, fc2;
  /// ORT's swiglu_fusion: 1 gate and value interleaved, 2 gate half first.
  int64_t fusion = 2;
  double alpha = 1, beta = 0;
  std::optional<double> limit;
  const NodeProto *output = nullptr; // the ReduceSum over the k choices
};

/// The stacked expert parameters a router's choices gather: [E, out, in]
/// matrices and [E, out] biases.
struct GatheredExperts {
  std::vector<const NodeProto *> matrices, biases;
  int64_t experts = 0;
};

/// A gathered expert matrix's batched MatMul.
struct BatchedMatMul {
  const NodeProto *matmul = nullptr;
  BatchedProjection projection;
  std::string operand; // what the gathered matrix multiplies
};

class Fuser {
public:
  Fuser(::onnx::ModelProto &model, llvm::StringRef path)
      : model(model), graph(*model.mutable_graph()), path(path) {
    for (const auto &init : graph.initializer())
      initializers[init.name()] = &init;
    for (const NodeProto &n : graph.node()) {
      for (const std::string &out : n.output())
        producers[out] = &n;
      for (const std::string &in : n.input())
        consumers[in].push_back(&n);
    }
  }

  llvm::Expected<std::vector<StackedWeight>> run();

private:
  /// Matches the block whose router ends in `topK`: std::nullopt when it is
  /// not an MoE router at all, an error when it is one that does not match.
  llvm::Expected<std::optional<Block>> match(const NodeProto &topK);
  llvm::Error matchExpert(Block &block, int64_t expert,
                          const NodeProto &maskGather,
                          const std::string &weights,
                          std::vector<Accumulation> &adds);
  /// Matches transformers 5's batched experts routed by `topK`: std::nullopt
  /// when no stacked expert weight is gathered by its choices.
  llvm::Expected<std::optional<BatchedBlock>>
  matchBatched(const NodeProto &topK);
  /// The GatherND nodes within a few steps of the choices `chosen` that
  /// read stacked expert parameters of one expert count.
  GatheredExperts gatheredExperts(const std::string &chosen) const;
  /// Matches the router (softmax, top-k, maybe renormalized) and the
  /// hidden states it reads; returns the routing weights.
  llvm::Expected<std::string>
  matchBatchedRouting(BatchedBlock &block,
                      const GatheredExperts &gathered) const;
  /// The batched MatMul that reads the gathered matrix `gather`.
  std::optional<BatchedMatMul> batchedMatMulOf(const NodeProto &gather) const;
  /// Matches the two projections (with their biases) and the gated unit
  /// between them; returns the expert MLP's output.
  llvm::Expected<std::string> matchBatchedMlp(BatchedBlock &block,
                                              const GatheredExperts &gathered);
  /// Matches the expert outputs weighted by `weights` and summed over the
  /// k choices.
  llvm::Error matchWeightedSum(BatchedBlock &block,
                               const std::string &expertOut,
                               const std::string &weights) const;
  llvm::Error matchGatedUnit(BatchedBlock &block, const std::string &projected,
                             const std::string &activated);
  /// How many experts the router projection `gate` scores (0: not one).
  int64_t routerExperts(const NodeProto &gate) const;
  /// Plans the replacement of `block` (applied by applyReplacements).
  void rewrite(const Block &block, std::vector<StackedWeight> &stacked);
  void rewrite(const BatchedBlock &block);
  /// Plans `moe` (and the nodes it reads, `before`) in place of `output`,
  /// the block's last node, reading `input` unflattened when the router
  /// flattened it and flattening the result back.
  void replaceBlock(const NodeProto &output, const NodeProto &topK,
                    const std::string &logits, NodeProto moe,
                    std::vector<NodeProto> before);
  /// Puts each planned replacement where the node it replaces was.
  void applyReplacements();
  void removeDeadNodes();

  const NodeProto *producer(const std::string &name) const {
    auto it = producers.find(name);
    return it == producers.end() ? nullptr : it->second;
  }
  llvm::ArrayRef<const NodeProto *> users(const std::string &name) const {
    auto it = consumers.find(name);
    return it == consumers.end() ? llvm::ArrayRef<const NodeProto *>()
                                 : llvm::ArrayRef(it->second);
  }
  /// The single user of `name` of type `opType`, or null.
  const NodeProto *userOfType(const std::string &name,
                              llvm::StringRef opType) const {
    const NodeProto *found = nullptr;
    for (const NodeProto *n : users(name))
      if (n->op_type() == opType && isDefaultDomain(n->domain())) {
        if (found && found != n)
          return nullptr;
        found = n;
      }
    return found;
  }
  /// `name` with Cast/Identity producers skipped.
  std::string throughCasts(std::string name) const {
    while (const NodeProto *n = producer(name))
      if ((n->op_type() == "Cast" || n->op_type() == "Identity") &&
          n->input_size() > 0)
        name = n->input(0);
      else
        break;
    return name;
  }
  /// The value `name` becomes after single Cast users.
  std::string forwardCasts(std::string name) const {
    while (users(name).size() == 1 && users(name)[0]->op_type() == "Cast")
      name = users(name)[0]->output(0);
    return name;
  }
  /// The nodes that read `name` within `depth` steps.
  std::vector<const NodeProto *> reachableFrom(const std::string &name,
                                               int depth) const {
    std::vector<const NodeProto *> found;
    llvm::SmallVector<std::pair<std::string, int>> work{{name, 0}};
    llvm::StringSet<> seen;
    while (!work.empty()) {
      auto [v, d] = work.pop_back_val();
      if (d >= depth || !seen.insert(v).second)
        continue;
      for (const NodeProto *n : users(v)) {
        found.push_back(n);
        for (const std::string &out : n->output())
          work.push_back({out, d + 1});
      }
    }
    return found;
  }
  /// Whether `target` is `name` or computed from it (a bounded search up
  /// the producers).
  bool dependsOn(const std::string &name, const std::string &target) const;
  /// The int64 value of a one-element constant `name` (a Constant node or
  /// an initializer, through reshapes and casts).
  std::optional<std::vector<int64_t>> constantInts(std::string name) const;
  std::optional<HostTensor> constantTensor(std::string name) const;
  std::optional<ExpertWeight> weightOf(const std::string &name) const;
  /// The value of a one-element float or integer constant.
  std::optional<double> constantScalar(const std::string &name) const;
  /// `name` after single Squeeze/Unsqueeze/Reshape users (the rank
  /// plumbing around a bmm), and before such producers.
  std::string forwardShapes(std::string name) const {
    for (;;) {
      auto next = users(name);
      if (next.size() != 1 || next[0]->output_size() != 1 ||
          (next[0]->op_type() != "Squeeze" &&
           next[0]->op_type() != "Unsqueeze" &&
           next[0]->op_type() != "Reshape"))
        return name;
      name = next[0]->output(0);
    }
  }
  std::string backwardShapes(std::string name) const {
    while (const NodeProto *n = producer(name))
      if (n->op_type() == "Squeeze" || n->op_type() == "Unsqueeze" ||
          n->op_type() == "Reshape" || n->op_type() == "Cast")
        name = n->input(0);
      else
        break;
    return name;
  }

  template <typename... Ts>
  llvm::Error blockError(const NodeProto &at, const char *fmt,
                         Ts &&...args) const {
    return ::dtc::badInput(
        "{0}: MoE block routed by node '{1}' (TopK): {2}; dtc fuses "
        "Hugging Face's sparse MoE block (softmax router, top-k, SwiGLU "
        "experts) or imports com.microsoft MoE",
        path, nodeName(at),
        llvm::formatv(fmt, std::forward<Ts>(args)...).str());
  }

  ::onnx::ModelProto &model;
  ::onnx::GraphProto &graph;
  std::string path;
  std::map<std::string, const ::onnx::TensorProto *> initializers;
  std::map<std::string, const NodeProto *> producers;
  std::map<std::string, std::vector<const NodeProto *>> consumers;
  std::map<const NodeProto *, std::vector<NodeProto>> replacements;
};

bool Fuser::dependsOn(const std::string &name,
                      const std::string &target) const {
  // Breadth first: the data path is short, the shape arithmetic beside it
  // can be long.
  std::deque<std::string> work{name};
  llvm::StringSet<> seen;
  while (!work.empty() && seen.size() < 256) {
    std::string v = std::move(work.front());
    work.pop_front();
    if (v == target)
      return true;
    if (v.empty() || !seen.insert(v).second)
      continue;
    if (const NodeProto *n = producer(v))
      work.insert(work.end(), n->input().begin(), n->input().end());
  }
  return false;
}

std::optional<HostTensor> Fuser::constantTensor(std::string name) const {
  for (;;) {
    std::string error;
    if (auto it = initializers.find(name); it != initializers.end())
      return decodeTensor(*it->second, "", error);
    const NodeProto *n = producer(name);
    if (!n || !isDefaultDomain(n->domain()))
      return std::nullopt;
    if (n->op_type() == "Constant") {
      if (const auto *v = findAttribute(*n, "value_int"))
        return HostTensor::fromInts({v->i()});
      if (const auto *v = findAttribute(*n, "value_ints"))
        return HostTensor::fromInts(
            std::vector<int64_t>(v->ints().begin(), v->ints().end()));
      if (const auto *v = findAttribute(*n, "value_float")) {
        HostTensor t = HostTensor::zeros(::onnx::TensorProto::FLOAT, {});
        t.set(0, v->f());
        return t;
      }
      const auto *v = findAttribute(*n, "value");
      if (!v)
        return std::nullopt;
      return decodeTensor(v->t(), "", error);
    }
    // A reshaped or cast constant keeps its elements (CastLike: cast like
    // its second input, whose type only it reads).
    if (n->op_type() != "Reshape" && n->op_type() != "Squeeze" &&
        n->op_type() != "Unsqueeze" && n->op_type() != "Cast" &&
        n->op_type() != "CastLike" && n->op_type() != "Identity")
      return std::nullopt;
    name = n->input(0);
  }
}

std::optional<std::vector<int64_t>>
Fuser::constantInts(std::string name) const {
  auto t = constantTensor(std::move(name));
  if (!t || t->isFloat())
    return std::nullopt;
  return t->ints;
}

std::optional<double> Fuser::constantScalar(const std::string &name) const {
  auto t = constantTensor(name);
  if (!t || t->size() != 1)
    return std::nullopt;
  return t->getDouble(0);
}

std::optional<ExpertWeight> Fuser::weightOf(const std::string &name) const {
  auto isMatrix = [&](const std::string &v) {
    auto it = initializers.find(v);
    return it != initializers.end() && it->second->dims_size() == 2 &&
           isFloatType(it->second->data_type());
  };
  if (isMatrix(name))
    return ExpertWeight{name, false};
  const NodeProto *t = producer(name);
  if (t && t->op_type() == "Transpose" && isMatrix(t->input(0))) {
    auto perm = getIntsAttr(*t, "perm");
    if (!perm || (*perm)[0] == 1)
      return ExpertWeight{t->input(0), true};
  }
  return std::nullopt;
}

llvm::Expected<std::optional<Block>> Fuser::match(const NodeProto &topK) {
  Block block;
  block.topK = &topK;
  if (topK.input_size() < 2 || topK.output_size() < 2 ||
      getIntAttr(topK, "largest", 1) != 1)
    return std::nullopt;
  const NodeProto *softmax = producer(throughCasts(topK.input(0)));
  if (!softmax || softmax->op_type() != "Softmax")
    return std::nullopt;
  const NodeProto *gate = producer(softmax->input(0));
  if (!gate || gate->op_type() != "MatMul")
    return std::nullopt;
  auto gateWeight = weightOf(gate->input(1));
  // The one-hot mask of the choices: OneHot, or (dynamo) Equal against a
  // Range of the expert indices.
  const NodeProto *oneHot = userOfType(topK.output(1), "OneHot");
  const NodeProto *equal = nullptr;
  if (const NodeProto *unsqueeze = userOfType(topK.output(1), "Unsqueeze"))
    if ((equal = userOfType(unsqueeze->output(0), "Equal"))) {
      const NodeProto *range =
          producer(equal->input(0) == unsqueeze->output(0) ? equal->input(1)
                                                           : equal->input(0));
      if (!range || range->op_type() != "Range")
        equal = nullptr;
    }
  if (!gateWeight || (!oneHot && !equal))
    return std::nullopt;
  // From here on this is an MoE router: what does not match is an error.
  const auto &gateDims = initializers.at(gateWeight->initializer)->dims();
  block.experts = gateWeight->storedOutIn ? gateDims[0] : gateDims[1];
  block.logits = softmax->input(0);
  block.input = gate->input(0);
  // The router reads the hidden states flattened to rows; the MoE node
  // takes them unflattened, so batch and sequence stay separate dims.
  if (const NodeProto *flatten = producer(block.input);
      flatten && flatten->op_type() == "Reshape")
    block.input = flatten->input(0);
  auto k = constantInts(topK.input(1));
  if (!k || k->size() != 1)
    return blockError(topK, "its k is not a constant");
  block.k = (*k)[0];
  int64_t axis = getIntAttr(*softmax, "axis", -1);
  if (getIntAttr(topK, "axis", -1) != -1 || (axis != -1 && axis != 1))
    return blockError(topK, "the router's softmax and top-k are not over the "
                            "experts (last axis)");

  // The routing weights: the top-k probabilities, renormalized or not.
  std::string weights = topK.output(0);
  if (const NodeProto *sum = userOfType(weights, "ReduceSum"))
    for (const NodeProto *div : users(sum->output(0)))
      if (div->op_type() == "Div" && div->input(0) == weights) {
        block.normalize = true;
        weights = div->output(0);
      }

  if (oneHot) {
    auto depth = constantInts(oneHot->input(1));
    if (!depth || depth->size() != 1 || (*depth)[0] != block.experts)
      return blockError(topK, "OneHot's depth is not the router's {0} experts",
                        block.experts);
  }
  const NodeProto *transpose = userOfType(
      forwardCasts(oneHot ? oneHot->output(0) : equal->output(0)), "Transpose");
  auto perm = transpose ? getIntsAttr(*transpose, "perm") : std::nullopt;
  if (!perm || *perm != llvm::SmallVector<int64_t>{2, 1, 0})
    return blockError(topK, "the expert mask is not OneHot(choices) "
                            "transposed [2, 1, 0]");
  std::map<int64_t, const NodeProto *> maskGathers;
  for (const NodeProto *g : users(transpose->output(0))) {
    auto e = g->op_type() == "Gather" && getIntAttr(*g, "axis", 0) == 0
                 ? constantInts(g->input(1))
                 : std::nullopt;
    if (!e || e->size() != 1 || (*e)[0] < 0 || (*e)[0] >= block.experts)
      return blockError(topK,
                        "node '{0}' reads the expert mask other than "
                        "by one expert's row",
                        nodeName(*g));
    maskGathers[(*e)[0]] = g;
  }
  std::vector<Accumulation> adds;
  block.w1.resize(block.experts);
  block.w2.resize(block.experts);
  block.w3.resize(block.experts);
  for (int64_t e = 0; e < block.experts; ++e) {
    auto it = maskGathers.find(e);
    if (it == maskGathers.end())
      return blockError(topK, "expert {0} is never computed", e);
    if (llvm::Error err = matchExpert(block, e, *it->second, weights, adds))
      return std::move(err);
  }
  // The accumulation: a chain from zeros, one step per expert; the block
  // output is the step no other reads.
  for (const Accumulation &step : adds) {
    bool readByChain = llvm::any_of(adds, [&](const Accumulation &other) {
      return other.in == step.out->output(0);
    });
    if (!readByChain) {
      if (block.output)
        return blockError(topK, "the experts' results are not summed into "
                                "one accumulator");
      block.output = step.out;
    }
  }
  return block;
}

llvm::Error Fuser::matchExpert(Block &block, int64_t expert,
                               const NodeProto &maskGather,
                               const std::string &weights,
                               std::vector<Accumulation> &adds) {
  const NodeProto &topK = *block.topK;
  std::string mask = forwardCasts(maskGather.output(0));
  const NodeProto *nonZero = userOfType(mask, "NonZero");
  if (!nonZero)
    return blockError(topK, "expert {0}: its mask row is not read by NonZero",
                      expert);
  // The chosen rows: Gather(x2 (maybe unsqueezed), row index) over the
  // flattened hidden states, reshaped to [n, h].
  std::string flat;
  if (const NodeProto *gate = producer(block.logits))
    flat = gate->input(0);
  std::string rows;
  for (const NodeProto *node : reachableFrom(nonZero->output(0), 10)) {
    if ((node->op_type() != "Gather" && node->op_type() != "GatherND") ||
        node->input_size() < 2)
      continue;
    // x2, or x2 unsqueezed (and transposed) to gather rows with an index.
    std::string data = node->input(0);
    for (const char *wrap : {"Transpose", "Unsqueeze"})
      if (const NodeProto *p = producer(data); p && p->op_type() == wrap)
        data = p->input(0);
    if (data != flat)
      continue;
    rows = node->output(0);
    for (const char *unwrap : {"Transpose", "Reshape"})
      if (const NodeProto *next = userOfType(rows, unwrap))
        rows = next->output(0);
  }
  if (rows.empty())
    return blockError(topK,
                      "expert {0}: no gather of its tokens' hidden "
                      "states",
                      expert);
  // SwiGLU: (silu(rows W1^T) * (rows W3^T)) W2^T, silu as x * Sigmoid(x).
  const NodeProto *gateProj = nullptr, *upProj = nullptr;
  for (const NodeProto *m : users(rows)) {
    if (m->op_type() != "MatMul" || m->input(0) != rows)
      continue;
    if (userOfType(m->output(0), "Sigmoid"))
      gateProj = m;
    else
      upProj = m;
  }
  const NodeProto *sigmoid =
      gateProj ? userOfType(gateProj->output(0), "Sigmoid") : nullptr;
  const NodeProto *silu = nullptr;
  if (sigmoid)
    for (const NodeProto *m : users(sigmoid->output(0)))
      if (m->op_type() == "Mul" && (m->input(0) == gateProj->output(0) ||
                                    m->input(1) == gateProj->output(0)))
        silu = m;
  const NodeProto *gated = nullptr;
  if (silu && upProj)
    for (const NodeProto *m : users(silu->output(0)))
      if (m->op_type() == "Mul" && (m->input(0) == upProj->output(0) ||
                                    m->input(1) == upProj->output(0)))
        gated = m;
  const NodeProto *downProj =
      gated ? userOfType(gated->output(0), "MatMul") : nullptr;
  auto w1 = gateProj ? weightOf(gateProj->input(1)) : std::nullopt;
  auto w3 = upProj ? weightOf(upProj->input(1)) : std::nullopt;
  auto w2 = downProj && downProj->input(0) == gated->output(0)
                ? weightOf(downProj->input(1))
                : std::nullopt;
  if (!w1 || !w2 || !w3)
    return blockError(topK,
                      "expert {0}: its MLP is not SwiGLU "
                      "(silu(x W1) * (x W3)) W2 over weight matrices",
                      expert);
  block.w1[expert] = *w1;
  block.w2[expert] = *w2;
  block.w3[expert] = *w3;

  // Scaled by its routing weight, then scattered into the accumulator.
  const NodeProto *scaled = userOfType(downProj->output(0), "Mul");
  if (!scaled)
    return blockError(topK,
                      "expert {0}: its output is not scaled by the "
                      "routing weight",
                      expert);
  const std::string &scale = scaled->input(0) == downProj->output(0)
                                 ? scaled->input(1)
                                 : scaled->input(0);
  const std::string &chosen = nonZero->output(0);
  if (!dependsOn(scale, weights) || !dependsOn(scale, chosen))
    return blockError(topK,
                      "expert {0}: its output is scaled by something "
                      "other than its tokens' routing weights",
                      expert);
  // Added back at its tokens' rows: Add(acc, ScatterElements(zeros, rows,
  // y)) or (dynamo) ScatterND(acc, rows, y, reduction = add), maybe between
  // transposes.
  Accumulation step;
  for (const NodeProto *node : reachableFrom(scaled->output(0), 5)) {
    bool elements = node->op_type() == "ScatterElements" &&
                    getIntAttr(*node, "axis", 0) == 0;
    bool nd = node->op_type() == "ScatterND" &&
              getStringAttr(*node, "reduction", "none") == "add";
    if ((!elements && !nd) || node->input_size() != 3 ||
        !dependsOn(node->input(2), scaled->output(0)) ||
        !dependsOn(node->input(1), chosen))
      continue;
    if (elements) {
      const NodeProto *add = userOfType(node->output(0), "Add");
      if (!add)
        continue;
      step.out = add;
      step.in =
          add->input(0) == node->output(0) ? add->input(1) : add->input(0);
    } else {
      step.out = node;
      if (const NodeProto *t = userOfType(node->output(0), "Transpose"))
        step.out = t;
      step.in = node->input(0);
      if (const NodeProto *t = producer(step.in);
          t && t->op_type() == "Transpose")
        step.in = t->input(0);
    }
  }
  if (!step.out)
    return blockError(topK,
                      "expert {0}: its result is not added back at "
                      "its tokens' rows",
                      expert);
  adds.push_back(step);
  return llvm::Error::success();
}

int64_t Fuser::routerExperts(const NodeProto &gate) const {
  if (gate.op_type() == "MatMul") {
    auto weight = weightOf(gate.input(1));
    if (!weight)
      return 0;
    const auto &dims = initializers.at(weight->initializer)->dims();
    return weight->storedOutIn ? dims[0] : dims[1];
  }
  if (gate.op_type() != "Gemm" || gate.input_size() < 2 ||
      getIntAttr(gate, "transA", 0))
    return 0;
  auto it = initializers.find(gate.input(1));
  if (it == initializers.end() || it->second->dims_size() != 2)
    return 0;
  return getIntAttr(gate, "transB", 0) ? it->second->dims(0)
                                       : it->second->dims(1);
}

llvm::Expected<std::optional<BatchedBlock>>
Fuser::matchBatched(const NodeProto &topK) {
  BatchedBlock block;
  block.topK = &topK;
  if (topK.input_size() < 2 || topK.output_size() < 2 ||
      getIntAttr(topK, "largest", 1) != 1)
    return std::nullopt;
  GatheredExperts gathered = gatheredExperts(topK.output(1));
  if (gathered.matrices.empty() && gathered.biases.empty())
    return std::nullopt;
  // From here on these are batched experts: what does not match is an error.
  llvm::Expected<std::string> weights = matchBatchedRouting(block, gathered);
  if (!weights)
    return weights.takeError();
  llvm::Expected<std::string> expertOut = matchBatchedMlp(block, gathered);
  if (!expertOut)
    return expertOut.takeError();
  if (llvm::Error err = matchWeightedSum(block, *expertOut, *weights))
    return std::move(err);
  return block;
}

GatheredExperts Fuser::gatheredExperts(const std::string &chosen) const {
  // The expert parameters the choices index: [E, out, in] matrices and
  // [E, out] biases.
  GatheredExperts gathered;
  llvm::DenseSet<const NodeProto *> seen;
  for (const NodeProto *n : reachableFrom(chosen, 4)) {
    if (n->op_type() != "GatherND" || n->input_size() != 2 ||
        getIntAttr(*n, "batch_dims", 0) != 0 || !seen.insert(n).second)
      continue;
    auto it = initializers.find(n->input(0));
    if (it == initializers.end() || !isFloatType(it->second->data_type()) ||
        it->second->dims_size() < 2 || it->second->dims_size() > 3)
      continue;
    if (gathered.experts && it->second->dims(0) != gathered.experts)
      continue;
    gathered.experts = it->second->dims(0);
    (it->second->dims_size() == 3 ? gathered.matrices : gathered.biases)
        .push_back(n);
  }
  return gathered;
}

llvm::Expected<std::string>
Fuser::matchBatchedRouting(BatchedBlock &block,
                           const GatheredExperts &gathered) const {
  const NodeProto &topK = *block.topK;
  // The routing weights: top-k of the softmax (maybe renormalized), or the
  // softmax of the top-k logits, which is the renormalized top-k softmax.
  std::string weights = topK.output(0);
  if (const NodeProto *softmax = producer(throughCasts(topK.input(0)));
      softmax && softmax->op_type() == "Softmax") {
    block.logits = softmax->input(0);
    if (const NodeProto *sum = userOfType(weights, "ReduceSum"))
      for (const NodeProto *div : users(sum->output(0)))
        if (div->op_type() == "Div" && div->input(0) == weights) {
          block.normalize = true;
          weights = div->output(0);
        }
  } else if (const NodeProto *softmax = userOfType(weights, "Softmax")) {
    block.logits = throughCasts(topK.input(0));
    block.normalize = true;
    weights = softmax->output(0);
  } else {
    return blockError(topK, "its routing weights are neither the top-k of a "
                            "softmax over the router logits nor a softmax of "
                            "the top-k logits (sigmoid scores with a choice "
                            "bias or expert groups, DeepSeek-V3's routing, "
                            "are not supported yet)");
  }
  const NodeProto *gate = producer(block.logits);
  if (!gate || routerExperts(*gate) != gathered.experts)
    return blockError(topK,
                      "its router is not a projection of the hidden "
                      "states onto the {0} experts",
                      gathered.experts);
  if (gathered.matrices.size() != 2)
    return blockError(topK,
                      "its choices gather {0} stacked expert matrices; "
                      "batched experts gather two (gate-up and down)",
                      gathered.matrices.size());
  auto k = constantInts(topK.input(1));
  if (!k || k->size() != 1)
    return blockError(topK, "its k is not a constant");
  block.k = (*k)[0];
  int64_t axis = getIntAttr(topK, "axis", -1);
  if (axis != -1 && axis != 1)
    return blockError(topK, "the top-k is not over the experts (last axis)");
  // The MoE node reads the hidden states unflattened, [b, s, h].
  std::string rows = gate->input(0);
  block.input = rows;
  while (const NodeProto *flatten = producer(block.input))
    if (flatten->op_type() == "Reshape")
      block.input = flatten->input(0);
    else
      break;
  return weights;
}

std::optional<BatchedMatMul>
Fuser::batchedMatMulOf(const NodeProto &gather) const {
  const NodeProto *mm = userOfType(gather.output(0), "MatMul");
  if (!mm || mm->input(0) == mm->input(1))
    return std::nullopt;
  BatchedMatMul bmm;
  bmm.matmul = mm;
  bmm.projection.weight = gather.input(0);
  bmm.projection.storedInOut = mm->input(1) == gather.output(0);
  bmm.operand = bmm.projection.storedInOut ? mm->input(0) : mm->input(1);
  return bmm;
}

llvm::Expected<std::string>
Fuser::matchBatchedMlp(BatchedBlock &block, const GatheredExperts &gathered) {
  const NodeProto &topK = *block.topK;
  auto first = batchedMatMulOf(*gathered.matrices[0]),
       second = batchedMatMulOf(*gathered.matrices[1]);
  if (!first || !second)
    return blockError(topK, "a gathered expert matrix is not read by one "
                            "batched MatMul");
  if (dependsOn(first->operand, second->matmul->output(0)))
    std::swap(first, second);
  if (!dependsOn(second->operand, first->matmul->output(0)) ||
      !dependsOn(first->operand, block.input))
    return blockError(topK, "the expert MLP is not two projections in "
                            "sequence over the routed token rows");
  block.fc1 = first->projection;
  block.fc2 = second->projection;
  // A bias is added right after its projection (one gather may serve both
  // when the exporter merged equal initializers).
  llvm::DenseSet<const NodeProto *> biasesUsed;
  auto biased = [&](BatchedProjection &projection, const NodeProto &mm) {
    std::string out = forwardShapes(mm.output(0));
    const NodeProto *add = userOfType(out, "Add");
    if (!add)
      return out;
    std::string other = add->input(0) == out ? add->input(1) : add->input(0);
    for (const NodeProto *b : gathered.biases)
      if (backwardShapes(other) == b->output(0)) {
        projection.bias = b->input(0);
        biasesUsed.insert(b);
        return forwardShapes(add->output(0));
      }
    return out;
  };
  std::string projected = biased(block.fc1, *first->matmul);
  std::string expertOut = biased(block.fc2, *second->matmul);
  if (biasesUsed.size() != gathered.biases.size())
    return blockError(topK, "a gathered expert bias is not added to a "
                            "projection");
  if (llvm::Error err =
          matchGatedUnit(block, projected, backwardShapes(second->operand)))
    return std::move(err);
  return expertOut;
}

llvm::Error Fuser::matchWeightedSum(BatchedBlock &block,
                                    const std::string &expertOut,
                                    const std::string &weights) const {
  const NodeProto &topK = *block.topK;
  // Weighted by the routing weights, then summed over the k choices.
  const NodeProto *scaled = userOfType(expertOut, "Mul");
  if (!scaled || !dependsOn(scaled->input(0) == expertOut ? scaled->input(1)
                                                          : scaled->input(0),
                            weights))
    return blockError(topK, "the experts' results are not weighted by the "
                            "routing weights");
  const NodeProto *sum =
      userOfType(forwardShapes(scaled->output(0)), "ReduceSum");
  std::optional<std::vector<int64_t>> axes;
  if (sum && sum->input_size() > 1)
    axes = constantInts(sum->input(1));
  else if (auto attr = sum ? getIntsAttr(*sum, "axes") : std::nullopt)
    axes = std::vector<int64_t>(attr->begin(), attr->end());
  if (!sum || !axes || *axes != std::vector<int64_t>{1} ||
      getIntAttr(*sum, "keepdims", 1) != 0)
    return blockError(topK, "the weighted expert results are not summed "
                            "over the k choices");
  block.output = sum;
  return llvm::Error::success();
}

llvm::Error Fuser::matchGatedUnit(BatchedBlock &block,
                                  const std::string &projected,
                                  const std::string &activated) {
  const NodeProto &topK = *block.topK;
  auto notGlu = [&](const char *what) {
    return blockError(topK,
                      "the expert MLP is not a gated linear unit "
                      "(silu(gate) * value, or GPT-OSS's clamped form): {0}",
                      what);
  };
  // The gate and value halves of the first projection.
  auto isLastAxis = [](int64_t axis) { return axis == 1 || axis == -1; };
  std::string gate, value;
  auto readers = users(projected);
  if (readers.size() == 1 && readers[0]->op_type() == "Split" &&
      readers[0]->output_size() == 2 &&
      isLastAxis(getIntAttr(*readers[0], "axis", 0))) {
    if (readers[0]->input_size() > 1 && !readers[0]->input(1).empty()) {
      auto sizes = constantInts(readers[0]->input(1));
      if (!sizes || sizes->size() != 2 || (*sizes)[0] != (*sizes)[1])
        return notGlu("the projection is split unevenly");
    }
    block.fusion = 2;
    gate = readers[0]->output(0);
    value = readers[0]->output(1);
  } else {
    // Two Slices of the last axis: the contiguous halves x[:, :f] and
    // x[:, f:] (a Split spelled as Slices) or the strided x[:, 0::2] and
    // x[:, 1::2] (GPT-OSS's interleaved gate and value).
    const ::onnx::TensorProto &fc1 = *initializers.at(block.fc1.weight);
    int64_t width = fc1.dims(block.fc1.storedInOut ? 2 : 1);
    if (readers.size() != 2)
      return notGlu("the first projection is read other than by a Split "
                    "into halves or two strided Slices");
    std::string halves[2], strided[2];
    for (const NodeProto *slice : readers) {
      if (slice->op_type() != "Slice" || slice->input_size() < 4)
        return notGlu("the first projection is read other than by a Split "
                      "into halves or two strided Slices");
      auto start = constantInts(slice->input(1));
      auto end = constantInts(slice->input(2));
      auto axes = constantInts(slice->input(3));
      auto steps =
          slice->input_size() > 4 && !slice->input(4).empty()
              ? constantInts(slice->input(4))
              : std::optional<std::vector<int64_t>>(std::vector<int64_t>{1});
      if (!start || !end || !axes || !steps || start->size() != 1 ||
          end->size() != 1 || axes->size() != 1 || steps->size() != 1 ||
          !isLastAxis((*axes)[0]))
        return notGlu("a Slice of the first projection is not over its last "
                      "axis with constant bounds");
      // Python's bounds: negative from the end, clamped to the width.
      auto bound = [&](int64_t b) {
        return std::clamp(b < 0 ? b + width : b, int64_t(0), width);
      };
      int64_t from = bound((*start)[0]), to = bound((*end)[0]);
      int64_t step = (*steps)[0];
      // Strided: every other element from 0 or 1, width / 2 of them.
      if (step == 2 && from <= 1 && width % 2 == 0 &&
          (to - from + 1) / 2 == width / 2)
        strided[from] = slice->output(0);
      else if (step == 1 && width % 2 == 0 && from == 0 && to == width / 2)
        halves[0] = slice->output(0);
      else if (step == 1 && width % 2 == 0 && from == width / 2 && to == width)
        halves[1] = slice->output(0);
      else
        return notGlu("a Slice of the first projection is not x[:, :f], "
                      "x[:, f:], x[:, 0::2] or x[:, 1::2]");
    }
    if (!strided[0].empty() && !strided[1].empty()) {
      block.fusion = 1;
      gate = strided[0];
      value = strided[1];
    } else if (!halves[0].empty() && !halves[1].empty()) {
      block.fusion = 2;
      gate = halves[0];
      value = halves[1];
    } else {
      return notGlu("the first projection is not split into gate and value");
    }
  }
  // GPT-OSS clamps the gate from above and the value on both sides.
  if (const NodeProto *clip = userOfType(gate, "Clip")) {
    auto hi =
        clip->input_size() > 2 ? constantScalar(clip->input(2)) : std::nullopt;
    if (!hi || (clip->input_size() > 1 && !clip->input(1).empty()))
      return notGlu("the gate is clipped other than from above");
    block.limit = *hi;
    gate = clip->output(0);
  }
  if (const NodeProto *clip = userOfType(value, "Clip")) {
    auto lo = constantScalar(clip->input_size() > 1 ? clip->input(1) : "");
    auto hi = constantScalar(clip->input_size() > 2 ? clip->input(2) : "");
    if (!lo || !hi || !block.limit || *hi != *block.limit || *lo != -*hi)
      return notGlu("the value's clamp is not [-limit, limit] of the gate's "
                    "limit");
    value = clip->output(0);
  } else if (block.limit) {
    return notGlu("the gate is clipped but the value is not");
  }
  // glu = gate * sigmoid(alpha * gate).
  const NodeProto *sigmoid = userOfType(gate, "Sigmoid");
  for (const NodeProto *mul : users(gate)) {
    if (sigmoid || mul->op_type() != "Mul")
      continue;
    const std::string &other =
        mul->input(0) == gate ? mul->input(1) : mul->input(0);
    auto alpha = constantScalar(other);
    if (const NodeProto *s = userOfType(mul->output(0), "Sigmoid");
        s && alpha) {
      sigmoid = s;
      block.alpha = *alpha;
    }
  }
  const NodeProto *glu = nullptr;
  if (sigmoid)
    for (const NodeProto *mul : users(sigmoid->output(0)))
      if (mul->op_type() == "Mul" &&
          (mul->input(0) == gate || mul->input(1) == gate))
        glu = mul;
  if (!glu)
    return notGlu("no gate * sigmoid(alpha * gate)");
  // value + beta.
  if (const NodeProto *add = userOfType(value, "Add")) {
    auto beta =
        constantScalar(add->input(0) == value ? add->input(1) : add->input(0));
    if (beta) {
      block.beta = *beta;
      value = add->output(0);
    }
  }
  const NodeProto *product = producer(activated);
  if (!product || product->op_type() != "Mul" ||
      !((product->input(0) == glu->output(0) && product->input(1) == value) ||
        (product->input(1) == glu->output(0) && product->input(0) == value)))
    return notGlu("the down projection does not read glu * value");
  return llvm::Error::success();
}

/// The name prefix of a block: the common prefix of its router's and its
/// output's node names ("/model/layers.0/block_sparse_moe/"), or the
/// router's TopK's name for exporters that name nodes flat (dynamo).
static std::string blockScope(const NodeProto &router, const NodeProto &output,
                              const NodeProto &topK) {
  const std::string &first = router.name(), &last = output.name();
  size_t common = 0;
  while (common < first.size() && common < last.size() &&
         first[common] == last[common])
    ++common;
  std::string scope = first.substr(0, common);
  scope = scope.substr(0, scope.rfind('/') + 1);
  return scope.empty() ? nodeName(topK) + "/" : scope;
}

static void addIntAttr(NodeProto &node, const char *name, int64_t value) {
  auto *attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(::onnx::AttributeProto::INT);
  attr->set_i(value);
}

static void addFloatAttr(NodeProto &node, const char *name, double value) {
  auto *attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(::onnx::AttributeProto::FLOAT);
  attr->set_f(static_cast<float>(value));
}

static void addStringAttr(NodeProto &node, const char *name,
                          const char *value) {
  auto *attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(::onnx::AttributeProto::STRING);
  attr->set_s(value);
}

void Fuser::rewrite(const Block &block, std::vector<StackedWeight> &stacked) {
  auto stack = [&](const std::vector<ExpertWeight> &members) {
    StackedWeight w;
    for (const ExpertWeight &m : members)
      w.members.push_back(m.initializer);
    w.transposed = !members.front().storedOutIn;
    // "layers.0.experts.*.w1.weight" from the members' common prefix and
    // suffix, unless that is not unique (constant-folded "onnx::MatMul_7").
    const std::string &a = w.members.front(), &b = w.members.back();
    size_t pre = 0, suf = 0;
    while (pre < a.size() && pre < b.size() && a[pre] == b[pre])
      ++pre;
    while (suf < a.size() - pre && suf < b.size() - pre &&
           a[a.size() - 1 - suf] == b[b.size() - 1 - suf])
      ++suf;
    w.name = a.substr(0, pre) + "*" + a.substr(a.size() - suf);
    bool clash = initializers.count(w.name) ||
                 llvm::any_of(stacked, [&](const StackedWeight &other) {
                   return other.name == w.name;
                 });
    if (clash || pre == 0)
      w.name = "stack(" + a + ".." + b + ")";
    const ::onnx::TensorProto &proto = *initializers.at(a);
    ::onnx::TensorProto *init = graph.add_initializer();
    init->set_name(w.name);
    init->set_data_type(proto.data_type());
    init->add_dims(static_cast<int64_t>(members.size()));
    init->add_dims(proto.dims(w.transposed ? 1 : 0));
    init->add_dims(proto.dims(w.transposed ? 0 : 1));
    stacked.push_back(w);
    return w.name;
  };

  NodeProto moe;
  moe.add_input(block.input);
  moe.add_input(block.logits);
  moe.add_input(stack(block.w1));
  moe.add_input("");
  moe.add_input(stack(block.w2));
  moe.add_input("");
  moe.add_input(stack(block.w3));
  addIntAttr(moe, "k", block.k);
  addIntAttr(moe, "normalize_routing_weights", block.normalize ? 1 : 0);
  addStringAttr(moe, "activation_type", "silu");
  replaceBlock(*block.output, *block.topK, block.logits, std::move(moe), {});
}

void Fuser::rewrite(const BatchedBlock &block) {
  std::string scope =
      blockScope(*producer(block.logits), *block.output, *block.topK);
  NodeProto moe;
  std::vector<NodeProto> before;
  // The MoE node takes torch Linear's [E, out, in]; bmm(rows, W[e]) stores
  // [E, in, out], read through a transpose (the parameter keeps its layout).
  auto weight = [&](const BatchedProjection &projection, const char *name) {
    if (!projection.storedInOut)
      return projection.weight;
    NodeProto transpose;
    transpose.set_name(scope + "MoE/" + name);
    transpose.set_op_type("Transpose");
    transpose.add_input(projection.weight);
    transpose.add_output(transpose.name());
    auto *perm = transpose.add_attribute();
    perm->set_name("perm");
    perm->set_type(::onnx::AttributeProto::INTS);
    for (int64_t d : {0, 2, 1})
      perm->add_ints(d);
    before.push_back(transpose);
    return transpose.output(0);
  };
  moe.add_input(block.input);
  moe.add_input(block.logits);
  moe.add_input(weight(block.fc1, "fc1"));
  moe.add_input(block.fc1.bias);
  moe.add_input(weight(block.fc2, "fc2"));
  moe.add_input(block.fc2.bias);
  addIntAttr(moe, "k", block.k);
  addIntAttr(moe, "normalize_routing_weights", block.normalize ? 1 : 0);
  addStringAttr(moe, "activation_type", "swiglu");
  addIntAttr(moe, "swiglu_fusion", block.fusion);
  addFloatAttr(moe, "activation_alpha", block.alpha);
  addFloatAttr(moe, "activation_beta", block.beta);
  if (block.limit)
    addFloatAttr(moe, "swiglu_limit", *block.limit);
  replaceBlock(*block.output, *block.topK, block.logits, std::move(moe),
               std::move(before));
}

void Fuser::replaceBlock(const NodeProto &output, const NodeProto &topK,
                         const std::string &logits, NodeProto moe,
                         std::vector<NodeProto> before) {
  const NodeProto &router = *producer(logits);
  std::string scope = blockScope(router, output, topK);
  moe.set_name(scope + "MoE");
  moe.set_op_type("MoE");
  moe.set_domain("com.microsoft");
  // The MoE node reads the hidden states unflattened ([b, s, h]), so that
  // batch and sequence stay separate dims; its result is flattened back to
  // the block's [rows, h] for the readers (a Qwen-MoE shared expert adds
  // to it there).
  const std::string &out = output.output(0);
  bool unflattened = moe.input(0) != router.input(0);
  moe.add_output(unflattened ? out + "/unflattened" : out);
  std::vector<NodeProto> &nodes = replacements[&output];
  nodes = std::move(before);
  nodes.push_back(moe);
  if (!unflattened)
    return;
  NodeProto shape;
  shape.set_name(scope + "MoE/rows_shape");
  shape.set_op_type("Shape");
  shape.add_input(router.input(0));
  shape.add_output(shape.name());
  NodeProto flatten;
  flatten.set_name(scope + "MoE/rows");
  flatten.set_op_type("Reshape");
  flatten.add_input(moe.output(0));
  flatten.add_input(shape.output(0));
  flatten.add_output(out);
  nodes.push_back(shape);
  nodes.push_back(flatten);
}

void Fuser::applyReplacements() {
  ::google::protobuf::RepeatedPtrField<NodeProto> rebuilt;
  for (NodeProto &n : *graph.mutable_node()) {
    auto it = replacements.find(&n);
    if (it == replacements.end()) {
      rebuilt.Add()->Swap(&n);
      continue;
    }
    for (NodeProto &replacement : it->second)
      rebuilt.Add()->Swap(&replacement);
  }
  graph.mutable_node()->Swap(&rebuilt);
  replacements.clear();
}

void Fuser::removeDeadNodes() {
  llvm::StringSet<> live;
  for (const auto &output : graph.output())
    live.insert(output.name());
  // One backward sweep suffices: nodes are in topological order.
  std::vector<bool> keep(graph.node_size());
  for (int i = graph.node_size() - 1; i >= 0; --i) {
    const NodeProto &n = graph.node(i);
    keep[i] = llvm::any_of(
        n.output(), [&](const std::string &out) { return live.contains(out); });
    if (keep[i])
      for (const std::string &in : n.input())
        live.insert(in);
  }
  ::google::protobuf::RepeatedPtrField<NodeProto> kept;
  for (int i = 0; i < graph.node_size(); ++i)
    if (keep[i])
      kept.Add()->Swap(graph.mutable_node(i));
  graph.mutable_node()->Swap(&kept);
  // Initializers only the removed nodes read (the per-expert weights).
  ::google::protobuf::RepeatedPtrField<::onnx::TensorProto> inits;
  for (auto &init : *graph.mutable_initializer())
    if (live.contains(init.name()))
      inits.Add()->Swap(&init);
  graph.mutable_initializer()->Swap(&inits);
}

llvm::Expected<std::vector<StackedWeight>> Fuser::run() {
  std::vector<Block> blocks;
  std::vector<BatchedBlock> batched;
  for (const NodeProto &n : graph.node()) {
    if (n.op_type() != "TopK" || !isDefaultDomain(n.domain()))
      continue;
    auto block = match(n);
    if (!block)
      return block.takeError();
    if (*block) {
      blocks.push_back(std::move(**block));
      continue;
    }
    auto batch = matchBatched(n);
    if (!batch)
      return batch.takeError();
    if (*batch)
      batched.push_back(std::move(**batch));
  }
  std::vector<StackedWeight> stacked;
  if (blocks.empty() && batched.empty())
    return stacked;
  for (const Block &block : blocks)
    rewrite(block, stacked);
  for (const BatchedBlock &block : batched)
    rewrite(block);
  applyReplacements();
  removeDeadNodes();
  bool hasMicrosoft = llvm::any_of(model.opset_import(), [](const auto &o) {
    return o.domain() == "com.microsoft";
  });
  if (!hasMicrosoft) {
    auto *import = model.add_opset_import();
    import->set_domain("com.microsoft");
    import->set_version(1);
  }
  return stacked;
}

} // namespace

llvm::Expected<std::vector<StackedWeight>>
dtc::onnx::detail::fuseSparseMoeBlocks(::onnx::ModelProto &model,
                                       llvm::StringRef path) {
  // Every block is routed by a TopK; most models have none.
  if (llvm::none_of(model.graph().node(),
                    [](const NodeProto &n) { return n.op_type() == "TopK"; }))
    return std::vector<StackedWeight>();
  // The matcher knows the optimized spelling of each step; other exports
  // are brought to it first (results unchanged).
  canonicalizeGraph(model);
  return Fuser(model, path).run();
}
