//===- ClusterTest.cpp - cluster presets ----------------------------------===//

#include "compiler/costmodel/Cluster.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

using namespace dtc;

// The figures are the published ones of ../shared/data/hardware.csv.
TEST(Cluster, H100PresetCarriesDatasheetFigures) {
  auto cluster = lookupClusterPreset("h100", 64);
  ASSERT_TRUE(static_cast<bool>(cluster))
      << llvm::toString(cluster.takeError());
  EXPECT_EQ(cluster->gpu, "H100-SXM5-80GB");
  EXPECT_DOUBLE_EQ(cluster->peakBf16Tflops, 989.4);
  EXPECT_DOUBLE_EQ(cluster->hbmBytes, usableHbmBytes(80));
  EXPECT_EQ(cluster->gpusPerNode, 8);
  EXPECT_DOUBLE_EQ(cluster->intraNodeGBps, 450); // 900 GB/s both directions.
  EXPECT_DOUBLE_EQ(cluster->interNodeGBps, 50);  // 400 Gbit/s.
  EXPECT_EQ(cluster->gpus, 64);
}

TEST(Cluster, Nvl72IsOneNvlinkDomain) {
  auto cluster = lookupClusterPreset("gb200-nvl72", 72);
  ASSERT_TRUE(static_cast<bool>(cluster))
      << llvm::toString(cluster.takeError());
  EXPECT_EQ(cluster->gpusPerNode, 72);
}

TEST(Cluster, EveryPresetNameResolves) {
  for (llvm::StringRef name : clusterPresetNames()) {
    auto cluster = lookupClusterPreset(name, 8);
    ASSERT_TRUE(static_cast<bool>(cluster)) << name.str();
    EXPECT_GT(cluster->peakBf16Tflops, 0) << name.str();
    EXPECT_GT(cluster->hbmBytes, 0) << name.str();
  }
}

TEST(Cluster, UnknownNameIsBadInputListingPresets) {
  auto cluster = lookupClusterPreset("v100", 8);
  ASSERT_FALSE(static_cast<bool>(cluster));
  llvm::handleAllErrors(cluster.takeError(), [](const DtcError &e) {
    EXPECT_EQ(e.getKind(), ErrorKind::BadInput);
    EXPECT_NE(e.getMessage().find("'v100'"), std::string::npos);
    EXPECT_NE(e.getMessage().find("h100"), std::string::npos);
  });
}
