//===- InlineFunctions.cpp - Model-local ONNX functions, inlined ----------===//
//
// PyTorch's dynamo exporter writes calls to model-local functions
// (onnxscript's torch_lib: aten_getitem, Rank, IsScalar, ...). The ONNX
// library dtc links has no inliner, so each call is replaced by the
// function's body here, before anything else reads the graph: values
// renamed under the call's name, attribute references (ref_attr_name)
// bound to the call's attributes or the function's defaults.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/ImporterImpl.h"

#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"

#include <functional>
#include <map>

using namespace ::dtc::onnx;
using namespace ::dtc::onnx::detail;

namespace {

/// A local function's attribute defaults (FunctionProto.attribute_proto,
/// field 11). ONNX libraries before 1.13 do not know the field: protobuf
/// keeps it among the unknown fields.
llvm::StringMap<::onnx::AttributeProto>
attributeDefaults(const ::onnx::FunctionProto &fn) {
  llvm::StringMap<::onnx::AttributeProto> defaults;
  auto add = [&](const std::string &bytes) {
    ::onnx::AttributeProto attr;
    if (attr.ParseFromString(bytes))
      defaults[attr.name()] = std::move(attr);
  };
  const auto *reflection = fn.GetReflection();
  if (const auto *field =
          fn.GetDescriptor()->FindFieldByName("attribute_proto")) {
    for (int i = 0, e = reflection->FieldSize(fn, field); i < e; ++i)
      add(reflection->GetRepeatedMessage(fn, field, i).SerializeAsString());
    return defaults;
  }
  const auto &unknown = reflection->GetUnknownFields(fn);
  for (int i = 0; i < unknown.field_count(); ++i)
    if (unknown.field(i).number() == 11 &&
        unknown.field(i).type() ==
            google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      add(unknown.field(i).length_delimited());
  return defaults;
}

/// The key of a function or call: "::name" in the default domain,
/// "domain::name" in others.
std::string functionKey(llvm::StringRef domain, llvm::StringRef name) {
  return (isDefaultDomain(domain) ? "" : domain.str()) + "::" + name.str();
}

/// The values of one inlined call: formal inputs and outputs become the
/// call's values; the rest get fresh names under the call's name.
class CallRenaming {
public:
  CallRenaming(const ::onnx::NodeProto &call, const ::onnx::FunctionProto &fn,
               llvm::StringSet<> &names);

  /// The name `name` of the body has at the call site.
  std::string renamed(const std::string &name);

  std::string prefix;
  /// The function's outputs that no body node produces (inputs passed
  /// through), with the call's values they are.
  llvm::SmallVector<std::pair<std::string, std::string>> passThrough;

private:
  llvm::StringSet<> &names;
  llvm::StringMap<std::string> rename;
};

CallRenaming::CallRenaming(const ::onnx::NodeProto &call,
                           const ::onnx::FunctionProto &fn,
                           llvm::StringSet<> &names)
    : prefix(nodeName(call) + "/"), names(names) {
  for (auto [i, formal] : llvm::enumerate(fn.input()))
    rename[formal] =
        static_cast<int>(i) < call.input_size() ? call.input(i) : std::string();
  llvm::StringSet<> produced;
  for (const auto &n : fn.node())
    produced.insert(n.output().begin(), n.output().end());
  for (auto [i, formal] : llvm::enumerate(fn.output())) {
    std::string actual = static_cast<int>(i) < call.output_size()
                             ? call.output(i)
                             : std::string();
    if (!produced.contains(formal)) {
      // An output that is an input (or undefined: reported later).
      if (!actual.empty())
        passThrough.emplace_back(formal, actual);
    } else if (!actual.empty()) {
      rename[formal] = actual;
    }
  }
}

std::string CallRenaming::renamed(const std::string &name) {
  if (name.empty())
    return name;
  if (auto r = rename.find(name); r != rename.end())
    return r->second;
  std::string fresh = prefix + name;
  for (int k = 1; names.contains(fresh); ++k)
    fresh = prefix + name + "_" + std::to_string(k);
  names.insert(fresh);
  rename[name] = fresh;
  return fresh;
}

/// Attributes of `bodyNode` referring to the function's (ref_attr_name)
/// take the call's value, else the default; with neither they are absent.
google::protobuf::RepeatedPtrField<::onnx::AttributeProto>
boundAttributes(const ::onnx::NodeProto &bodyNode,
                const ::onnx::NodeProto &call,
                const llvm::StringMap<::onnx::AttributeProto> &defaults) {
  google::protobuf::RepeatedPtrField<::onnx::AttributeProto> attrs;
  for (const auto &attr : bodyNode.attribute()) {
    if (attr.ref_attr_name().empty()) {
      *attrs.Add() = attr;
      continue;
    }
    const ::onnx::AttributeProto *value =
        findAttribute(call, attr.ref_attr_name());
    if (auto d = defaults.find(attr.ref_attr_name());
        !value && d != defaults.end())
      value = &d->second;
    if (!value)
      continue;
    ::onnx::AttributeProto *added = attrs.Add();
    *added = *value;
    added->set_name(attr.name());
  }
  return attrs;
}

/// Replaces the calls of a model's local functions by their bodies,
/// recursively, into a new node list.
class FunctionInliner {
public:
  explicit FunctionInliner(ModelImporter &importer);

  /// Appends top-level node `n` to `nodes`, its calls inlined.
  Error inlineTopLevel(const ::onnx::NodeProto &n) {
    top = &n;
    return emit(n, 0);
  }

  google::protobuf::RepeatedPtrField<::onnx::NodeProto> nodes;

private:
  /// Appends `call` (a node of nesting `depth`) to `nodes`: itself, or the
  /// body of the local function it calls.
  Error emit(const ::onnx::NodeProto &call, int depth);
  /// Whether function `fn` (under `key`) can be inlined at `call`.
  Error checkCall(const ::onnx::NodeProto &call,
                  const ::onnx::FunctionProto &fn, llvm::StringRef key,
                  int depth);
  /// Appends the body of `fn`, renamed for `call`.
  Error inlineCall(const ::onnx::NodeProto &call,
                   const ::onnx::FunctionProto &fn, int depth);

  // Bounds for malformed models: recursion, and calls that multiply.
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxNodes = 1 << 22;

  ModelImporter &importer;
  llvm::StringMap<const ::onnx::FunctionProto *> functions;
  llvm::StringSet<> overloaded;
  int64_t modelOpset = 0;
  // Every value name, so the renamed body values stay unique.
  llvm::StringSet<> names;
  const ::onnx::NodeProto *top = nullptr;
};

FunctionInliner::FunctionInliner(ModelImporter &importer) : importer(importer) {
  const ::onnx::ModelProto &model = importer.model;
  for (const auto &fn : model.functions())
    if (!functions.try_emplace(functionKey(fn.domain(), fn.name()), &fn).second)
      overloaded.insert(functionKey(fn.domain(), fn.name()));
  for (const auto &import : model.opset_import())
    if (isDefaultDomain(import.domain()))
      modelOpset = import.version();

  const auto &graph = model.graph();
  for (const auto &input : graph.input())
    names.insert(input.name());
  for (const auto &init : graph.initializer())
    names.insert(init.name());
  for (const auto &n : graph.node())
    names.insert(n.output().begin(), n.output().end());
}

Error FunctionInliner::emit(const ::onnx::NodeProto &call, int depth) {
  importer.node = &call;
  if (nodes.size() >= kMaxNodes)
    return importer.nodeError("inlining the local functions makes more than "
                              "{0} nodes",
                              kMaxNodes);
  auto it = functions.find(functionKey(call.domain(), call.op_type()));
  if (it == functions.end()) {
    *nodes.Add() = call;
    return Error::success();
  }
  if (Error err = checkCall(call, *it->second, it->first(), depth))
    return err;
  return inlineCall(call, *it->second, depth);
}

Error FunctionInliner::checkCall(const ::onnx::NodeProto &call,
                                 const ::onnx::FunctionProto &fn,
                                 llvm::StringRef key, int depth) {
  if (overloaded.contains(key))
    return importer.nodeError("calls local function '{0}', which the model "
                              "defines more than once; dtc does not inline "
                              "overloads",
                              fn.name());
  if (depth >= kMaxDepth) {
    importer.node = top;
    return importer.nodeError("calls of local functions nest deeper than {0} "
                              "inside it (a recursive function?)",
                              kMaxDepth);
  }
  for (const auto &import : fn.opset_import())
    if (isDefaultDomain(import.domain()) && import.version() != modelOpset)
      return importer.nodeError("calls local function '{0}', which uses "
                                "opset {1} of the default domain, not the "
                                "model's {2}",
                                fn.name(), import.version(), modelOpset);
  if (call.input_size() > fn.input_size() ||
      call.output_size() > fn.output_size())
    return importer.nodeError("calls local function '{0}' with {1} inputs "
                              "and {2} outputs; it has {3} and {4}",
                              fn.name(), call.input_size(), call.output_size(),
                              fn.input_size(), fn.output_size());
  return Error::success();
}

Error FunctionInliner::inlineCall(const ::onnx::NodeProto &call,
                                  const ::onnx::FunctionProto &fn, int depth) {
  CallRenaming renaming(call, fn, names);
  llvm::StringMap<::onnx::AttributeProto> defaults = attributeDefaults(fn);
  for (const auto &bodyNode : fn.node()) {
    ::onnx::NodeProto copy = bodyNode;
    copy.set_name(renaming.prefix + nodeName(bodyNode));
    for (auto &in : *copy.mutable_input())
      in = renaming.renamed(in);
    for (auto &out : *copy.mutable_output())
      out = renaming.renamed(out);
    google::protobuf::RepeatedPtrField<::onnx::AttributeProto> attrs =
        boundAttributes(bodyNode, call, defaults);
    copy.mutable_attribute()->Swap(&attrs);
    if (Error err = emit(copy, depth + 1))
      return err;
  }
  for (const auto &[formal, actual] : renaming.passThrough) {
    ::onnx::NodeProto *identity = nodes.Add();
    identity->set_op_type("Identity");
    identity->set_name(renaming.prefix + actual);
    identity->add_input(renaming.renamed(formal));
    identity->add_output(actual);
  }
  return Error::success();
}

/// Drops the local functions from `model`, and rewrites its opset imports:
/// bodies may import domains the model does not; the functions' own
/// domains, unused now, would only make the ONNX checks skip the model.
void dropFunctions(::onnx::ModelProto &model) {
  std::map<std::string, int64_t> imports;
  for (const auto &import : model.opset_import())
    imports[import.domain()] = import.version();
  for (const auto &fn : model.functions())
    for (const auto &import : fn.opset_import())
      if (!isDefaultDomain(import.domain()))
        imports.try_emplace(import.domain(), import.version());
  llvm::StringSet<> used, functionDomains;
  for (const auto &n : model.graph().node())
    used.insert(n.domain());
  for (const auto &fn : model.functions())
    functionDomains.insert(fn.domain());
  model.clear_functions();
  model.clear_opset_import();
  for (const auto &[domain, version] : imports) {
    if (functionDomains.contains(domain) && !used.contains(domain))
      continue;
    auto *import = model.add_opset_import();
    import->set_domain(domain);
    import->set_version(version);
  }
}

} // namespace

Error ModelImporter::inlineLocalFunctions() {
  if (model.functions_size() == 0)
    return Error::success();
  FunctionInliner inliner(*this);
  for (const auto &n : model.graph().node())
    if (Error err = inliner.inlineTopLevel(n))
      return err;
  node = nullptr;
  model.mutable_graph()->mutable_node()->Swap(&inliner.nodes);
  dropFunctions(model);
  return Error::success();
}
