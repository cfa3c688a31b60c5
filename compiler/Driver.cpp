//===- Driver.cpp - dtc compile: model in, plan bundle out ----------------===//
//
// Strings the stages together: import, simplify, summarize, and write the
// bundle. Planning, partitioning and lowering join here as their issues land;
// until then the bundle says which of its sections are still pending.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"
#include "compiler/GraphPlanner.h"
#include "compiler/ModelImport.h"
#include "compiler/ProgramBuilder.h"

#include "compiler/ModelSummary.h"
#include "compiler/costmodel/Cluster.h"
#include "compiler/costmodel/Memory.h"
#include "compiler/planner/Planner.h"
#include "compiler/support/ProgramFile.h"
#include "dialects/dtc/DtcDialect.h"
#include "frontends/hf/HfConfig.h"
#include "frontends/modelgen/ModelGen.h"
#include "frontends/onnx/OnnxImporter.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/core/LayoutFile.h"
#include "runtime/support/Error.h"
#include "runtime/support/OutputDir.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <chrono>
#include <cmath>

using namespace dtc;

/// The largest batch, sequence and micro-batch: far above any run, and
/// small enough that products of a few of them cannot overflow int64.
constexpr int64_t kMaxSize = int64_t(1) << 31;

static llvm::Error checkPositive(const char *flag, std::optional<int64_t> value,
                                 int64_t min = 1, int64_t max = kMaxSize) {
  if (value && *value < min)
    return badInput("--{0}: must be >= {1}, got {2}", flag, min, *value);
  if (value && *value > max)
    return badInput("--{0}: must be <= {1}, got {2}", flag, max, *value);
  return llvm::Error::success();
}

/// A float flag: finite and at least `min`.
static llvm::Error checkFinite(const char *flag, double value, int64_t min) {
  if (!std::isfinite(value) || value < min)
    return badInput("--{0}: must be a finite number >= {1}, got {2}", flag, min,
                    value);
  return llvm::Error::success();
}

/// `--loss OBJECTIVE` or `--loss model:OUTPUT` into o.loss, and the
/// objective's numbers checked.
static llvm::Error parseLossSpec(CompileOptions &o) {
  LossRequest &loss = o.loss;
  if (!o.lossSpec.empty()) {
    auto [objective, output] = llvm::StringRef(o.lossSpec).split(':');
    if (!llvm::is_contained(
            {"next-token", "masked-lm", "seq2seq", "classify", "model"},
            objective) ||
        (objective != "model" && o.lossSpec.find(':') != std::string::npos))
      return badInput("--loss {0}: expected next-token, masked-lm, seq2seq, "
                      "classify, model or model:OUTPUT",
                      o.lossSpec);
    loss.objective = objective.str();
    loss.lossOutput = output.str();
  }
  if (!(loss.maskProbability > 0 && loss.maskProbability < 1))
    return badInput("--mask-probability {0}: expected a fraction in (0, 1)",
                    loss.maskProbability);
  for (auto [flag, value] :
       {std::pair{"mask-token-id", loss.maskTokenId},
        std::pair{"decoder-start-token-id", loss.decoderStartTokenId}})
    if (value < -1 || value > (int64_t(1) << 31))
      return badInput("--{0} {1}: expected a token id in [0, 2^31]", flag,
                      value);
  return llvm::Error::success();
}

static llvm::Error validateOptions(const CompileOptions &o) {
  if (llvm::Error err = checkPositive("gpus", o.gpus, 1, kMaxGpus))
    return err;
  for (auto [flag, value] :
       {std::pair{"gpus-per-node", o.gpusPerNode},
        std::pair{"global-batch", o.globalBatch},
        std::pair{"seq-len", o.seqLen}, std::pair{"tp", o.tp},
        std::pair{"pp", o.pp}, std::pair{"dp", o.dp}, std::pair{"cp", o.cp},
        std::pair{"ep", o.ep}, std::pair{"vpp", o.vpp},
        std::pair{"micro-batch", o.microBatch}})
    if (llvm::Error err = checkPositive(flag, value))
      return err;
  for (auto [flag, value] :
       {std::pair{"lr", o.optimizer.lr}, std::pair{"min-lr", o.optimizer.minLr},
        std::pair{"weight-decay", o.optimizer.weightDecay},
        std::pair{"grad-clip", o.optimizer.gradClip}})
    if (llvm::Error err = checkFinite(flag, value, 0))
      return err;
  for (auto [flag, value] :
       {std::pair{"warmup-steps", o.optimizer.warmupSteps},
        std::pair{"lr-decay-steps", o.optimizer.decaySteps}})
    if (llvm::Error err = checkPositive(flag, value, 0, int64_t(1) << 40))
      return err;
  if (o.zero && (*o.zero < 0 || *o.zero > 3))
    return badInput("--zero: must be 0, 1, 2 or 3, got {0}", *o.zero);
  if (o.mode != "train" && o.mode != "infer")
    return badInput("--mode: must be train or infer, got '{0}'", o.mode);
  if (o.dtype != "bf16" && o.dtype != "fp16" && o.dtype != "fp32")
    return badInput("--dtype: must be bf16, fp16 or fp32, got '{0}'", o.dtype);
  if (o.recompute && *o.recompute != "none" && *o.recompute != "selective" &&
      *o.recompute != "full")
    return badInput("--recompute: must be none, selective or full, got '{0}'",
                    *o.recompute);
  if (o.schedule && !parseSchedule(*o.schedule))
    return badInput("--schedule: must be one of {0}, got '{1}'",
                    scheduleNames(), *o.schedule);
  if (o.schedule && parseSchedule(*o.schedule) == Schedule::Interleaved &&
      o.vpp && *o.vpp < 2)
    return badInput("--schedule interleaved needs --vpp 2 or more");
  if (o.schedule && *parseSchedule(*o.schedule) != Schedule::Interleaved &&
      o.vpp && *o.vpp > 1)
    return badInput("--schedule {0} runs one model chunk per stage; --vpp {1} "
                    "needs --schedule interleaved",
                    *o.schedule, *o.vpp);
  if (o.schedule && o.pp && *o.pp < 2 &&
      *parseSchedule(*o.schedule) != Schedule::OneFOneB)
    return badInput("--schedule {0} needs --pp 2 or more", *o.schedule);
  if (!o.emit.empty() && o.emit != "imported" && o.emit != "sharded" &&
      o.emit != "partitioned" && o.emit != "program")
    return badInput(
        "--emit: must be imported, sharded, partitioned or program, got '{0}'",
        o.emit);
  if (o.meshOrder && !parseMeshOrder(*o.meshOrder))
    return badInput("--mesh-order {0}: must name dp, tp, pp and cp once each, "
                    "outermost first (e.g. pp,dp,cp,tp)",
                    *o.meshOrder);
  if (o.noSearch && !(o.tp && o.pp && o.dp))
    return badInput("--no-search needs every degree pinned: pass at least "
                    "--tp, --pp and --dp");
  return llvm::Error::success();
}

/// Routes MLIR diagnostics into one dtc error line (the first error wins).
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &diag) {
          if (diag.getSeverity() == mlir::DiagnosticSeverity::Error &&
              message.empty()) {
            llvm::raw_string_ostream os(message);
            os << diag.getLocation() << ": " << diag;
          }
          return mlir::success();
        }) {}

  llvm::Error takeError(llvm::StringRef what) {
    return failure("{0}: {1}", what,
                   message.empty() ? std::string("unknown error") : message);
  }
  bool hasError() const { return !message.empty(); }
  /// A pass that refused the model (partitioning an op the plan cannot
  /// split): bad input, with the pass's own message.
  llvm::Error takeRefusal(llvm::StringRef what) {
    return badInput("{0}: {1}", what, message);
  }

private:
  std::string message;
  mlir::ScopedDiagnosticHandler handler;
};

/// A config.json declares the architecture only: there are no weights to
/// start from.
static bool storesWeights(const CompileOptions &o) {
  return llvm::sys::path::extension(o.modelPath) != ".json";
}

static PlanRequest makePlanRequest(const CompileOptions &o,
                                   const TransformerSpec &spec,
                                   const Cluster &cluster) {
  PlanRequest request;
  request.spec = spec;
  // validateOptions() accepted the name, so it parses.
  request.spec.dtype = parseDType(o.dtype).value_or(DType::BF16);
  request.cluster = cluster;
  request.gpus = o.gpus;
  request.globalBatch = o.globalBatch;
  PlanPins &pins = request.pins;
  pins.dp = o.dp;
  pins.tp = o.tp;
  pins.pp = o.pp;
  pins.cp = o.cp;
  pins.ep = o.ep;
  pins.vpp = o.vpp;
  // A compile that builds programs searches only plans it can lower: the
  // expert-parallel groups within the data-parallel ranks, pinned or not.
  request.expertsWithinData = !o.noProgram;
  if (o.zero)
    pins.zero = static_cast<int>(*o.zero);
  pins.microBatch = o.microBatch;
  if (o.sequenceParallel)
    pins.sequenceParallel = *o.sequenceParallel == "on";
  if (o.meshOrder)
    pins.meshOrder = parseMeshOrder(*o.meshOrder);
  pins.dataRows = o.fixedDataRows;
  if (o.recompute)
    pins.recompute = parseRecompute(*o.recompute);
  if (o.schedule)
    pins.schedule = parseSchedule(*o.schedule);
  // The program overlaps what the cost model assumes it does.
  ParallelPlan &execution = request.execution;
  execution.overlapGradReduce = execution.overlapTpComm =
      execution.overlapParamGather = !o.noOverlap;
  execution.tpCommChunks = o.noOverlap ? 1 : o.tpCommChunks.value_or(0);
  return request;
}

static double propagationFlopsPerByte(const CompileOptions &o,
                                      const Cluster &cluster);

/// The IR-priced planner's request: the same pins, batch and execution
/// choices as the transformer planner's, and the model at each micro-batch
/// it prices.
static GraphPlanRequest makeGraphPlanRequest(const CompileOptions &o,
                                             const Cluster &cluster,
                                             llvm::StringRef modelName,
                                             ModelImports &imports) {
  PlanRequest plan = makePlanRequest(o, TransformerSpec(), cluster);
  GraphPlanRequest request;
  request.modelName = modelName.str();
  request.import = [&imports](int64_t batch) { return imports.at(batch); };
  request.cluster = cluster;
  request.gpus = o.gpus;
  request.dtype = plan.spec.dtype;
  request.globalBatch = o.globalBatch;
  request.pins = plan.pins;
  request.execution = plan.execution;
  request.flopsPerByte = propagationFlopsPerByte(o, cluster);
  return request;
}

/// The plan's mesh in its mesh order, outermost first (plan.meshOrder is
/// innermost first), the text the passes and the runtime read: the
/// expert-parallel axis carved out of the data-parallel axis's inner ranks
/// (Megatron-Core's parallel folding, so an EP group is as close as the
/// data-parallel ranks get). `pipeline` keeps the pipeline axis (without
/// it: one stage's mesh); `all` keeps dp and tp of size 1 (for --emit
/// sharded/partitioned, whose output names them); cp and ep only when the
/// plan has them.
static runtime::Mesh planMesh(const ParallelPlan &plan, bool pipeline,
                              bool all) {
  std::vector<runtime::Mesh::Axis> axes;
  for (MeshAxis axis : llvm::reverse(plan.meshOrder)) {
    switch (axis) {
    case MeshAxis::PP:
      if (pipeline && plan.pp > 1)
        axes.push_back({"pp", plan.pp});
      break;
    case MeshAxis::DP: {
      int64_t dpOuter = plan.dp / std::max<int64_t>(plan.ep, 1);
      if (all || dpOuter > 1)
        axes.push_back({"dp", dpOuter});
      if (plan.ep > 1)
        axes.push_back({"ep", plan.ep});
      break;
    }
    case MeshAxis::CP:
      if (plan.cp > 1)
        axes.push_back({"cp", plan.cp});
      break;
    case MeshAxis::TP:
      if (all || plan.tp > 1)
        axes.push_back({"tp", plan.tp});
      break;
    }
  }
  return runtime::Mesh(std::move(axes));
}

/// What the sharding propagation trades replicated compute against
/// communication with: the cluster's ratio in the compile's dtype, at most
/// 300. Above that (an H100 in bf16 is at 2460) the
/// propagation would replicate the small GEMMs of a narrow model to save
/// their tensor-parallel collectives, while the cost model prices
/// Megatron-LM's layouts (tiny-gpt at tp 2 replicated every op at 1000 once
/// attention was priced at its FLOPs); below it (a CPU, about 10)
/// replicated work costs what it costs there (docs/partition.md, "Sharding
/// propagation").
static double propagationFlopsPerByte(const CompileOptions &o,
                                      const Cluster &cluster) {
  constexpr double kMegatronFlopsPerByte = 300;
  return std::min(
      kMegatronFlopsPerByte,
      cluster.flopsPerLinkByte(parseDType(o.dtype).value_or(DType::BF16)));
}

/// How `plan` becomes the training step's options: one definition for the
/// program and for --emit partitioned. `searched`: the plan came from a
/// search (its recompute choice honours a --recompute pin); without one the
/// pin applies. Without `pipeline` the mesh leaves out the pipeline axis
/// (the whole model over the dp/cp/tp part).
static TrainingStepOptions
trainingStepOptionsFor(const CompileOptions &o, const ParallelPlan &plan,
                       bool searched, const Cluster &cluster,
                       const TransformerSpec *spec, bool pipeline) {
  TrainingStepOptions t;
  t.loss = o.loss;
  t.gradAccum = std::max<int64_t>(1, plan.microBatches());
  t.optimizer = o.optimizer;
  if (plan.gpus() > 1) {
    // Axes of size 1 would only add collectives over one rank.
    t.mesh = planMesh(plan, pipeline, /*all=*/false);
    t.sequenceParallel = plan.sequenceParallel && plan.tp > 1;
    t.flopsPerByte = propagationFlopsPerByte(o, cluster);
    t.zeroStage = plan.dp > 1 ? plan.zero : 0;
    t.pipelineStages = pipeline ? plan.pp : 1;
    t.virtualStages = pipeline && plan.pp > 1 ? plan.vpp : 1;
    t.overlap = !o.noOverlap;
    t.tpCommChunks = std::max<int64_t>(1, plan.tpCommChunks);
    // ZeRO-3 gathers run ahead by one transformer block's parameters, as
    // the cost model prices the prefetch.
    if (spec && t.zeroStage >= 3)
      t.zeroPrefetchElements =
          static_cast<int64_t>(layerParamCount(*spec, plan).total());
    t.gradBucketBytes =
        std::max<int64_t>(1, static_cast<int64_t>(o.gradBucketMb * (1 << 20)));
    // Interleaving is 1F1B with virtual stages.
    t.schedule = plan.schedule == Schedule::Interleaved ? Schedule::OneFOneB
                                                        : plan.schedule;
  }
  // Recompute hook (docs/recompute.md).
  t.recompute = searched ? plan.recompute
                         : parseRecompute(o.recompute.value_or("none"))
                               .value_or(Recompute::None);
  return t;
}

/// The model as one data-parallel step of the plan sees it (dp micro-batches)
/// with every op's sharding over the plan's dp x tp mesh. Pipeline stages
/// and context parallelism are laid out by later passes (issue 7).
static llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
shardForPlan(const CompileOptions &o, const ParallelPlan &plan,
             const Cluster &cluster, ModelImports &imports,
             mlir::MLIRContext &context, DiagnosticCollector &diagnostics) {
  auto module = imports.at(plan.microBatch * plan.dp);
  if (!module)
    return module.takeError();
  ForwardPartitionOptions options;
  options.mesh = planMesh(plan, /*pipeline=*/false, /*all=*/true).str();
  options.sequenceParallel = plan.sequenceParallel;
  options.flopsPerByte = propagationFlopsPerByte(o, cluster);
  options.partition = false;
  mlir::PassManager pm(&context);
  buildForwardPartitionPipeline(pm, options);
  if (mlir::failed(pm.run(**module)))
    return diagnostics.takeError(o.modelPath);
  return module;
}

static std::string defaultBundleDir(llvm::StringRef modelPath) {
  llvm::SmallString<256> dir(modelPath);
  llvm::sys::path::replace_extension(dir, ".dtc");
  return std::string(dir);
}

/// Writes `files` (name -> contents) as the bundle `dir`
/// (runtime/support/OutputDir.h: whole or not at all, nothing of the user's
/// deleted).
static llvm::Error
writeBundle(llvm::StringRef dir, bool force,
            llvm::ArrayRef<std::pair<std::string, std::string>> files) {
  return writeOutputDirectory(
      dir, OutputKind::Bundle, force, [&](llvm::StringRef tmp) -> llvm::Error {
        for (const auto &[name, contents] : files) {
          llvm::SmallString<256> path(tmp);
          llvm::sys::path::append(path, name);
          std::error_code ec;
          llvm::raw_fd_ostream os(path, ec);
          if (!ec) {
            os << contents;
            os.close();
            ec = os.error();
          }
          if (ec)
            return failure("cannot write {0}: {1}", path, ec.message());
        }
        return llvm::Error::success();
      });
}

/// The summary figures, and under "spec" the whole cluster as a
/// dtc.cluster/1 object (after --gpus-per-node), so that `dtc plan report
/// --trace` can price instructions on a cluster file's constants without
/// the file.
static llvm::json::Object clusterJson(const Cluster &c) {
  return llvm::json::Object{
      {"name", c.name},
      {"gpu", c.gpu},
      {"gpus", c.gpus},
      {"gpus_per_node", c.gpusPerNode},
      {"peak_tflops", c.peakBf16Tflops},
      {"hbm_bytes", c.hbmBytes},
      {"intra_node_gbps", c.intraNodeGBps},
      {"inter_node_gbps", c.interNodeGBps},
      {"spec", clusterToJsonObject(c)},
  };
}

static llvm::json::Object modelJson(const ModelSummary &m) {
  return llvm::json::Object{
      {"name", m.name},
      {"params", m.params},
      {"parameter_tensors", m.parameterTensors},
      {"trained_tensors", llvm::json::Array(m.trained)},
      {"frozen_tensors", llvm::json::Array(m.frozen)},
      {"not_exported", llvm::json::Array(m.notExported)},
      {"frozen_params", m.frozenElements},
      {"tokens_per_forward", m.tokensPerStep},
      {"flops_per_token", m.flopsPerToken()},
      {"blocks", m.blocks},
      {"distinct_blocks", m.distinctBlocks},
  };
}

/// Each stage of plan.json gets its predicted time per micro-batch and its
/// memory, for the timeline and memory bars of `dtc plan report`.
static void addStageDetails(llvm::json::Object &plan,
                            llvm::ArrayRef<StageDetail> details) {
  llvm::json::Array *stages = plan.getArray("stages");
  if (!stages || stages->size() != details.size())
    return;
  for (auto [stage, detail] : llvm::zip(*stages, details)) {
    llvm::json::Object *object = stage.getAsObject();
    const MemoryBreakdown &m = detail.memory;
    (*object)["time_per_micro_batch_s"] = detail.timeS;
    (*object)["forward_per_micro_batch_s"] = detail.forwardS;
    (*object)["weight_grad_per_micro_batch_s"] = detail.weightS;
    (*object)["memory_bytes"] = m.total();
    (*object)["memory_breakdown"] = llvm::json::Object{
        {"params", m.params},       {"grads", m.grads},
        {"optimizer", m.optimizer}, {"activations", m.activations},
        {"workspace", m.workspace}, {"reserve", m.reserve}};
  }
}

static void printSummary(llvm::raw_ostream &out, const ModelSummary &m,
                         const Cluster &c, const PlanResult *plan,
                         llvm::StringRef planMissing,
                         llvm::StringRef programLine, llvm::StringRef bundleDir,
                         double seconds) {
  out << "model    " << m.name << ": " << m.params << " parameters in "
      << m.parameterTensors << " tensors, "
      << llvm::format("%.3g", m.flopsPerToken()) << " training FLOPs/token";
  if (m.blocks > 0) {
    out << ", " << m.blocks << " transformer block"
        << (m.blocks > 1 ? "s" : "");
    if (m.blocks > 1)
      out << (m.distinctBlocks == 1
                  ? " (all alike)"
                  : " (" + std::to_string(m.distinctBlocks) + " distinct)");
  }
  if (m.fixedBatch && !m.fixedBatchReason.empty())
    out << "; batch fixed at " << *m.fixedBatch
        << " (inputs' dim 0: " << m.fixedBatchReason << ")";
  else if (m.fixedBatch)
    out << "; exported at batch " << *m.fixedBatch
        << ", re-bound to micro-batch "
        << (plan ? plan->best.plan.microBatch : *m.fixedBatch);
  if (!m.frozen.empty()) {
    // What is read but never trained: PyTorch's buffers, --frozen.
    constexpr size_t kNamed = 3;
    out << "; frozen: " << m.frozen.size() << " tensor"
        << (m.frozen.size() == 1 ? "" : "s") << " ("
        << llvm::join(llvm::ArrayRef(m.frozen).take_front(kNamed), ", ")
        << (m.frozen.size() > kNamed ? ", ..." : "") << ")";
  }
  if (!m.notExported.empty()) {
    // No tensor of their own in the export: tied to a tensor saved under
    // another name, or dropped because forward never reads them.
    constexpr size_t kNamed = 3;
    out << "; parameters with no tensor in the export (tied to another, or "
           "never read; checkpoints lack them): "
        << llvm::join(llvm::ArrayRef(m.notExported).take_front(kNamed), ", ")
        << (m.notExported.size() > kNamed ? ", ..." : "");
  }
  out << "\n";
  out << "cluster  " << c.gpus << " x " << c.gpu << " (" << c.name << ", "
      << c.gpusPerNode << " per node)\n";
  if (plan) {
    const Prediction &p = plan->best.prediction;
    out << "plan     " << planSummary(plan->best.plan) << ", global batch "
        << plan->globalBatch << (plan->globalBatchDefaulted ? " (default)" : "")
        << "\n";
    out << llvm::formatv("predict  {0:f4} s/step, {1:f0} tokens/s, {2:f1} "
                         "TFLOP/s/GPU, MFU {3:f1}%, bubble {4:f1}%, "
                         "{5:f1} GB/GPU\n",
                         p.stepTimeS, p.tokensPerS, p.tflopsPerGpu, 100 * p.mfu,
                         100 * p.bubbleFraction, p.memoryPerGpuBytes / 1e9);
    out << llvm::formatv("search   {0} candidates in {1:f3} s\n",
                         plan->candidatesEvaluated, plan->searchSeconds);
  } else {
    out << "plan     not planned: " << planMissing << "\n";
  }
  out << "program  " << programLine << "\n";
  out << "bundle   " << bundleDir << "  (" << llvm::format("%.2f", seconds)
      << " s)\n";
}

/// Parameter bytes (fp32) up to which a multi-rank bundle carries the
/// single-device reference program of `dtc verify`.
constexpr int64_t kVerifiableBytes = int64_t(1) << 30;

/// Why the partitioner cannot lower `plan` to runtime programs yet (empty
/// when it can): data, tensor (with sequence parallelism), expert and
/// context parallelism, ZeRO 1-3 and pipeline stages (GPipe, 1F1B,
/// interleaved 1F1B) are lowered, each with the others (docs/partition.md).
static std::string unsupportedForPrograms(const ParallelPlan &plan) {
  if (plan.ep > 1 && plan.dp % plan.ep)
    return llvm::formatv("expert parallelism is carved out of data "
                         "parallelism: ep={0} must divide dp={1}",
                         plan.ep, plan.dp);
  return "";
}

/// A plan is a promise that its program runs: a compile that cannot build
/// the program is refused (exit 2) unless --no-program asked for the plan
/// alone.
static llvm::Error programRefused(const CompileOptions &o,
                                  llvm::StringRef why) {
  return badInput("{0}: no program for this plan: {1}; pass --no-program to "
                  "keep the plan without one",
                  o.modelPath, why);
}

/// --emit sharded / partitioned: the IR of `plan`'s ranks. Partitioned is
/// built by one registered pipeline printed on the first line (dtc-opt
/// reproduces it from --emit imported). Training: dtc-training-pipeline, the
/// training step (with pp > 1 one nested module per pipeline stage, as the
/// program builder lowers them). Inference: the forward function, sharded
/// and partitioned.
static llvm::Error
emitPlannedIR(const CompileOptions &o, const ParallelPlan &plan,
              const Cluster &cluster, const TransformerSpec *spec,
              ModelImports &imports, mlir::MLIRContext &context,
              DiagnosticCollector &diagnostics, llvm::raw_ostream &out) {
  if (o.emit == "sharded") {
    auto sharded =
        shardForPlan(o, plan, cluster, imports, context, diagnostics);
    if (!sharded)
      return sharded.takeError();
    (*sharded)->print(out);
    return llvm::Error::success();
  }
  auto module = imports.at(plan.microBatch * plan.dp);
  if (!module)
    return module.takeError();
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  if (o.mode == "train") {
    buildTrainingPipeline(pm, trainingStepOptionsFor(o, plan,
                                                     /*searched=*/true, cluster,
                                                     spec, /*pipeline=*/true));
  } else {
    ForwardPartitionOptions forward;
    forward.mesh = planMesh(plan, /*pipeline=*/false, /*all=*/true).str();
    forward.sequenceParallel = plan.sequenceParallel;
    forward.flopsPerByte = propagationFlopsPerByte(o, cluster);
    buildForwardPartitionPipeline(pm, forward);
  }
  if (mlir::failed(pm.run(**module)))
    return diagnostics.takeRefusal(o.modelPath);
  out << "// dtc-opt --pass-pipeline='";
  pm.printAsTextualPipeline(out);
  out << "'\n";
  (*module)->print(out);
  out << "\n";
  return llvm::Error::success();
}

/// A graph exported with a fixed batch is imported at the plan's
/// micro-batch where its batch re-binds (frontends/onnx/BatchRebind.h);
/// where not, every data-parallel micro-step runs that batch, which the
/// data-parallel ranks split (the partitioner keeps what couples the rows,
/// a mean over the batch, exact): dp x micro-batch is that batch. Records
/// which in `o` (fixedBatchRebinds, fixedDataRows); `module` is the model
/// imported at one micro-batch.
static llvm::Error resolveFixedBatch(CompileOptions &o, mlir::ModuleOp module,
                                     ModelImports &imports) {
  auto fixed = module->getAttrOfType<mlir::IntegerAttr>("dtc.fixed_batch");
  if (!fixed)
    return llvm::Error::success();
  int64_t batch = fixed.getInt();
  auto reason =
      module->getAttrOfType<mlir::StringAttr>("dtc.fixed_batch_reason");
  if (!reason && !module->hasAttr("dtc.rebound_batch")) {
    // Imported at the exported batch itself: whether it re-binds shows
    // at the batch a data-parallel plan of it imports.
    auto probe = imports.at(2 * batch);
    if (!probe)
      return probe.takeError();
    reason =
        (**probe)->getAttrOfType<mlir::StringAttr>("dtc.fixed_batch_reason");
    if (reason)
      module->setAttr("dtc.fixed_batch_reason", reason);
  }
  if (reason) {
    if (o.microBatch && batch % *o.microBatch)
      return badInput("--micro-batch {0}: {1} has a fixed batch of {2} "
                      "(its inputs' dim 0) that does not re-bind: {3}; the "
                      "data-parallel ranks split those rows (dp x "
                      "micro-batch = {2}): pass a --micro-batch that "
                      "divides {2} or leave it out, or re-export with a "
                      "dynamic batch dim",
                      *o.microBatch, o.modelPath, batch, reason.getValue());
    if (o.microBatch && o.gpus % (batch / *o.microBatch))
      return badInput("--micro-batch {0}: {1} has a fixed batch of {2} "
                      "(its inputs' dim 0) that does not re-bind: {3}; the "
                      "data-parallel ranks split those rows (dp x "
                      "micro-batch = {2}), and dp {4} does not divide "
                      "--gpus {5}: pass --micro-batch {2} or leave it out",
                      *o.microBatch, o.modelPath, batch, reason.getValue(),
                      batch / *o.microBatch, o.gpus);
    if (o.microBatch && o.dp && *o.dp * *o.microBatch != batch)
      return badInput("--dp {0} --micro-batch {1}: {2} has a fixed batch "
                      "of {3} that does not re-bind: {4}; dp x micro-batch "
                      "must be {3}",
                      *o.dp, *o.microBatch, o.modelPath, batch,
                      reason.getValue());
    o.fixedDataRows = batch;
  } else {
    o.fixedBatchRebinds = true;
  }
  return llvm::Error::success();
}

namespace {
/// The plan of one compile: the transformer planner's, searched on the
/// spec read off the IR, or the IR-priced planner's for other graphs;
/// `missing` says why there is none.
struct CompilePlan {
  std::optional<TransformerSpec> spec;
  std::optional<PlanResult> result;
  std::unique_ptr<GraphPlanner> graphPlanner;
  std::string missing;
};

/// A bundle's program part: its files, the summary's program line and the
/// training objective, and program.mlir's text.
struct BundlePrograms {
  std::vector<std::pair<std::string, std::string>> files;
  std::string line, objective, mlir;
  /// The model's parameters the loss does not reach, kept and not trained.
  std::vector<std::string> untrained;
};

/// The parameters of `summary` the program keeps frozen: dtc-bind-loss
/// freezes those the loss does not reach (PyTorch gives them no gradient,
/// so AdamW skips them).
std::vector<std::string> untrainedParameters(const program::Program &program,
                                             const ModelSummary &summary) {
  llvm::StringSet<> trained;
  for (const std::string &name : summary.trained)
    trained.insert(name);
  std::vector<std::string> names;
  llvm::StringSet<> seen;
  for (const program::RankProgram &rank : program.ranks())
    for (const program::Variable &v : rank.variables()) {
      const std::string &name =
          v.parameter().empty() ? v.name() : v.parameter();
      if (v.role() == "buffer" && trained.contains(name) &&
          seen.insert(name).second)
        names.push_back(name);
    }
  return names;
}
} // namespace

/// Searches the plan of `module` (the model at one micro-batch).
static llvm::Expected<CompilePlan> planModel(const CompileOptions &o,
                                             const Cluster &cluster,
                                             mlir::ModuleOp module,
                                             llvm::StringRef modelName,
                                             ModelImports &imports) {
  CompilePlan planned;
  auto spec = extractTransformerSpec(module, modelName);
  if (spec) {
    planned.spec = *spec;
    auto searched = searchPlan(makePlanRequest(o, *spec, cluster),
                               o.explain ? static_cast<int>(*o.explain) : 3);
    if (!searched)
      return searched.takeError();
    const PlanChoice &best = searched->best;
    if (o.tpCommChunks && *o.tpCommChunks > 1 && !o.noOverlap &&
        best.plan.tp > 1 && spec->moe())
      return badInput("--tp-comm-chunks {0}: TP collectives are split into "
                      "row blocks for dense models only; {1} has experts "
                      "(leave the flag out)",
                      *o.tpCommChunks, modelName);
    if (o.tpCommChunks && *o.tpCommChunks > 1 && !o.noOverlap &&
        best.plan.tp > 1 && best.prediction.tpCommChunks != *o.tpCommChunks)
      return badInput("--tp-comm-chunks {0}: the plan's tensor-parallel "
                      "activations (micro-batch {1}, sequence {2}{3}) do not "
                      "split into {0} row blocks; pin a micro-batch or "
                      "chunk count that divides",
                      *o.tpCommChunks, best.plan.microBatch, spec->seqLen,
                      best.plan.sequenceParallel
                          ? ", one of them split by sequence parallelism"
                          : "");
    planned.result = std::move(*searched);
    return planned;
  }
  // Not a recognized transformer: plan it from its IR.
  GraphPlanRequest request =
      makeGraphPlanRequest(o, cluster, modelName, imports);
  std::string why = llvm::toString(spec.takeError());
  llvm::StringRef reason(why);
  reason.consume_front((modelName + ": ").str());
  request.unrecognized = reason.take_until([](char c) { return c == ';'; });
  planned.graphPlanner = std::make_unique<GraphPlanner>(std::move(request));
  SearchOptions options;
  options.explainK = o.explain ? static_cast<int>(*o.explain) : 3;
  auto searched = planned.graphPlanner->search(options);
  if (searched)
    planned.result = std::move(*searched);
  else if (makePlanRequest(o, TransformerSpec(), cluster).pins.any())
    return searched.takeError(); // A pinned plan yields a program or this.
  else
    planned.missing = llvm::toString(searched.takeError());
  return planned;
}

/// The plan a program is built for: the searched one, or one device's.
static ParallelPlan programPlan(const CompileOptions &o,
                                const CompilePlan &planned) {
  if (planned.result)
    return planned.result->best.plan;
  ParallelPlan single;
  single.microBatch = o.microBatch.value_or(1);
  single.globalBatch = o.globalBatch.value_or(single.microBatch);
  return single;
}

/// Adds `dtc verify`'s single-device program of `build` (the plan's global
/// micro-batch on one device) as reference.pb, for models small enough to
/// run on a CPU, or says in `bundle.line` why there is none.
static llvm::Error addReference(const CompileOptions &o,
                                const ParallelPlan &plan,
                                const ProgramBuildOptions &build,
                                ModelImports &imports, BundlePrograms &bundle) {
  auto refModule = imports.at(plan.microBatch * plan.dp);
  if (!refModule)
    return refModule.takeError();
  ProgramBuildOptions single = build;
  single.training.mesh = runtime::Mesh();
  single.training.pipelineStages = 1;
  single.training.virtualStages = 1;
  single.training.zeroStage = 0;
  single.training.sequenceParallel = false;
  auto reference = buildProgram(**refModule, single);
  if (reference && !storesWeights(o))
    initParametersWithoutWeights(*reference);
  auto bytes = reference ? serializeProgram(*reference, "reference.pb")
                         : llvm::Expected<std::string>(reference.takeError());
  if (bytes) {
    bundle.files.emplace_back("reference.pb", std::move(*bytes));
    bundle.line += ", single-device reference for dtc verify";
  } else {
    bundle.line +=
        ", no single-device reference: " + llvm::toString(bytes.takeError());
  }
  return llvm::Error::success();
}

/// The runtime program (training step or forward) of the plan: the model
/// bound to the micro-batch of the whole data-parallel group, partitioned
/// over the plan's mesh when it has more than one rank; with `--emit
/// program` printed to `out` instead (`printed` says so).
static llvm::Expected<BundlePrograms>
buildBundlePrograms(const CompileOptions &o, const Cluster &cluster,
                    const CompilePlan &planned, const ModelSummary &summary,
                    ModelImports &imports, DiagnosticCollector &diagnostics,
                    llvm::raw_ostream &out, bool &printed) {
  BundlePrograms bundle;
  std::string missing;
  if (o.noProgram && o.emit != "program")
    missing = "--no-program";
  else if (o.gpus > 1 && !planned.result)
    missing = "no plan: " + planned.missing;
  else if (planned.result)
    missing = unsupportedForPrograms(planned.result->best.plan);
  if (!missing.empty()) {
    if (o.emit == "program")
      return badInput("--emit program: {0}", missing);
    if (!o.noProgram)
      return programRefused(o, missing);
    bundle.line = "none: " + missing;
    return bundle;
  }

  const ParallelPlan plan = programPlan(o, planned);
  auto runModule = imports.at(plan.microBatch * plan.dp);
  if (!runModule)
    return runModule.takeError();
  ProgramBuildOptions build;
  build.mode = o.mode;
  llvm::SmallString<256> absolute(o.modelPath);
  llvm::sys::fs::make_absolute(absolute);
  build.modelPath = std::string(absolute);
  build.training = trainingStepOptionsFor(
      o, plan, planned.result.has_value(), cluster,
      planned.spec ? &*planned.spec : nullptr, /*pipeline=*/true);
  std::string stagesText;
  auto built =
      buildProgram(**runModule, build, o.programMlir ? &stagesText : nullptr);
  if (built && !storesWeights(o))
    initParametersWithoutWeights(*built);
  if (!built) {
    llvm::Error buildError = built.takeError();
    if (diagnostics.hasError()) {
      llvm::consumeError(std::move(buildError));
      buildError = diagnostics.takeRefusal(o.modelPath);
    }
    // A multi-rank plan the partitioner cannot lower yet keeps its plan;
    // the bundle says why it has no program. One device must always run.
    if (o.gpus == 1 || o.emit == "program")
      return std::move(buildError);
    return programRefused(o, llvm::toString(std::move(buildError)));
  }
  if (o.emit == "program") {
    printProgram(*built, out);
    printed = true;
    return bundle;
  }
  if (o.programMlir && stagesText.empty()) {
    llvm::raw_string_ostream os(bundle.mlir);
    (*runModule)->print(os, programTextFlags());
  } else {
    bundle.mlir = stagesText;
  }
  // Protobuf refuses messages over 2 GB; say so instead of writing an
  // empty program.pb.
  auto bytes = serializeProgram(*built, "program.pb");
  if (!bytes)
    return bytes.takeError();
  bundle.files.emplace_back("program.pb", std::move(*bytes));
  bundle.files.emplace_back("layout.json", runtime::writeLayoutFile(*built));
  bundle.objective = built->training().objective();
  bundle.untrained = untrainedParameters(*built, summary);
  bundle.line =
      llvm::formatv("{0} rank{1}{2}", built->world_size(),
                    built->world_size() > 1 ? "s" : "",
                    built->mesh().empty() ? std::string()
                                          : " over mesh " + built->mesh())
          .str();
  if (built->world_size() > 1 && summary.params * 4 <= kVerifiableBytes)
    if (llvm::Error err = addReference(o, plan, build, imports, bundle))
      return std::move(err);
  return bundle;
}

/// The command line with every argument that names an existing file made
/// absolute, so that it re-runs from any directory (`dtc run --elastic`
/// re-plans it).
static llvm::json::Array portableCommand(llvm::ArrayRef<std::string> args) {
  llvm::json::Array command;
  for (const std::string &arg : args) {
    llvm::SmallString<256> path(arg);
    if (!arg.empty() && arg[0] != '-' && llvm::sys::path::is_relative(path) &&
        llvm::sys::fs::exists(path) && !llvm::sys::fs::make_absolute(path))
      command.push_back(path.str().str());
    else
      command.push_back(arg);
  }
  return command;
}

/// plan.json: the model, the cluster, the plan with its stages and
/// prediction (or what is pending and why).
static llvm::Expected<llvm::json::Object>
planJson(const CompileOptions &o, const ModelSummary &summary,
         const Cluster &cluster, const CompilePlan &planned,
         llvm::StringRef objective, double seconds) {
  llvm::json::Object plan{
      {"schema", "dtc.plan/1"},
      {"model", modelJson(summary)},
      {"cluster", clusterJson(cluster)},
      {"mode", o.mode},
      {"objective", objective},
      {"dtype", o.dtype},
      {"compile_time_s", seconds},
      {"compile_command", portableCommand(o.commandLine)},
  };
  if (!planned.result) {
    // Listed so readers of the bundle know what is missing and why.
    plan["pending"] = llvm::json::Array{"parallel", "mesh", "stages",
                                        "predicted", "alternatives"};
    plan["pending_reason"] = planned.missing;
    return plan;
  }
  const ParallelPlan &best = planned.result->best.plan;
  std::vector<StageDetail> details;
  llvm::json::Array stages;
  if (planned.graphPlanner) {
    auto graphStages = planned.graphPlanner->stagesJson(best);
    if (!graphStages)
      return graphStages.takeError();
    stages = std::move(*graphStages);
    if (auto priced = planned.graphPlanner->predict(best, &details); !priced)
      return priced.takeError();
  } else {
    stages = stagesToJson(*planned.spec, best);
    Cluster priced = cluster;
    priced.gpus = o.gpus;
    // The planner priced this plan already; it cannot fail here.
    llvm::cantFail(predict(*planned.spec, best, priced, &details).takeError());
  }
  for (auto &entry : planToJson(*planned.result, std::move(stages)))
    plan[entry.first] = std::move(entry.second);
  // The transformer cost model, or every op priced from the IR.
  plan["planner"] = planned.graphPlanner ? "ir" : "transformer";
  addStageDetails(plan, details);
  return plan;
}

llvm::Error dtc::runCompile(const CompileOptions &requested,
                            llvm::raw_ostream &out) {
  auto start = std::chrono::steady_clock::now();
  // What the model imposes (a fixed batch) is pinned below.
  CompileOptions o = requested;
  if (llvm::Error err = validateOptions(o))
    return err;
  if (llvm::Error err = parseLossSpec(o))
    return err;
  std::string bundleDir =
      o.outputDir.empty() ? defaultBundleDir(o.modelPath) : o.outputDir;
  // Before any work: the bundle directory must be new, empty or dtc's own.
  if (o.emit.empty())
    if (llvm::Error err =
            checkOutputDirectory(bundleDir, "-o", OutputKind::Bundle, o.force))
      return err;
  auto cluster = loadCluster(o.cluster, o.gpus);
  if (!cluster)
    return cluster.takeError();
  if (o.gpusPerNode)
    cluster->gpusPerNode = *o.gpusPerNode;

  mlir::MLIRContext context;
  context.loadDialect<mlir::dtc::DtcDialect, mlir::func::FuncDialect>();
  // Errors are reported once, as a dtc error line, not printed by MLIR.
  DiagnosticCollector diagnostics(context);
  ModelImports imports(o, context);
  // The model as one device runs it: one micro-batch.
  auto module = imports.at(o.microBatch.value_or(1));
  if (!module)
    return module.takeError();
  if (llvm::Error err = resolveFixedBatch(o, **module, imports))
    return err;
  if (o.emit == "imported") {
    (*module)->print(out);
    return llvm::Error::success();
  }

  std::string modelName = llvm::sys::path::stem(o.modelPath).str();
  if (auto name = (**module)->getAttrOfType<mlir::StringAttr>(kModelNameAttr))
    modelName = name.str();
  ModelSummary summary = summarizeModel(**module, modelName);
  auto planned = planModel(o, *cluster, **module, modelName, imports);
  if (!planned)
    return planned.takeError();
  if (o.emit == "sharded" || o.emit == "partitioned") {
    if (!planned->result)
      return badInput("--emit {0}: {1}", o.emit, planned->missing);
    return emitPlannedIR(o, planned->result->best.plan, *cluster,
                         planned->spec ? &*planned->spec : nullptr, imports,
                         context, diagnostics, out);
  }

  bool printed = false;
  auto programs = buildBundlePrograms(o, *cluster, *planned, summary, imports,
                                      diagnostics, out, printed);
  if (!programs)
    return programs.takeError();
  if (printed)
    return llvm::Error::success();
  // What training minimizes, stated (docs/training.md "Data binding").
  std::string programLine = programs->line;
  if (!programs->objective.empty())
    programLine += "; objective " + programs->objective;
  if (!programs->untrained.empty()) {
    constexpr size_t kNamed = 4;
    llvm::ArrayRef<std::string> names(programs->untrained);
    programLine += llvm::formatv(
        "; not trained, the loss does not reach them (as in PyTorch): {0}{1}",
        llvm::join(names.take_front(kNamed), ", "),
        names.size() > kNamed ? ", ..." : "");
  }

  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  auto plan =
      planJson(o, summary, *cluster, *planned, programs->objective, seconds);
  if (!plan)
    return plan.takeError();
  std::string planText;
  llvm::raw_string_ostream planOs(planText);
  planOs << llvm::formatv("{0:2}", llvm::json::Value(std::move(*plan))) << "\n";
  std::vector<std::pair<std::string, std::string>> files =
      std::move(programs->files);
  files.emplace_back("plan.json", planText);
  // program.mlir: the partitioned program once there is one, else the
  // imported model; written only on request.
  if (o.programMlir) {
    std::string text = programs->mlir;
    if (text.empty()) {
      llvm::raw_string_ostream os(text);
      (*module)->print(os);
    }
    files.emplace_back("program.mlir", text);
  }
  if (llvm::Error err = writeBundle(bundleDir, o.force, files))
    return err;
  if (o.json) {
    out << planText;
    return llvm::Error::success();
  }
  printSummary(out, summary, *cluster,
               planned->result ? &*planned->result : nullptr, planned->missing,
               programLine, bundleDir, seconds);
  if (o.explain && planned->result)
    out << formatExplanation(*planned->result);
  return llvm::Error::success();
}
