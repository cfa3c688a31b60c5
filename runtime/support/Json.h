//===- Json.h - JSON from untrusted files -----------------------*- C++ -*-===//
//
// Every JSON a user or a disk hands dtc (checkpoint indexes, safetensors
// headers, cluster files, Hugging Face configs) is parsed through here.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_SUPPORT_JSON_H
#define DTC_RUNTIME_SUPPORT_JSON_H

#include "llvm/Support/JSON.h"

namespace dtc::runtime {

/// Arrays and objects nested deeper than this are refused before parsing:
/// llvm::json::parse recurses once per level, so a file of a few hundred
/// thousand '[' would overflow the stack. Real files nest under 10 levels.
constexpr int kMaxJsonDepth = 256;

/// llvm::json::parse, after the depth check (brackets inside strings do
/// not count). The error is the parser's, or "nested deeper than 256
/// levels"; callers add the file.
llvm::Expected<llvm::json::Value> parseJson(llvm::StringRef text);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_SUPPORT_JSON_H
