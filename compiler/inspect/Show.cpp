//===- Show.cpp - dtc plan show -------------------------------------------===//
//
// A compact table of the chosen plan from plan.json alone: degrees, mesh and
// placement, stages, the prediction, memory per GPU against capacity and
// communication by kind with how much of it is hidden. `--rank` shows one
// rank's place in the mesh, and its program from RankShow.cpp.
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/Inspect.h"

#include "compiler/planner/Planner.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace dtc;

std::string dtc::axisPlacement(const PlanView &view, llvm::StringRef axis) {
  int64_t degree = view.mesh.degree(axis), stride = view.mesh.stride(axis);
  int64_t perNode = std::max<int64_t>(view.cluster.gpusPerNode, 1);
  if (degree <= 1)
    return "";
  if (stride * degree <= perNode)
    return "inside a node";
  if (stride >= perNode)
    return "across nodes, 1 per node";
  int64_t k = perNode / stride;
  return llvm::formatv("{0} per node, across {1} nodes", k, degree / k).str();
}

static void printMesh(const PlanView &v, llvm::raw_ostream &out) {
  llvm::SmallVector<std::string, 4> dims;
  for (auto [axis, size] : llvm::zip(v.mesh.axes, v.mesh.shape))
    dims.push_back(llvm::formatv("{0}={1}", axis, size).str());
  int64_t perNode = std::max<int64_t>(v.cluster.gpusPerNode, 1);
  int64_t nodes = (v.plan.gpus() + perNode - 1) / perNode;
  out << "mesh      " << llvm::join(dims, " x ")
      << "  (outermost first; rank = row-major index)\n";
  llvm::SmallVector<std::string, 4> places;
  // Innermost first: the order in which axes fill a node.
  for (const std::string &axis : llvm::reverse(v.mesh.axes)) {
    std::string where = axisPlacement(v, axis);
    if (!where.empty())
      places.push_back(axis + " " + where);
  }
  if (v.mesh.epSize > 1)
    places.push_back(llvm::formatv("ep={0} inside dp", v.mesh.epSize).str());
  out << llvm::formatv("placement {0} node{1} of {2} GPUs: {3}\n", nodes,
                       nodes == 1 ? "" : "s", perNode,
                       places.empty() ? std::string("a single GPU")
                                      : llvm::join(places, "; "));
}

static void printStages(const PlanView &v, llvm::raw_ostream &out) {
  bool details = v.hasStageDetails();
  std::string header = llvm::formatv(
      "{0,-6} {1,-26} {2,-24}", "stage",
      v.stages.empty() ? "layers" : v.stages.front().unit, "ranks");
  if (details)
    header += llvm::formatv(" {0,-11} {1}", "fwd+bwd/mb", "memory/GPU").str();
  out << llvm::StringRef(header).rtrim() << "\n";
  for (const StageView &s : v.stages) {
    std::string layers = formatLayersCompact(s, 20);
    if (s.embedding)
      layers = "emb " + layers;
    if (s.output)
      layers += " out";
    std::string ranks = formatRanks(s.ranks, 2);
    if (ranks.find("...") != std::string::npos)
      ranks = llvm::formatv("{0}: {1}", s.ranks.size(), ranks).str();
    std::string line =
        llvm::formatv("{0,-6} {1,-26} {2,-24}", s.index, layers, ranks);
    if (details)
      line +=
          llvm::formatv(" {0,-11} {1}", formatSeconds(*s.timePerMicroBatchS),
                        formatBytes(s.memory->total()))
              .str();
    out << llvm::StringRef(line).rtrim() << "\n";
  }
}

static void printPrediction(const PlanView &v, llvm::raw_ostream &out) {
  const Prediction &p = v.predicted;
  std::string hardware =
      p.hwTflopsPerGpu > p.tflopsPerGpu * 1.0005
          ? llvm::formatv(" ({0:F1} with recompute)", p.hwTflopsPerGpu).str()
          : "";
  out << llvm::formatv("predict   {0}/step, {1} tokens/s, {2:F1} TFLOP/s/GPU"
                       "{3}, MFU {4:F1}%, bubble {5:F1}%\n",
                       formatSeconds(p.stepTimeS), formatCount(p.tokensPerS),
                       p.tflopsPerGpu, hardware, 100 * p.mfu,
                       100 * p.bubbleFraction);
  const MemoryBreakdown &m = p.memory;
  out << llvm::formatv(
      "memory    {0} of {1} per GPU ({2:F1}%{3}){4}\n",
      formatBytes(p.memoryPerGpuBytes), formatBytes(v.cluster.hbmBytes),
      100 * p.memoryPerGpuBytes / v.cluster.hbmBytes,
      v.plan.pp > 1 ? llvm::formatv(", on stage {0}", p.peakMemoryStage).str()
                    : std::string(),
      p.fits ? "" : ": does not fit");
  out << llvm::formatv("          params {0}, grads {1}, optimizer {2}, "
                       "activations {3}, workspace {4}, reserve {5}\n",
                       formatBytes(m.params), formatBytes(m.grads),
                       formatBytes(m.optimizer), formatBytes(m.activations),
                       formatBytes(m.workspace), formatBytes(m.reserve));

  CommTimes hidden = p.commHidden();
  out << llvm::formatv("comm      {0,-6} {1,-11} {2,-11} {3}\n", "kind",
                       "time/step", "exposed", "hidden");
  auto row = [&](llvm::StringRef kind, double time, double exposed,
                 double hide) {
    if (time <= 0)
      return;
    out << llvm::formatv("          {0,-6} {1,-11} {2,-11} {3} ({4:F0}%)\n",
                         kind, formatSeconds(time), formatSeconds(exposed),
                         formatSeconds(hide), 100 * hide / time);
  };
  row("tp", p.commTime.tp, p.commExposed.tp, hidden.tp);
  row("cp", p.commTime.cp, p.commExposed.cp, hidden.cp);
  row("ep", p.commTime.ep, p.commExposed.ep, hidden.ep);
  row("pp", p.commTime.pp, p.commExposed.pp, hidden.pp);
  row("dp", p.commTime.dp, p.commExposed.dp, hidden.dp);
  if (p.commTime.total() > 0)
    row("total", p.commTime.total(), p.commExposed.total(), hidden.total());
  else
    out << "          none (a single GPU)\n";
}

static void printPlan(const PlanView &v, llvm::raw_ostream &out) {
  const ParallelPlan &plan = v.plan;
  out << llvm::formatv("plan      {0}\n", planSummary(plan));
  out << llvm::formatv("batch     {0} sequences/step = dp {1} x micro-batch "
                       "{2} x {3} micro-batches{4}; schedule {5}\n",
                       plan.globalBatch, plan.dp, plan.microBatch,
                       plan.microBatches(),
                       v.globalBatchDefaulted ? " (default batch)" : "",
                       scheduleName(plan.schedule));
  printMesh(v, out);
  printStages(v, out);
  printPrediction(v, out);
}

/// One rank: its mesh coordinates, stage and group members.
static void printRank(const PlanView &v, int64_t rank,
                      const std::optional<RankProgramSummary> &program,
                      llvm::raw_ostream &out) {
  int64_t gpus = v.plan.gpus();
  std::vector<int64_t> coords = v.mesh.coordinates(rank);
  llvm::SmallVector<std::string, 4> position;
  for (auto [axis, coord] : llvm::zip(v.mesh.axes, coords))
    position.push_back(llvm::formatv("{0}={1}", axis, coord).str());
  int64_t perNode = std::max<int64_t>(v.cluster.gpusPerNode, 1);
  int64_t node = rank / perNode;
  out << llvm::formatv("rank      {0} of {1}: {2}\n", rank, gpus,
                       llvm::join(position, " "));
  int64_t first = node * perNode,
          last = std::min(gpus, (node + 1) * perNode) - 1;
  out << llvm::formatv("node      {0} ({1}), GPU {2} of it\n", node,
                       first == last
                           ? llvm::formatv("rank {0}", first).str()
                           : llvm::formatv("ranks {0}-{1}", first, last).str(),
                       rank % perNode);
  const StageView &stage = v.stages[v.stageOf(rank)];
  out << llvm::formatv("stage     {0} of {1}: {2} {3}{4}{5}\n", stage.index,
                       v.plan.pp, stage.unit, formatLayers(stage),
                       stage.embedding ? ", embedding" : "",
                       stage.output ? ", output layer and loss" : "");
  for (llvm::StringRef axis : {"tp", "cp", "dp", "pp"}) {
    int64_t degree = v.mesh.degree(axis);
    if (degree <= 1)
      continue;
    std::string where = axisPlacement(v, axis);
    out << llvm::formatv("{0} group  {1} ranks, {2}: {3}\n", axis, degree,
                         where, formatRanks(v.mesh.groupOf(rank, axis), 8));
  }
  if (!program) {
    out << "program   the per-rank program summary needs program.pb, which "
           "this bundle lacks; the 'program' line of the dtc compile that "
           "wrote it says why (e.g. --no-program, or a plan the partitioner "
           "cannot lower yet)\n";
    return;
  }
  printRankProgram(*program, out);
}

llvm::Error dtc::showPlan(const PlanView &v, std::optional<int64_t> rank,
                          llvm::raw_ostream &out) {
  // Checked before anything is printed: an error is the only output.
  if (rank && !v.planned)
    return requirePlanned(v);
  if (rank && v.planned && (*rank < 0 || *rank >= v.plan.gpus()))
    return badInput("--rank {0}: the plan has {1} ranks, 0 to {2}", *rank,
                    v.plan.gpus(), v.plan.gpus() - 1);
  std::optional<RankProgramSummary> program;
  if (rank) {
    auto summary = summarizeRankProgram(v.bundle, *rank);
    if (!summary)
      return summary.takeError();
    program = std::move(*summary);
    if (program && program->worldSize != v.plan.gpus())
      return badInput("{0}: world size {1} but plan.json has {2} ranks; "
                      "recompile the bundle with 'dtc compile'",
                      program->path, program->worldSize, v.plan.gpus());
  }
  out << llvm::formatv("model     {0}: {1} parameters, {2:e2} training "
                       "FLOPs/token; {3} {4}\n",
                       v.model.name, formatCount(v.model.params),
                       v.model.flopsPerToken, v.mode.empty() ? "train" : v.mode,
                       v.dtype.empty() ? "bf16" : v.dtype);
  out << llvm::formatv("cluster   {0} x {1} ({2}), {3} per node, {4} HBM, "
                       "{5:F0} TFLOP/s peak\n",
                       v.cluster.gpus, v.cluster.gpu, v.cluster.name,
                       v.cluster.gpusPerNode, formatBytes(v.cluster.hbmBytes),
                       v.cluster.peakTflops);
  if (!v.planned) {
    // Still a valid bundle: dtc compile says why it could not plan.
    out << "plan      not planned: " << v.pendingReason << "\n";
    return llvm::Error::success();
  }
  if (rank) {
    printRank(v, *rank, program, out);
    return llvm::Error::success();
  }
  printPlan(v, out);
  return llvm::Error::success();
}
