//===- ProgramBuilder.cpp - The runtime program of a plan -----------------===//

#include "compiler/ProgramBuilder.h"

#include "passes/lowering/ProgramLowering.h"
#include "runtime/support/Error.h"

#include "dialects/dtc/DtcAttrs.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/core/Communicator.h"
#include "runtime/core/PipelineSchedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

namespace dtc {

static void setTraining(program::Program &p, const TrainingStepInfo &info,
                        const TrainingStepOptions &options,
                        llvm::StringRef stepFunction, int64_t callsPerStep) {
  program::Training *t = p.mutable_training();
  t->set_micro_step(stepFunction.str());
  t->set_apply("apply");
  t->set_grad_accum(callsPerStep);
  t->set_micro_batches_per_call(info.microBatchesPerCall);
  t->set_stacked_micro_batches(info.stackedMicroBatches);
  t->set_micro_batch(info.microBatch);
  t->set_seq_len(info.seqLen);
  t->set_vocab(info.vocab);
  t->set_moe_layers(info.moeLayers);
  t->set_moe_experts(info.moeExperts);
  t->set_objective(info.objective);
  t->set_loss_sums_counted_labels(info.lossSumsCountedLabels);
  if (info.maskTokenId >= 0)
    t->set_mask_token_id(info.maskTokenId);
  t->set_mask_probability(info.maskProbability);
  if (info.decoderStartTokenId >= 0)
    t->set_decoder_start_token_id(info.decoderStartTokenId);
  const OptimizerConfig &c = options.optimizer;
  program::Optimizer *opt = t->mutable_optimizer();
  opt->set_name("adamw");
  opt->set_lr(c.lr);
  opt->set_min_lr(c.minLr);
  opt->set_warmup_steps(c.warmupSteps);
  opt->set_decay_steps(c.decaySteps);
  opt->set_schedule(c.schedule);
  opt->set_beta1(c.beta1);
  opt->set_beta2(c.beta2);
  opt->set_eps(c.epsilon);
  opt->set_weight_decay(c.weightDecay);
  opt->set_grad_clip(c.gradClip);
}

mlir::OpPrintingFlags programTextFlags() {
  mlir::OpPrintingFlags flags;
  flags.elideLargeElementsAttrs(1 << 16);
  return flags;
}

llvm::Expected<program::Program>
buildProgram(mlir::ModuleOp module, const ProgramBuildOptions &options,
             std::string *stagesText) {
  const runtime::Mesh &mesh = options.training.mesh;
  program::Program p;
  p.set_schema("dtc.program/1");
  p.set_mode(options.mode);
  p.set_model_path(options.modelPath);
  p.set_world_size(mesh.worldSize());
  p.set_mesh(mesh.str());
  bool partitioned = mesh.worldSize() > 1;
  TrainingStepOptions training = options.training;

  if (training.pipelineStages > 1) {
    if (options.mode != "train")
      return badInput("pipeline stages are lowered for training only; "
                      "compile inference plans with --pp 1");
    // dtc-training-pipeline with stages: one nested module per stage.
    auto info = buildTrainingStep(module, training);
    if (!info)
      return info.takeError();
    setTraining(p, *info, training, "pipeline_step", 1);
    int ppAxis = mesh.axisIndex("pp");
    auto stages = llvm::to_vector(module.getOps<mlir::ModuleOp>());
    for (auto [s, stage] : llvm::enumerate(stages)) {
      auto rank = lowerToRankProgram(stage);
      if (!rank)
        return rank.takeError();
      bool firstRank = true;
      for (int r = 0; r < mesh.worldSize(); ++r)
        if (mesh.coordinates(r)[ppAxis] == static_cast<int64_t>(s)) {
          if (firstRank)
            rank->set_rank(r);
          firstRank = false;
          rank->add_ranks(r);
        }
      *p.add_ranks() = std::move(*rank);
      if (stagesText) {
        llvm::raw_string_ostream os(*stagesText);
        os << "// pipeline stage " << s << "\n";
        stage->print(os, programTextFlags());
        os << "\n"; // a nested op prints without one
      }
    }
    return p;
  }

  if (options.mode == "train") {
    auto info = buildTrainingStep(module, training);
    if (!info)
      return info.takeError();
    setTraining(p, *info, training, "micro_step", training.gradAccum);
    if (module.lookupSymbol("micro_step_sync"))
      p.mutable_training()->set_last_micro_step("micro_step_sync");
  } else {
    auto funcs = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
    if (funcs.size() != 1)
      return failure("expected one forward function, found {0}", funcs.size());
    p.set_infer_function(funcs.front().getSymName().str());
    if (partitioned) {
      // Every rank returns whole outputs (partitioning gathers split ones).
      mlir::func::FuncOp forward = funcs.front();
      mlir::Builder b(module.getContext());
      for (unsigned i = 0; i < forward.getNumResults(); ++i) {
        auto type =
            llvm::cast<mlir::RankedTensorType>(forward.getResultTypes()[i]);
        llvm::SmallVector<mlir::Attribute> dims(type.getRank(),
                                                b.getArrayAttr({}));
        llvm::SmallVector<int64_t> blocks(type.getRank(), 0);
        forward.setResultAttr(
            i, "dtc.sharding",
            mlir::dtc::ShardingAttr::get(b.getContext(), b.getArrayAttr(dims),
                                         blocks, b.getArrayAttr({})));
      }
      mlir::PassManager pm(module.getContext());
      ForwardPartitionOptions partition;
      partition.mesh = mesh.str();
      partition.sequenceParallel = training.sequenceParallel;
      partition.flopsPerByte = training.flopsPerByte;
      buildForwardPartitionPipeline(pm, partition);
      if (mlir::failed(pm.run(module)))
        return failure("partitioning over mesh {0} failed (see the error "
                       "above)",
                       mesh.str());
    }
  }
  auto rank = lowerToRankProgram(module);
  if (!rank)
    return rank.takeError();
  // SPMD: every rank runs the same program; its mesh coordinates select
  // its data, its shards and its collective groups at run time.
  rank->set_rank(0);
  for (int r = 0; partitioned && r < mesh.worldSize(); ++r)
    rank->add_ranks(r);
  *p.add_ranks() = std::move(*rank);
  return p;
}

void initParametersWithoutWeights(program::Program &p) {
  for (program::RankProgram &rank : *p.mutable_ranks())
    for (program::Variable &v : *rank.mutable_variables())
      if (v.init() == "model")
        v.set_init(v.fallback_init());
}

static std::string typeText(const program::TensorType &type) {
  std::string s;
  for (int64_t d : type.shape())
    s += std::to_string(d) + "x";
  static const char *names[] = {"?",   "f32", "f16", "bf16", "f64",
                                "i64", "i32", "i8",  "i1"};
  return s + names[type.dtype()];
}

static std::string valueText(const program::Function &f, int id) {
  const program::Value &v = f.values(id);
  std::string where;
  switch (v.storage_case()) {
  case program::Value::kArenaOffset:
    where = "arena+" + std::to_string(v.arena_offset());
    break;
  case program::Value::kState:
    where = "var \"" + v.state() + "\"";
    break;
  case program::Value::kConstant:
    where = "const " + std::to_string(v.constant());
    break;
  case program::Value::kArgument:
    where = "arg " + std::to_string(v.argument());
    break;
  default:
    where = "?";
  }
  return llvm::formatv("%{0}:{1}@{2}", id, typeText(v.type()), where).str();
}

void printProgram(const program::Program &p, llvm::raw_ostream &os) {
  os << "program " << p.schema() << " mode " << p.mode() << " ranks "
     << p.world_size() << (p.mesh().empty() ? "" : " mesh " + p.mesh()) << "\n";
  for (const program::RankProgram &rank : p.ranks()) {
    std::string ranks = std::to_string(rank.rank());
    if (rank.ranks_size() > 1)
      ranks = llvm::formatv("{0}-{1}", rank.ranks(0),
                            rank.ranks(rank.ranks_size() - 1));
    os << "rank " << ranks << ": " << rank.variables_size() << " variables, "
       << rank.constants_size() << " constants\n";
    for (const program::Variable &v : rank.variables()) {
      os << "  var \"" << v.name() << "\" " << typeText(v.type()) << " "
         << v.role() << " init " << v.init();
      if (v.shard_size()) {
        os << " shard of ";
        for (int64_t d : v.global_shape())
          os << d << "x";
        os << " [";
        for (auto [i, dim] : llvm::enumerate(v.shard())) {
          os << (i ? ", " : "") << "[" << llvm::join(dim.axes(), ",") << "]";
          if (dim.block())
            os << ":" << dim.block();
        }
        os << "]";
      }
      os << "\n";
    }
    for (const program::Function &f : rank.functions()) {
      os << "  func " << f.name() << ": " << f.instructions_size()
         << " instructions, arena " << f.arena_bytes() << " bytes (live peak "
         << f.live_bytes_peak() << ", all temporaries " << f.temporaries_bytes()
         << ")\n";
      for (const program::Argument &a : f.arguments())
        os << "    arg " << valueText(f, a.value()) << " feed " << a.feed()
           << (a.name().empty() ? "" : " \"" + a.name() + "\"") << "\n";
      if (f.has_pipeline()) {
        // The schedule the executor runs instead of instructions.
        const program::Pipeline &p = f.pipeline();
        os << "    pipeline " << p.schedule() << " stage " << p.stage()
           << " of " << p.stages() << ", " << std::max(1, p.virtual_stages())
           << " chunk(s) per stage, " << p.micro_batches()
           << " micro-batches, over " << p.axis()
           << (p.overlap() ? ", overlapped" : "") << ", loss " << p.loss()
           << "\n";
        for (auto [k, chunk] : llvm::enumerate(p.chunks()))
          os << "      chunk "
             << static_cast<int64_t>(k) * p.stages() + p.stage() << ": forward "
             << (chunk.forward().empty() ? "-" : chunk.forward())
             << ", backward " << chunk.backward() << ", data ["
             << llvm::join(llvm::map_range(
                               chunk.data(),
                               [](int32_t i) { return std::to_string(i); }),
                           ", ")
             << "]\n";
        // The passes in the order the executor runs them (for the
        // compiled micro-batches; docs/runtime.md's notation).
        runtime::PipelineShape shape =
            runtime::pipelineShapeOf(p, p.micro_batches());
        os << "      order";
        for (const runtime::PipelinePass &pass :
             runtime::pipelinePasses(shape, p.stage()))
          os << " " << runtime::passName(shape, p.stage(), pass);
        os << "\n";
      }
      for (const program::Instruction &inst : f.instructions()) {
        os << "    ";
        for (auto [i, id] : llvm::enumerate(inst.outputs()))
          os << (i ? ", " : "") << valueText(f, id);
        os << (inst.outputs_size() ? " = " : "") << inst.op() << "(";
        for (auto [i, id] : llvm::enumerate(inst.inputs()))
          os << (i ? ", " : "") << "%" << id;
        os << ")";
        // Communication: the group and the request pairing start and wait.
        if (auto it = inst.attrs().find("mesh_axes"); it != inst.attrs().end())
          os << " over " << llvm::join(it->second.strings().values(), ",");
        if (auto it = inst.attrs().find("request"); it != inst.attrs().end())
          os << " #" << it->second.i();
        os << "\n";
      }
      for (const program::Result &r : f.results())
        os << "    result " << valueText(f, r.value())
           << (r.state().empty() ? "" : " -> var \"" + r.state() + "\"")
           << (r.name().empty() ? "" : " \"" + r.name() + "\"") << "\n";
    }
  }
}

} // namespace dtc
