//===- HfConfig.h - Hugging Face config.json -> ModelConfig -----*- C++ -*-===//
//
// Reads the architecture of a Hugging Face `config.json` (model_type gpt2,
// llama, mistral, qwen2, mixtral, qwen2_moe, qwen3_moe) into the
// ModelConfig dtc modelgen builds an ONNX model from. Errors are one line
// naming the file and the key.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_HF_HFCONFIG_H
#define DTC_FRONTENDS_HF_HFCONFIG_H

#include "frontends/modelgen/ModelGen.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace dtc::hf {

/// The model_type values understood.
llvm::ArrayRef<llvm::StringRef> supportedModelTypes();

/// Parses `text`, the contents of the config file `path` (named in errors).
llvm::Expected<modelgen::ModelConfig> parseConfig(llvm::StringRef text,
                                                  llvm::StringRef path);

/// Reads and parses the config file at `path`.
llvm::Expected<modelgen::ModelConfig> readConfigFile(llvm::StringRef path);

} // namespace dtc::hf

#endif // DTC_FRONTENDS_HF_HFCONFIG_H
