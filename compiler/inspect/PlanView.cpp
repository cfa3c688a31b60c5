//===- PlanView.cpp - A plan bundle's plan.json, read back ----------------===//

#include "compiler/inspect/PlanView.h"
#include "compiler/costmodel/Cluster.h"

#include "runtime/support/Error.h"
#include "runtime/support/Json.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <numeric>

using namespace dtc;
namespace json = llvm::json;

//===----------------------------------------------------------------------===//
// MeshView, StageView, PlanView
//===----------------------------------------------------------------------===//

int64_t MeshView::size() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

int MeshView::axisIndex(llvm::StringRef axis) const {
  for (auto [i, name] : llvm::enumerate(axes))
    if (name == axis)
      return static_cast<int>(i);
  return -1;
}

int64_t MeshView::stride(llvm::StringRef axis) const {
  int index = axisIndex(axis);
  if (index < 0)
    return 0;
  int64_t stride = 1;
  for (size_t i = index + 1; i < shape.size(); ++i)
    stride *= shape[i];
  return stride;
}

int64_t MeshView::degree(llvm::StringRef axis) const {
  int index = axisIndex(axis);
  return index < 0 ? 1 : shape[index];
}

std::vector<int64_t> MeshView::coordinates(int64_t rank) const {
  std::vector<int64_t> coords(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    coords[i] = rank % shape[i];
    rank /= shape[i];
  }
  return coords;
}

std::vector<int64_t> MeshView::groupOf(int64_t rank,
                                       llvm::StringRef axis) const {
  int index = axisIndex(axis);
  if (index < 0)
    return {rank};
  int64_t s = stride(axis);
  int64_t base = rank - coordinates(rank)[index] * s;
  std::vector<int64_t> group;
  for (int64_t i = 0; i < shape[index]; ++i)
    group.push_back(base + i * s);
  return group;
}

int64_t StageView::layerCount() const {
  int64_t count = 0;
  for (auto [first, last] : layers)
    count += last - first + 1;
  return count;
}

int64_t PlanView::stageOf(int64_t rank) const {
  int index = mesh.axisIndex("pp");
  return index < 0 ? 0 : mesh.coordinates(rank)[index];
}

bool PlanView::hasStageDetails() const {
  return !stages.empty() && llvm::all_of(stages, [](const StageView &s) {
    return s.timePerMicroBatchS && s.forwardPerMicroBatchS && s.memory;
  });
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {
/// Reads through json::ObjectMapper; the first problem is reported at its
/// path, e.g. "expected integer at parallel.tp".
struct Reader {
  json::Path::Root &root;

  template <typename T>
  bool map(const json::Value &value, T &out, json::Path path);
};
} // namespace

namespace dtc {
static bool fromJSON(const json::Value &value, MemoryBreakdown &m,
                     json::Path path) {
  json::ObjectMapper o(value, path);
  return o && o.map("params", m.params) && o.map("grads", m.grads) &&
         o.map("optimizer", m.optimizer) &&
         o.map("activations", m.activations) &&
         o.map("workspace", m.workspace) && o.mapOptional("reserve", m.reserve);
}

static bool fromJSON(const json::Value &value, CommTimes &c, json::Path path) {
  json::ObjectMapper o(value, path);
  return o && o.map("dp", c.dp) && o.map("tp", c.tp) && o.map("pp", c.pp) &&
         o.map("cp", c.cp) && o.map("ep", c.ep);
}

static bool fromJSON(const json::Value &value, Prediction &p, json::Path path) {
  json::ObjectMapper o(value, path);
  return o && o.map("step_time_s", p.stepTimeS) &&
         o.map("tokens_per_s", p.tokensPerS) &&
         o.map("tflops_per_gpu", p.tflopsPerGpu) &&
         o.map("hw_tflops_per_gpu", p.hwTflopsPerGpu) && o.map("mfu", p.mfu) &&
         o.mapOptional("hfu", p.hfu) &&
         o.map("bubble_fraction", p.bubbleFraction) &&
         o.mapOptional("stage_imbalance", p.stageImbalance) &&
         o.mapOptional("compute_time_s", p.computeTimeS) &&
         o.mapOptional("optimizer_time_s", p.optimizerTimeS) &&
         o.map("memory_per_gpu_bytes", p.memoryPerGpuBytes) &&
         o.map("memory_breakdown", p.memory) &&
         o.mapOptional("peak_memory_stage", p.peakMemoryStage) &&
         o.map("comm_time_s", p.commTime) &&
         o.mapOptional("comm_exposed_s", p.commExposed) &&
         o.mapOptional("fits", p.fits) && o.mapOptional("reason", p.reason);
}

static bool parseEnum(const json::Value &value, Recompute &out,
                      json::Path path) {
  std::optional<llvm::StringRef> name = value.getAsString();
  std::optional<Recompute> parsed = name ? parseRecompute(*name) : std::nullopt;
  if (!parsed) {
    path.report("expected none, selective or full");
    return false;
  }
  out = *parsed;
  return true;
}

static bool parseEnum(const json::Value &value, Schedule &out,
                      json::Path path) {
  std::optional<llvm::StringRef> name = value.getAsString();
  std::optional<Schedule> parsed = name ? parseSchedule(*name) : std::nullopt;
  if (!parsed) {
    path.report("expected gpipe, 1f1b or interleaved");
    return false;
  }
  out = *parsed;
  return true;
}

static bool fromJSON(const json::Value &value, ParallelPlan &plan,
                     json::Path path) {
  json::ObjectMapper o(value, path);
  if (!(o && o.map("dp", plan.dp) && o.map("tp", plan.tp) &&
        o.map("pp", plan.pp) && o.mapOptional("cp", plan.cp) &&
        o.mapOptional("ep", plan.ep) && o.mapOptional("vpp", plan.vpp) &&
        o.map("zero", plan.zero) && o.map("micro_batch", plan.microBatch) &&
        o.map("global_batch", plan.globalBatch) &&
        o.mapOptional("sequence_parallel", plan.sequenceParallel) &&
        o.mapOptional("tp_comm_chunks", plan.tpCommChunks)))
    return false;
  const json::Object *object = value.getAsObject();
  if (const json::Value *r = object->get("recompute");
      !r || !parseEnum(*r, plan.recompute, path.field("recompute"))) {
    if (!r)
      path.field("recompute").report("missing value");
    return false;
  }
  if (const json::Value *s = object->get("schedule"))
    return parseEnum(*s, plan.schedule, path.field("schedule"));
  plan.schedule = plan.vpp > 1 ? Schedule::Interleaved : Schedule::OneFOneB;
  return true;
}

static bool fromJSON(const json::Value &value, MeshView &mesh,
                     json::Path path) {
  json::ObjectMapper o(value, path);
  if (!(o && o.map("axes", mesh.axes) && o.map("shape", mesh.shape)))
    return false;
  if (const json::Value *ep = value.getAsObject()->get("ep")) {
    json::ObjectMapper e(*ep, path.field("ep"));
    return e && e.map("size", mesh.epSize);
  }
  return true;
}

static bool fromJSON(const json::Value &value, StageView &stage,
                     json::Path path) {
  json::ObjectMapper o(value, path);
  if (!(o && o.map("index", stage.index) && o.map("ranks", stage.ranks) &&
        o.mapOptional("embedding", stage.embedding) &&
        o.mapOptional("output", stage.output) &&
        o.mapOptional("time_per_micro_batch_s", stage.timePerMicroBatchS) &&
        o.mapOptional("forward_per_micro_batch_s",
                      stage.forwardPerMicroBatchS) &&
        o.mapOptional("weight_grad_per_micro_batch_s",
                      stage.weightGradPerMicroBatchS) &&
        o.mapOptional("memory_breakdown", stage.memory)))
    return false;
  // One [first, last], or one per interleaved chunk; op ranges for a plan
  // of the any-graph planner.
  llvm::StringRef key = "layers";
  if (!value.getAsObject()->get(key) && value.getAsObject()->get("ops")) {
    key = "ops";
    stage.unit = "ops";
  }
  const json::Array *layers = value.getAsObject()->getArray(key);
  json::Path layersPath = path.field(key);
  if (!layers || layers->empty()) {
    layersPath.report("expected [first, last] layer ranges");
    return false;
  }
  auto range = [&](const json::Value &v, json::Path p) {
    const json::Array *pair = v.getAsArray();
    std::optional<int64_t> first, last;
    if (pair && pair->size() == 2) {
      first = (*pair)[0].getAsInteger();
      last = (*pair)[1].getAsInteger();
    }
    if (!first || !last) {
      p.report("expected [first, last]");
      return false;
    }
    stage.layers.push_back({*first, *last});
    return true;
  };
  if ((*layers)[0].getAsInteger())
    return range(value.getAsObject()->find(key)->second, layersPath);
  for (auto [i, chunk] : llvm::enumerate(*layers))
    if (!range(chunk, layersPath.index(i)))
      return false;
  return true;
}

static bool fromJSON(const json::Value &value, AlternativeView &alt,
                     json::Path path) {
  json::ObjectMapper o(value, path);
  std::string kind;
  if (!(o && o.map("kind", kind) && o.map("parallel", alt.plan) &&
        o.mapOptional("mesh", alt.mesh) && o.map("predicted", alt.predicted) &&
        o.map("verdict", alt.verdict) && o.mapOptional("change", alt.change)))
    return false;
  alt.counterfactual = kind == "counterfactual";
  return true;
}

static bool fromJSON(const json::Value &value, ClusterView &c,
                     json::Path path) {
  json::ObjectMapper o(value, path);
  return o && o.map("name", c.name) && o.map("gpu", c.gpu) &&
         o.map("gpus", c.gpus) && o.map("gpus_per_node", c.gpusPerNode) &&
         o.map("peak_tflops", c.peakTflops) && o.map("hbm_bytes", c.hbmBytes) &&
         o.mapOptional("intra_node_gbps", c.intraNodeGBps) &&
         o.mapOptional("inter_node_gbps", c.interNodeGBps);
}

static bool fromJSON(const json::Value &value, ModelView &m, json::Path path) {
  json::ObjectMapper o(value, path);
  return o && o.map("name", m.name) && o.map("params", m.params) &&
         o.mapOptional("parameter_tensors", m.parameterTensors) &&
         o.mapOptional("tokens_per_forward", m.tokensPerForward) &&
         o.mapOptional("flops_per_token", m.flopsPerToken);
}
} // namespace dtc

/// The mesh order of ParallelPlan (innermost first) from the mesh axes.
static bool setMeshOrder(ParallelPlan &plan, const MeshView &mesh) {
  if (mesh.axes.size() != 4)
    return false;
  for (auto [i, name] : llvm::enumerate(llvm::reverse(mesh.axes))) {
    if (name == "tp")
      plan.meshOrder[i] = MeshAxis::TP;
    else if (name == "cp")
      plan.meshOrder[i] = MeshAxis::CP;
    else if (name == "dp")
      plan.meshOrder[i] = MeshAxis::DP;
    else if (name == "pp")
      plan.meshOrder[i] = MeshAxis::PP;
    else
      return false;
  }
  return true;
}

static int64_t planDegree(const ParallelPlan &plan, llvm::StringRef axis) {
  return axis == "tp"   ? plan.tp
         : axis == "cp" ? plan.cp
         : axis == "dp" ? plan.dp
                        : plan.pp;
}

/// What any plan.json's cluster must hold; the first problem found.
static std::optional<std::string> checkCluster(const ClusterView &c) {
  if (c.gpus < 1 || c.gpus > kMaxGpus)
    return llvm::formatv("cluster.gpus is {0}; expected 1 to {1}", c.gpus,
                         kMaxGpus)
        .str();
  if (c.gpusPerNode < 1 || c.gpusPerNode > kMaxGpus)
    return llvm::formatv("cluster.gpus_per_node is {0}; expected 1 to {1}",
                         c.gpusPerNode, kMaxGpus)
        .str();
  for (auto [name, value] : {std::pair{"peak_tflops", c.peakTflops},
                             std::pair{"hbm_bytes", c.hbmBytes}})
    if (!(value > 0) || !std::isfinite(value))
      return llvm::formatv("cluster.{0} is {1}; expected a finite number > 0",
                           name, value)
          .str();
  return std::nullopt;
}

/// A prediction's quantities are finite, not negative and below 1e30 (in
/// seconds, bytes, tokens or FLOP/s: no cluster comes near), so that every
/// figure the commands derive stays finite; the first problem found.
static std::optional<std::string> checkPrediction(const Prediction &p,
                                                  int64_t stages) {
  const std::pair<const char *, double> quantities[] = {
      {"step_time_s", p.stepTimeS},
      {"tokens_per_s", p.tokensPerS},
      {"tflops_per_gpu", p.tflopsPerGpu},
      {"hw_tflops_per_gpu", p.hwTflopsPerGpu},
      {"mfu", p.mfu},
      {"hfu", p.hfu},
      {"bubble_fraction", p.bubbleFraction},
      {"stage_imbalance", p.stageImbalance},
      {"compute_time_s", p.computeTimeS},
      {"optimizer_time_s", p.optimizerTimeS},
      {"memory_per_gpu_bytes", p.memoryPerGpuBytes},
      {"memory_breakdown.params", p.memory.params},
      {"memory_breakdown.grads", p.memory.grads},
      {"memory_breakdown.optimizer", p.memory.optimizer},
      {"memory_breakdown.activations", p.memory.activations},
      {"memory_breakdown.workspace", p.memory.workspace},
      {"memory_breakdown.reserve", p.memory.reserve},
      {"comm_time_s.dp", p.commTime.dp},
      {"comm_time_s.tp", p.commTime.tp},
      {"comm_time_s.pp", p.commTime.pp},
      {"comm_time_s.cp", p.commTime.cp},
      {"comm_time_s.ep", p.commTime.ep},
      {"comm_exposed_s.dp", p.commExposed.dp},
      {"comm_exposed_s.tp", p.commExposed.tp},
      {"comm_exposed_s.pp", p.commExposed.pp},
      {"comm_exposed_s.cp", p.commExposed.cp},
      {"comm_exposed_s.ep", p.commExposed.ep}};
  for (auto [name, value] : quantities)
    if (!(value >= 0 && value < 1e30))
      return llvm::formatv("predicted.{0} is {1}; expected a number from 0 to "
                           "1e30",
                           name, value)
          .str();
  if (p.peakMemoryStage < 0 || p.peakMemoryStage >= stages)
    return llvm::formatv("predicted.peak_memory_stage is {0} of {1} stages",
                         p.peakMemoryStage, stages)
        .str();
  return std::nullopt;
}

/// Consistency that the schema cannot express; the first problem found.
static std::optional<std::string> checkConsistency(PlanView &v) {
  const ParallelPlan &p = v.plan;
  // Degrees bounded first: their product (the world size) must not overflow.
  for (auto [name, value] :
       {std::pair{"dp", p.dp}, std::pair{"tp", p.tp}, std::pair{"pp", p.pp},
        std::pair{"cp", p.cp}, std::pair{"ep", p.ep}, std::pair{"vpp", p.vpp}})
    if (value < 1 || value > kMaxGpus)
      return llvm::formatv("parallel.{0} is {1}; expected 1 to {2}", name,
                           value, kMaxGpus)
          .str();
  for (auto [name, value] : {std::pair{"micro_batch", p.microBatch},
                             std::pair{"global_batch", p.globalBatch}})
    if (value < 1)
      return llvm::formatv("parallel.{0} is {1}; expected >= 1", name, value)
          .str();
  int64_t world = p.dp;
  if (__builtin_mul_overflow(world, p.tp, &world) ||
      __builtin_mul_overflow(world, p.pp, &world) ||
      __builtin_mul_overflow(world, p.cp, &world) || world != v.cluster.gpus)
    return llvm::formatv("parallel dp x tp x pp x cp is not cluster.gpus "
                         "({0})",
                         v.cluster.gpus)
        .str();
  if (v.mesh.axes.size() != v.mesh.shape.size())
    return std::string("mesh.axes and mesh.shape differ in length");
  if (!setMeshOrder(v.plan, v.mesh))
    return std::string("mesh.axes must name tp, cp, dp and pp once each");
  for (llvm::StringRef axis : {"tp", "cp", "dp", "pp"})
    if (v.mesh.degree(axis) != planDegree(p, axis))
      return llvm::formatv("mesh.shape gives {0}={1} but parallel.{0} is {2}",
                           axis, v.mesh.degree(axis), planDegree(p, axis))
          .str();
  if (static_cast<int64_t>(v.stages.size()) != p.pp)
    return llvm::formatv("{0} stages for parallel.pp {1}", v.stages.size(),
                         p.pp)
        .str();
  for (const StageView &stage : v.stages)
    for (int64_t rank : stage.ranks)
      if (rank < 0 || rank >= p.gpus())
        return llvm::formatv("stage {0} lists rank {1} of {2}", stage.index,
                             rank, p.gpus())
            .str();
  if (std::optional<std::string> problem = checkPrediction(v.predicted, p.pp))
    return problem;
  for (auto [i, alt] : llvm::enumerate(v.alternatives))
    if (std::optional<std::string> problem =
            checkPrediction(alt.predicted, std::max<int64_t>(alt.plan.pp, 1)))
      return llvm::formatv("alternatives[{0}]: {1}", i, *problem).str();
  return std::nullopt;
}

llvm::Expected<PlanView> dtc::parsePlanView(llvm::StringRef text,
                                            llvm::StringRef path) {
  llvm::Expected<json::Value> value = runtime::parseJson(text);
  if (!value)
    return badInput("{0}: not valid JSON: {1}; recompile the bundle with 'dtc "
                    "compile'",
                    path, llvm::toString(value.takeError()));
  const json::Object *object = value->getAsObject();
  if (!object)
    return badInput("{0}: expected a JSON object", path);
  std::optional<llvm::StringRef> schema = object->getString("schema");
  if (!schema)
    return badInput("{0}: no \"schema\"; not a dtc plan", path);
  if (*schema != "dtc.plan/1")
    return badInput("{0}: schema \"{1}\" is not dtc.plan/1; this dtc reads "
                    "dtc.plan/1",
                    path, *schema);

  PlanView view;
  view.planPath = path.str();
  view.text = text.str();
  json::Path::Root root("plan");
  json::ObjectMapper o(*value, root);
  bool ok = o.map("model", view.model) && o.map("cluster", view.cluster) &&
            o.mapOptional("mode", view.mode) &&
            o.mapOptional("dtype", view.dtype) &&
            o.mapOptional("compile_time_s", view.compileTimeS) &&
            o.mapOptional("pending_reason", view.pendingReason);
  view.planned = ok && object->get("parallel");
  if (ok && view.planned) {
    ok = o.map("parallel", view.plan) && o.map("mesh", view.mesh) &&
         o.map("stages", view.stages) && o.map("predicted", view.predicted) &&
         o.mapOptional("alternatives", view.alternatives);
    if (const json::Object *search = object->getObject("search")) {
      view.candidatesEvaluated =
          search->getInteger("candidates_evaluated").value_or(0);
      view.searchTimeS = search->getNumber("search_time_s").value_or(0);
      view.globalBatchDefaulted =
          search->getBoolean("global_batch_defaulted").value_or(false);
    }
  }
  if (!ok) {
    std::string message = llvm::toString(root.getError());
    return badInput("{0}: {1}", path, message);
  }
  if (std::optional<std::string> problem = checkCluster(view.cluster))
    return badInput("{0}: {1}", path, *problem);
  if (view.planned) {
    if (std::optional<std::string> problem = checkConsistency(view))
      return badInput("{0}: {1}", path, *problem);
    for (AlternativeView &alt : view.alternatives)
      if (!setMeshOrder(alt.plan, alt.mesh))
        alt.plan.meshOrder = view.plan.meshOrder;
  }
  return view;
}

llvm::Expected<PlanView> dtc::loadPlanView(llvm::StringRef bundle) {
  if (!llvm::sys::fs::exists(bundle))
    return badInput("{0}: no such plan bundle; make one with 'dtc compile "
                    "MODEL --gpus N -o {0}'",
                    bundle);
  llvm::SmallString<256> path(bundle);
  if (llvm::sys::fs::is_directory(bundle))
    llvm::sys::path::append(path, "plan.json");
  else if (llvm::sys::path::filename(bundle) != "plan.json")
    return badInput("{0}: not a plan bundle directory", bundle);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return badInput("{0}: cannot read: {1}; is {2} a plan bundle?", path,
                    buffer.getError().message(), bundle);
  auto view = parsePlanView((*buffer)->getBuffer(), path);
  if (view)
    view->bundle = bundle.str();
  return view;
}

llvm::Error dtc::requirePlanned(const PlanView &view) {
  if (view.planned)
    return llvm::Error::success();
  return badInput("{0}: the bundle holds no plan ({1})", view.planPath,
                  view.pendingReason.empty() ? "dtc compile did not plan it"
                                             : view.pendingReason);
}

//===----------------------------------------------------------------------===//
// Formatting
//===----------------------------------------------------------------------===//

/// Three significant digits, without an exponent.
static std::string threeDigits(double value) {
  double magnitude = std::fabs(value);
  const char *format = magnitude >= 100  ? "{0:F0}"
                       : magnitude >= 10 ? "{0:F1}"
                                         : "{0:F2}";
  return llvm::formatv(format, value).str();
}

std::string dtc::formatSeconds(double seconds) {
  double magnitude = std::fabs(seconds);
  if (magnitude == 0)
    return "0 s";
  if (magnitude >= 1)
    return threeDigits(seconds) + " s";
  if (magnitude >= 1e-3)
    return threeDigits(seconds * 1e3) + " ms";
  return threeDigits(seconds * 1e6) + " us";
}

std::string dtc::formatBytes(double bytes) {
  double magnitude = std::fabs(bytes);
  if (magnitude >= 1e9)
    return llvm::formatv("{0:F1} GB", bytes / 1e9).str();
  if (magnitude >= 1e6)
    return threeDigits(bytes / 1e6) + " MB";
  if (magnitude >= 1e3)
    return threeDigits(bytes / 1e3) + " KB";
  return llvm::formatv("{0:F0} B", bytes).str();
}

std::string dtc::formatSecondsDelta(double seconds) {
  return (seconds >= 0 ? "+" : "-") + formatSeconds(std::fabs(seconds));
}

std::string dtc::formatBytesDelta(double bytes) {
  return (bytes >= 0 ? "+" : "-") + formatBytes(std::fabs(bytes));
}

std::string dtc::formatCount(double count) {
  if (count >= 1e9)
    return threeDigits(count / 1e9) + " B";
  if (count >= 1e6)
    return threeDigits(count / 1e6) + " M";
  if (count >= 1e3)
    return threeDigits(count / 1e3) + " K";
  return llvm::formatv("{0:F0}", count).str();
}

std::string dtc::formatRanks(llvm::ArrayRef<int64_t> ranks, size_t maxRuns) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t rank : ranks) {
    if (!runs.empty() && runs.back().second + 1 == rank)
      runs.back().second = rank;
    else
      runs.push_back({rank, rank});
  }
  std::string text;
  for (auto [i, run] : llvm::enumerate(runs)) {
    if (i == maxRuns) {
      text += ",...";
      break;
    }
    if (i)
      text += ",";
    text += run.first == run.second
                ? std::to_string(run.first)
                : llvm::formatv("{0}-{1}", run.first, run.second).str();
  }
  return text;
}

std::string dtc::formatLayers(const StageView &stage) {
  std::string text;
  for (auto [i, range] : llvm::enumerate(stage.layers)) {
    if (i)
      text += ",";
    text += range.first == range.second
                ? std::to_string(range.first)
                : llvm::formatv("{0}-{1}", range.first, range.second).str();
  }
  return text;
}

std::string dtc::formatLayersCompact(const StageView &stage, size_t maxChars) {
  std::string full = formatLayers(stage);
  if (full.size() <= maxChars)
    return full;
  return llvm::formatv("{0} layers, {1} chunks", stage.layerCount(),
                       stage.layers.size())
      .str();
}
