//===- FuzzClusterJson.cpp - libFuzzer target for --cluster files ---------===//
//
// Bytes -> dtc::parseClusterJson. Any input must give a Cluster or a clean
// bad-input error. The GPU count (what `--gpus` would say) comes from the
// first byte so counts that do not match the file's shape are covered too.
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/Cluster.h"

#include "llvm/Support/Error.h"

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  // 0..255 GPUs; 0 exercises the "no GPUs" path.
  int64_t gpus = data[0];
  llvm::StringRef text(reinterpret_cast<const char *>(data) + 1, size - 1);
  llvm::Expected<dtc::Cluster> cluster =
      dtc::parseClusterJson(text, "<fuzz>", gpus);
  if (!cluster)
    llvm::consumeError(cluster.takeError());
  return 0;
}
