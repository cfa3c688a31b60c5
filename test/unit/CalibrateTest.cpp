//===- CalibrateTest.cpp - dtc calibrate's fitting and cluster file -------===//
//
// The GEMM curve fit recovers known constants from timings generated here
// from them; the cluster file `dtc calibrate` writes reads back as a cluster
// with the measured values (worked out by hand below); the memory
// efficiency meets a measured step; the attention constants reach the cost
// model; the kernels it times are priced as the kinds they calibrate.
//
//===----------------------------------------------------------------------===//

#include "compiler/calibrate/Calibrate.h"
#include "compiler/costmodel/Collectives.h"
#include "compiler/costmodel/Compute.h"
#include "compiler/costmodel/KernelTime.h"

#include <gtest/gtest.h>

#include <random>

using namespace dtc;
using namespace dtc::calibrate;

namespace {

/// Seconds of a GEMM at rate / (1 + half (1/M + 1/N + 1/K)), written out
/// here independently of the fitting code.
double curveSeconds(double rate, double half, int64_t m, int64_t n, int64_t k) {
  double flops = 2.0 * m * n * k;
  return flops * (1 + half * (1.0 / m + 1.0 / n + 1.0 / k)) / rate;
}

const int64_t kShapes[][3] = {{128, 128, 128},    {256, 256, 256},
                              {1024, 1024, 1024}, {64, 1024, 1024},
                              {2048, 768, 32},    {512, 3072, 768}};

TEST(CalibrateTest, FitRecoversExactCurve) {
  std::vector<GemmSample> samples;
  for (auto &s : kShapes)
    samples.push_back(
        {s[0], s[1], s[2], curveSeconds(50e9, 40, s[0], s[1], s[2])});
  auto fit = fitGemmCurve(samples);
  ASSERT_TRUE(static_cast<bool>(fit)) << llvm::toString(fit.takeError());
  EXPECT_NEAR(fit->peakFlops, 50e9, 50e9 * 1e-9);
  EXPECT_NEAR(fit->halfSize, 40, 1e-6);
  EXPECT_LT(fit->worstError, 1e-9);
  // 512^3 at 50 GFLOP/s / (1 + 40 * 3/512): 268435456 / 50e9 * 1.234375.
  EXPECT_NEAR(gemmSeconds(*fit, 512, 512, 512), 0.00662700032, 1e-11);
}

TEST(CalibrateTest, FitToleratesNoise) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(0.95, 1.05);
  std::vector<GemmSample> samples;
  for (int rep = 0; rep < 4; ++rep)
    for (auto &s : kShapes)
      samples.push_back(
          {s[0], s[1], s[2],
           curveSeconds(80e9, 12, s[0], s[1], s[2]) * noise(rng)});
  auto fit = fitGemmCurve(samples);
  ASSERT_TRUE(static_cast<bool>(fit)) << llvm::toString(fit.takeError());
  EXPECT_NEAR(fit->peakFlops, 80e9, 80e9 * 0.05);
  EXPECT_NEAR(fit->halfSize, 12, 4);
  EXPECT_LT(fit->worstError, 0.11);
  EXPECT_LT(fit->medianError, 0.05);
}

TEST(CalibrateTest, SmallShapesNoSlowerGiveAFlatCurve) {
  // The same 30 GFLOP/s at every size, and then small shapes faster: the
  // half size cannot go negative.
  std::vector<GemmSample> flat, faster;
  for (auto &s : kShapes) {
    double seconds = 2.0 * s[0] * s[1] * s[2] / 30e9;
    flat.push_back({s[0], s[1], s[2], seconds});
    double x = 1.0 / s[0] + 1.0 / s[1] + 1.0 / s[2];
    faster.push_back({s[0], s[1], s[2], seconds * (1 - 5 * x)});
  }
  auto fit = fitGemmCurve(flat);
  ASSERT_TRUE(static_cast<bool>(fit)) << llvm::toString(fit.takeError());
  EXPECT_NEAR(fit->peakFlops, 30e9, 30e9 * 1e-9);
  EXPECT_NEAR(fit->halfSize, 0, 1e-9);
  fit = fitGemmCurve(faster);
  ASSERT_TRUE(static_cast<bool>(fit)) << llvm::toString(fit.takeError());
  EXPECT_EQ(fit->halfSize, 0);
}

TEST(CalibrateTest, FitRejectsTooFewOrBadSamples) {
  auto one = fitGemmCurve({GemmSample{256, 256, 256, 1e-3}});
  ASSERT_FALSE(static_cast<bool>(one));
  EXPECT_NE(llvm::toString(one.takeError()).find("two shapes"),
            std::string::npos);
  // Two samples of one shape do not determine a curve.
  auto same = fitGemmCurve(
      {GemmSample{256, 256, 256, 1e-3}, GemmSample{256, 256, 256, 2e-3}});
  ASSERT_FALSE(static_cast<bool>(same));
  llvm::consumeError(same.takeError());
  auto zero = fitGemmCurve(
      {GemmSample{256, 256, 256, 0}, GemmSample{512, 512, 512, 1e-3}});
  ASSERT_FALSE(static_cast<bool>(zero));
  EXPECT_NE(llvm::toString(zero.takeError()).find("not positive"),
            std::string::npos);
}

TEST(CalibrateTest, MemoryEfficiencyMeetsTheMeasuredStep) {
  // 2 s at full bandwidth and 2.5 s at half: 0.5 s of streaming, 1.5 s of
  // the rest. A 3 s step leaves 1.5 s for streaming: a third of the bandwidth.
  EXPECT_NEAR(fitMemoryEfficiency(3, 2, 2.5), 1.0 / 3, 1e-12);
  // A step the model already reaches or overestimates keeps efficiency 1.
  EXPECT_EQ(fitMemoryEfficiency(1.9, 2, 2.5), 1);
  // A step far slower than any bandwidth explains is clamped.
  EXPECT_EQ(fitMemoryEfficiency(1000, 2, 2.5), 0.01);
  // No streaming at all: nothing to fit.
  EXPECT_EQ(fitMemoryEfficiency(3, 2, 2), 1);
}

Measurements handMeasurements() {
  Measurements m;
  m.device = "Test CPU";
  m.threads = 2;
  m.memoryBytes = 16e9;
  m.streamBytes = 12e9; // 12 GB/s through dtc.add.
  m.streamSeconds = 1;
  m.copyBytes = 16e9; // memcpy: 8 GB/s read + 8 GB/s written.
  m.copySeconds = 1;
  m.attention = {1, 1, 128, 64, true, 0, 0};
  // Forward FLOPs 4 * 128^2 * 64 / 2 = 2097152; at 50 GFLOP/s times the
  // head-dim term 64/96 that takes 6.291456e-5 s, so twice that is an
  // efficiency factor of 0.5. The backward takes 4x the forward.
  m.attention.forwardSeconds = 1.2582912e-4;
  m.attention.backwardSeconds = 4 * 1.2582912e-4;
  m.step.memoryEfficiency = 0.25;
  m.perOpSeconds = 0.5e-6;
  return m;
}

TEST(CalibrateTest, ClusterFileReadsBack) {
  GemmFit fit;
  fit.peakFlops = 50e9;
  fit.halfSize = 0;
  Cluster written =
      clusterFromMeasurements(handMeasurements(), fit, "test-cpu");
  std::string json = clusterToJson(written);
  auto read = parseClusterJson(json, "cpu.json", 1);
  ASSERT_TRUE(static_cast<bool>(read)) << llvm::toString(read.takeError());
  EXPECT_EQ(read->name, "test-cpu");
  EXPECT_EQ(read->gpu, "Test CPU (2 threads)");
  EXPECT_EQ(read->gpusPerNode, 1);
  EXPECT_DOUBLE_EQ(read->peakTf32Tflops, 0.05);
  EXPECT_DOUBLE_EQ(read->peakBf16Tflops, 0.05);
  EXPECT_DOUBLE_EQ(read->peakFp16Tflops, 0.05);
  EXPECT_EQ(read->peakFp8Tflops, 0);
  EXPECT_DOUBLE_EQ(read->peakFlops(DType::F32), 50e9);
  EXPECT_DOUBLE_EQ(read->hbmBytes, 16e9);
  EXPECT_DOUBLE_EQ(read->hbmBytesPerSecond, 12e9);
  EXPECT_DOUBLE_EQ(read->memoryEfficiency, 0.25);
  EXPECT_DOUBLE_EQ(read->gemmPeakEfficiency, 1);
  EXPECT_DOUBLE_EQ(read->gemmHalfSize, 0);
  EXPECT_DOUBLE_EQ(read->intraNodeGBps, 8);
  EXPECT_DOUBLE_EQ(read->interNodeGBps, 8);
  EXPECT_NEAR(read->attentionEfficiency, 0.5, 1e-9);
  EXPECT_NEAR(read->attentionBackwardRatio, 4, 1e-9);
  EXPECT_DOUBLE_EQ(read->kernelOverheadUs, 0.5);
}

TEST(CalibrateTest, LinkFitRecoversLatencyAndBandwidth) {
  // Two-rank all-reduces at 15 us latency (two steps) and 4 GB/s, written
  // out here: t = 2 * 15e-6 + bytes / 4e9.
  std::vector<CollectiveSample> samples;
  for (double bytes : {4096.0, 65536.0, 1048576.0, 16777216.0})
    samples.push_back({bytes, 30e-6 + bytes / 4e9});
  auto fit = fitLink(samples);
  ASSERT_TRUE(static_cast<bool>(fit)) << llvm::toString(fit.takeError());
  EXPECT_NEAR(fit->latencySeconds, 15e-6, 1e-12);
  EXPECT_NEAR(fit->bytesPerSecond, 4e9, 1e-3);
  EXPECT_LT(fit->worstError, 1e-9);

  // The measured link replaces memcpy's in the cluster file.
  Measurements m = handMeasurements();
  m.link = *fit;
  GemmFit gemm;
  gemm.peakFlops = 50e9;
  Cluster c = clusterFromMeasurements(m, gemm, "test-cpu");
  EXPECT_DOUBLE_EQ(c.intraNodeGBps, 4);
  EXPECT_DOUBLE_EQ(c.interNodeGBps, 4);
  EXPECT_NEAR(c.intraNodeLatencyUs, 15, 1e-6);
  EXPECT_NEAR(
      flatCollectiveTime(Collective::AllReduce, 1048576, 2, c.intraNode()),
      30e-6 + 1048576 / 4e9, 1e-12);
}

TEST(CalibrateTest, LinkFitWithoutLatencyAndBadSamples) {
  // A small message faster than any positive latency allows: the line
  // through the origin minimizing the relative residuals (b x - t) / t,
  // b = sum(x / t) / sum(x^2 / t^2) = (2e9 + 1e9 + 1e9) / (4e18 + 1e18 +
  // 1e18), so 1.5 GB/s.
  std::vector<CollectiveSample> samples = {
      {1000, 0.5e-6}, {1e6, 1e-3}, {4e6, 4e-3}};
  auto fit = fitLink(samples);
  ASSERT_TRUE(static_cast<bool>(fit)) << llvm::toString(fit.takeError());
  EXPECT_EQ(fit->latencySeconds, 0);
  EXPECT_NEAR(fit->bytesPerSecond, 1.5e9, 1e3);

  auto one = fitLink({{4096, 1e-5}});
  ASSERT_FALSE(static_cast<bool>(one));
  EXPECT_NE(llvm::toString(one.takeError()).find("at least two sizes"),
            std::string::npos);
  auto negative = fitLink({{4096, 1e-5}, {8192, -1}});
  ASSERT_FALSE(static_cast<bool>(negative));
  EXPECT_NE(llvm::toString(negative.takeError()).find("not positive"),
            std::string::npos);
}

TEST(CalibrateTest, AttentionConstantsReachTheCostModel) {
  auto preset = lookupClusterPreset("h100", 1);
  ASSERT_TRUE(static_cast<bool>(preset));
  // The presets keep FlashAttention's figures.
  EXPECT_EQ(preset->attentionEfficiency, 1);
  EXPECT_EQ(preset->attentionBackwardRatio, 2.5);
  auto file = parseClusterJson(
      R"({"base": "h100", "attention": {"efficiency": 0.5,
          "backward_ratio": 10}})",
      "a.json", 1);
  ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
  EXPECT_EQ(file->attentionBackwardRatio, 10);
  EXPECT_DOUBLE_EQ(fusedAttentionEfficiency(4096, 4096, 128, *file),
                   0.5 * fusedAttentionEfficiency(4096, 4096, 128, *preset));
  auto bad = parseClusterJson(R"({"base": "h100", "attention": {"efficiency":
      0}})",
                              "a.json", 1);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("attention.efficiency"),
            std::string::npos);
}

TEST(CalibrateTest, GpuNamesFindTheirPresets) {
  EXPECT_EQ(presetForGpu("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(presetForGpu("NVIDIA H200"), "h200");
  EXPECT_EQ(presetForGpu("NVIDIA A100-SXM4-80GB"), "a100-80g");
  EXPECT_EQ(presetForGpu("NVIDIA B200"), "b200");
  // "GB200" contains "B200".
  EXPECT_EQ(presetForGpu("NVIDIA GB200"), "gb200-nvl72");
  EXPECT_EQ(presetForGpu("NVIDIA L40S"), "");
}

/// What `dtc calibrate --backend cuda` measured on one H200, by hand.
Measurements handGpuMeasurements() {
  Measurements m;
  m.cuda = true;
  m.device = "NVIDIA H200";
  m.gpus = 1;
  m.memoryBytes = 150e9;
  m.f32OverBf16 = 0.4;
  m.streamBytes = 4e9; // 4 TB/s through dtc.add.
  m.streamSeconds = 1e-3;
  m.copyBytes = 2e9;
  m.copySeconds = 1e-3;
  m.step.memoryEfficiency = 0.8;
  m.perOpSeconds = 3e-6;
  return m;
}

TEST(CalibrateTest, GpuClusterKeepsItsPresetsTopology) {
  GemmFit fit;
  fit.peakFlops = 700e12;
  fit.halfSize = 300;
  Cluster c = clusterFromMeasurements(handGpuMeasurements(), fit, "gpu");
  auto read = parseClusterJson(clusterToJson(c), "gpu.json", 16);
  ASSERT_TRUE(static_cast<bool>(read)) << llvm::toString(read.takeError());
  EXPECT_EQ(read->gpu, "NVIDIA H200");
  // The measured bf16 curve is the curve: peak efficiency 1.
  EXPECT_DOUBLE_EQ(read->peakBf16Tflops, 700);
  EXPECT_DOUBLE_EQ(read->peakFp16Tflops, 700);
  EXPECT_DOUBLE_EQ(read->gemmPeakEfficiency, 1);
  EXPECT_DOUBLE_EQ(read->gemmHalfSize, 300);
  // f32 at 0.4 of bf16; fp8 at the H200 datasheet's 1978.9 / 989.4.
  EXPECT_DOUBLE_EQ(read->peakTf32Tflops, 280);
  EXPECT_NEAR(read->peakFp8Tflops, 700 * 1978.9 / 989.4, 1e-9);
  EXPECT_DOUBLE_EQ(read->hbmBytes, 150e9);
  EXPECT_DOUBLE_EQ(read->hbmBytesPerSecond, 4e12);
  EXPECT_DOUBLE_EQ(read->memoryEfficiency, 0.8);
  EXPECT_DOUBLE_EQ(read->kernelOverheadUs, 3);
  // One GPU measures no link: the preset's NVLink node and scale-out.
  Cluster h200 = cantFail(lookupClusterPreset("h200", 16));
  EXPECT_EQ(read->gpusPerNode, h200.gpusPerNode);
  EXPECT_DOUBLE_EQ(read->intraNodeGBps, h200.intraNodeGBps);
  EXPECT_DOUBLE_EQ(read->intraNodeEfficiency, h200.intraNodeEfficiency);
  EXPECT_DOUBLE_EQ(read->interNodeGBps, h200.interNodeGBps);
  EXPECT_DOUBLE_EQ(read->interNodeLatencyUs, h200.interNodeLatencyUs);

  // Two GPUs' all-reduces replace the NVLink link, not the scale-out one.
  Measurements two = handGpuMeasurements();
  two.gpus = 8;
  two.link.bytesPerSecond = 360e9;
  two.link.latencySeconds = 8e-6;
  Cluster measured = clusterFromMeasurements(two, fit, "gpu");
  EXPECT_DOUBLE_EQ(measured.intraNodeGBps, 360);
  EXPECT_NEAR(measured.intraNodeLatencyUs, 8, 1e-9);
  EXPECT_DOUBLE_EQ(measured.intraNodeEfficiency, 1);
  EXPECT_DOUBLE_EQ(measured.interNodeGBps, h200.interNodeGBps);
}

TEST(CalibrateTest, GpuWithoutPresetIsOneNodeOnPcie) {
  Measurements m = handGpuMeasurements();
  m.device = "NVIDIA L40S";
  m.gpus = 4;
  GemmFit fit;
  fit.peakFlops = 300e12;
  Cluster c = clusterFromMeasurements(m, fit, "gpu");
  EXPECT_EQ(c.gpusPerNode, 4);
  EXPECT_DOUBLE_EQ(c.intraNodeGBps, 32);
  EXPECT_DOUBLE_EQ(c.interNodeGBps, 32);
  // No datasheet ratio to scale: no fp8.
  EXPECT_EQ(c.peakFp8Tflops, 0);
  EXPECT_DOUBLE_EQ(c.peakBf16Tflops, 300);
}

} // namespace

// The kernels calibration times are priced as the kinds whose curves they
// fit, with the operands the runtime's kernels expect.
TEST(CalibrateTest, ProbesArePricedAsTheKindTheyCalibrate) {
  KernelWork gemm = kernelWork(gemmProbe(64, 32, 16, /*transposeLhs=*/false));
  EXPECT_EQ(gemm.kind, KernelWork::Kind::Gemm);
  EXPECT_EQ(gemm.m, 64);
  EXPECT_EQ(gemm.n, 32);
  EXPECT_EQ(gemm.k, 16);
  EXPECT_EQ(gemm.batch, 1);
  // X^T dY: the left operand is stored [k, m].
  KernelDesc transposed = gemmProbe(64, 32, 16, /*transposeLhs=*/true);
  EXPECT_EQ(transposed.inputs[0].shape,
            (llvm::SmallVector<int64_t, 4>{16, 64}));
  KernelWork weightGrad = kernelWork(transposed);
  EXPECT_EQ(weightGrad.m, 64);
  EXPECT_EQ(weightGrad.k, 16);
  EXPECT_EQ(weightGrad.flops, 2.0 * 64 * 32 * 16);

  KernelWork forward = kernelWork(attentionProbe(2, 4, 128, 64, true, false));
  EXPECT_EQ(forward.kind, KernelWork::Kind::Attention);
  EXPECT_FALSE(forward.gradient);
  EXPECT_EQ(forward.flops, 2.0 * 2 * 4 * 128 * 128 * (64 + 64));
  EXPECT_EQ(forward.executedFlops, forward.flops / 2);
  KernelDesc backward = attentionProbe(2, 4, 128, 64, true, true);
  EXPECT_EQ(backward.inputs.size(), 4u);
  EXPECT_EQ(backward.outputs.size(), 3u);
  EXPECT_TRUE(kernelWork(backward).gradient);

  KernelWork stream = kernelWork(streamProbe(1000));
  EXPECT_EQ(stream.kind, KernelWork::Kind::Stream);
  EXPECT_EQ(stream.bytes, 3.0 * 4 * 1000);
}
