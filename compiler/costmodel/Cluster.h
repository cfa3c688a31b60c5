//===- Cluster.h - GPU cluster descriptions ---------------------*- C++ -*-===//
//
// The hardware a plan targets. Presets carry the published per-GPU figures of
// compiler/costmodel/data/hardware.csv (sources there) plus the cost model's
// few tunable constants (docs/cost-model.md); anything else is described by a
// JSON cluster file (schema `dtc.cluster/1`, documented in the same page).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_CLUSTER_H
#define DTC_COMPILER_COSTMODEL_CLUSTER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <optional>
#include <string>

namespace dtc {

/// The largest GPU count (and parallel degree) dtc plans for: 64 times the
/// largest published training runs; a compile there takes seconds.
constexpr int64_t kMaxGpus = int64_t(1) << 20;

/// Element type of the compute (matmul inputs, activations, weights).
enum class DType { F32, BF16, F16, FP8 };

llvm::StringRef dtypeName(DType type);
/// "fp32"/"f32", "bf16", "fp16"/"f16", "fp8"; nullopt for anything else.
std::optional<DType> parseDType(llvm::StringRef name);
int64_t dtypeBytes(DType type);
/// Bytes of what a `type` model keeps in memory and sends between kernels
/// and ranks: fp8 training (Transformer Engine) computes its GEMMs in fp8
/// but keeps weights, activations and gradients in bf16, so fp8 stores 2.
int64_t storageBytes(DType type);
/// The type attention's kernel computes in: fp8 models run FlashAttention
/// in bf16.
DType attentionType(DType type);

/// One kind of link as seen by a single GPU.
struct Link {
  double bytesPerSecond = 0; ///< Nominal, one direction.
  double latencySeconds = 0; ///< Per collective step (one hop).
  double efficiency = 1;     ///< Achievable fraction of nominal bandwidth.
  double effectiveBytesPerSecond() const { return bytesPerSecond * efficiency; }
};

/// The bytes a GPU sold as `nominalGB` of HBM gives the CUDA allocator.
/// HBM stacks come in GiB ("80 GB" is 80 GiB) and the driver keeps a
/// little: PyTorch reports a total capacity of 79.11 GiB on an 80 GB H100
/// and 23.65 GiB on a 24 GB Titan RTX (both in the OOM messages of
/// data/corpus/oom_configs.csv), 0.989 of nominal. What dtc calibrate
/// measures on a lent GPU is this figure.
double usableHbmBytes(double nominalGB);

/// The software that runs a plan, where it changes what runs. dtc's own
/// program cuts pipeline stages where its pipeline pass does (balanced on
/// FLOPs, at block halves); Megatron-LM-style frameworks, which ran the
/// published runs the cost model is checked on, put whole layers on each
/// stage, the extra ones on the first stages.
enum class Software { Dtc, Megatron };

struct Cluster {
  std::string name;
  std::string gpu;
  /// Dense tensor-core peaks per GPU; 0 = not supported. fp32 runs on TF32.
  double peakBf16Tflops = 0;
  double peakFp16Tflops = 0;
  double peakFp8Tflops = 0;
  double peakTf32Tflops = 0;
  double hbmBytes = 0;
  double hbmBytesPerSecond = 0;
  int64_t gpusPerNode = 0;  ///< GPUs in one NVLink domain.
  double intraNodeGBps = 0; ///< NVLink bandwidth per GPU, one direction.
  double interNodeGBps = 0; ///< Scale-out bandwidth per GPU, one direction.
  int64_t gpus = 0;

  // Not on datasheets: the cost model's constants (docs/cost-model.md).
  double intraNodeLatencyUs = 0;
  double interNodeLatencyUs = 0;
  double intraNodeEfficiency = 1; ///< Fitted: bus bandwidth / nominal.
  double interNodeEfficiency = 1; ///< Fitted: bus bandwidth / nominal.
  /// GEMM efficiency curve: peak / (1 + halfSize * (1/M + 1/N + 1/K)).
  double gemmPeakEfficiency = 1;
  double gemmHalfSize = 0;
  /// FP8 GEMMs reach this fraction of the bf16 curve's efficiency (their
  /// per-tensor scaling and casts, and a main loop that moves twice the
  /// operands per FLOP through the same tensor-core pipeline).
  double fp8GemmEfficiency = 1;
  /// Achievable fraction of HBM bandwidth for streaming kernels.
  double memoryEfficiency = 1;
  /// Fused attention: a factor on its efficiency curve, and the time of its
  /// backward kernel over its forward (FlashAttention-2: five GEMMs against
  /// two, 2.5). Both differ between attention kernels and machines; `dtc
  /// calibrate` measures them.
  double attentionEfficiency = 1;
  double attentionBackwardRatio = 2.5;
  /// Fixed cost of one kernel call, in microseconds: what `dtc calibrate`
  /// measures on the CPU runtime. 0 on every preset; the planner's formulas
  /// leave it out, and only `dtc plan report --trace`'s per-instruction
  /// replay adds it to every call.
  double kernelOverheadUs = 0;
  Software software = Software::Dtc;

  /// Dense peak FLOP/s (not TFLOP/s) for `type`; 0 if unsupported.
  double peakFlops(DType type) const;
  Link intraNode() const;
  /// Achievable GEMM FLOP/s per achievable byte/s of the intra-node link:
  /// what the sharding propagation trades replicated compute against
  /// communication with (its `flops-per-byte`).
  double flopsPerLinkByte(DType type) const;
  Link interNode() const;
};

/// Latency per hop and achieved fraction of nominal bandwidth of the two
/// link levels (Cluster::intraNode and interNode), fitted to nccl-tests
/// (CollectiveCorpus.h).
struct LinkConstants {
  double intraLatencyUs = 0, intraEfficiency = 1;
  double interLatencyUs = 0, interEfficiency = 1;
};

/// The constants every preset is built with.
LinkConstants presetLinkConstants();

/// Names accepted by `--cluster`.
llvm::ArrayRef<llvm::StringRef> clusterPresetNames();

/// The GPU generation of preset `name` ("ampere", "hopper", "blackwell"),
/// whose GEMM efficiency the presets share; "" for an unknown name.
llvm::StringRef clusterPresetGeneration(llvm::StringRef name);

/// The preset `name` sized to `gpus` GPUs, or a bad-input error listing the
/// presets.
llvm::Expected<Cluster> lookupClusterPreset(llvm::StringRef name, int64_t gpus);

/// Parses a `dtc.cluster/1` JSON document; `source` names it in errors.
llvm::Expected<Cluster> parseClusterJson(llvm::StringRef text,
                                         llvm::StringRef source, int64_t gpus);
/// The same for a document's top-level object already parsed (plan.json's
/// `cluster.spec`).
llvm::Expected<Cluster> parseClusterObject(const llvm::json::Object &root,
                                           llvm::StringRef source,
                                           int64_t gpus);

/// `cluster` as a complete `dtc.cluster/1` object: every key (fp8 only when
/// supported), so reading it back needs no preset and gives `cluster` again
/// (all but `gpus`, which comes from `--gpus`). The inverse of
/// parseClusterJson.
llvm::json::Object clusterToJsonObject(const Cluster &cluster);
/// The same as a document: indented JSON and a final newline.
std::string clusterToJson(const Cluster &cluster);

/// Reads a `dtc.cluster/1` JSON file.
llvm::Expected<Cluster> readClusterFile(llvm::StringRef path, int64_t gpus);

/// What `--cluster NAME|FILE` means: a preset name, else a JSON file path.
llvm::Expected<Cluster> loadCluster(llvm::StringRef nameOrPath, int64_t gpus);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_CLUSTER_H
