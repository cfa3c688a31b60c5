//===- OnnxUtils.h - Helpers over ONNX protobuf nodes -----------*- C++ -*-===//

#ifndef DTC_FRONTENDS_ONNX_ONNXUTILS_H
#define DTC_FRONTENDS_ONNX_ONNXUTILS_H

#include "onnx/onnx_pb.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace dtc::onnx {

/// The attribute `name` of `node`, or null.
const ::onnx::AttributeProto *findAttribute(const ::onnx::NodeProto &node,
                                            llvm::StringRef name);
int64_t getIntAttr(const ::onnx::NodeProto &node, llvm::StringRef name,
                   int64_t defaultValue);
float getFloatAttr(const ::onnx::NodeProto &node, llvm::StringRef name,
                   float defaultValue);
std::string getStringAttr(const ::onnx::NodeProto &node, llvm::StringRef name,
                          llvm::StringRef defaultValue);
std::optional<llvm::SmallVector<int64_t>>
getIntsAttr(const ::onnx::NodeProto &node, llvm::StringRef name);

/// How messages name a node: its name, else its first output's name.
std::string nodeName(const ::onnx::NodeProto &node);

/// True for the default ONNX domain ("" or "ai.onnx").
inline bool isDefaultDomain(llvm::StringRef domain) {
  return domain.empty() || domain == "ai.onnx";
}

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_ONNXUTILS_H
