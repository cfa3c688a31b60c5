//===- nvToolsExt.h - NVTX ranges for the CUDA host emulation ---*- C++ -*-===//
//
// No profiler to name ranges for: they do nothing.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_TEST_CUDA_EMULATION_NVTOOLSEXT_H
#define DTC_TEST_CUDA_EMULATION_NVTOOLSEXT_H

inline int nvtxRangePushA(const char *) { return 0; }
inline int nvtxRangePop() { return 0; }

#endif // DTC_TEST_CUDA_EMULATION_NVTOOLSEXT_H
