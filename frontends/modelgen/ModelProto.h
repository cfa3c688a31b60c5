//===- ModelProto.h - modelgen on ONNX protobuf classes ---------*- C++ -*-===//
//
// The ONNX ModelProto side of modelgen, apart from ModelGen.h so that users
// of the config and generate() do not see the global `onnx` namespace.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_MODELGEN_MODELPROTO_H
#define DTC_FRONTENDS_MODELGEN_MODELPROTO_H

#include "frontends/modelgen/ModelGen.h"

#include "onnx/onnx_pb.h"

namespace dtc::modelgen {

/// Builds the model. Fails (bad input) when inline random weights would not
/// fit one protobuf (2 GB): pass shape-only then.
llvm::Error buildModel(const ModelConfig &config, const GenOptions &options,
                       ::onnx::ModelProto &model);

/// Serializes `model` to `path` atomically (a temp file renamed into place).
llvm::Error writeModel(const ::onnx::ModelProto &model, llvm::StringRef path);

} // namespace dtc::modelgen

#endif // DTC_FRONTENDS_MODELGEN_MODELPROTO_H
