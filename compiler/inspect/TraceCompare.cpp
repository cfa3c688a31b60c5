//===- TraceCompare.cpp - Predicted vs measured step timelines ------------===//
//
// The traces are checked against the bundle before anything is compared:
// world size, mesh and rank from otherData, and every instruction event's
// (function, index) must name that op in the rank's program.pb, so a trace
// of another model or plan is an error naming its file rather than a
// silently meaningless report.
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/TraceCompare.h"

#include "compiler/support/ProgramFile.h"
#include "runtime/support/Error.h"

#include "runtime/core/Shard.h"
#include "runtime/support/Json.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <set>

using namespace dtc;

namespace {

constexpr double kMicro = 1e-6;

/// The mesh in one spelling ("" for one rank), or the text when it does
/// not parse (then it only equals itself).
std::string canonicalMesh(llvm::StringRef text) {
  auto mesh = runtime::Mesh::parse(text);
  if (!mesh) {
    llvm::consumeError(mesh.takeError());
    return text.str();
  }
  return mesh->str();
}

bool isKernel(llvm::StringRef op) {
  return op != "dtc.wait" && !op.ends_with("_start");
}

} // namespace

llvm::Expected<RankTrace> dtc::parseRankTrace(llvm::StringRef text,
                                              llvm::StringRef path) {
  auto json = runtime::parseJson(text);
  if (!json)
    return badInput("{0}: not valid JSON: {1}", path,
                    llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  const llvm::json::Object *other =
      root ? root->getObject("otherData") : nullptr;
  const llvm::json::Array *events =
      root ? root->getArray("traceEvents") : nullptr;
  if (!other || !events)
    return badInput("{0}: not a dtc trace (no otherData or traceEvents)", path);
  std::optional<llvm::StringRef> schema = other->getString("schema");
  if (!schema || *schema != "dtc.trace/1")
    return badInput("{0}: otherData.schema must be \"dtc.trace/1\"", path);
  RankTrace trace;
  trace.path = path.str();
  std::optional<int64_t> rank = other->getInteger("rank"),
                         world = other->getInteger("world_size");
  if (!rank || !world)
    return badInput("{0}: otherData needs integer rank and world_size", path);
  trace.rank = *rank;
  trace.worldSize = *world;
  trace.mesh = other->getString("mesh").value_or("").str();
  trace.status = other->getString("status").value_or("").str();

  std::map<int64_t, std::pair<double, double>> named, parts;
  for (auto [i, value] : llvm::enumerate(*events)) {
    const llvm::json::Object *e = value.getAsObject();
    if (!e)
      return badInput("{0}: traceEvents[{1}] is not an object", path, i);
    if (e->getString("ph").value_or("") != "X")
      continue;
    llvm::StringRef cat = e->getString("cat").value_or("");
    std::optional<double> ts = e->getNumber("ts"), dur = e->getNumber("dur");
    const llvm::json::Object *args = e->getObject("args");
    if (cat != "step" && cat != "compute" && cat != "communication")
      continue;
    if (!ts || !dur || !args)
      return badInput("{0}: traceEvents[{1}] ({2}) needs ts, dur and args",
                      path, i, cat);
    std::optional<int64_t> step = args->getInteger("step");
    if (!step)
      return badInput("{0}: traceEvents[{1}] has no integer args.step", path,
                      i);
    double start = *ts * kMicro, end = (*ts + *dur) * kMicro;
    if (cat == "step") {
      // "step N" spans the step; other events on the track (its parts, if
      // a writer adds them) only widen a step that has none.
      bool whole = e->getString("name").value_or("") ==
                   llvm::formatv("step {0}", *step).str();
      auto [it, added] = (whole ? named : parts).try_emplace(*step, start, end);
      if (!added) {
        it->second.first = std::min(it->second.first, start);
        it->second.second = std::max(it->second.second, end);
      }
      continue;
    }
    std::optional<int64_t> index = args->getInteger("index");
    std::optional<llvm::StringRef> function = args->getString("function");
    if (!index || !function)
      return badInput("{0}: traceEvents[{1}] has no args.function and "
                      "args.index",
                      path, i);
    RankTrace::Event event;
    event.step = *step;
    TimelineEvent &t = event.event;
    t.function = function->str();
    t.index = *index;
    t.call = args->getInteger("call").value_or(0);
    t.op = e->getString("name").value_or("").str();
    t.loc = args->getString("loc").value_or("").str();
    t.track = cat == "compute" ? 0 : 1;
    t.start = start;
    t.end = end;
    trace.events.push_back(std::move(event));
  }
  trace.steps = std::move(named);
  for (const auto &entry : parts)
    trace.steps.insert(entry);
  return trace;
}

std::optional<int64_t> dtc::pickStep(llvm::ArrayRef<RankTrace> traces) {
  if (traces.empty())
    return std::nullopt;
  std::vector<std::pair<double, int64_t>> spans; // (duration, step)
  for (const auto &[step, first] : traces.front().steps) {
    double start = first.first, end = first.second;
    bool everywhere = true;
    for (const RankTrace &trace : traces.drop_front()) {
      auto it = trace.steps.find(step);
      if (it == trace.steps.end()) {
        everywhere = false;
        break;
      }
      start = std::min(start, it->second.first);
      end = std::max(end, it->second.second);
    }
    if (everywhere)
      spans.push_back({end - start, step});
  }
  if (spans.empty())
    return std::nullopt;
  // spans is in step order: the first is the warm-up.
  if (spans.size() >= 3)
    spans.erase(spans.begin());
  llvm::stable_sort(spans);
  return spans[(spans.size() - 1) / 2].second;
}

std::optional<double>
dtc::weightedMedian(std::vector<std::pair<double, double>> values) {
  double total = 0;
  for (const auto &[value, weight] : values)
    total += weight;
  if (total <= 0)
    return std::nullopt;
  llvm::sort(values);
  double seen = 0;
  for (const auto &[value, weight] : values) {
    seen += weight;
    if (seen >= total / 2)
      return value;
  }
  return values.back().first;
}

namespace {

llvm::Expected<program::Program> loadProgram(llvm::StringRef bundle) {
  return readBundleProgram(bundle, "program.pb",
                           "--trace compares a bundle's runtime program, and "
                           "this bundle has none");
}

/// plan.json's `cluster.spec`, the whole dtc.cluster/1 object dtc compile
/// records; nullopt for a bundle written before it did.
llvm::Expected<std::optional<Cluster>> recordedCluster(const PlanView &view,
                                                       int64_t gpus) {
  auto json = runtime::parseJson(view.text);
  if (!json)
    return badInput("{0}: not valid JSON: {1}", view.planPath,
                    llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  const llvm::json::Object *cluster =
      root ? root->getObject("cluster") : nullptr;
  const llvm::json::Value *spec = cluster ? cluster->get("spec") : nullptr;
  if (!spec)
    return std::nullopt;
  const llvm::json::Object *object = spec->getAsObject();
  if (!object)
    return badInput("{0}: cluster.spec must be a dtc.cluster/1 object",
                    view.planPath);
  auto parsed =
      parseClusterObject(*object, view.planPath + " (cluster.spec)", gpus);
  if (!parsed)
    return parsed.takeError();
  return std::optional<Cluster>(std::move(*parsed));
}

/// The cluster the bundle was compiled for: `given` (--cluster) when set,
/// else plan.json's cluster.spec, else (older bundles) the preset of
/// plan.json's cluster name.
llvm::Expected<Cluster> bundleCluster(const PlanView &view,
                                      llvm::StringRef given) {
  int64_t gpus = std::max<int64_t>(view.plan.gpus(), 1);
  std::optional<Cluster> cluster;
  std::string from;
  if (!given.empty()) {
    auto loaded = loadCluster(given, gpus);
    if (!loaded)
      return loaded.takeError();
    cluster = std::move(*loaded);
    from = ("--cluster " + given).str();
  } else {
    auto recorded = recordedCluster(view, gpus);
    if (!recorded)
      return recorded.takeError();
    cluster = std::move(*recorded);
    from = view.planPath + ": cluster.spec";
  }
  if (!cluster) {
    auto preset = lookupClusterPreset(view.cluster.name, gpus);
    if (!preset) {
      llvm::consumeError(preset.takeError());
      return badInput("{0}: the bundle was compiled for cluster '{1}', which "
                      "is not a preset, and its plan.json (written before "
                      "dtc recorded cluster.spec) holds only the name: give "
                      "the cluster file it was compiled with, --cluster FILE",
                      view.planPath, view.cluster.name);
    }
    cluster = std::move(*preset);
    from = "preset " + view.cluster.name;
  }
  if (cluster->name != view.cluster.name ||
      std::abs(cluster->peakBf16Tflops - view.cluster.peakTflops) >
          1e-6 * std::max(1.0, view.cluster.peakTflops))
    return badInput("{0}: cluster '{1}' ({2} TFLOP/s) is not the one {3} was "
                    "compiled for ('{4}', {5} TFLOP/s)",
                    from, cluster->name, cluster->peakBf16Tflops, view.bundle,
                    view.cluster.name, view.cluster.peakTflops);
  // dtc compile --gpus-per-node overrides the cluster's (cluster.spec
  // already holds it; a --cluster file or a preset does not).
  if (view.cluster.gpusPerNode > 0)
    cluster->gpusPerNode = view.cluster.gpusPerNode;
  return std::move(*cluster);
}

/// Checks `trace` against the bundle's program for its rank.
llvm::Error checkTrace(const RankTrace &trace, const program::Program &program,
                       int64_t rank) {
  if (trace.worldSize != program.world_size())
    return badInput("{0}: a trace of {1} ranks, but the bundle runs {2}: the "
                    "trace is of another bundle",
                    trace.path, trace.worldSize, program.world_size());
  if (canonicalMesh(trace.mesh) != canonicalMesh(program.mesh()))
    return badInput("{0}: mesh \"{1}\", but the bundle's is \"{2}\": the "
                    "trace is of another bundle",
                    trace.path, trace.mesh, program.mesh());
  if (trace.rank != rank)
    return badInput("{0}: otherData.rank is {1}, expected {2}", trace.path,
                    trace.rank, rank);
  const program::RankProgram *mine =
      runtime::rankProgramOf(program, static_cast<int>(rank));
  if (!mine)
    return badInput("{0}: the bundle holds no program for rank {1}", trace.path,
                    rank);
  llvm::StringMap<const program::Function *> functions;
  for (const program::Function &fn : mine->functions())
    functions[fn.name()] = &fn;
  for (const RankTrace::Event &e : trace.events) {
    const TimelineEvent &t = e.event;
    const program::Function *fn = functions.lookup(t.function);
    if (!fn)
      return badInput("{0}: function '{1}' is not in rank {2}'s program: the "
                      "trace is of another bundle",
                      trace.path, t.function, rank);
    if (t.index < 0 || t.index >= fn->instructions_size())
      return badInput("{0}: {1} #{2} is past the function's {3} instructions: "
                      "the trace is of another bundle",
                      trace.path, t.function, t.index, fn->instructions_size());
    llvm::StringRef op = fn->instructions(static_cast<int>(t.index)).op();
    // Communication events drop the `_start`.
    bool same =
        t.track == 0 ? t.op == op : (t.op == op || t.op + "_start" == op);
    if (!same)
      return badInput("{0}: {1} #{2} is {3} in the trace but {4} in the "
                      "bundle's program: the trace is of another bundle",
                      trace.path, t.function, t.index, t.op, op);
  }
  return llvm::Error::success();
}

} // namespace

llvm::Expected<TraceComparison> dtc::compareTrace(const PlanView &view,
                                                  llvm::StringRef dir,
                                                  llvm::StringRef clusterName) {
  if (llvm::Error err = requirePlanned(view))
    return std::move(err);
  if (!llvm::sys::fs::is_directory(dir))
    return badInput("--trace {0}: no such directory", dir);
  auto program = loadProgram(view.bundle);
  if (!program)
    return program.takeError();
  auto mesh = runtime::Mesh::parse(program->mesh());
  if (!mesh)
    return badInput("{0}/program.pb: mesh \"{1}\": {2}", view.bundle,
                    program->mesh(), llvm::toString(mesh.takeError()));
  auto cluster = bundleCluster(view, clusterName);
  if (!cluster)
    return cluster.takeError();

  // One rank per pipeline stage: the lowest of that pp coordinate.
  int64_t world = std::max<int64_t>(program->world_size(), 1);
  int pp = mesh->axisIndex("pp");
  std::map<int64_t, int64_t> repOf; // stage -> rank
  for (int64_t rank = world - 1; rank >= 0; --rank) {
    int64_t stage = pp < 0 ? 0 : mesh->coordinates(static_cast<int>(rank))[pp];
    repOf[stage] = rank;
  }
  std::vector<int64_t> ranks;
  for (const auto &[stage, rank] : repOf)
    ranks.push_back(rank);

  std::vector<RankTrace> traces;
  for (int64_t rank : ranks) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, llvm::formatv("rank-{0}.trace.json", rank));
    if (!llvm::sys::fs::exists(path)) {
      bool partial = llvm::sys::fs::exists(path + ".partial");
      return badInput("{0}: no such file{1}", path,
                      partial ? " (only its .partial: the run has not ended)"
                              : "; 'dtc run --trace DIR' writes one per rank");
    }
    auto buffer = llvm::MemoryBuffer::getFile(path);
    if (!buffer)
      return badInput("{0}: cannot read: {1}", path,
                      buffer.getError().message());
    auto trace = parseRankTrace((*buffer)->getBuffer(), path);
    if (!trace)
      return trace.takeError();
    if (llvm::Error err = checkTrace(*trace, *program, rank))
      return std::move(err);
    traces.push_back(std::move(*trace));
  }
  std::optional<int64_t> step = pickStep(traces);
  if (!step)
    return badInput(
        "{0}: no step that every trace holds complete{1}", traces.front().path,
        traces.front().status.empty() || traces.front().status == "complete"
            ? std::string()
            : " (status: " + traces.front().status + ")");

  TraceComparison c;
  c.dir = dir.str();
  c.clusterName = cluster->name;
  c.step = *step;
  c.stepsInTrace = static_cast<int64_t>(traces.front().steps.size());
  c.overheadS = cluster->kernelOverheadUs * kMicro;
  InstructionPricer pricer(*cluster, *mesh, c.overheadS);
  auto predicted = predictStep(*program, ranks, pricer);
  if (!predicted)
    return predicted.takeError();
  c.predictedStepS = predicted->stepTimeS;
  c.matched = predicted->matched;

  double origin = INFINITY, finish = -INFINITY;
  for (const RankTrace &trace : traces) {
    auto [start, end] = trace.steps.at(*step);
    origin = std::min(origin, start);
    finish = std::max(finish, end);
  }
  c.measuredStepS = finish - origin;

  std::vector<std::pair<double, double>> errors;
  for (auto [i, rank] : llvm::enumerate(ranks)) {
    StageComparison stage;
    stage.stage = pp < 0 ? 0 : mesh->coordinates(static_cast<int>(rank))[pp];
    stage.rank = rank;
    stage.predicted = predicted->ranks[i];
    stage.measured.rank = rank;
    for (const RankTrace::Event &e : traces[i].events) {
      if (e.step != *step)
        continue;
      TimelineEvent t = e.event;
      t.start -= origin;
      t.end -= origin;
      stage.measured.end = std::max(stage.measured.end, t.end);
      stage.measured.events.push_back(std::move(t));
    }
    // Compute-track time per instruction, over the step's calls.
    std::map<std::pair<std::string, int64_t>, InstructionDeviation> rows;
    auto add = [&](const TimelineEvent &t, bool measured) {
      if (t.track != 0)
        return;
      InstructionDeviation &row = rows[{t.function, t.index}];
      row.rank = rank;
      row.stage = stage.stage;
      row.function = t.function;
      row.index = t.index;
      row.op = t.op;
      row.loc = t.loc;
      (measured ? row.measuredS : row.predictedS) += t.end - t.start;
      if (measured)
        ++row.calls;
    };
    for (const TimelineEvent &t : stage.predicted.events)
      add(t, false);
    for (const TimelineEvent &t : stage.measured.events)
      add(t, true);
    for (auto &[key, row] : rows) {
      if (row.calls == 0)
        continue; // not measured: the trace skipped it
      if (isKernel(row.op) && row.predictedS > 0)
        errors.push_back(
            {std::abs(row.measuredS / row.predictedS - 1), row.measuredS});
      c.deviations.push_back(std::move(row));
    }
    c.stages.push_back(std::move(stage));
  }
  llvm::stable_sort(c.deviations, [](const InstructionDeviation &a,
                                     const InstructionDeviation &b) {
    return std::abs(a.measuredS - a.predictedS) >
           std::abs(b.measuredS - b.predictedS);
  });
  c.medianKernelError = weightedMedian(std::move(errors));
  return c;
}

std::string dtc::traceSummaryLine(const TraceComparison &c) {
  std::string line = llvm::formatv(
      "trace    step {0}: measured {1}, predicted {2} (x{3:F2})", c.step,
      formatSeconds(c.measuredStepS), formatSeconds(c.predictedStepS),
      c.predictedStepS > 0 ? c.measuredStepS / c.predictedStepS : 0.0);
  // The kernel that deviates most: waits and posts follow from the
  // kernels and transfers around them, and the table lists them anyway.
  auto kernel = llvm::find_if(c.deviations, [](const InstructionDeviation &d) {
    return isKernel(d.op);
  });
  if (kernel != c.deviations.end()) {
    const InstructionDeviation &d = *kernel;
    line += llvm::formatv(
        "; largest deviation {0}{1} ({2} #{3}, rank {4}): "
        "measured {5}, predicted {6} over {7} call{8}",
        d.op, d.loc.empty() ? "" : " at '" + d.loc + "'", d.function, d.index,
        d.rank, formatSeconds(d.measuredS), formatSeconds(d.predictedS),
        d.calls, d.calls == 1 ? "" : "s");
  }
  if (c.medianKernelError)
    line += llvm::formatv("; median kernel error {0:F0}% (time-weighted)",
                          100 * *c.medianKernelError);
  return line;
}
