//===- Blas.h - OpenBLAS's kernels, chosen for this CPU ---------*- C++ -*-===//
//
// Debian's OpenBLAS is built for every x86-64 generation (DYNAMIC_ARCH) and
// picks a kernel table ("core") when it loads. Its pick is not always its
// fastest sgemm: 0.3.21 sends AVX-512 BF16 CPUs (Cooper Lake, Sapphire
// Rapids, Zen 4) to the Cooperlake table, whose sgemm measured 64 GFLOP/s
// on a Xeon where the SkylakeX table reached 296 (issue 31). The CPU backend
// therefore chooses the table itself, once per process, before any GEMM:
// the user's OPENBLAS_CORETYPE wins, else the detected core unless a faster
// one for f32 is known and this CPU runs it. The choice only moves between
// tables of one library; each is deterministic, and every tile of
// parallelSgemm uses the same one.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CPU_BLAS_H
#define DTC_RUNTIME_CPU_BLAS_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace dtc::runtime::cpu {

struct BlasKernels {
  std::string config;   ///< openblas_get_config()
  std::string detected; ///< the core OpenBLAS chose when it loaded
  std::string used;     ///< the core in use
  std::string reason;   ///< why `used` is what it is, one line
};

/// Whether this CPU executes the instructions of OpenBLAS core `core` (an
/// OPENBLAS_CORETYPE name, any case); false for names dtc does not know.
bool cpuRunsOpenBlasCore(llvm::StringRef core);

/// The core whose sgemm dtc prefers over `detected`, given the widest table
/// the CPU runs (widestOpenBlasCore): SkylakeX over Cooperlake, and the
/// widest table over a generic one (Prescott, Nehalem, Sandybridge, ...),
/// which OpenBLAS 0.3.21 falls back to for a CPU it does not recognize: a
/// Sapphire Rapids VM reporting "Intel Xeon Processor" got Prescott's SSE3
/// sgemm, 18 GFLOP/s on tiny-gpt's shapes where SkylakeX's reached 80-110
/// (issue 60). `detected` itself when none is known to beat it.
std::string preferredOpenBlasCore(llvm::StringRef detected,
                                  llvm::StringRef widestCore);

/// The widest of the SkylakeX, Haswell, Sandybridge and Prescott tables this
/// CPU runs.
std::string widestOpenBlasCore();

/// Switches OpenBLAS to `core` now. False, with the library unchanged, when
/// this OpenBLAS cannot switch (not DYNAMIC_ARCH) or the CPU cannot run it.
/// Not thread-safe: call while no GEMM runs.
bool useOpenBlasCore(llvm::StringRef core);

/// Makes the choice described above on the first call; later calls return
/// it. registerCpuKernels calls it.
const BlasKernels &chooseBlasKernels();

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_BLAS_H
