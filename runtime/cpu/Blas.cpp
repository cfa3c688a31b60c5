//===- Blas.cpp - OpenBLAS's kernels, chosen for this CPU -----------------===//

#include "runtime/cpu/Blas.h"

#include <cblas.h>
#include <dlfcn.h>

#include "llvm/ADT/StringSwitch.h"

#include <cstdlib>
#include <mutex>
#include <optional>

namespace dtc::runtime::cpu {

namespace {

bool cpuHasAvx512() {
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}

bool cpuHasAvx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

std::string corename() {
  const char *name = openblas_get_corename();
  return name ? name : "";
}

/// Sets OPENBLAS_CORETYPE for the duration of a scope, then restores it.
class ScopedCoreType {
public:
  explicit ScopedCoreType(llvm::StringRef core) {
    if (const char *old = std::getenv("OPENBLAS_CORETYPE"))
      saved_ = old;
    ::setenv("OPENBLAS_CORETYPE", core.str().c_str(), 1);
  }
  ~ScopedCoreType() {
    if (saved_)
      ::setenv("OPENBLAS_CORETYPE", saved_->c_str(), 1);
    else
      ::unsetenv("OPENBLAS_CORETYPE");
  }

private:
  std::optional<std::string> saved_;
};

} // namespace

bool cpuRunsOpenBlasCore(llvm::StringRef core) {
  std::string lower = core.lower();
  return llvm::StringSwitch<bool>(lower)
      .Case("cooperlake",
            cpuHasAvx512() && __builtin_cpu_supports("avx512bf16"))
      .Case("skylakex", cpuHasAvx512())
      .Cases({"haswell", "zen"}, cpuHasAvx2())
      .Case("sandybridge", __builtin_cpu_supports("avx"))
      .Cases({"nehalem", "prescott"}, true) // SSE4.2 / SSE3: every x86-64 here
      .Default(false);
}

std::string preferredOpenBlasCore(llvm::StringRef detected,
                                  llvm::StringRef widestCore) {
  std::string lower = detected.lower();
  // Cooperlake's table adds bf16 kernels to SkylakeX's; its sgemm is the
  // slow one (the header's figures).
  if (lower == "cooperlake" && widestCore == "SkylakeX")
    return "SkylakeX";
  // Tables with AVX2 kernels were chosen for this CPU family: kept.
  bool tuned =
      llvm::StringSwitch<bool>(lower)
          .Cases({"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"},
                 true)
          .Default(false);
  // Anything else on a CPU with AVX2 or AVX-512 is OpenBLAS's fallback for
  // a CPU it did not recognize (a VM's generic model name).
  if (!tuned && (widestCore == "SkylakeX" || widestCore == "Haswell"))
    return widestCore.str();
  return detected.str();
}

std::string widestOpenBlasCore() {
  if (cpuRunsOpenBlasCore("SkylakeX"))
    return "SkylakeX";
  if (cpuRunsOpenBlasCore("Haswell"))
    return "Haswell";
  if (cpuRunsOpenBlasCore("Sandybridge"))
    return "Sandybridge";
  return "Prescott";
}

bool useOpenBlasCore(llvm::StringRef core) {
  using Hook = void (*)();
  // DYNAMIC_ARCH builds export these; re-initializing reads
  // OPENBLAS_CORETYPE again.
  auto quit =
      reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init =
      reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (!quit || !init || !cpuRunsOpenBlasCore(core))
    return false;
  std::string before = corename();
  {
    ScopedCoreType scoped(core);
    quit();
    init();
  }
  if (llvm::StringRef(corename()).equals_insensitive(core))
    return true;
  // This OpenBLAS does not have that table: go back to the one it had.
  ScopedCoreType scoped(before);
  quit();
  init();
  return false;
}

const BlasKernels &chooseBlasKernels() {
  static BlasKernels kernels;
  static std::once_flag once;
  std::call_once(once, [] {
    const char *config = openblas_get_config();
    kernels.config = config ? config : "";
    kernels.detected = kernels.used = corename();
    if (std::getenv("OPENBLAS_CORETYPE")) {
      kernels.reason = "OPENBLAS_CORETYPE is set";
      return;
    }
    std::string preferred =
        preferredOpenBlasCore(kernels.detected, widestOpenBlasCore());
    if (preferred == kernels.detected) {
      kernels.reason = "OpenBLAS's own choice";
      return;
    }
    if (useOpenBlasCore(preferred)) {
      kernels.used = corename();
      kernels.reason =
          "faster f32 GEMM than OpenBLAS's own choice, " + kernels.detected;
    } else {
      kernels.reason =
          "OpenBLAS's own choice (cannot switch to " + preferred + ")";
    }
  });
  return kernels;
}

} // namespace dtc::runtime::cpu
