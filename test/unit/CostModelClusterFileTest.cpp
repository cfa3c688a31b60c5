//===- CostModelClusterFileTest.cpp - dtc.cluster/1 files -----------------===//

#include "compiler/costmodel/Cluster.h"
#include "compiler/support/Error.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace dtc;

namespace {
const char *kFull = R"({
  "schema": "dtc.cluster/1",
  "name": "lab-h100",
  "gpu": "H100-SXM5-80GB",
  "gpus_per_node": 8,
  "peak_tflops": {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7},
  "hbm": {"capacity_gbytes": 80, "bandwidth_tbytes_per_s": 3.35},
  "intra_node": {"bandwidth_gbytes_per_s": 450, "latency_us": 2.5,
                 "efficiency": 0.8},
  "inter_node": {"bandwidth_gbytes_per_s": 25, "latency_us": 10},
  "gemm_efficiency": {"peak": 0.7, "half_size": 100},
  "memory_efficiency": 0.9
})";

std::string errorOf(llvm::StringRef json) {
  auto cluster = parseClusterJson(json, "c.json", 16);
  if (cluster) {
    ADD_FAILURE() << "expected an error for " << json.str();
    return "";
  }
  std::string message;
  llvm::handleAllErrors(cluster.takeError(), [&](const DtcError &e) {
    EXPECT_EQ(e.getKind(), ErrorKind::BadInput);
    message = e.getMessage();
  });
  EXPECT_EQ(message.rfind("cluster file c.json: ", 0), 0u) << message;
  return message;
}
} // namespace

TEST(ClusterFile, ReadsEveryField) {
  auto c = parseClusterJson(kFull, "c.json", 16);
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name, "lab-h100");
  EXPECT_EQ(c->gpus, 16);
  EXPECT_EQ(c->gpusPerNode, 8);
  EXPECT_DOUBLE_EQ(c->peakFlops(DType::BF16), 989.4e12);
  EXPECT_DOUBLE_EQ(c->peakFlops(DType::FP8), 1978.9e12);
  EXPECT_DOUBLE_EQ(c->peakFlops(DType::F32), 494.7e12);
  EXPECT_DOUBLE_EQ(c->hbmBytes, 80e9);
  EXPECT_DOUBLE_EQ(c->hbmBytesPerSecond, 3.35e12);
  EXPECT_DOUBLE_EQ(c->intraNode().bytesPerSecond, 450e9);
  EXPECT_DOUBLE_EQ(c->intraNode().latencySeconds, 2.5e-6);
  EXPECT_DOUBLE_EQ(c->intraNode().efficiency, 0.8);
  EXPECT_DOUBLE_EQ(c->interNode().bytesPerSecond, 25e9);
  EXPECT_DOUBLE_EQ(c->interNode().latencySeconds, 10e-6);
  EXPECT_DOUBLE_EQ(c->gemmPeakEfficiency, 0.7);
  EXPECT_DOUBLE_EQ(c->gemmHalfSize, 100);
  EXPECT_DOUBLE_EQ(c->memoryEfficiency, 0.9);
  // Unset: the calibrated default.
  auto preset = lookupClusterPreset("a100-80g", 8);
  EXPECT_DOUBLE_EQ(c->interNodeEfficiency, preset->interNodeEfficiency);
}

TEST(ClusterFile, BaseStartsFromAPreset) {
  auto c = parseClusterJson(
      R"({"base": "h200", "name": "h200-ib800",
          "inter_node": {"bandwidth_gbytes_per_s": 100}})",
      "c.json", 32);
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name, "h200-ib800");
  EXPECT_EQ(c->gpu, "H200-SXM-141GB");
  EXPECT_DOUBLE_EQ(c->hbmBytes, 141e9);
  EXPECT_DOUBLE_EQ(c->interNodeGBps, 100);
  EXPECT_DOUBLE_EQ(c->intraNodeGBps, 450);
}

TEST(ClusterFile, MalformedFilesSayWhatAndWhere) {
  EXPECT_NE(errorOf("{").find("not valid JSON"), std::string::npos);
  // Found by fuzz-cluster-json: the parser recursed once per level and
  // overflowed the stack.
  EXPECT_NE(errorOf(std::string(65536, '[')).find("nested deeper than 256"),
            std::string::npos);
  EXPECT_NE(errorOf("[1, 2]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(errorOf(R"({"schema": "dtc.cluster/2"})").find("dtc.cluster/1"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"base": "v100"})").find("base must name a preset"),
            std::string::npos);
  // A typo is an error, not a silent default.
  EXPECT_NE(errorOf(R"({"base": "h100", "gpus_per_nod": 4})")
                .find("unknown key 'gpus_per_nod'"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"base": "h100",
                        "intra_node": {"bandwidth": 900}})")
                .find("unknown key 'intra_node.bandwidth'"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"base": "h100", "gpus_per_node": 0})")
                .find("gpus_per_node must be a positive integer, got 0"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"base": "h100",
                        "hbm": {"capacity_gbytes": "80"}})")
                .find("hbm.capacity_gbytes must be a positive number, got "
                      "\"80\""),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"base": "h100",
                        "inter_node": {"efficiency": 1.5}})")
                .find("inter_node.efficiency must be a number in (0, 1]"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"base": "h100", "peak_tflops": 989})")
                .find("peak_tflops must be an object"),
            std::string::npos);
}

TEST(ClusterFile, WithoutBaseEveryDatasheetFieldIsRequired) {
  std::string full = kFull;
  EXPECT_NE(errorOf(R"({"name": "x", "gpu": "y", "gpus_per_node": 8,
                        "peak_tflops": {"bf16": 1},
                        "hbm": {"capacity_gbytes": 80,
                                "bandwidth_tbytes_per_s": 2},
                        "intra_node": {"bandwidth_gbytes_per_s": 300}})")
                .find("missing inter_node"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"name": "x", "gpu": "y", "gpus_per_node": 8,
                        "peak_tflops": {"bf16": 1},
                        "hbm": {"capacity_gbytes": 80},
                        "intra_node": {"bandwidth_gbytes_per_s": 300},
                        "inter_node": {"bandwidth_gbytes_per_s": 25}})")
                .find("missing hbm.bandwidth_tbytes_per_s"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"gpu": "y", "gpus_per_node": 8,
                        "peak_tflops": {"bf16": 1},
                        "hbm": {"capacity_gbytes": 80,
                                "bandwidth_tbytes_per_s": 2},
                        "intra_node": {"bandwidth_gbytes_per_s": 300},
                        "inter_node": {"bandwidth_gbytes_per_s": 25}})")
                .find("missing required key 'name'"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"name": "x", "gpu": "y", "gpus_per_node": 8,
                        "peak_tflops": {"fp8": 1},
                        "hbm": {"capacity_gbytes": 80,
                                "bandwidth_tbytes_per_s": 2},
                        "intra_node": {"bandwidth_gbytes_per_s": 300},
                        "inter_node": {"bandwidth_gbytes_per_s": 25}})")
                .find("at least one of bf16, fp16, tf32"),
            std::string::npos);
}

TEST(ClusterFile, LoadClusterTakesANameOrAFile) {
  auto preset = loadCluster("b200", 8);
  ASSERT_TRUE(static_cast<bool>(preset));
  EXPECT_EQ(preset->gpu, "B200");

  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("cluster", "json", path));
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os << kFull;
  }
  auto file = loadCluster(path, 16);
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
  EXPECT_EQ(file->name, "lab-h100");

  auto missing = loadCluster("/nonexistent/cluster.json", 8);
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("cannot read"),
            std::string::npos);
  auto unknown = loadCluster("v100", 8);
  ASSERT_FALSE(static_cast<bool>(unknown));
  EXPECT_NE(llvm::toString(unknown.takeError()).find("neither a preset"),
            std::string::npos);
}

TEST(ClusterFile, PresetsCarryDtypePeaksAndConstants) {
  auto a100 = lookupClusterPreset("a100-80g", 8);
  ASSERT_TRUE(static_cast<bool>(a100));
  EXPECT_DOUBLE_EQ(a100->peakFlops(DType::F16), 312e12);
  EXPECT_DOUBLE_EQ(a100->peakFlops(DType::FP8), 0);
  EXPECT_DOUBLE_EQ(a100->interNodeGBps, 25); // 200 Gbit/s HDR.
  for (llvm::StringRef name : clusterPresetNames()) {
    auto c = lookupClusterPreset(name, 8);
    ASSERT_TRUE(static_cast<bool>(c));
    EXPECT_GT(c->intraNodeLatencyUs, 0) << name.str();
    EXPECT_GT(c->interNodeLatencyUs, c->intraNodeLatencyUs) << name.str();
    EXPECT_GT(c->gemmPeakEfficiency, 0) << name.str();
    EXPECT_LE(c->gemmPeakEfficiency, 1) << name.str();
    EXPECT_GT(c->hbmBytesPerSecond, 0) << name.str();
  }
}
