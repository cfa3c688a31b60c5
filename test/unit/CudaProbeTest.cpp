//===- CudaProbeTest.cpp - the CUDA stack builds, links and runs ----------===//
//
// Runs everywhere the toolkit is installed. Without a GPU the library calls
// must fail cleanly (no crash) and the device tests are reported as skipped.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaProbe.h"

#include <gtest/gtest.h>

using namespace dtc;

TEST(CudaProbe, LibrariesLoadWithOrWithoutDevice) {
  cuda::ProbeResult result = cuda::probe();
  EXPECT_GE(result.deviceCount, 0);
  EXPECT_EQ(result.deviceNames.size(), static_cast<size_t>(result.deviceCount));
  // NCCL answers its version without a device; 2.x is >= 20000.
  EXPECT_GE(result.ncclVersion, 20000);
}

TEST(CudaProbe, CublasLtHandle) {
  if (cuda::probe().deviceCount == 0) {
    // Must fail with a message, not crash.
    EXPECT_FALSE(cuda::checkCublasLt().empty());
    GTEST_SKIP() << "no CUDA device";
  }
  EXPECT_EQ(cuda::checkCublasLt(), "");
}

TEST(CudaProbe, KernelLaunch) {
  if (cuda::probe().deviceCount == 0)
    GTEST_SKIP() << "no CUDA device";
  EXPECT_EQ(cuda::checkKernelLaunch(), "");
}
