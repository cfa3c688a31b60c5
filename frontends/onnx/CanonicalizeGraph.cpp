//===- CanonicalizeGraph.cpp - One spelling for equal ONNX subgraphs ------===//
//
// One forward pass over the nodes (they are in topological order): each
// node's inputs are first renamed through the aliases found so far, then the
// node is either recognized as equal to one of its inputs or to an earlier
// node (its outputs become aliases of that value) or rewritten in place.
// Readers are renamed, never producers, so the names a graph output or a
// subgraph reads keep their meaning; a node whose results nobody reads any
// more is then removed, and with it what only it read.
//
// Why these rewrites: they are what separates torch.onnx.export(dynamo=True,
// optimize=False) from the optimized export of the same model (the ONNX
// optimizer folds them), and FuseMoe's matcher, which follows the data
// path node by node, stops at each of them.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/CanonicalizeGraph.h"

#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/OnnxUtils.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <optional>

using namespace dtc::onnx;
using ::onnx::NodeProto;

namespace {

/// A value's recorded shape, -1 for a dim without a fixed size.
using Dims = llvm::SmallVector<int64_t, 4>;

/// Ops whose two runs on equal inputs may differ: never merged.
bool isRandom(llvm::StringRef op) {
  return llvm::is_contained({"RandomNormal", "RandomUniform",
                             "RandomNormalLike", "RandomUniformLike",
                             "Bernoulli", "Multinomial", "Dropout"},
                            op);
}

bool hasSubgraph(const NodeProto &n) {
  return llvm::any_of(n.attribute(), [](const ::onnx::AttributeProto &a) {
    return a.has_g() || a.graphs_size() > 0;
  });
}

/// Every name `graph` (a subgraph) reads or returns, nested ones included:
/// values of the enclosing graph it may capture.
void namesReadBy(const ::onnx::GraphProto &graph, llvm::StringSet<> &names) {
  for (const NodeProto &n : graph.node()) {
    for (const std::string &in : n.input())
      names.insert(in);
    for (const auto &a : n.attribute()) {
      if (a.has_g())
        namesReadBy(a.g(), names);
      for (const auto &g : a.graphs())
        namesReadBy(g, names);
    }
  }
  for (const auto &out : graph.output())
    names.insert(out.name());
}

class Canonicalizer {
public:
  explicit Canonicalizer(::onnx::ModelProto &model)
      : graph(*model.mutable_graph()) {
    for (const auto &o : model.opset_import())
      if (isDefaultDomain(o.domain()))
        opset = o.version();
    for (const auto &init : graph.initializer()) {
      initializers[init.name()] = &init;
      shapes[init.name()] = Dims(init.dims().begin(), init.dims().end());
    }
    for (const auto *infos :
         {&graph.input(), &graph.output(), &graph.value_info()})
      for (const auto &info : *infos)
        recordShape(info);
    for (const auto &out : graph.output())
      pinned.insert(out.name());
    for (const NodeProto &n : graph.node())
      for (const auto &a : n.attribute()) {
        if (a.has_g())
          namesReadBy(a.g(), pinned);
        for (const auto &g : a.graphs())
          namesReadBy(g, pinned);
      }
    for (const auto &in : graph.input())
      names.insert(in.name());
    for (const auto &init : graph.initializer())
      names.insert(init.name());
    for (int i = 0; i < graph.node_size(); ++i) {
      const NodeProto &n = graph.node(i);
      for (const std::string &out : n.output()) {
        producers[out] = i;
        names.insert(out);
      }
      for (const std::string &in : n.input()) {
        readers[in].push_back(i);
        usedBefore.insert(in);
      }
    }
  }

  int run();

private:
  void recordShape(const ::onnx::ValueInfoProto &info) {
    if (!info.type().has_tensor_type() ||
        !info.type().tensor_type().has_shape())
      return;
    Dims dims;
    for (const auto &d : info.type().tensor_type().shape().dim())
      dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    shapes[info.name()] = dims;
  }

  const NodeProto *producer(const std::string &name) const {
    auto it = producers.find(name);
    return it == producers.end() ? nullptr : &graph.node(it->second);
  }
  const Dims *shapeOf(const std::string &name) const {
    auto it = shapes.find(name);
    return it == shapes.end() ? nullptr : &it->second;
  }
  /// The integer constant `name` (an initializer or a Constant node).
  std::optional<HostTensor> constantInts(const std::string &name) const;
  std::string resolve(const std::string &name) const {
    auto it = aliases.find(name);
    return it == aliases.end() ? name : it->second;
  }
  /// Readers of `from` read `to` from now on (an equal value). Returns
  /// whether that changes the graph: `from` has readers to rename, or its
  /// producer goes (it is not pinned).
  bool alias(const std::string &from, const std::string &to) {
    aliases[from] = to;
    if (!shapes.count(to))
      if (const Dims *dims = shapeOf(from))
        shapes[to] = *dims;
    return !pinned.contains(from) || readers.count(from);
  }
  std::string freshName(const std::string &base) {
    std::string name = base;
    for (int i = 1; names.contains(name); ++i)
      name = base + "_" + std::to_string(i);
    names.insert(name);
    return name;
  }
  NodeProto constantNode(const std::string &base,
                         llvm::ArrayRef<int64_t> values, bool scalar);

  /// The input `n` computes unchanged, if it is one.
  std::optional<std::string> identityOf(const NodeProto &n) const;
  bool expandsToOwnShape(const NodeProto &expand) const;
  /// Rewrites the SplitToSequence at `index` and its SequenceAt readers.
  bool splitSequence(int index);
  /// Makes `n` an alias of an equal earlier node.
  bool mergeRepeated(const NodeProto &n);

  ::onnx::GraphProto &graph;
  int64_t opset = 0;
  std::map<std::string, const ::onnx::TensorProto *> initializers;
  std::map<std::string, Dims> shapes;
  /// Values read where readers are not renamed (graph outputs, subgraphs):
  /// their producers stay.
  llvm::StringSet<> pinned;
  llvm::StringSet<> names, usedBefore;
  std::map<std::string, int> producers;
  std::map<std::string, std::vector<int>> readers;
  std::map<std::string, std::string> aliases;
  std::map<std::string, int> seen; // mergeRepeated's keys
  std::map<int, std::vector<NodeProto>> replacements;
  std::vector<bool> erased;
};

std::optional<HostTensor>
Canonicalizer::constantInts(const std::string &name) const {
  std::optional<HostTensor> t;
  std::string error;
  if (auto it = initializers.find(name); it != initializers.end()) {
    t = decodeTensor(*it->second, "", error);
  } else if (const NodeProto *n = producer(name);
             n && n->op_type() == "Constant" && isDefaultDomain(n->domain())) {
    if (const auto *v = findAttribute(*n, "value_int"))
      t = HostTensor::fromInts({v->i()}, llvm::ArrayRef<int64_t>());
    else if (const auto *v = findAttribute(*n, "value_ints"))
      t = HostTensor::fromInts(
          std::vector<int64_t>(v->ints().begin(), v->ints().end()));
    else if (const auto *v = findAttribute(*n, "value"))
      t = decodeTensor(v->t(), "", error);
  }
  if (!t || t->isFloat())
    return std::nullopt;
  return t;
}

NodeProto Canonicalizer::constantNode(const std::string &base,
                                      llvm::ArrayRef<int64_t> values,
                                      bool scalar) {
  NodeProto c;
  c.set_op_type("Constant");
  c.set_name(freshName(base));
  c.add_output(c.name());
  auto *attr = c.add_attribute();
  attr->set_name("value");
  attr->set_type(::onnx::AttributeProto::TENSOR);
  auto *t = attr->mutable_t();
  t->set_data_type(::onnx::TensorProto::INT64);
  if (!scalar)
    t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values)
    t->add_int64_data(v);
  return c;
}

bool Canonicalizer::expandsToOwnShape(const NodeProto &expand) const {
  if (expand.input_size() != 2 || expand.input(1).empty())
    return false;
  const std::string &x = expand.input(0);
  const Dims *dims = shapeOf(x);
  // Expand(x, Shape(x)): aten's broadcasting of an index onto itself.
  if (const NodeProto *shape = producer(expand.input(1));
      shape && shape->op_type() == "Shape" &&
      isDefaultDomain(shape->domain()) && shape->input_size() == 1 &&
      shape->input(0) == x && getIntAttr(*shape, "start", 0) == 0) {
    const auto *end = findAttribute(*shape, "end");
    if (!end || (dims && end->i() >= static_cast<int64_t>(dims->size())))
      return true;
  }
  // A constant shape that broadcasting against x's recorded shape leaves
  // unchanged: no longer than x's rank, each dim 1 or x's own size.
  auto target = constantInts(expand.input(1));
  if (!dims || !target || target->rank() != 1 ||
      target->ints.size() > dims->size())
    return false;
  size_t offset = dims->size() - target->ints.size();
  for (auto [i, d] : llvm::enumerate(target->ints))
    if (d != 1 && (d != (*dims)[offset + i] || d < 0))
      return false;
  return true;
}

std::optional<std::string> Canonicalizer::identityOf(const NodeProto &n) const {
  if (n.output_size() != 1 || n.input_size() == 0 || n.input(0).empty())
    return std::nullopt;
  llvm::StringRef op = n.op_type();
  if (op == "Transpose") {
    auto perm = getIntsAttr(n, "perm");
    if (perm && llvm::all_of(llvm::enumerate(*perm), [](auto p) {
          return p.value() == static_cast<int64_t>(p.index());
        }))
      return n.input(0);
  }
  // Variadic ops of one operand: concatenating, or taking the elementwise
  // max, min, sum or mean of one tensor gives that tensor.
  if (llvm::is_contained({"Concat", "Max", "Min", "Sum", "Mean"}, op) &&
      n.input_size() == 1)
    return n.input(0);
  if (op == "Expand" && expandsToOwnShape(n))
    return n.input(0);
  return std::nullopt;
}

bool Canonicalizer::splitSequence(int index) {
  const NodeProto &n = graph.node(index);
  if (n.input_size() < 2 || n.input(1).empty() || n.output_size() != 1)
    return false;
  const std::string &x = n.input(0), &seq = n.output(0);
  if (pinned.contains(seq))
    return false;
  auto split = constantInts(n.input(1));
  if (!split || split->rank() > 1)
    return false;
  int64_t axis = getIntAttr(n, "axis", 0);
  int64_t dim = -1;
  if (const Dims *dims = shapeOf(x)) {
    int64_t rank = dims->size();
    if (axis < -rank || axis >= rank)
      return false;
    dim = (*dims)[axis < 0 ? axis + rank : axis];
  }
  // The parts' sizes, when known: a list is given whole; a scalar is the
  // chunk length (the last chunk may be shorter), which needs the dim.
  std::optional<std::vector<int64_t>> sizes;
  int64_t chunk = 0;
  if (split->rank() == 1) {
    sizes = split->ints;
    int64_t total = 0;
    for (int64_t s : *sizes) {
      if (s < 0)
        return false;
      total += s;
    }
    if (dim >= 0 && total != dim)
      return false;
  } else {
    chunk = split->ints.front();
    if (chunk < 1)
      return false;
    if (dim >= 0) {
      if (dim / chunk > (int64_t(1) << 16))
        return false;
      sizes.emplace();
      for (int64_t at = 0; at < dim; at += chunk)
        sizes->push_back(std::min(chunk, dim - at));
    }
  }
  // Every reader must be SequenceAt at a constant, in-range position.
  std::vector<std::pair<int, int64_t>> reads; // node index, part
  for (int r : readers[seq]) {
    const NodeProto &at = graph.node(r);
    if (at.op_type() != "SequenceAt" || !isDefaultDomain(at.domain()) ||
        at.input_size() != 2 || at.input(0) != seq || at.input(1) == seq ||
        at.output_size() != 1 || r <= index || erased[r] ||
        replacements.count(r))
      return false;
    auto position = constantInts(at.input(1));
    if (!position || position->ints.size() != 1)
      return false;
    int64_t k = position->ints.front();
    if (k < 0 && sizes)
      k += sizes->size();
    if (k < 0 || (sizes && k >= static_cast<int64_t>(sizes->size())))
      return false; // left for the importer to report
    reads.push_back({r, k});
  }
  if (reads.empty())
    return false;

  if (!sizes) {
    if (opset < 10) // Slice's bounds were attributes
      return false;
    // The dim is not recorded: each read part is a Slice (its end clamps
    // to the dim like SplitToSequence's shorter last chunk).
    for (auto [r, k] : reads) {
      const NodeProto &at = graph.node(r);
      std::string base = nodeName(at);
      std::vector<NodeProto> nodes = {
          constantNode(base + "/starts", {k * chunk}, false),
          constantNode(base + "/ends", {(k + 1) * chunk}, false),
          constantNode(base + "/axes", {axis}, false)};
      NodeProto slice;
      slice.set_name(at.name());
      slice.set_op_type("Slice");
      slice.add_input(x);
      for (const NodeProto &c : nodes)
        slice.add_input(c.output(0));
      slice.add_output(at.output(0));
      nodes.push_back(std::move(slice));
      replacements[r] = std::move(nodes);
    }
    return true;
  }

  // One Split whose outputs are the read parts, named as their first
  // readers named them; a part read twice is one value.
  std::vector<std::string> outputs(sizes->size());
  for (auto [r, k] : reads) {
    const std::string &out = graph.node(r).output(0);
    if (!outputs[k].empty() && pinned.contains(out))
      return false;
  }
  for (auto [r, k] : reads) {
    const std::string &out = graph.node(r).output(0);
    if (outputs[k].empty())
      outputs[k] = out;
    else
      alias(out, outputs[k]);
    erased[r] = true;
  }
  for (auto [k, out] : llvm::enumerate(outputs))
    if (out.empty())
      out = freshName(seq + "/part" + std::to_string(k));
  NodeProto splitNode;
  splitNode.set_name(n.name());
  splitNode.set_op_type("Split");
  splitNode.add_input(x);
  auto *axisAttr = splitNode.add_attribute();
  axisAttr->set_name("axis");
  axisAttr->set_type(::onnx::AttributeProto::INT);
  axisAttr->set_i(axis);
  std::vector<NodeProto> nodes;
  if (opset >= 13) {
    nodes.push_back(constantNode(nodeName(n) + "/split", *sizes, false));
    splitNode.add_input(nodes.back().output(0));
  } else {
    auto *attr = splitNode.add_attribute();
    attr->set_name("split");
    attr->set_type(::onnx::AttributeProto::INTS);
    for (int64_t s : *sizes)
      attr->add_ints(s);
  }
  for (const std::string &out : outputs)
    splitNode.add_output(out);
  nodes.push_back(std::move(splitNode));
  replacements[index] = std::move(nodes);
  return true;
}

bool Canonicalizer::mergeRepeated(const NodeProto &n) {
  if (n.output_size() == 0 || isRandom(n.op_type()) || hasSubgraph(n))
    return false;
  // Constants that hold whole tensors are not worth comparing.
  size_t attributeBytes = 0;
  for (const auto &a : n.attribute())
    attributeBytes += a.ByteSizeLong();
  if (attributeBytes > 4096)
    return false;
  std::string key = n.op_type() + '\0' + n.domain() + '\0';
  for (const std::string &in : n.input())
    key += in + '\0';
  key += '|';
  for (const std::string &out : n.output())
    key += out.empty() ? '-' : '+';
  std::vector<const ::onnx::AttributeProto *> attrs;
  for (const auto &a : n.attribute())
    attrs.push_back(&a);
  llvm::sort(attrs, [](const auto *a, const auto *b) {
    return a->name() < b->name();
  });
  for (const auto *a : attrs)
    key += '\0' + a->SerializeAsString();
  auto [it, inserted] = seen.try_emplace(key, producers.at(n.output(0)));
  if (inserted)
    return false;
  const NodeProto &first = graph.node(it->second);
  bool changed = false;
  for (int i = 0; i < n.output_size(); ++i)
    if (!n.output(i).empty())
      changed |= alias(n.output(i), first.output(i));
  return changed;
}

int Canonicalizer::run() {
  int rewrites = 0;
  erased.assign(graph.node_size(), false);
  for (int i = 0; i < graph.node_size(); ++i) {
    if (erased[i] || replacements.count(i))
      continue;
    NodeProto &n = *graph.mutable_node(i);
    for (int j = 0; j < n.input_size(); ++j)
      if (!n.input(j).empty())
        n.set_input(j, resolve(n.input(j)));
    if (!isDefaultDomain(n.domain()) || hasSubgraph(n) ||
        n.output_size() == 0 || n.output(0).empty())
      continue;
    if (auto same = identityOf(n)) {
      rewrites += alias(n.output(0), *same);
    } else if (n.op_type() == "SplitToSequence" && splitSequence(i)) {
      ++rewrites;
    } else if (mergeRepeated(n)) {
      ++rewrites;
    }
  }
  if (rewrites == 0)
    return 0;

  // The rewritten node list: replacements where they were planned.
  ::google::protobuf::RepeatedPtrField<NodeProto> rebuilt;
  std::vector<bool> created;
  for (int i = 0; i < graph.node_size(); ++i) {
    if (erased[i])
      continue;
    auto it = replacements.find(i);
    if (it == replacements.end()) {
      rebuilt.Add()->Swap(graph.mutable_node(i));
      created.push_back(false);
      continue;
    }
    for (NodeProto &node : it->second) {
      rebuilt.Add()->Swap(&node);
      created.push_back(true);
    }
  }
  // Nodes nobody reads any more (one backward sweep: the order is
  // topological). A node that was already unread stays: only what the
  // rewrites orphaned goes.
  llvm::StringMap<int> uses;
  for (const NodeProto &n : rebuilt)
    for (const std::string &in : n.input())
      ++uses[in];
  auto unread = [&](const std::string &name) {
    return name.empty() || (!pinned.contains(name) && uses.lookup(name) == 0);
  };
  std::vector<bool> keep(rebuilt.size(), true);
  for (int i = rebuilt.size() - 1; i >= 0; --i) {
    const NodeProto &n = rebuilt.Get(i);
    bool wasRead =
        created[i] || llvm::any_of(n.output(), [&](const std::string &out) {
          return usedBefore.contains(out);
        });
    if (n.output_size() == 0 || !wasRead || !llvm::all_of(n.output(), unread))
      continue;
    keep[i] = false;
    for (const std::string &in : n.input())
      --uses[in];
  }
  llvm::StringSet<> produced;
  ::google::protobuf::RepeatedPtrField<NodeProto> kept;
  for (int i = 0; i < rebuilt.size(); ++i)
    if (keep[i]) {
      for (const std::string &out : rebuilt.Get(i).output())
        produced.insert(out);
      kept.Add()->Swap(rebuilt.Mutable(i));
    }
  graph.mutable_node()->Swap(&kept);
  // Shapes recorded for values no node makes any more.
  ::google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto> infos;
  for (auto &info : *graph.mutable_value_info())
    if (produced.contains(info.name()) || !producers.count(info.name()))
      infos.Add()->Swap(&info);
  graph.mutable_value_info()->Swap(&infos);
  return rewrites;
}

} // namespace

int dtc::onnx::detail::canonicalizeGraph(::onnx::ModelProto &model) {
  return Canonicalizer(model).run();
}
