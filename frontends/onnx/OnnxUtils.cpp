//===- OnnxUtils.cpp - Helpers over ONNX protobuf nodes -------------------===//

#include "frontends/onnx/OnnxUtils.h"

using namespace dtc::onnx;

const ::onnx::AttributeProto *
dtc::onnx::findAttribute(const ::onnx::NodeProto &node, llvm::StringRef name) {
  for (const auto &attr : node.attribute())
    if (attr.name() == name)
      return &attr;
  return nullptr;
}

int64_t dtc::onnx::getIntAttr(const ::onnx::NodeProto &node,
                              llvm::StringRef name, int64_t defaultValue) {
  const auto *attr = findAttribute(node, name);
  return attr ? attr->i() : defaultValue;
}

float dtc::onnx::getFloatAttr(const ::onnx::NodeProto &node,
                              llvm::StringRef name, float defaultValue) {
  const auto *attr = findAttribute(node, name);
  return attr ? attr->f() : defaultValue;
}

std::string dtc::onnx::getStringAttr(const ::onnx::NodeProto &node,
                                     llvm::StringRef name,
                                     llvm::StringRef defaultValue) {
  const auto *attr = findAttribute(node, name);
  return attr ? attr->s() : defaultValue.str();
}

std::optional<llvm::SmallVector<int64_t>>
dtc::onnx::getIntsAttr(const ::onnx::NodeProto &node, llvm::StringRef name) {
  const auto *attr = findAttribute(node, name);
  if (!attr)
    return std::nullopt;
  return llvm::SmallVector<int64_t>(attr->ints().begin(), attr->ints().end());
}

std::string dtc::onnx::nodeName(const ::onnx::NodeProto &node) {
  if (!node.name().empty())
    return node.name();
  if (node.output_size() > 0 && !node.output(0).empty())
    return node.output(0);
  return "<unnamed>";
}
