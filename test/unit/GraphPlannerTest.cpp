//===- GraphPlannerTest.cpp - The IR-priced planner
//------------------------===//
//
// The planner's path for any graph (compiler/GraphPlanner.h): on every
// recognized transformer its prediction of a plan agrees with the
// transformer cost model's (the fast path) within the tolerances below;
// graphs that are not transformers (the CNN fixture) get plans; what such
// a graph cannot take is refused with a reason.
//
//===----------------------------------------------------------------------===//

#include "compiler/GraphPlanner.h"
#include "compiler/ModelSummary.h"
#include "compiler/costmodel/CostModel.h"
#include "dialects/dtc/DtcDialect.h"
#include "frontends/modelgen/ModelGen.h"
#include "frontends/onnx/OnnxImporter.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace dtc;

namespace {

const std::string kModels = DTC_TEST_MODELS_DIR;

/// Model FLOPs per step: the IR path sums its ops' GEMM and attention
/// FLOPs, and so does a spec read off the IR (IrKernels), so a model's
/// heads (an MLM transform, a classifier on one token) count alike.
constexpr double kFlopsTolerance = 0.02;
/// Step time. Both paths price the program dtc builds: the fast path one
/// block from the IR's kernels (its streaming ops per half, separate or
/// fused projections, the bound cross-entropy) and the stages the pipeline
/// pass cuts, the IR path every per-rank op. Without tensor parallelism
/// the parts are the same kernels: measured IR / fast 1.000 to 1.003.
constexpr double kStepTolerance = 0.01;
/// Under tp the fast path assumes Megatron-LM's layout (four collectives
/// per block, the LM head split over the vocabulary), the IR path prices
/// the layout the propagation chose: measured 0.970 to 1.045 (llama-1b at
/// dp2 x tp2 x pp2, whose head the propagation splits another way).
constexpr double kTensorParallelStepTolerance = 0.05;
/// The tiny exported fixtures are latency-bound under tp (microseconds of
/// kernels against tens of microseconds per collective), so there the count
/// of collectives decides: Megatron's four per block in the fast path, the
/// propagation's cheaper layout in the IR path, never a costlier one
/// (IR / fast 0.50 on hf/mistral to 0.96 on the encoders at tp 2).
constexpr double kLatencyBoundStepFloor = 0.45;

class GraphPlannerTest : public ::testing::Test {
protected:
  void SetUp() override {
    context.loadDialect<mlir::dtc::DtcDialect, mlir::func::FuncDialect>();
  }

  /// The importer the driver would use for `path`: batch bound, simplified.
  ModelImporter importerOf(std::string path,
                           std::optional<int64_t> seqLen = std::nullopt) {
    return [this, path, seqLen](int64_t batch)
               -> llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> {
      onnx::ImportOptions options;
      options.batch = batch;
      options.seqLen = seqLen;
      auto module = onnx::importOnnxFile(path, options, context);
      if (!module)
        return module.takeError();
      mlir::PassManager pm(&context);
      dtc::buildImportPipeline(pm);
      if (mlir::failed(pm.run(**module)))
        return llvm::createStringError("simplify failed on " + path);
      return module;
    };
  }

  /// A weightless model from modelgen (shapes only), in a temp file.
  std::string generated(const modelgen::ModelConfig &config) {
    llvm::SmallString<128> path;
    EXPECT_FALSE(
        llvm::sys::fs::createTemporaryFile("graph-planner", "onnx", path));
    modelgen::GenOptions options;
    options.shapeOnly = true;
    options.externalDataFile = "unused.weights";
    EXPECT_FALSE(static_cast<bool>(modelgen::generate(config, options, path)));
    removers.emplace_back(std::make_unique<llvm::FileRemover>(path));
    return std::string(path);
  }

  GraphPlanRequest requestFor(std::string name, std::string path, int64_t gpus,
                              std::optional<int64_t> seqLen = std::nullopt) {
    GraphPlanRequest request;
    request.modelName = std::move(name);
    request.import = importerOf(std::move(path), seqLen);
    auto cluster = loadCluster("h100", gpus);
    EXPECT_TRUE(static_cast<bool>(cluster));
    request.cluster = *cluster;
    request.gpus = gpus;
    request.dtype = DType::BF16;
    return request;
  }

  mlir::MLIRContext context;
  std::vector<std::unique_ptr<llvm::FileRemover>> removers;
};

modelgen::ModelConfig gptConfig() {
  modelgen::ModelConfig config;
  config.name = "gpt-350m";
  config.arch = modelgen::Arch::GPT;
  config.vocab = 50304;
  config.hidden = 1024;
  config.layers = 4;
  config.heads = 16;
  config.maxPositions = 1024;
  return config;
}

modelgen::ModelConfig llamaConfig() {
  modelgen::ModelConfig config;
  config.name = "llama-1b";
  config.arch = modelgen::Arch::Llama;
  config.vocab = 32000;
  config.hidden = 2048;
  config.layers = 2;
  config.heads = 16;
  config.kvHeads = 4;
  config.ffn = 5632;
  config.maxPositions = 2048;
  return config;
}

struct Case {
  std::string name, path;
  bool latencyBound = false;
  std::optional<int64_t> seqLen; ///< The exported fixtures leave it open.
};

TEST_F(GraphPlannerTest, AgreesWithTheTransformerCostModel) {
  std::vector<Case> cases = {
      {"gpt-350m", generated(gptConfig())},
      {"llama-1b", generated(llamaConfig())},
      {"hf-llama", kModels + "/hf/llama.onnx", true, 16},
      {"hf-gpt2", kModels + "/hf/gpt2-dynamo.onnx", true, 16},
      {"hf-mistral", kModels + "/hf/mistral.onnx", true, 16},
      {"nanogpt", kModels + "/oracle/nanogpt.onnx", true},
      {"distilbert", kModels + "/oracle/distilbert-mlm.onnx", true},
      {"bert", kModels + "/oracle/bert-mlm.onnx", true},
      {"roberta", kModels + "/oracle/roberta-classify.onnx", true},
  };
  const int64_t gpus = 8;
  struct PlanCase {
    int64_t dp, tp, pp, microBatch;
    int zero;
    Recompute recompute;
  };
  std::vector<PlanCase> plans = {
      {8, 1, 1, 1, 0, Recompute::None}, {8, 1, 1, 2, 1, Recompute::None},
      {4, 2, 1, 1, 0, Recompute::None}, {4, 1, 2, 1, 0, Recompute::None},
      {2, 2, 2, 1, 1, Recompute::None}, {8, 1, 1, 1, 0, Recompute::Full},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    GraphPlanRequest request = requestFor(c.name, c.path, gpus, c.seqLen);
    auto one = request.import(1);
    ASSERT_TRUE(static_cast<bool>(one)) << llvm::toString(one.takeError());
    auto spec = extractTransformerSpec(**one, c.name);
    ASSERT_TRUE(static_cast<bool>(spec)) << llvm::toString(spec.takeError());
    spec->dtype = DType::BF16;
    GraphPlanner planner(request);
    for (const PlanCase &pc : plans) {
      ParallelPlan plan;
      plan.dp = pc.dp;
      plan.tp = pc.tp;
      plan.pp = pc.pp;
      plan.microBatch = pc.microBatch;
      plan.zero = pc.zero;
      plan.recompute = pc.recompute;
      plan.globalBatch = 64;
      plan.tpCommChunks = 1;
      std::string name = planSummary(plan);
      SCOPED_TRACE(name);
      auto fast = predict(*spec, plan, request.cluster);
      ASSERT_TRUE(static_cast<bool>(fast)) << llvm::toString(fast.takeError());
      auto priced = planner.predict(plan);
      ASSERT_TRUE(static_cast<bool>(priced))
          << llvm::toString(priced.takeError());
      double flops = priced->modelFlopsPerStep / fast->modelFlopsPerStep;
      double step = priced->stepTimeS / fast->stepTimeS;
      std::cout << llvm::formatv("{0,-10} {1,-60} flops {2:f3} step {3:f3} "
                                 "(ir {4:e2} s, fast {5:e2} s)\n",
                                 c.name, name, flops, step, priced->stepTimeS,
                                 fast->stepTimeS)
                       .str();
      EXPECT_NEAR(flops, 1.0, kFlopsTolerance);
      if (pc.tp == 1) {
        EXPECT_NEAR(step, 1.0, kStepTolerance);
      } else if (c.latencyBound) {
        // The propagation's layout costs no more than Megatron-LM's.
        EXPECT_LE(step, 1.0 + kStepTolerance);
        EXPECT_GE(step, kLatencyBoundStepFloor);
      } else {
        EXPECT_NEAR(step, 1.0, kTensorParallelStepTolerance);
      }
    }
  }
}

TEST_F(GraphPlannerTest, SummaryCountsTheFlopsThePlannerPrices) {
  GraphPlanRequest request =
      requestFor("tiny-gpt", kModels + "/tiny-gpt.onnx", 1);
  auto one = request.import(1);
  ASSERT_TRUE(static_cast<bool>(one));
  ModelSummary summary = summarizeModel(**one, "tiny-gpt");
  GraphPlanner planner(request);
  auto perSample = planner.trainingFlopsPerSample();
  ASSERT_TRUE(static_cast<bool>(perSample));
  EXPECT_DOUBLE_EQ(*perSample, summary.flopsPerToken() * summary.tokensPerStep);
}

TEST_F(GraphPlannerTest, PlansTheCnn) {
  GraphPlanRequest request = requestFor("cnn", kModels + "/cnn/cnn.onnx", 2);
  {
    GraphPlanner planner(request);
    auto plan = planner.search(SearchOptions());
    ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->best.plan.gpus(), 2);
    EXPECT_TRUE(plan->best.prediction.fits);
    EXPECT_GT(plan->best.prediction.stepTimeS, 0);
    EXPECT_FALSE(plan->counterfactuals.empty());
  }
  for (int64_t pp : {1, 2}) {
    GraphPlanRequest pinned = request;
    pinned.pins.dp = 2 / pp;
    pinned.pins.pp = pp;
    pinned.pins.tp = 1;
    GraphPlanner planner(pinned);
    auto plan = planner.search(SearchOptions());
    ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->best.plan.dp, 2 / pp);
    EXPECT_EQ(plan->best.plan.pp, pp);
    auto stages = planner.stagesJson(plan->best.plan);
    ASSERT_TRUE(static_cast<bool>(stages));
    EXPECT_EQ(static_cast<int64_t>(stages->size()), pp);
  }
}

TEST_F(GraphPlannerTest, RefusesWhatNeedsAttention) {
  GraphPlanRequest request = requestFor("cnn", kModels + "/cnn/cnn.onnx", 2);
  request.pins.cp = 2;
  request.unrecognized = "no attention found";
  GraphPlanner planner(request);
  auto plan = planner.search(SearchOptions());
  ASSERT_FALSE(static_cast<bool>(plan));
  std::string message = llvm::toString(plan.takeError());
  EXPECT_NE(message.find("--cp 2"), std::string::npos) << message;
  // The refusal says why the transformer planner did not take the model.
  EXPECT_NE(message.find("(no attention found;"), std::string::npos) << message;
}

TEST_F(GraphPlannerTest, RefusesMoreStagesThanCutPoints) {
  GraphPlanRequest request = requestFor("cnn", kModels + "/cnn/cnn.onnx", 64);
  request.pins.pp = 64;
  request.globalBatch = 64;
  GraphPlanner planner(request);
  auto plan = planner.search(SearchOptions());
  ASSERT_FALSE(static_cast<bool>(plan));
  std::string message = llvm::toString(plan.takeError());
  EXPECT_NE(message.find("cannot cut the model into 64 stages"),
            std::string::npos)
      << message;
}

} // namespace
