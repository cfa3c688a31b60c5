//===- ProgramBuilder.cpp - The runtime program of a plan -----------------===//

#include "compiler/ProgramBuilder.h"

#include "compiler/support/Error.h"
#include "passes/lowering/ProgramLowering.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FormatVariadic.h"

namespace dtc {

llvm::Expected<program::Program>
buildSingleRankProgram(mlir::ModuleOp module,
                       const ProgramBuildOptions &options) {
  program::Program p;
  p.set_schema("dtc.program/1");
  p.set_mode(options.mode);
  p.set_model_path(options.modelPath);
  p.set_world_size(1);
  if (options.mode == "train") {
    auto info = buildTrainingStep(module, options.training);
    if (!info)
      return info.takeError();
    program::Training *t = p.mutable_training();
    t->set_micro_step("micro_step");
    t->set_apply("apply");
    t->set_grad_accum(options.training.gradAccum);
    t->set_micro_batch(info->microBatch);
    t->set_seq_len(info->seqLen);
    t->set_vocab(info->vocab);
    const OptimizerConfig &c = options.training.optimizer;
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
  } else {
    auto funcs = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
    if (funcs.size() != 1)
      return failure("expected one forward function, found {0}", funcs.size());
    p.set_infer_function(funcs.front().getSymName().str());
  }
  auto rank = lowerToRankProgram(module);
  if (!rank)
    return rank.takeError();
  *p.add_ranks() = std::move(*rank);
  return p;
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
     << p.world_size() << "\n";
  for (const program::RankProgram &rank : p.ranks()) {
    os << "rank " << rank.rank() << ": " << rank.variables_size()
       << " variables, " << rank.constants_size() << " constants\n";
    for (const program::Variable &v : rank.variables())
      os << "  var \"" << v.name() << "\" " << typeText(v.type()) << " "
         << v.role() << " init " << v.init() << "\n";
    for (const program::Function &f : rank.functions()) {
      os << "  func " << f.name() << ": " << f.instructions_size()
         << " instructions, arena " << f.arena_bytes() << " bytes (live peak "
         << f.live_bytes_peak() << ", all temporaries " << f.temporaries_bytes()
         << ")\n";
      for (const program::Argument &a : f.arguments())
        os << "    arg " << valueText(f, a.value()) << " feed " << a.feed()
           << (a.name().empty() ? "" : " \"" + a.name() + "\"") << "\n";
      for (const program::Instruction &inst : f.instructions()) {
        os << "    ";
        for (auto [i, id] : llvm::enumerate(inst.outputs()))
          os << (i ? ", " : "") << valueText(f, id);
        os << " = " << inst.op() << "(";
        for (auto [i, id] : llvm::enumerate(inst.inputs()))
          os << (i ? ", " : "") << "%" << id;
        os << ")\n";
      }
      for (const program::Result &r : f.results())
        os << "    result " << valueText(f, r.value())
           << (r.state().empty() ? "" : " -> var \"" + r.state() + "\"")
           << (r.name().empty() ? "" : " \"" + r.name() + "\"") << "\n";
    }
  }
}

} // namespace dtc
