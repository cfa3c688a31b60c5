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

} // namespace

Error ModelImporter::inlineLocalFunctions() {
  if (model.functions_size() == 0)
    return Error::success();
  auto keyOf = [](llvm::StringRef domain, llvm::StringRef name) {
    return (isDefaultDomain(domain) ? "" : domain.str()) + "::" + name.str();
  };
  llvm::StringMap<const ::onnx::FunctionProto *> functions;
  llvm::StringSet<> overloaded;
  for (const auto &fn : model.functions())
    if (!functions.try_emplace(keyOf(fn.domain(), fn.name()), &fn).second)
      overloaded.insert(keyOf(fn.domain(), fn.name()));
  int64_t modelOpset = 0;
  for (const auto &import : model.opset_import())
    if (isDefaultDomain(import.domain()))
      modelOpset = import.version();

  // Every value name, so the renamed body values stay unique.
  const auto &graph = model.graph();
  llvm::StringSet<> names;
  for (const auto &input : graph.input())
    names.insert(input.name());
  for (const auto &init : graph.initializer())
    names.insert(init.name());
  for (const auto &n : graph.node())
    names.insert(n.output().begin(), n.output().end());

  // Bounds for malformed models: recursion, and calls that multiply.
  constexpr int kMaxDepth = 32;
  constexpr int kMaxNodes = 1 << 22;
  google::protobuf::RepeatedPtrField<::onnx::NodeProto> nodes;
  const ::onnx::NodeProto *top = nullptr;
  std::function<Error(const ::onnx::NodeProto &, int)> emit =
      [&](const ::onnx::NodeProto &call, int depth) -> Error {
    node = &call;
    if (nodes.size() >= kMaxNodes)
      return nodeError("inlining the local functions makes more than {0} "
                       "nodes",
                       kMaxNodes);
    auto it = functions.find(keyOf(call.domain(), call.op_type()));
    if (it == functions.end()) {
      *nodes.Add() = call;
      return Error::success();
    }
    const ::onnx::FunctionProto &fn = *it->second;
    if (overloaded.contains(it->first()))
      return nodeError("calls local function '{0}', which the model defines "
                       "more than once; dtc does not inline overloads",
                       fn.name());
    if (depth >= kMaxDepth) {
      node = top;
      return nodeError("calls of local functions nest deeper than {0} "
                       "inside it (a recursive function?)",
                       kMaxDepth);
    }
    for (const auto &import : fn.opset_import())
      if (isDefaultDomain(import.domain()) && import.version() != modelOpset)
        return nodeError("calls local function '{0}', which uses opset {1} "
                         "of the default domain, not the model's {2}",
                         fn.name(), import.version(), modelOpset);
    if (call.input_size() > fn.input_size() ||
        call.output_size() > fn.output_size())
      return nodeError("calls local function '{0}' with {1} inputs and {2} "
                       "outputs; it has {3} and {4}",
                       fn.name(), call.input_size(), call.output_size(),
                       fn.input_size(), fn.output_size());

    // Formal inputs and outputs become the call's values; the rest get
    // fresh names under the call's name.
    std::string prefix = nodeName(call) + "/";
    llvm::StringMap<std::string> rename;
    for (auto [i, formal] : llvm::enumerate(fn.input()))
      rename[formal] = static_cast<int>(i) < call.input_size() ? call.input(i)
                                                               : std::string();
    llvm::StringSet<> produced;
    for (const auto &n : fn.node())
      produced.insert(n.output().begin(), n.output().end());
    llvm::SmallVector<std::pair<std::string, std::string>> passThrough;
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
    auto renamed = [&](const std::string &name) -> std::string {
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
    };
    llvm::StringMap<::onnx::AttributeProto> defaults = attributeDefaults(fn);
    for (const auto &bodyNode : fn.node()) {
      ::onnx::NodeProto copy = bodyNode;
      copy.set_name(prefix + nodeName(bodyNode));
      for (auto &in : *copy.mutable_input())
        in = renamed(in);
      for (auto &out : *copy.mutable_output())
        out = renamed(out);
      // Attributes referring to the function's (ref_attr_name) take the
      // call's value, else the default; with neither they are absent.
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
      copy.mutable_attribute()->Swap(&attrs);
      if (Error err = emit(copy, depth + 1))
        return err;
    }
    for (const auto &[formal, actual] : passThrough) {
      ::onnx::NodeProto *identity = nodes.Add();
      identity->set_op_type("Identity");
      identity->set_name(prefix + actual);
      identity->add_input(renamed(formal));
      identity->add_output(actual);
    }
    return Error::success();
  };
  for (const auto &n : graph.node()) {
    top = &n;
    if (Error err = emit(n, 0))
      return err;
  }
  node = nullptr;
  model.mutable_graph()->mutable_node()->Swap(&nodes);

  // Bodies may import domains the model does not; the functions' own
  // domains, unused now, would only make the ONNX checks skip the model.
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
  return Error::success();
}
