//===- Json.cpp - JSON from untrusted files -------------------------------===//

#include "runtime/support/Json.h"
#include "runtime/support/Error.h"

namespace dtc::runtime {

llvm::Expected<llvm::json::Value> parseJson(llvm::StringRef text) {
  int depth = 0;
  bool inString = false, escaped = false;
  for (char c : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return dtc::failureText("nested deeper than " +
                                llvm::Twine(kMaxJsonDepth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return llvm::json::parse(text);
}

} // namespace dtc::runtime
