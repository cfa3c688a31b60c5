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
// Matching keys on the router, on the expert index of each `mask[e]` gather
// and on the expert MLP; the plumbing between them (index arithmetic,
// expands, casts) is checked only for where it leads, so exporter versions
// that spell it differently still match. Everything the block computed is
// then dead and removed.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/FuseMoe.h"

#include "compiler/support/Error.h"
#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/OnnxUtils.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

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
  /// Plans the replacement of `block` (applied by applyReplacements).
  void rewrite(const Block &block, std::vector<StackedWeight> &stacked);
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
  std::optional<ExpertWeight> weightOf(const std::string &name) const;

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

std::optional<std::vector<int64_t>>
Fuser::constantInts(std::string name) const {
  for (;;) {
    if (auto it = initializers.find(name); it != initializers.end()) {
      std::string error;
      auto t = decodeTensor(*it->second, "", error);
      if (!t || t->isFloat())
        return std::nullopt;
      return t->ints;
    }
    const NodeProto *n = producer(name);
    if (!n || !isDefaultDomain(n->domain()))
      return std::nullopt;
    if (n->op_type() == "Constant") {
      if (const auto *v = findAttribute(*n, "value_int"))
        return std::vector<int64_t>{v->i()};
      if (const auto *v = findAttribute(*n, "value_ints"))
        return std::vector<int64_t>(v->ints().begin(), v->ints().end());
      const auto *v = findAttribute(*n, "value");
      if (!v)
        return std::nullopt;
      std::string error;
      auto t = decodeTensor(v->t(), "", error);
      if (!t || t->isFloat())
        return std::nullopt;
      return t->ints;
    }
    // A reshaped or cast constant keeps its elements.
    if (n->op_type() != "Reshape" && n->op_type() != "Squeeze" &&
        n->op_type() != "Unsqueeze" && n->op_type() != "Cast" &&
        n->op_type() != "Identity")
      return std::nullopt;
    name = n->input(0);
  }
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

void Fuser::rewrite(const Block &block, std::vector<StackedWeight> &stacked) {
  // Named after the block: the common prefix of the router's and the
  // output's node names ("/model/layers.0/block_sparse_moe/").
  std::string first = producer(block.logits)->name();
  std::string last = block.output->name();
  size_t common = 0;
  while (common < first.size() && common < last.size() &&
         first[common] == last[common])
    ++common;
  std::string scope = first.substr(0, common);
  scope = scope.substr(0, scope.rfind('/') + 1);
  if (scope.empty()) // exporters that name nodes flat (dynamo): the router's
    scope = nodeName(*block.topK) + "/";

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
  moe.set_name(scope + "MoE");
  moe.set_op_type("MoE");
  moe.set_domain("com.microsoft");
  moe.add_input(block.input);
  moe.add_input(block.logits);
  moe.add_input(stack(block.w1));
  moe.add_input("");
  moe.add_input(stack(block.w2));
  moe.add_input("");
  moe.add_input(stack(block.w3));
  // The MoE node reads the hidden states unflattened ([b, s, h]), so that
  // batch and sequence stay separate dims; its result is flattened back to
  // the block's [rows, h] for the readers (a Qwen-MoE shared expert adds
  // to it there).
  const std::string &out = block.output->output(0);
  bool unflattened = block.input != producer(block.logits)->input(0);
  moe.add_output(unflattened ? out + "/unflattened" : out);
  auto addInt = [&](const char *name, int64_t value) {
    auto *attr = moe.add_attribute();
    attr->set_name(name);
    attr->set_type(::onnx::AttributeProto::INT);
    attr->set_i(value);
  };
  addInt("k", block.k);
  addInt("normalize_routing_weights", block.normalize ? 1 : 0);
  auto *activation = moe.add_attribute();
  activation->set_name("activation_type");
  activation->set_type(::onnx::AttributeProto::STRING);
  activation->set_s("silu");
  std::vector<NodeProto> &nodes = replacements[block.output];
  nodes.push_back(moe);
  if (!unflattened)
    return;
  NodeProto shape;
  shape.set_name(scope + "MoE/rows_shape");
  shape.set_op_type("Shape");
  shape.add_input(producer(block.logits)->input(0));
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
  for (const NodeProto &n : graph.node()) {
    if (n.op_type() != "TopK" || !isDefaultDomain(n.domain()))
      continue;
    auto block = match(n);
    if (!block)
      return block.takeError();
    if (*block)
      blocks.push_back(std::move(**block));
  }
  std::vector<StackedWeight> stacked;
  if (blocks.empty())
    return stacked;
  for (const Block &block : blocks)
    rewrite(block, stacked);
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
  return Fuser(model, path).run();
}
