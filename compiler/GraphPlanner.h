//===- GraphPlanner.h - Plans for any graph, priced from its IR -*- C++ -*-===//
//
// The planner's path for a model that is not a recognized stack of
// transformer blocks (a CNN, attention whose mask dtc.attention cannot
// express, anything else): every op of the forward function is priced from
// the IR with the cost model's one definition of its work (KernelWork.h),
// on the per-rank program the partitioner makes of it.
//
//  - Tensor parallelism: the forward is sharded by the propagation pass
//    over a tp mesh and partitioned, exactly as the training step will be;
//    the per-rank ops and the collectives inserted are priced.
//  - Pipeline parallelism: the cuts the pipeline pass makes (chooseCuts, at
//    single-crossing edges balanced on FLOPs), each stage's share priced.
//  - Data parallelism and ZeRO: the gradient reduction and optimizer step
//    of the per-rank parameters, with the formulas predict() uses.
//  - Micro-batch and full recompute searched as the transformer planner
//    does; context, expert and interleaved pipeline parallelism, selective
//    recompute and sequence parallelism need attention or blocks and are
//    refused when pinned.
//
// docs/planner.md ("Any graph") states the approximations.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_GRAPHPLANNER_H
#define DTC_COMPILER_GRAPHPLANNER_H

#include "compiler/planner/Planner.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/JSON.h"

#include <functional>
#include <map>
#include <memory>

namespace dtc {

/// The model imported and simplified with its batch bound to `batch` rows.
using ModelImporter =
    std::function<llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>(
        int64_t batch)>;

struct GraphPlanRequest {
  std::string modelName;
  ModelImporter import;
  Cluster cluster; ///< Its `gpus` is overridden by `gpus`.
  int64_t gpus = 1;
  DType dtype = DType::BF16;
  std::optional<int64_t> globalBatch;
  PlanPins pins;
  /// Execution choices held fixed (overlap flags), as PlanRequest's.
  ParallelPlan execution;
  /// The sharding propagation's trade of replicated compute against
  /// communication (the training step's).
  double flopsPerByte = 1000;
  /// Why the transformer planner did not take the model (for the messages
  /// that refuse cp, ep, vpp and the other transformer-only pins).
  std::string unrecognized = "not a recognized transformer";
};

class GraphPlanner {
public:
  explicit GraphPlanner(GraphPlanRequest request);
  ~GraphPlanner();

  /// Prices `plan` (cp = ep = vpp = 1). `stages` receives each pipeline
  /// stage's time and memory.
  llvm::Expected<Prediction>
  predict(const ParallelPlan &plan, std::vector<StageDetail> *stages = nullptr);

  /// The fastest plan that fits, runners-up and counterfactuals, as
  /// searchPlan() reports them. A pinned degree the graph cannot take is
  /// an error naming the op (its ONNX node) or the reason.
  llvm::Expected<PlanResult> search(const SearchOptions &options);

  /// The `stages` section of plan.json: per stage the range of @main op
  /// indices it runs and its ranks.
  llvm::Expected<llvm::json::Array> stagesJson(const ParallelPlan &plan);

  /// Training FLOPs per sample (3x the forward's GEMM and attention FLOPs
  /// at one row), the same count the model summary prints.
  llvm::Expected<double> trainingFlopsPerSample();

  struct Profile;
  struct Cuts;

private:
  llvm::Expected<const Profile *> profile(int64_t microBatch, int64_t tp);
  llvm::Expected<const Cuts *> cuts(int64_t microBatch, int64_t pp);
  int64_t defaultGlobalBatch();

  GraphPlanRequest request;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Profile>> profiles;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Cuts>> cutCache;
};

} // namespace dtc

#endif // DTC_COMPILER_GRAPHPLANNER_H
