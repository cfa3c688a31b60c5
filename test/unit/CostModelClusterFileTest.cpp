//===- CostModelClusterFileTest.cpp - dtc.cluster/1 files -----------------===//

#include "compiler/costmodel/Cluster.h"
#include "runtime/support/Error.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <vector>

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
  EXPECT_DOUBLE_EQ(c->hbmBytes, usableHbmBytes(141));
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
                .find("hbm.capacity_gbytes must be a positive number up to "
                      "1e12, got \"80\""),
            std::string::npos);
  // Absurd sizes put inf and NaN into plan.json (issue 61).
  EXPECT_NE(errorOf(R"({"base": "h100",
                        "hbm": {"capacity_gbytes": 1e300}})")
                .find("hbm.capacity_gbytes must be a positive number up to "
                      "1e12, got 1"),
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

TEST(ClusterFile, KernelOverheadIsOptionalAndNonNegative) {
  auto c = parseClusterJson(R"({"base": "h100", "kernel_overhead_us": 0.75})",
                            "c.json", 8);
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->kernelOverheadUs, 0.75);
  auto zero = parseClusterJson(R"({"base": "h100", "kernel_overhead_us": 0})",
                               "c.json", 8);
  ASSERT_TRUE(static_cast<bool>(zero)) << llvm::toString(zero.takeError());
  EXPECT_EQ(zero->kernelOverheadUs, 0);
  // Absent: 0, as on every preset (the cost model has no per-kernel term).
  auto full = parseClusterJson(kFull, "c.json", 16);
  ASSERT_TRUE(static_cast<bool>(full)) << llvm::toString(full.takeError());
  EXPECT_EQ(full->kernelOverheadUs, 0);
  for (llvm::StringRef name : clusterPresetNames())
    EXPECT_EQ(lookupClusterPreset(name, 8)->kernelOverheadUs, 0) << name.str();
  EXPECT_NE(errorOf(R"({"base": "h100", "kernel_overhead_us": -1})")
                .find("kernel_overhead_us must be a non-negative number up "
                      "to 1e12, got -1"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"base": "h100", "kernel_overhead_us": "1"})")
                .find("kernel_overhead_us must be a non-negative number"),
            std::string::npos);
}

namespace {
/// Every field of Cluster. The JSON carries hbm in GB and TB/s, so those two
/// go through a division and a multiplication by a power of ten and may
/// differ in the last bits; everything else must come back exactly.
void expectSameCluster(const Cluster &a, const Cluster &b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.gpu, b.gpu);
  EXPECT_EQ(a.peakBf16Tflops, b.peakBf16Tflops);
  EXPECT_EQ(a.peakFp16Tflops, b.peakFp16Tflops);
  EXPECT_EQ(a.peakFp8Tflops, b.peakFp8Tflops);
  EXPECT_EQ(a.peakTf32Tflops, b.peakTf32Tflops);
  EXPECT_DOUBLE_EQ(a.hbmBytes, b.hbmBytes);
  EXPECT_DOUBLE_EQ(a.hbmBytesPerSecond, b.hbmBytesPerSecond);
  EXPECT_EQ(a.gpusPerNode, b.gpusPerNode);
  EXPECT_EQ(a.intraNodeGBps, b.intraNodeGBps);
  EXPECT_EQ(a.interNodeGBps, b.interNodeGBps);
  EXPECT_EQ(a.gpus, b.gpus);
  EXPECT_EQ(a.intraNodeLatencyUs, b.intraNodeLatencyUs);
  EXPECT_EQ(a.interNodeLatencyUs, b.interNodeLatencyUs);
  EXPECT_EQ(a.intraNodeEfficiency, b.intraNodeEfficiency);
  EXPECT_EQ(a.interNodeEfficiency, b.interNodeEfficiency);
  EXPECT_EQ(a.gemmPeakEfficiency, b.gemmPeakEfficiency);
  EXPECT_EQ(a.gemmHalfSize, b.gemmHalfSize);
  EXPECT_EQ(a.memoryEfficiency, b.memoryEfficiency);
  EXPECT_EQ(a.attentionEfficiency, b.attentionEfficiency);
  EXPECT_EQ(a.attentionBackwardRatio, b.attentionBackwardRatio);
  EXPECT_EQ(a.kernelOverheadUs, b.kernelOverheadUs);
}
} // namespace

TEST(ClusterFile, ClusterToJsonReadsBackAsTheSameCluster) {
  // Every field away from every preset's and parseClusterJson's defaults,
  // with digits that do not survive a short printout, so a field the
  // writer forgot or rounds reads back different.
  Cluster odd;
  odd.name = "odd \"lab\" cluster";
  odd.gpu = "Some GPU (3 threads)";
  odd.peakBf16Tflops = 123.456789012345;
  odd.peakFp16Tflops = 0.1 + 0.2;
  odd.peakFp8Tflops = 1e-3 / 3;
  odd.peakTf32Tflops = 7.0 / 3;
  odd.hbmBytes = 33554432.0 * 1001;
  odd.hbmBytesPerSecond = 17.71e9 + 1.0 / 7;
  odd.gpusPerNode = 3;
  odd.intraNodeGBps = 15.263;
  odd.interNodeGBps = 2.0 / 3;
  odd.gpus = 6;
  odd.intraNodeLatencyUs = 0;
  odd.interNodeLatencyUs = 11.25;
  odd.intraNodeEfficiency = 0.61;
  odd.interNodeEfficiency = 1.0 / 3;
  odd.gemmPeakEfficiency = 0.999;
  odd.gemmHalfSize = 13.9;
  odd.memoryEfficiency = 0.135;
  odd.attentionEfficiency = 1.7;
  odd.attentionBackwardRatio = 7.08;
  odd.kernelOverheadUs = 0.37;

  Cluster noFp8 = odd;
  noFp8.name = "no-fp8";
  noFp8.peakFp8Tflops = 0;

  std::vector<Cluster> clusters = {odd, noFp8};
  for (llvm::StringRef name : clusterPresetNames())
    clusters.push_back(*lookupClusterPreset(name, 6));
  for (const Cluster &c : clusters) {
    SCOPED_TRACE(c.name);
    std::string text = clusterToJson(c);
    EXPECT_EQ(text.back(), '\n');
    // A complete document: read without a base, nothing from a preset.
    EXPECT_EQ(text.find("\"base\""), std::string::npos);
    EXPECT_NE(text.find("\"schema\": \"dtc.cluster/1\""), std::string::npos);
    EXPECT_NE(text.find("\"kernel_overhead_us\""), std::string::npos);
    auto read = parseClusterJson(text, "round-trip.json", c.gpus);
    ASSERT_TRUE(static_cast<bool>(read)) << llvm::toString(read.takeError());
    expectSameCluster(c, *read);

    // The already-parsed form, as plan.json's cluster.spec is read.
    auto fromObject =
        parseClusterObject(clusterToJsonObject(c), "spec", c.gpus);
    ASSERT_TRUE(static_cast<bool>(fromObject))
        << llvm::toString(fromObject.takeError());
    expectSameCluster(c, *fromObject);
  }
  // The number of GPUs is not in the file: --gpus gives it.
  auto resized = parseClusterJson(clusterToJson(odd), "c.json", 64);
  ASSERT_TRUE(static_cast<bool>(resized));
  EXPECT_EQ(resized->gpus, 64);
  EXPECT_EQ(clusterToJson(odd).find("\"gpus\""), std::string::npos);
}
