//===- main.cpp - the dtc command-line tool -------------------------------===//
//
// Parses the command line of SPEC "Commands" and dispatches to the compiler,
// plan tools, runtime and checkpoint tools. Commands that are not built yet
// exist with their flags and `--help`, and say so (exit 2).
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"
#include "compiler/calibrate/Calibrate.h"
#include "compiler/ckpt/Ckpt.h"
#include "compiler/inspect/Inspect.h"
#include "compiler/inspect/TraceCompare.h"
#include "compiler/run/Run.h"
#include "frontends/hf/HfConfig.h"
#include "frontends/modelgen/ModelGen.h"
#include "runtime/support/Error.h"
#include "runtime/support/ParallelPlan.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

namespace {

/// A command's action, run after a successful parse.
using Action = std::function<llvm::Error()>;

void addCompile(CLI::App &app, dtc::CompileOptions &o, Action &action) {
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a model into a parallel training plan bundle");
  cmd->add_option("MODEL", o.modelPath,
                  "A .onnx file or a Hugging Face config.json")
      ->required();
  cmd->add_option("--gpus", o.gpus, "Total GPUs")->required();
  cmd->add_option("--cluster", o.cluster,
                  "a100-80g, h100, h200, b200, gb200-nvl72, or a JSON file")
      ->capture_default_str();
  cmd->add_option("--gpus-per-node", o.gpusPerNode,
                  "GPUs in one NVLink domain (default: from the cluster)");
  cmd->add_option("--global-batch", o.globalBatch,
                  "Sequences per optimizer step");
  cmd->add_option("--dim", o.dims,
                  "Bind a named dynamic dim: NAME=SIZE (repeatable)");
  cmd->add_option("--seq-len", o.seqLen, "Binds a dynamic sequence dimension");
  cmd->add_option("--trainable", o.trainable,
                  "Train only the initializers whose names match this regex "
                  "(default: the exporter's PARAMETERs, not its BUFFERs)");
  cmd->add_option("--frozen", o.frozen,
                  "Never train the initializers whose names match this "
                  "regex (read from the model, kept in checkpoints)");
  cmd->add_option("--mode", o.mode, "train or infer")->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "bf16, fp16 or fp32")
      ->capture_default_str();
  cmd->add_option("--tp", o.tp, "Pin the tensor-parallel degree");
  cmd->add_option("--pp", o.pp, "Pin the pipeline-parallel degree");
  cmd->add_option("--dp", o.dp, "Pin the data-parallel degree");
  cmd->add_option("--cp", o.cp, "Pin the context-parallel degree");
  cmd->add_option("--ep", o.ep, "Pin the expert-parallel degree");
  cmd->add_option("--vpp", o.vpp, "Pin the virtual pipeline stages per rank");
  cmd->add_option("--zero", o.zero, "Pin the ZeRO stage (0-3)");
  cmd->add_option("--micro-batch", o.microBatch, "Pin the micro-batch size");
  cmd->add_option("--recompute", o.recompute,
                  "Pin activation recompute: none, selective or full");
  cmd->add_option("--schedule", o.schedule,
                  "Pin the pipeline schedule: " + dtc::scheduleNames());
  cmd->add_option("--sequence-parallel", o.sequenceParallel,
                  "Pin Megatron sequence parallelism with tp > 1: on or off")
      ->transform(CLI::IsMember({"on", "off"}));
  cmd->add_option("--mesh-order", o.meshOrder,
                  "Pin the mesh's axis order, outermost first: dp, tp, pp "
                  "and cp once each (default: the planner's choice; "
                  "Megatron's is pp,dp,cp,tp)");
  cmd->add_flag("--no-overlap", o.noOverlap,
                "Reduce gradients after the backward pass, not during it");
  cmd->add_option("--tp-comm-chunks", o.tpCommChunks,
                  "Pin the row blocks each TP GEMM and its collective are "
                  "split into, to overlap them (1: whole; default: the cost "
                  "model's choice)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--grad-bucket-mb", o.gradBucketMb,
                  "Gradient all-reduce bucket size (MiB)")
      ->capture_default_str();
  cmd->add_flag(
      "--no-program", o.noProgram,
      "Plan only: write no runtime program (faster for large models)");
  cmd->add_flag("--program-mlir", o.programMlir,
                "Also write program.mlir, the program as readable MLIR");
  cmd->add_flag("--no-search", o.noSearch,
                "All degrees are pinned; only predict");
  cmd->add_option("-o", o.outputDir, "Bundle directory (default <model>.dtc)");
  cmd->add_flag("--force", o.force,
                "Write the bundle into -o even if it is not empty and not a "
                "dtc bundle, a symbolic link or the working directory "
                "(nothing else in it is deleted)");
  cmd->add_flag("--json", o.json, "Print plan.json instead of the table");
  // `--explain` alone means 3 alternatives (set after parsing, below).
  CLI::Option *explain =
      cmd->add_option("--explain", o.explain,
                      "Also print the K best alternatives (default 3)")
          ->expected(0, 1);
  // The optimizer the training program carries (AdamW).
  cmd->add_option("--lr", o.optimizer.lr, "Peak learning rate")
      ->capture_default_str();
  cmd->add_option("--min-lr", o.optimizer.minLr,
                  "Learning rate at the end of the decay")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", o.optimizer.warmupSteps,
                  "Linear warmup steps")
      ->capture_default_str();
  cmd->add_option("--lr-decay-steps", o.optimizer.decaySteps,
                  "Steps of decay after warmup (0: constant)")
      ->capture_default_str();
  cmd->add_option("--lr-schedule", o.optimizer.schedule,
                  "cosine, linear or constant")
      ->capture_default_str();
  cmd->add_option("--weight-decay", o.optimizer.weightDecay,
                  "AdamW weight decay (matrices only)")
      ->capture_default_str();
  cmd->add_option("--grad-clip", o.optimizer.gradClip,
                  "Clip the global gradient norm (0: off)")
      ->capture_default_str();
  // The training objective and how the data reaches the graph's inputs.
  cmd->add_option("--loss", o.lossSpec,
                  "next-token, masked-lm, seq2seq, classify or "
                  "model[:OUTPUT] (default: from the graph)");
  cmd->add_option("--feed", o.loss.feeds,
                  "Bind a graph input to a data role: NAME=ROLE, ROLE one "
                  "of tokens, labels, decoder_tokens, attention_mask, input "
                  "(repeatable)");
  cmd->add_option("--mask-token-id", o.loss.maskTokenId,
                  "masked-lm: the [MASK] id that replaces masked tokens "
                  "when the data has no labels");
  cmd->add_option("--mask-probability", o.loss.maskProbability,
                  "masked-lm: the fraction of tokens masked")
      ->capture_default_str();
  cmd->add_option("--decoder-start-token-id", o.loss.decoderStartTokenId,
                  "seq2seq: the decoder's first input id, when the data "
                  "has labels but no decoder input");
  cmd->add_option("--emit", o.emit,
                  "Print one stage's IR and stop: imported, sharded, "
                  "partitioned or program");
  cmd->callback([&o, &action, explain] {
    if (explain->count() && !o.explain)
      o.explain = 3;
    action = [&o] { return dtc::runCompile(o, llvm::outs()); };
  });
}

/// What the plan and ckpt commands take.
struct ToolArgs {
  std::string bundle, other, output, ckptDir;
  int64_t rank = 0, k = 3;
  bool json = false;
  bool force = false;
};

/// Loads `bundle`'s plan.json, then runs `body` on it.
Action withPlan(const std::string &bundle,
                std::function<llvm::Error(const dtc::PlanView &)> body) {
  return [&bundle, body]() -> llvm::Error {
    auto view = dtc::loadPlanView(bundle);
    if (!view)
      return view.takeError();
    return body(*view);
  };
}

void addPlan(CLI::App &app, ToolArgs &a, Action &action) {
  CLI::App *plan = app.add_subcommand("plan", "Inspect a compiled plan");
  plan->require_subcommand(1);

  CLI::App *show =
      plan->add_subcommand("show", "The chosen plan as a table (or JSON)");
  show->add_option("BUNDLE", a.bundle, "Plan bundle directory")->required();
  CLI::Option *json = show->add_flag("--json", a.json, "Print plan.json");
  CLI::Option *rank =
      show->add_option("--rank", a.rank,
                       "Show one rank's place and summarize its program "
                       "(program.pb)")
          ->excludes(json);
  show->callback([&a, &action, rank] {
    action = withPlan(a.bundle,
                      [&a, rank](const dtc::PlanView &view) -> llvm::Error {
                        if (a.json) {
                          llvm::outs() << view.text;
                          return llvm::Error::success();
                        }
                        std::optional<int64_t> only;
                        if (rank->count())
                          only = a.rank;
                        return dtc::showPlan(view, only, llvm::outs());
                      });
  });

  CLI::App *explain = plan->add_subcommand(
      "explain", "The K best alternatives and why each lost");
  explain->add_option("BUNDLE", a.bundle, "Plan bundle directory")->required();
  explain->add_option("-k", a.k, "How many runners-up")->capture_default_str();
  explain->callback([&a, &action] {
    action = withPlan(a.bundle, [&a](const dtc::PlanView &view) {
      return dtc::explainPlan(view, a.k, llvm::outs());
    });
  });

  CLI::App *diff = plan->add_subcommand(
      "diff", "What differs between two plans, and the predicted effect");
  diff->add_option("A", a.bundle, "First bundle")->required();
  diff->add_option("B", a.other, "Second bundle")->required();
  diff->callback([&a, &action] {
    action =
        withPlan(a.bundle, [&a](const dtc::PlanView &first) -> llvm::Error {
          auto second = dtc::loadPlanView(a.other);
          if (!second)
            return second.takeError();
          return dtc::diffPlans(first, *second, llvm::outs());
        });
  });

  CLI::App *report =
      plan->add_subcommand("report", "One self-contained HTML page of a plan");
  report->add_option("BUNDLE", a.bundle, "Plan bundle directory")->required();
  report->add_option("-o", a.output, "Output .html file")->required();
  // Owned by the callbacks: ToolArgs is shared with the other commands.
  auto traceDir = std::make_shared<std::string>();
  auto traceCluster = std::make_shared<std::string>();
  report->add_option("--trace", *traceDir,
                     "Set the step 'dtc run --trace DIR' measured against "
                     "the predicted one");
  report->add_option("--cluster", *traceCluster,
                     "With --trace: override the cluster recorded in "
                     "plan.json (needed only for bundles written before "
                     "cluster.spec)");
  report->callback([&a, &action, traceDir, traceCluster] {
    action = withPlan(
        a.bundle,
        [&a, traceDir, traceCluster](const dtc::PlanView &view) -> llvm::Error {
          auto start = std::chrono::steady_clock::now();
          std::optional<dtc::TraceComparison> trace;
          if (!traceDir->empty()) {
            auto compared = dtc::compareTrace(view, *traceDir, *traceCluster);
            if (!compared)
              return compared.takeError();
            trace = std::move(*compared);
          } else if (!traceCluster->empty()) {
            return dtc::badInput("--cluster is only used with --trace");
          }
          if (llvm::Error err =
                  dtc::writeReport(view, a.output, trace ? &*trace : nullptr))
            return err;
          double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
          llvm::outs() << llvm::formatv("wrote {0} ({1} GPUs) in {2:F3} s\n",
                                        a.output, view.plan.gpus(), seconds);
          if (trace)
            llvm::outs() << dtc::traceSummaryLine(*trace) << "\n";
          return llvm::Error::success();
        });
  });
}

void addRun(CLI::App &app, dtc::RunOptions &o, dtc::VerifyOptions &v,
            Action &action) {
  CLI::App *run = app.add_subcommand(
      "run", "Execute a compiled plan with the bundled runtime");
  run->add_option("BUNDLE", o.bundle, "Plan bundle directory")->required();
  run->add_option("--backend", o.backend, "cpu or cuda (default: cpu here)");
  run->add_option("--steps", o.steps, "Train until this global step");
  run->add_option("--data", o.data,
                  "Token file (flat little-endian uint16 ids, nanoGPT "
                  "train.bin), or a directory of *.safetensors shards "
                  "(tensors named by graph input or role, dim 0 the "
                  "sample)");
  run->add_option("--data-dtype", o.dataDtype, "uint16 or uint32")
      ->capture_default_str();
  run->add_option("--inputs", o.inputs,
                  "Inference inputs: DIR/input_0.pb ... (ONNX TensorProto)");
  run->add_option("--outputs", o.outputs,
                  "Write inference outputs to DIR/output_0.pb ...");
  run->add_flag("--force", o.force,
                "Write --outputs into a directory that is not empty and not "
                "dtc's outputs (nothing else in it is deleted)");
  run->add_option("--seed", o.seed, "Random seed (data order, --init)")
      ->capture_default_str();
  run->add_flag("--init", o.init,
                "Start from seeded random weights, not the model's");
  run->add_flag("--log-json", o.logJson, "One JSON object per step on stdout");
  // For `dtc verify`: each rank writes its final parameters here.
  run->add_option("--dump-state", o.dumpState)->group("");
  run->add_option("--ckpt-dir", o.ckptDir,
                  "Save checkpoints here (after the last step, and every "
                  "--save-every steps)");
  run->add_option("--save-every", o.saveEvery, "Save every K steps")
      ->check(CLI::PositiveNumber);
  run->add_option("--global-batch", o.globalBatch,
                  "Sequences per step, instead of the compiled global batch "
                  "(a multiple of the plan's micro-batch x dp)")
      ->check(CLI::PositiveNumber);
  run->add_flag("--resume", o.resume,
                "Continue from the latest committed checkpoint in "
                "--ckpt-dir, under this bundle's plan");
  run->add_option("--elastic", o.elastic,
                  "MIN:MAX ranks: when a rank dies, re-plan for the ranks "
                  "left (global batch kept) and resume from the newest "
                  "committed step, by itself; needs --ckpt-dir and "
                  "--save-every");
  // For bench/ckpt.sh: the synchronous save the asynchronous one is
  // measured against.
  run->add_flag("--ckpt-sync", o.ckptSync)->group("");
  run->add_option("--trace", o.traceDir,
                  "Write one Chrome/Perfetto trace per rank to "
                  "DIR/rank-R.trace.json");
  run->add_option("--straggler-factor", o.stragglerFactor,
                  "Name a rank whose compute time per step exceeds its "
                  "peers' median by this factor (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  run->callback([&o, &action] {
    if (o.ckptDir.empty() && (o.saveEvery || o.resume)) {
      action = [&o] {
        return dtc::badInput("{0} needs --ckpt-dir DIR",
                             o.resume ? "--resume" : "--save-every");
      };
      return;
    }
    action = [&o] { return dtc::runBundle(o, llvm::outs()); };
  });

  CLI::App *verify = app.add_subcommand(
      "verify", "Run the plan on CPU at its rank count and compare with "
                "single-device execution");
  verify->add_option("BUNDLE", v.bundle, "Plan bundle directory")->required();
  verify->add_option("--steps", v.steps, "Training steps to compare")
      ->capture_default_str();
  verify->add_option("--data", v.data,
                     "Token file or shard directory (default: synthetic "
                     "tokens from --seed)");
  verify->add_option("--inputs", v.inputs,
                     "Inference bundles: input_<i>.pb files (default: "
                     "synthetic inputs from --seed)");
  verify->add_option("--seed", v.seed, "Random seed (data order, --init)")
      ->capture_default_str();
  verify->add_flag("--init", v.init,
                   "Seeded random weights instead of the model's");
  verify
      ->add_option("--loss-tolerance", v.lossTolerance,
                   "Per-step loss, relative")
      ->capture_default_str();
  verify
      ->add_option("--param-tolerance", v.paramTolerance,
                   "Final parameters: the L2 norm of the difference from "
                   "one device over that of the parameter's update")
      ->capture_default_str();
  verify->callback([&v, &o, &action] {
    v.executable = o.command.empty() ? "dtc" : o.command.front();
    action = [&v] { return dtc::verifyBundle(v, llvm::outs()); };
  });
}

void addCkpt(CLI::App &app, ToolArgs &a, Action &action) {
  CLI::App *ckpt =
      app.add_subcommand("ckpt", "Inspect and convert checkpoints");
  ckpt->require_subcommand(1);
  CLI::App *inspect =
      ckpt->add_subcommand("inspect", "What a checkpoint holds");
  inspect
      ->add_option("DIR", a.ckptDir,
                   "Checkpoint root (its latest step) or step directory")
      ->required();
  inspect->callback([&a, &action] {
    action = [&a] { return dtc::inspectCheckpoint(a.ckptDir, llvm::outs()); };
  });
  CLI::App *verify =
      ckpt->add_subcommand("verify", "Check a checkpoint end to end");
  verify
      ->add_option("DIR", a.ckptDir,
                   "Checkpoint root (every step) or step directory")
      ->required();
  verify->callback([&a, &action] {
    action = [&a] { return dtc::verifyCheckpoint(a.ckptDir, llvm::outs()); };
  });
  CLI::App *consolidate = ckpt->add_subcommand(
      "consolidate", "Write one safetensors file with the model's own names");
  consolidate
      ->add_option("DIR", a.ckptDir,
                   "Checkpoint root (its latest step) or step directory")
      ->required();
  consolidate->add_option("-o", a.output, "Output .safetensors")->required();
  consolidate->add_flag("--force", a.force, "Replace an existing -o file");
  consolidate->callback([&a, &action] {
    action = [&a] {
      return dtc::consolidateCheckpoint(a.ckptDir, a.output, a.force,
                                        llvm::outs());
    };
  });
}

/// `dtc modelgen`: a preset or a base model per --arch, with any size
/// overridden by flags.
struct ModelgenArgs {
  std::string arch, preset, config, output;
  std::optional<int64_t> layers, hidden, heads, kvHeads, ffn, vocab, seqLen,
      experts, topK;
  std::optional<double> capacityFactor;
  uint64_t seed = 0;
  bool shapeOnly = false;
};

llvm::Error runModelgen(const ModelgenArgs &a) {
  namespace mg = dtc::modelgen;
  std::optional<mg::Arch> arch;
  if (!a.arch.empty() && !(arch = mg::parseArch(a.arch)))
    return dtc::badInput("--arch: unknown architecture '{0}'; use gpt, llama, "
                         "mistral or mixtral",
                         a.arch);
  mg::ModelConfig config;
  if (!a.config.empty()) {
    if (!a.preset.empty() || arch)
      return dtc::badInput("--config {0}: drop --arch and --preset; the "
                           "config.json names the architecture",
                           a.config);
    auto parsed = dtc::hf::readConfigFile(a.config);
    if (!parsed)
      return parsed.takeError();
    config = *parsed;
  } else if (!a.preset.empty()) {
    std::optional<mg::ModelConfig> p = mg::preset(a.preset);
    if (!p)
      return dtc::badInput("--preset: unknown preset '{0}'; presets are {1}",
                           a.preset, llvm::join(mg::presetNames(), ", "));
    if (arch && *arch != p->arch)
      return dtc::badInput("--arch {0} contradicts --preset {1} (a {2} "
                           "model); drop one of them",
                           a.arch, a.preset, mg::archName(p->arch));
    config = *p;
  } else if (arch) {
    config = *mg::preset(*arch == mg::Arch::GPT     ? "tiny-gpt"
                         : *arch == mg::Arch::Llama ? "tiny-llama"
                                                    : "tiny-mixtral");
    config.name = llvm::sys::path::stem(a.output).str();
  } else {
    return dtc::badInput("--arch, --preset or --config is required; run 'dtc "
                         "modelgen --help'");
  }
  auto set = [](int64_t &field, std::optional<int64_t> value) {
    if (value)
      field = *value;
  };
  set(config.layers, a.layers);
  set(config.hidden, a.hidden);
  set(config.heads, a.heads);
  set(config.kvHeads, a.kvHeads);
  set(config.ffn, a.ffn);
  set(config.vocab, a.vocab);
  set(config.maxPositions, a.seqLen);
  set(config.experts, a.experts);
  set(config.topK, a.topK);
  if (a.capacityFactor) {
    if (*a.capacityFactor < 0)
      return dtc::badInput("--capacity-factor: must be >= 0 (0: dropless), "
                           "got {0}",
                           *a.capacityFactor);
    config.capacityFactor = *a.capacityFactor;
  }
  if (a.kvHeads && *a.kvHeads < 1)
    return dtc::badInput("--kv-heads: must be >= 1, got {0}", *a.kvHeads);
  if (a.ffn && *a.ffn < 1)
    return dtc::badInput("--ffn: must be >= 1, got {0}", *a.ffn);
  if (llvm::sys::path::extension(a.output) != ".onnx")
    return dtc::badInput("-o {0}: the output must be a .onnx file", a.output);

  mg::GenOptions options;
  options.shapeOnly = a.shapeOnly;
  options.seed = a.seed;
  options.externalDataFile = llvm::sys::path::stem(a.output).str() + ".weights";
  if (llvm::Error err = mg::generate(config, options, a.output))
    return err;
  llvm::outs() << "wrote " << a.output << ": " << config.name << " ("
               << mg::archName(config.arch) << "), "
               << mg::parameterCount(config) << " parameters"
               << (a.shapeOnly ? " (shapes only)" : "") << "\n";
  return llvm::Error::success();
}

void addModelgen(CLI::App &app, ModelgenArgs &a, Action &action) {
  CLI::App *gen = app.add_subcommand(
      "modelgen", "Generate a GPT, LLaMA/Mistral or Mixtral ONNX model");
  gen->add_option("--arch", a.arch, "gpt, llama, mistral or mixtral");
  gen->add_option("--preset", a.preset,
                  "A named model: " +
                      llvm::join(dtc::modelgen::presetNames(), ", "));
  gen->add_option("--config", a.config,
                  "A Hugging Face config.json (gpt2, llama, mistral, qwen2, "
                  "mixtral, qwen2_moe, qwen3_moe)");
  gen->add_option("--layers", a.layers, "Transformer blocks");
  gen->add_option("--hidden", a.hidden, "Hidden size");
  gen->add_option("--heads", a.heads, "Attention heads");
  gen->add_option("--kv-heads", a.kvHeads,
                  "Key/value heads (grouped-query attention)");
  gen->add_option("--ffn", a.ffn, "MLP (per-expert) intermediate size");
  gen->add_option("--vocab", a.vocab, "Vocabulary size");
  gen->add_option("--seq-len", a.seqLen, "Maximum positions");
  gen->add_option("--experts", a.experts, "Experts per MoE layer");
  gen->add_option("--top-k", a.topK, "Experts per token");
  gen->add_option("--capacity-factor", a.capacityFactor,
                  "Expert capacity per sequence as a multiple of the even "
                  "share (0: dropless, the default)");
  gen->add_option("-o", a.output, "Output .onnx")->required();
  gen->add_flag("--shape-only", a.shapeOnly,
                "Declare the weights only (external data, never written)");
  gen->add_option("--seed", a.seed, "Seed of the random weights")
      ->capture_default_str();
  gen->callback([&] { action = [&a] { return runModelgen(a); }; });
}

/// `dtc calibrate`: measures this machine and writes a cluster file.
struct CalibrateArgs {
  std::string output = "calibrated.json";
  std::string backend;
  bool quick = false;
  /// Set on the two ranks calibrate starts to time all-reduces.
  std::string collectivesRank;
};

/// `command` is this process's command line (the dtc executable first),
/// filled in before the action runs.
void addCalibrate(CLI::App &app, CalibrateArgs &a,
                  const std::vector<std::string> &command, Action &action) {
  CLI::App *cmd = app.add_subcommand(
      "calibrate", "Measure this machine (the runtime's kernels, all-reduces "
                   "between two ranks, a small training step) and write a "
                   "cluster file for --cluster");
  cmd->add_option("-o", a.output, "Cluster file to write (.json)")
      ->capture_default_str();
  cmd->add_option("--backend", a.backend,
                  "cpu or cuda (default: cuda where a GPU is present)");
  cmd->add_flag("--quick", a.quick, "Fewer, smaller benchmarks (seconds)");
  cmd->add_option("--collectives-rank", a.collectivesRank)->group("");
  cmd->callback([&a, &command, &action] {
    action = [&a, &command] {
      if (!a.collectivesRank.empty())
        return dtc::calibrate::runCollectiveRank(a.backend, a.quick,
                                                 a.collectivesRank);
      dtc::calibrate::Options options;
      options.backend = a.backend;
      options.quick = a.quick;
      options.executable = command.front();
      return dtc::calibrate::runCalibrate(options, a.output, llvm::outs());
    };
  });
}

/// One `dtc: error:` line for a parse error, naming the command to ask for
/// help.
int reportParseError(const CLI::App &app, const CLI::Error &e) {
  std::string command = "dtc";
  for (const CLI::App *sub = &app; !sub->get_subcommands().empty();) {
    sub = sub->get_subcommands().front();
    command += " " + sub->get_name();
  }
  std::string what = e.what();
  // CLI11 sometimes ends its message with a newline and a hint of its own.
  if (auto pos = what.find('\n'); pos != std::string::npos)
    what.resize(pos);
  llvm::errs() << "dtc: error: " << what << "; run '" << command
               << " --help'\n";
  return static_cast<int>(dtc::ErrorKind::BadInput);
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  CLI::App app{"dtc: compile a model into a distributed training program"};
  app.set_version_flag("--version", std::string("dtc ") + DTC_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  Action action;
  dtc::CompileOptions compileOptions;
  dtc::RunOptions runOptions;
  dtc::VerifyOptions verifyOptions;
  ToolArgs toolArgs;
  ModelgenArgs modelgenArgs;
  CalibrateArgs calibrateArgs;
  addCompile(app, compileOptions, action);
  addPlan(app, toolArgs, action);
  addRun(app, runOptions, verifyOptions, action);
  addCkpt(app, toolArgs, action);
  addModelgen(app, modelgenArgs, action);
  addCalibrate(app, calibrateArgs, runOptions.command, action);
  // The ranks of a multi-rank plan re-run this command line under mpirun.
  runOptions.command.push_back(llvm::sys::fs::getMainExecutable(
      argv[0], reinterpret_cast<void *>(&reportParseError)));
  for (int i = 1; i < argc; ++i)
    runOptions.command.push_back(argv[i]);
  compileOptions.commandLine = runOptions.command;

  // CLI11 reports an unknown command as a missing one; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    try {
      app.get_subcommand(argv[1]);
    } catch (const CLI::OptionNotFound &) {
      llvm::errs() << "dtc: error: unknown command '" << argv[1]
                   << "'; run 'dtc --help'\n";
      return static_cast<int>(dtc::ErrorKind::BadInput);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    return reportParseError(app, e);
  }
  if (!action)
    return reportParseError(app, CLI::RequiredError("a command"));
  if (llvm::Error err = action())
    return dtc::reportError(std::move(err));
  return 0;
}
