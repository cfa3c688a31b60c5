//===- Report.cpp - dtc plan report: one self-contained HTML page ---------===//
//
// Everything is inline: CSS, SVG and a few lines of script, and a
// Content-Security-Policy that forbids any request, so the page opens
// offline. Sections: the device mesh (one box per GPU, or per pipeline
// stage x data-parallel slice when the cluster is large), a timeline of one
// step per pipeline stage replayed from the schedule and the predicted
// per-stage times, memory per stage against capacity, the step's cost
// breakdown and the alternatives.
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/KernelTime.h"
#include "compiler/inspect/Inspect.h"
#include "compiler/inspect/TraceCompare.h"

#include "compiler/planner/Planner.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace dtc;

namespace {

/// Largest GPU count drawn one box per GPU; above it, boxes are stage x dp
/// slices.
constexpr int64_t kMaxGpuBoxes = 512;
/// Most data-parallel columns drawn in the summarized mesh.
constexpr int64_t kMaxDpColumns = 32;
constexpr double kWidth = 1100; ///< SVG user units (CSS scales to fit).

std::string escape(llvm::StringRef text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

/// A coordinate: one decimal, no trailing noise.
std::string num(double value) { return llvm::formatv("{0:F1}", value).str(); }

/// Distinct colors for `count` groups: evenly spaced hues when few, the
/// golden angle when many (neighbours still differ).
std::string groupColor(int64_t index, int64_t count) {
  double hue = count <= 12
                   ? 360.0 * static_cast<double>(index) /
                         static_cast<double>(std::max<int64_t>(count, 1))
                   : std::fmod(137.508 * static_cast<double>(index), 360);
  int lightness = count <= 12 ? 62 : 55 + static_cast<int>(index % 3) * 8;
  return llvm::formatv("hsl({0:F0},62%,{1}%)", hue + 210, lightness).str();
}

struct Segment {
  const char *name;
  const char *color;
  double value;
};

/// Index of `rank`'s group along `axis`: the other coordinates, row-major.
int64_t groupIndex(const MeshView &mesh, int64_t rank, llvm::StringRef axis) {
  std::vector<int64_t> coords = mesh.coordinates(rank);
  int skip = mesh.axisIndex(axis);
  int64_t index = 0;
  for (size_t i = 0; i < coords.size(); ++i)
    if (static_cast<int>(i) != skip)
      index = index * mesh.shape[i] + coords[i];
  return index;
}

//===----------------------------------------------------------------------===//
// The page
//===----------------------------------------------------------------------===//

const char *kStyle = R"css(
:root{--fg:#1d2330;--muted:#5d6677;--line:#d9dde5;--bg:#f6f7f9;--card:#fff}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1f2a3d;color:#fff;padding:18px 28px}
header h1{margin:0;font-size:22px;font-weight:600}
header .sub{color:#c5cde0;margin-top:4px;font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:13px}
main{max-width:1180px;margin:0 auto;padding:18px 28px 40px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:16px 0}
h2{font-size:16px;margin:0 0 8px;font-weight:600}
p.note{color:var(--muted);margin:4px 0 10px;font-size:13px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:10px;margin-top:16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px}
.card .k{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:20px;font-weight:600;margin-top:2px}
.card .v.bad{color:#c0392b}
svg{display:block;width:100%;height:auto}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;fill:var(--fg)}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12.5px;color:var(--muted);margin:6px 0 2px}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-2px;margin-right:6px}
details summary{cursor:pointer;color:var(--muted);margin:10px 0 6px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-2px;margin-right:5px}
.modes{margin:4px 0 8px}
.modes button{font:inherit;font-size:12.5px;border:1px solid var(--line);background:#fff;border-radius:14px;padding:3px 12px;margin-right:6px;cursor:pointer}
.modes button.on{background:#1f2a3d;color:#fff;border-color:#1f2a3d}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600;font-size:12px}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.mono{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px}
td:first-child{white-space:nowrap}
tr.chosen td{background:#eef5ff;font-weight:600}
tr.oom td{color:#9a3b32}
footer{color:var(--muted);font-size:12px;text-align:center;padding:10px}
)css";

/// Switches the mesh coloring between stage, tp and dp groups; the colors
/// are precomputed in data attributes, so the page is colored without it.
const char *kScript = R"js(
(function(){
  var buttons=document.querySelectorAll('.modes button');
  function color(mode){
    document.querySelectorAll('#mesh [data-c-'+mode+']').forEach(function(e){
      e.setAttribute('fill',e.getAttribute('data-c-'+mode));});
    buttons.forEach(function(b){b.classList.toggle('on',b.getAttribute('data-mode')===mode);});
    var note=document.getElementById('mesh-mode');
    if(note)note.textContent=note.getAttribute('data-'+mode)||'';
  }
  buttons.forEach(function(b){b.addEventListener('click',function(){color(b.getAttribute('data-mode'));});});
})();
)js";

class ReportWriter {
public:
  ReportWriter(const PlanView &v, const TraceComparison *trace,
               llvm::raw_ostream &os)
      : v(v), trace(trace), os(os) {}

  void write() {
    const Prediction &p = v.predicted;
    os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
          "'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, "
          "initial-scale=1\">\n";
    os << "<title>dtc plan: " << escape(v.model.name) << " on "
       << v.cluster.gpus << " x " << escape(v.cluster.gpu) << "</title>\n";
    os << "<style>" << kStyle << "</style></head><body>\n";
    os << "<header><h1>" << escape(v.model.name) << " on " << v.cluster.gpus
       << " &times; " << escape(v.cluster.gpu) << "</h1><div class=\"sub\">"
       << escape(planSummary(v.plan)) << " &middot; global batch "
       << v.plan.globalBatch << " &middot; " << scheduleName(v.plan.schedule)
       << "</div></header>\n<main>\n";
    writeCards(p);
    writeMesh();
    writeTimeline();
    if (trace)
      writeTraceComparison();
    writeMemory();
    writeBreakdown();
    writeAlternatives();
    os << "</main>\n<footer>Written by dtc plan report from "
       << escape(v.planPath)
       << (trace ? ". Every number is the cost model's prediction "
                   "(docs/cost-model.md) except the measured ones, from "
                   "the traces in " +
                       escape(trace->dir) + ".</footer>\n"
                 : std::string(". Every number is the cost model's "
                               "prediction (docs/cost-model.md).</footer>\n"));
    os << "<script>" << kScript << "</script>\n</body></html>\n";
  }

private:
  const PlanView &v;
  const TraceComparison *trace;
  llvm::raw_ostream &os;

  void card(llvm::StringRef key, const std::string &value, bool bad = false) {
    os << "<div class=\"card\"><div class=\"k\">" << key
       << "</div><div class=\"v" << (bad ? " bad" : "") << "\">"
       << escape(value) << "</div></div>\n";
  }

  void writeCards(const Prediction &p) {
    os << "<div class=\"cards\">\n";
    card("step time", formatSeconds(p.stepTimeS));
    card("tokens / s", formatCount(p.tokensPerS));
    card("TFLOP/s / GPU", llvm::formatv("{0:F1}", p.tflopsPerGpu).str());
    card("MFU", llvm::formatv("{0:F1}%", 100 * p.mfu).str());
    card("PP bubble", llvm::formatv("{0:F1}%", 100 * p.bubbleFraction).str());
    card("memory / GPU",
         formatBytes(p.memoryPerGpuBytes) + " of " +
             formatBytes(v.cluster.hbmBytes),
         !p.fits);
    card("model", formatCount(v.model.params) + " params");
    os << "</div>\n";
  }

  void legend(llvm::ArrayRef<std::pair<std::string, std::string>> items) {
    os << "<div class=\"legend\">";
    for (const auto &[color, label] : items)
      os << "<span><i style=\"background:" << color << "\"></i>"
         << escape(label) << "</span>";
    os << "</div>\n";
  }

  // --- Mesh ----------------------------------------------------------------

  void writeMesh() {
    int64_t gpus = v.plan.gpus();
    int64_t perNode = std::max<int64_t>(v.cluster.gpusPerNode, 1);
    int64_t nodes = (gpus + perNode - 1) / perNode;
    os << "<section><h2>Device mesh</h2>\n";
    llvm::SmallVector<std::string, 4> places;
    for (const std::string &axis : llvm::reverse(v.mesh.axes)) {
      std::string where = axisPlacement(v, axis);
      if (!where.empty())
        places.push_back(
            llvm::formatv("{0}={1} {2}", axis, v.mesh.degree(axis), where)
                .str());
    }
    os << "<p class=\"note\">" << gpus << " GPUs in " << nodes << " node"
       << (nodes == 1 ? "" : "s") << " of " << perNode
       << "; rank = row-major index over "
       << escape(llvm::join(v.mesh.axes, " x ")) << " ("
       << escape(llvm::join(places, "; ")) << ").</p>\n";
    if (gpus <= kMaxGpuBoxes)
      writeMeshPerGpu(nodes, perNode);
    else
      writeMeshSummary(perNode);
    os << "</section>\n";
  }

  void modeButtons(bool withTp) {
    os << "<div class=\"modes\">Color by: "
          "<button class=\"on\" data-mode=\"stage\">pipeline stage</button>";
    if (withTp)
      os << "<button data-mode=\"tp\">tp group</button>";
    os << "<button data-mode=\"dp\">dp group</button> <span id=\"mesh-mode\" "
          "class=\"note\" data-stage=\"Same color: same pipeline stage.\" "
          "data-tp=\"Same color: one tensor-parallel group.\" "
          "data-dp=\"Same color: one data-parallel group (replicas of the "
          "same shard).\">Same color: same pipeline stage.</span></div>\n";
  }

  void writeMeshPerGpu(int64_t nodes, int64_t perNode) {
    modeButtons(true);
    int64_t gpus = v.plan.gpus();
    // GPUs of a node in a near-square grid, twice as wide as tall.
    int64_t cols =
        perNode <= 8
            ? std::min<int64_t>(perNode, 4)
            : static_cast<int64_t>(std::ceil(std::sqrt(2.0 * perNode)));
    int64_t rows = (perNode + cols - 1) / cols;
    double box = perNode <= 8 ? 30 : 16, gap = 4, pad = 8, label = 16;
    double nodeW = 2 * pad + cols * box + (cols - 1) * gap;
    double nodeH = label + 2 * pad + rows * box + (rows - 1) * gap;
    int64_t perRow = std::max<int64_t>(
        1, static_cast<int64_t>((kWidth + 12) / (nodeW + 12)));
    perRow = std::min(perRow, nodes);
    int64_t nodeRows = (nodes + perRow - 1) / perRow;
    double height = nodeRows * (nodeH + 12);
    os << "<svg id=\"mesh\" viewBox=\"0 0 " << num(kWidth) << " " << num(height)
       << "\" role=\"img\" aria-label=\"device mesh\">\n";
    int64_t tpGroups = gpus / v.mesh.degree("tp");
    int64_t dpGroups = gpus / v.mesh.degree("dp");
    for (int64_t node = 0; node < nodes; ++node) {
      double x = (node % perRow) * (nodeW + 12),
             y = (node / perRow) * (nodeH + 12);
      os << "<g class=\"node\" data-node=\"" << node << "\"><rect x=\""
         << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(nodeW)
         << "\" height=\"" << num(nodeH)
         << "\" rx=\"6\" fill=\"#f1f3f7\" stroke=\"#b8bfcc\"/><text x=\""
         << num(x + pad) << "\" y=\"" << num(y + 12)
         << "\" font-size=\"10.5\" fill=\"#5d6677\">node " << node
         << "</text>\n";
      for (int64_t i = 0; i < perNode; ++i) {
        int64_t rank = node * perNode + i;
        if (rank >= gpus)
          break;
        double gx = x + pad + (i % cols) * (box + gap);
        double gy = y + label + pad + (i / cols) * (box + gap);
        int64_t stage = v.stageOf(rank);
        std::string stageColor = groupColor(stage, v.plan.pp);
        os << "<rect class=\"gpu\" data-rank=\"" << rank << "\" data-stage=\""
           << stage << "\" x=\"" << num(gx) << "\" y=\"" << num(gy)
           << "\" width=\"" << num(box) << "\" height=\"" << num(box)
           << "\" rx=\"3\" stroke=\"#fff\" fill=\"" << stageColor
           << "\" data-c-stage=\"" << stageColor << "\" data-c-tp=\""
           << groupColor(groupIndex(v.mesh, rank, "tp"), tpGroups)
           << "\" data-c-dp=\""
           << groupColor(groupIndex(v.mesh, rank, "dp"), dpGroups)
           << "\"><title>" << rankTitle(rank) << "</title></rect>";
        if (box >= 24)
          os << "<text x=\"" << num(gx + box / 2) << "\" y=\""
             << num(gy + box / 2 + 4)
             << "\" font-size=\"10\" text-anchor=\"middle\" "
                "pointer-events=\"none\">"
             << rank << "</text>";
        os << "\n";
      }
      os << "</g>\n";
    }
    os << "</svg>\n";
    std::vector<std::pair<std::string, std::string>> items;
    if (v.plan.pp <= 16)
      for (const StageView &s : v.stages)
        items.push_back({groupColor(s.index, v.plan.pp),
                         llvm::formatv("stage {0}: layers {1}", s.index,
                                       formatLayersCompact(s, 24))
                             .str()});
    legend(items);
  }

  std::string rankTitle(int64_t rank) {
    std::vector<int64_t> coords = v.mesh.coordinates(rank);
    std::string text = llvm::formatv("rank {0}:", rank).str();
    for (auto [axis, coord] : llvm::zip(v.mesh.axes, coords))
      text += llvm::formatv(" {0}={1}", axis, coord).str();
    const StageView &stage = v.stages[v.stageOf(rank)];
    text += llvm::formatv("; stage {0}, layers {1}", stage.index,
                          formatLayers(stage))
                .str();
    return escape(text);
  }

  /// One box per pipeline stage x data-parallel slice, each holding the tp x
  /// cp GPUs of that model shard (times the replicas in the slice).
  void writeMeshSummary(int64_t perNode) {
    modeButtons(false);
    int64_t p = v.plan.pp, dp = v.mesh.degree("dp");
    int64_t shard = v.mesh.degree("tp") * v.mesh.degree("cp");
    int64_t columns = std::min(dp, kMaxDpColumns);
    int64_t perColumn = (dp + columns - 1) / columns;
    columns = (dp + perColumn - 1) / perColumn;
    os << "<p class=\"note\">Summarized: " << v.plan.gpus()
       << " GPUs are too many to draw one by one. Each box is one pipeline "
          "stage of "
       << (perColumn == 1
               ? std::string("one data-parallel replica")
               : llvm::formatv("{0} data-parallel replicas", perColumn).str())
       << ": " << perColumn * shard << " GPUs (tp &times; cp = " << shard
       << " per replica, "
       << escape(axisPlacement(v, "tp").empty()
                     ? std::string("tp=1")
                     : "tp " + axisPlacement(v, "tp"))
       << ").</p>\n";
    double left = 90, top = 22;
    double cellW = (kWidth - left) / static_cast<double>(columns);
    double cellH = std::clamp(360.0 / static_cast<double>(p), 12.0, 34.0);
    double height = top + p * cellH + 6;
    os << "<svg id=\"mesh\" class=\"summary\" viewBox=\"0 0 " << num(kWidth)
       << " " << num(height)
       << "\" role=\"img\" aria-label=\"device mesh, summarized\">\n";
    for (int64_t c = 0; c < columns; ++c) {
      int64_t first = c * perColumn,
              last = std::min(dp, (c + 1) * perColumn) - 1;
      if (columns <= 16 || c % 4 == 0)
        os << "<text x=\"" << num(left + c * cellW + cellW / 2)
           << "\" y=\"14\" "
           << "font-size=\"10\" text-anchor=\"middle\" fill=\"#5d6677\">dp "
           << first << (last > first ? "-" + std::to_string(last) : "")
           << "</text>";
    }
    os << "\n";
    for (int64_t s = 0; s < p; ++s) {
      double y = top + s * cellH;
      if (p <= 48 || s % 4 == 0)
        os << "<text x=\"0\" y=\"" << num(y + cellH / 2 + 4)
           << "\" font-size=\"11\">stage " << s << "</text>";
      std::string stageColor = groupColor(s, p);
      for (int64_t c = 0; c < columns; ++c) {
        int64_t first = c * perColumn,
                last = std::min(dp, (c + 1) * perColumn) - 1;
        int64_t count = (last - first + 1) * shard;
        std::string dpColor = groupColor(c, columns);
        os << "<rect class=\"group\" data-stage=\"" << s << "\" data-count=\""
           << count << "\" x=\"" << num(left + c * cellW + 1) << "\" y=\""
           << num(y + 1) << "\" width=\"" << num(cellW - 2) << "\" height=\""
           << num(cellH - 2) << "\" rx=\"2\" fill=\"" << stageColor
           << "\" data-c-stage=\"" << stageColor << "\" data-c-dp=\"" << dpColor
           << "\"><title>stage " << s << " (" << formatLayers(v.stages[s])
           << "), dp replicas " << first << "-" << last << ": " << count
           << " GPUs</title></rect>";
      }
      os << "\n";
    }
    os << "</svg>\n";
  }

  // --- Timeline ------------------------------------------------------------

  void writeTimeline() {
    const Prediction &p = v.predicted;
    const int64_t stages = v.plan.pp, m = v.plan.microBatches();
    std::vector<double> forward(stages), backward(stages), weight(stages);
    bool details = v.hasStageDetails();
    // Without per-stage times (older bundles): balanced stages whose
    // pipelined part gives the predicted step, forward a third of it.
    double pipelined = p.stepTimeS - p.commExposed.dp - p.optimizerTimeS;
    double balanced = pipelined / (static_cast<double>(m) +
                                   static_cast<double>(stages - 1) /
                                       static_cast<double>(v.plan.vpp));
    for (int64_t s = 0; s < stages; ++s) {
      const StageView &stage = v.stages[s];
      double time = details ? *stage.timePerMicroBatchS : balanced;
      forward[s] = details ? *stage.forwardPerMicroBatchS : time / 3;
      backward[s] = time - forward[s];
      // Older bundles: the weight gradient half the backward (its GEMMs'
      // share).
      weight[s] = stage.weightGradPerMicroBatchS
                      ? *stage.weightGradPerMicroBatchS
                      : backward[s] / 2;
    }
    PipelineTimeline timeline =
        replayPipeline(v.plan, forward, backward, weight);
    double tailComm = p.commExposed.dp, optimizer = p.optimizerTimeS;
    double end =
        std::max(timeline.makespan + tailComm + optimizer, p.stepTimeS);

    os << "<section><h2>One training step, per pipeline stage</h2>\n";
    os << "<p class=\"note\">" << m << " micro-batch" << (m == 1 ? "" : "es")
       << " of " << v.plan.microBatch << " sequence"
       << (v.plan.microBatch == 1 ? "" : "s") << ", schedule "
       << scheduleName(v.plan.schedule)
       << (v.plan.vpp > 1
               ? llvm::formatv(" with {0} chunks per stage", v.plan.vpp).str()
               : std::string())
       << ", replayed from the predicted time of each stage"
       << (details ? "" : " (balanced: this bundle has no per-stage times)")
       << ". Gaps are the pipeline bubble; exposed DP communication and the "
          "optimizer step end the step. The thin green bars under a lane are "
          "communication hidden behind computation.</p>\n";

    double left = 150, right = 16, laneH = 22, band = 5, gapH = 9, top = 8;
    double axisH = 30;
    double rowH = laneH + band + gapH;
    double plotW = kWidth - left - right;
    double height = top + stages * rowH + axisH;
    auto X = [&](double t) { return left + plotW * t / end; };
    os << "<svg id=\"gantt\" viewBox=\"0 0 " << num(kWidth) << " "
       << num(height)
       << "\" role=\"img\" aria-label=\"pipeline timeline\">\n"
          "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" "
          "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
          "<rect width=\"6\" height=\"6\" fill=\"#eef0f4\"/><line x1=\"0\" "
          "y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#c9ced8\" stroke-width=\"2\"/>"
          "</pattern></defs>\n";
    // Hidden communication: tp/cp/ep per micro-batch under the backward it
    // overlaps; dp (gradient reduction, ZeRO gathers) ending with the last
    // backward, as long as the cost model says it hides.
    CommTimes hidden = p.commHidden();
    double hiddenPerMicroBatch =
        m > 0 ? (hidden.tp + hidden.cp + hidden.ep) / static_cast<double>(m)
              : 0;
    for (int64_t s = 0; s < stages; ++s) {
      double y = top + s * rowH;
      const StageView &stage = v.stages[s];
      os << "<g class=\"lane\" data-stage=\"" << s << "\">";
      std::string layers = formatLayers(stage);
      os << "<text x=\"0\" y=\"" << num(y + laneH / 2 + 4)
         << "\" font-size=\"11.5\"><title>layers " << layers << "</title>stage "
         << s << " <tspan fill=\"#5d6677\">"
         << (layers.size() <= 11
                 ? "layers " + layers
                 : llvm::formatv("{0} layers", stage.layerCount()).str())
         << "</tspan></text>";
      os << "<rect class=\"bubble\" x=\"" << num(X(0)) << "\" y=\"" << num(y)
         << "\" width=\"" << num(X(timeline.makespan) - X(0)) << "\" height=\""
         << num(laneH) << "\" fill=\"url(#hatch)\"/>";
      writeOps(timeline.lanes[s], y, laneH, X, m);
      // Hidden communication.
      for (const PipelineOp &op : timeline.lanes[s])
        if (!op.forward && hiddenPerMicroBatch > 0) {
          double width =
              std::min(op.end - op.start,
                       hiddenPerMicroBatch / static_cast<double>(v.plan.vpp));
          os << "<rect class=\"overlap\" x=\"" << num(X(op.start)) << "\" y=\""
             << num(y + laneH + 1) << "\" width=\""
             << num(std::max(0.6, X(op.start + width) - X(op.start)))
             << "\" height=\"" << num(band - 1) << "\" fill=\"#59a14f\"/>";
        }
      if (hidden.dp > 0 && !timeline.lanes[s].empty()) {
        double stop = timeline.lanes[s].back().end;
        double start = std::max(0.0, stop - hidden.dp);
        os << "<rect class=\"overlap\" x=\"" << num(X(start)) << "\" y=\""
           << num(y + laneH + 1) << "\" width=\""
           << num(std::max(0.6, X(stop) - X(start))) << "\" height=\""
           << num(band - 1) << "\" fill=\"#59a14f\"><title>DP communication "
           << "hidden behind computation: " << formatSeconds(hidden.dp)
           << "</title></rect>";
      }
      double t = timeline.makespan;
      if (tailComm > 0) {
        os << "<rect class=\"dp-comm\" x=\"" << num(X(t)) << "\" y=\"" << num(y)
           << "\" width=\"" << num(X(t + tailComm) - X(t)) << "\" height=\""
           << num(laneH)
           << "\" fill=\"#e15759\"><title>exposed DP communication: "
           << formatSeconds(tailComm) << "</title></rect>";
        t += tailComm;
      }
      if (optimizer > 0)
        os << "<rect class=\"optimizer\" x=\"" << num(X(t)) << "\" y=\""
           << num(y) << "\" width=\"" << num(X(t + optimizer) - X(t))
           << "\" height=\"" << num(laneH)
           << "\" fill=\"#b07aa1\"><title>optimizer step: "
           << formatSeconds(optimizer) << "</title></rect>";
      os << "</g>\n";
    }
    // Time axis with the predicted step time.
    double axisY = top + stages * rowH;
    writeTimeAxis(axisY, left, plotW, end);
    os << "<line x1=\"" << num(X(p.stepTimeS)) << "\" y1=\"" << num(top - 4)
       << "\" x2=\"" << num(X(p.stepTimeS)) << "\" y2=\"" << num(axisY)
       << "\" stroke=\"#1f2a3d\" stroke-dasharray=\"4 3\"><title>predicted "
          "step time "
       << formatSeconds(p.stepTimeS) << "</title></line>\n";
    os << "</svg>\n";
    std::vector<std::pair<std::string, std::string>> items{
        {"#5b8def", "forward"}};
    if (splitsBackward(v.plan.schedule)) {
      items.push_back({"#e8864a", "input gradient (with recompute)"});
      items.push_back({"#f1ce63", "weight gradient"});
    } else {
      items.push_back({"#e8864a", "backward (with recompute)"});
    }
    items.push_back({"#eef0f4", "bubble (idle)"});
    items.push_back({"#59a14f", "communication hidden behind compute"});
    items.push_back({"#e15759", "exposed DP communication"});
    items.push_back({"#b07aa1", "optimizer step"});
    items.push_back(
        {"#1f2a3d", "predicted step time " + formatSeconds(p.stepTimeS)});
    legend(items);
    if (!timeline.complete)
      os << "<p class=\"note\">The schedule could not be replayed in full; "
            "the timeline is incomplete.</p>\n";
    os << "</section>\n";
  }

  /// Adjacent ops of the same kind merge, so long runs stay one box.
  template <typename Scale>
  void writeOps(llvm::ArrayRef<PipelineOp> ops, double y, double h, Scale X,
                int64_t m) {
    for (size_t i = 0; i < ops.size();) {
      size_t j = i + 1;
      while (j < ops.size() && ops[j].forward == ops[i].forward &&
             ops[j].weight == ops[i].weight && ops[j].start == ops[j - 1].end)
        ++j;
      double x0 = X(ops[i].start), x1 = X(ops[j - 1].end);
      bool forward = ops[i].forward, weight = ops[i].weight;
      os << "<rect class=\""
         << (forward  ? "fwd"
             : weight ? "wgrad"
                      : "bwd")
         << "\" x=\"" << num(x0) << "\" y=\"" << num(y) << "\" width=\""
         << num(std::max(0.5, x1 - x0)) << "\" height=\"" << num(h)
         << "\" fill=\""
         << (forward  ? "#5b8def"
             : weight ? "#f1ce63"
                      : "#e8864a")
         << "\" stroke=\"#fff\" stroke-width=\"" << (x1 - x0 > 3 ? "0.6" : "0")
         << "\"><title>"
         << (forward  ? "forward"
             : weight ? "weight gradient"
                      : "backward")
         << " of micro-batch" << (j - i > 1 ? "es " : " ") << ops[i].microBatch
         << (j - i > 1 ? "-" + std::to_string(ops[j - 1].microBatch) : "")
         << (v.plan.vpp > 1 ? ", chunk " + std::to_string(ops[i].chunk) : "")
         << ": " << formatSeconds(ops[j - 1].end - ops[i].start)
         << "</title></rect>";
      if (j - i == 1 && x1 - x0 >= 16 && m <= 99)
        os << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\""
           << num(y + h / 2 + 4)
           << "\" font-size=\"9.5\" text-anchor=\"middle\" fill=\"#fff\" "
              "pointer-events=\"none\">"
           << ops[i].microBatch << "</text>";
      i = j;
    }
  }

  /// A time axis from 0 to `end` seconds under a plot `plotW` wide.
  void writeTimeAxis(double axisY, double left, double plotW, double end) {
    auto X = [&](double t) { return left + plotW * t / end; };
    os << "<line x1=\"" << num(left) << "\" y1=\"" << num(axisY) << "\" x2=\""
       << num(left + plotW) << "\" y2=\"" << num(axisY)
       << "\" stroke=\"#8a93a5\"/>";
    double tick = niceStep(end / 8);
    for (double t = 0; t <= end * 1.0001; t += tick)
      os << "<line x1=\"" << num(X(t)) << "\" y1=\"" << num(axisY) << "\" x2=\""
         << num(X(t)) << "\" y2=\"" << num(axisY + 4)
         << "\" stroke=\"#8a93a5\"/><text x=\"" << num(X(t)) << "\" y=\""
         << num(axisY + 16)
         << "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#5d6677\">"
         << formatSeconds(t) << "</text>";
  }

  static double niceStep(double raw) {
    if (raw <= 0)
      return 1;
    double magnitude = std::pow(10, std::floor(std::log10(raw)));
    for (double f : {1.0, 2.0, 2.5, 5.0, 10.0})
      if (raw <= f * magnitude)
        return f * magnitude;
    return 10 * magnitude;
  }

  // --- Predicted vs measured (--trace) --------------------------------------

  static const char *traceCategory(const TimelineEvent &e) {
    llvm::StringRef op(e.op);
    if (e.track != 0)
      return "comm";
    if (op == "dtc.wait")
      return "wait";
    if (op.ends_with("_start"))
      return "post";
    // GEMMs and fused attention, by the cost model's definition of each
    // op's work (the measured trace's events have only their op's name).
    KernelDesc kernel;
    kernel.op = op;
    KernelWork::Kind kind = kernelWork(kernel).kind;
    if (kind == KernelWork::Kind::Gemm || kind == KernelWork::Kind::Attention)
      return "gemm";
    return "kernel";
  }

  static const char *traceColor(llvm::StringRef category) {
    return llvm::StringSwitch<const char *>(category)
        .Case("gemm", "#4e79a7")
        .Case("kernel", "#a0cbe8")
        .Case("post", "#f28e2b")
        .Case("wait", "#e15759")
        .Default("#59a14f");
  }

  static std::string eventTitle(const TimelineEvent &e) {
    llvm::StringRef op(e.op);
    return llvm::formatv("{0}{1} ({2} #{3}, call {4}): {5}", op,
                         e.loc.empty() ? std::string() : " at '" + e.loc + "'",
                         e.function, e.index, e.call,
                         formatSeconds(e.end - e.start))
        .str();
  }

  /// One track's events as rects; runs of events narrower than a pixel
  /// merge into one rect colored by the category with the most time.
  template <typename Scale>
  void writeTraceTrack(llvm::ArrayRef<const TimelineEvent *> events, double y,
                       double h, Scale X) {
    std::vector<const TimelineEvent *> run;
    double runEnd = 0;
    auto flush = [&] {
      if (run.empty())
        return;
      double t0 = run.front()->start, t1 = run.front()->end;
      std::map<std::string, double> time;
      for (const TimelineEvent *e : run) {
        t1 = std::max(t1, e->end);
        time[traceCategory(*e)] += e->end - e->start;
      }
      std::string category =
          std::max_element(time.begin(), time.end(), [](auto &a, auto &b) {
            return a.second < b.second;
          })->first;
      std::string title =
          run.size() == 1
              ? eventTitle(*run.front())
              : llvm::formatv("{0} instructions, {1} to {2}: mostly {3}",
                              run.size(), formatSeconds(t0), formatSeconds(t1),
                              category)
                    .str();
      os << "<rect class=\"ev " << category << "\" x=\"" << num(X(t0))
         << "\" y=\"" << num(y) << "\" width=\""
         << num(std::max(0.5, X(t1) - X(t0))) << "\" height=\"" << num(h)
         << "\" fill=\"" << traceColor(category) << "\"><title>"
         << escape(title) << "</title></rect>";
      run.clear();
    };
    for (const TimelineEvent *e : events) {
      if (!run.empty() && (X(runEnd) - X(run.front()->start) >= 1 ||
                           X(e->start) - X(runEnd) > 0.5))
        flush();
      runEnd = run.empty() ? e->end : std::max(runEnd, e->end);
      run.push_back(e);
    }
    flush();
  }

  void writeTraceComparison() {
    const TraceComparison &c = *trace;
    os << "<section id=\"trace\"><h2>Predicted vs measured</h2>\n";
    os << "<p class=\"note\">Step " << c.step << " of the " << c.stepsInTrace
       << " traced in " << escape(c.dir)
       << (c.stepsInTrace >= 3
               ? " (the step of median duration, leaving out the first)"
               : " (the step of median duration)")
       << ". Per pipeline stage, its lowest rank: the cost model's replay of "
          "the rank's program on cluster "
       << escape(c.clusterName)
       << " (each instruction priced alone, communication on its own track, "
          "waits blocking) above what dtc run measured, on one time axis. "
          "The thin band under a row is the communication track"
       << (c.overheadS > 0
               ? llvm::formatv("; every call costs {0} of overhead",
                               formatSeconds(c.overheadS))
                     .str()
               : std::string("; the cluster knows no per-call overhead, so "
                             "none is predicted"))
       << ". The planner's own prediction, from its per-layer formulas "
          "rather than this program's instructions, is "
       << formatSeconds(v.predicted.stepTimeS) << ".</p>\n";
    if (!c.matched)
      os << "<p class=\"note\">Transfers between the stages could not be "
            "matched; each rank was replayed on its own.</p>\n";
    os << "<div class=\"cards\">\n";
    card("measured step", formatSeconds(c.measuredStepS));
    card("predicted step", formatSeconds(c.predictedStepS));
    card(
        "measured / predicted",
        c.predictedStepS > 0
            ? llvm::formatv("x{0:F2}", c.measuredStepS / c.predictedStepS).str()
            : std::string("-"));
    if (c.medianKernelError)
      card("median kernel error",
           llvm::formatv("{0:F0}%", 100 * *c.medianKernelError).str());
    os << "</div>\n";

    double left = 150, right = 16, laneH = 18, band = 5, gapH = 4,
           stageGap = 12, top = 8, axisH = 30;
    double rowH = laneH + band + gapH;
    double stageH = 2 * rowH + stageGap;
    double plotW = kWidth - left - right;
    double height = top + c.stages.size() * stageH + axisH;
    double end = std::max({c.measuredStepS, c.predictedStepS, 1e-9});
    for (const StageComparison &s : c.stages)
      end = std::max({end, s.predicted.end, s.measured.end});
    auto X = [&](double t) { return left + plotW * t / end; };
    os << "<svg id=\"trace-gantt\" viewBox=\"0 0 " << num(kWidth) << " "
       << num(height)
       << "\" role=\"img\" aria-label=\"predicted and measured timelines\">\n";
    for (auto [i, s] : llvm::enumerate(c.stages)) {
      for (int row = 0; row < 2; ++row) {
        const RankTimeline &timeline = row == 0 ? s.predicted : s.measured;
        double y = top + i * stageH + row * rowH;
        os << "<g class=\"trace-lane\" data-stage=\"" << s.stage
           << "\" data-rank=\"" << s.rank << "\" data-kind=\""
           << (row == 0 ? "predicted" : "measured") << "\">";
        os << "<text x=\"0\" y=\"" << num(y + laneH / 2 + 4)
           << "\" font-size=\"11.5\">"
           << (row == 0 ? "stage " + std::to_string(s.stage)
                        : "rank " + std::to_string(s.rank))
           << " <tspan fill=\"#5d6677\">"
           << (row == 0 ? "predicted" : "measured") << "</tspan></text>";
        os << "<rect x=\"" << num(X(0)) << "\" y=\"" << num(y) << "\" width=\""
           << num(plotW) << "\" height=\"" << num(laneH)
           << "\" fill=\"#f1f3f7\"/>";
        std::vector<const TimelineEvent *> compute, comm;
        for (const TimelineEvent &e : timeline.events)
          (e.track == 0 ? compute : comm).push_back(&e);
        auto byStart = [](const TimelineEvent *a, const TimelineEvent *b) {
          return a->start < b->start;
        };
        llvm::stable_sort(compute, byStart);
        llvm::stable_sort(comm, byStart);
        writeTraceTrack(compute, y, laneH, X);
        writeTraceTrack(comm, y + laneH + 1, band - 1, X);
        os << "<line class=\"lane-end\" x1=\"" << num(X(timeline.end))
           << "\" y1=\"" << num(y - 1) << "\" x2=\"" << num(X(timeline.end))
           << "\" y2=\"" << num(y + laneH + band) << "\" stroke=\"#1f2a3d\" "
           << "stroke-width=\"1.5\"><title>"
           << (row == 0 ? "predicted" : "measured") << " end of rank " << s.rank
           << "'s step: " << formatSeconds(timeline.end)
           << "</title></line></g>\n";
      }
    }
    double axisY = top + c.stages.size() * stageH;
    writeTimeAxis(axisY, left, plotW, end);
    os << "</svg>\n";
    legend({{traceColor("gemm"), "matmul, convolution, attention"},
            {traceColor("kernel"), "other kernels"},
            {traceColor("post"), "posting communication"},
            {traceColor("wait"), "waiting for communication"},
            {traceColor("comm"), "communication in flight"}});

    constexpr size_t kRows = 15;
    os << "<h2 style=\"margin-top:14px\">Largest deviations</h2>\n<p "
          "class=\"note\">Per instruction of the ranks above, its time on the "
          "compute track summed over the step's calls (a wait: the time "
          "blocked), largest |measured - predicted| first; "
       << std::min(kRows, c.deviations.size()) << " of " << c.deviations.size()
       << ".</p>\n";
    os << "<table id=\"deviations\"><tr><th>rank</th><th>instruction</th>"
          "<th>op</th><th>loc</th><th class=\"n\">calls</th><th "
          "class=\"n\">predicted</th><th class=\"n\">measured</th><th "
          "class=\"n\">measured / predicted</th></tr>\n";
    for (const InstructionDeviation &d :
         llvm::ArrayRef(c.deviations).take_front(kRows))
      os << "<tr class=\"dev\"><td>" << d.rank << " (stage " << d.stage
         << ")</td><td class=\"mono\">" << escape(d.function) << " #" << d.index
         << "</td><td class=\"mono\">" << escape(d.op)
         << "</td><td class=\"mono\">" << escape(d.loc)
         << "</td><td class=\"n\">" << d.calls << "</td><td class=\"n\">"
         << formatSeconds(d.predictedS) << "</td><td class=\"n\">"
         << formatSeconds(d.measuredS) << "</td><td class=\"n\">"
         << (d.predictedS > 0
                 ? llvm::formatv("x{0:F2}", d.measuredS / d.predictedS).str()
                 : std::string("-"))
         << "</td></tr>\n";
    os << "</table></section>\n";
  }

  // --- Memory --------------------------------------------------------------

  static std::vector<Segment> memorySegments(const MemoryBreakdown &m) {
    return {{"params", "#4e79a7", m.params},
            {"grads", "#76b7b2", m.grads},
            {"optimizer states", "#edc948", m.optimizer},
            {"activations", "#f28e2b", m.activations},
            {"workspace", "#9c755f", m.workspace},
            {"fragmentation reserve", "#d4d7dd", m.reserve}};
  }

  void writeMemory() {
    const Prediction &p = v.predicted;
    bool details = v.hasStageDetails();
    std::vector<std::pair<std::string, MemoryBreakdown>> rows;
    if (details)
      for (const StageView &s : v.stages)
        rows.push_back({llvm::formatv("stage {0}", s.index).str(), *s.memory});
    else
      rows.push_back(
          {llvm::formatv("stage {0} (peak)", p.peakMemoryStage).str(),
           p.memory});
    double capacity = v.cluster.hbmBytes, most = capacity;
    for (const auto &row : rows)
      most = std::max(most, row.second.total());
    os << "<section><h2>Memory per GPU, by pipeline stage</h2>\n<p "
          "class=\"note\">Peak bytes on one GPU of each stage against the "
       << formatBytes(capacity) << " of HBM"
       << (details ? "" : " (this bundle has the peak stage only)")
       << ".</p>\n";
    double left = 80, right = 90, barH = rows.size() > 24 ? 10 : 18, gap = 6;
    double plotW = kWidth - left - right, top = 6;
    double height = top + rows.size() * (barH + gap) + 22;
    auto X = [&](double bytes) { return left + plotW * bytes / (most * 1.02); };
    os << "<svg id=\"memory\" viewBox=\"0 0 " << num(kWidth) << " "
       << num(height) << "\" role=\"img\" aria-label=\"memory per stage\">\n";
    for (auto [i, row] : llvm::enumerate(rows)) {
      double y = top + i * (barH + gap);
      os << "<g class=\"mem-bar\"><text x=\"0\" y=\"" << num(y + barH / 2 + 4)
         << "\" font-size=\"11\">" << escape(row.first) << "</text>";
      double at = 0;
      for (const Segment &seg : memorySegments(row.second)) {
        if (seg.value <= 0)
          continue;
        os << "<rect x=\"" << num(X(at)) << "\" y=\"" << num(y) << "\" width=\""
           << num(X(at + seg.value) - X(at)) << "\" height=\"" << num(barH)
           << "\" fill=\"" << seg.color << "\"><title>" << seg.name << ": "
           << formatBytes(seg.value) << "</title></rect>";
        at += seg.value;
      }
      bool over = row.second.total() > capacity;
      os << "<text x=\"" << num(X(at) + 6) << "\" y=\"" << num(y + barH / 2 + 4)
         << "\" font-size=\"11\"" << (over ? " fill=\"#c0392b\"" : "") << ">"
         << formatBytes(row.second.total())
         << llvm::formatv(" ({0:F0}%)", 100 * row.second.total() / capacity)
                .str()
         << "</text></g>\n";
    }
    double cx = X(capacity), bottom = top + rows.size() * (barH + gap);
    os << "<line x1=\"" << num(cx) << "\" y1=\"0\" x2=\"" << num(cx)
       << "\" y2=\"" << num(bottom) << "\" stroke=\"#c0392b\" "
       << "stroke-dasharray=\"5 3\"/><text x=\"" << num(cx) << "\" y=\""
       << num(bottom + 14) << "\" font-size=\"10.5\" text-anchor=\"middle\" "
       << "fill=\"#c0392b\">capacity " << formatBytes(capacity) << "</text>\n";
    os << "</svg>\n";
    std::vector<std::pair<std::string, std::string>> items;
    for (const Segment &seg : memorySegments(p.memory))
      items.push_back({seg.color, seg.name});
    legend(items);
    os << "</section>\n";
  }

  // --- Cost breakdown ------------------------------------------------------

  void writeBreakdown() {
    const Prediction &p = v.predicted;
    static const char *colors[] = {"#4e79a7", "#a0cbe8", "#bab0ac",
                                   "#f28e2b", "#ffbe7d", "#59a14f",
                                   "#8cd17d", "#e15759", "#b07aa1"};
    std::vector<StepPart> parts = stepBreakdown(p);
    double total = 0;
    for (const StepPart &part : parts)
      total += part.seconds;
    os << "<section><h2>Where the step goes</h2>\n<p class=\"note\">The "
       << formatSeconds(p.stepTimeS)
       << " step on the GPU that sets the pace, split into the parts the "
          "planner's verdicts compare (communication counted where it is "
          "exposed).</p>\n";
    os << "<svg id=\"breakdown\" viewBox=\"0 0 " << num(kWidth)
       << " 34\" role=\"img\" aria-label=\"step breakdown\">";
    double at = 0;
    for (auto [i, part] : llvm::enumerate(parts)) {
      if (part.seconds <= 0 || total <= 0)
        continue;
      double x = kWidth * at / total, w = kWidth * part.seconds / total;
      os << "<rect x=\"" << num(x) << "\" y=\"2\" width=\"" << num(w)
         << "\" height=\"28\" fill=\"" << colors[i] << "\"><title>" << part.name
         << ": " << formatSeconds(part.seconds) << "</title></rect>";
      if (w > 70)
        os << "<text x=\"" << num(x + 5) << "\" y=\"20\" font-size=\"11\" "
           << "fill=\"#fff\">" << part.name << "</text>";
      at += part.seconds;
    }
    os << "</svg>\n";
    os << "<table><tr><th>part</th><th class=\"n\">time / step</th><th "
          "class=\"n\">share</th><th></th></tr>\n";
    for (auto [i, part] : llvm::enumerate(parts)) {
      if (part.seconds <= 0)
        continue;
      os << "<tr><td><i class=\"sw\" style=\"background:" << colors[i]
         << "\"></i>" << part.name << "</td><td class=\"n\">"
         << formatSeconds(part.seconds) << "</td><td class=\"n\">"
         << llvm::formatv("{0:F1}%", 100 * part.seconds / total).str()
         << "</td><td></td></tr>\n";
    }
    os << "</table>\n";
    // Communication by kind.
    CommTimes hidden = p.commHidden();
    os << "<h2 style=\"margin-top:14px\">Communication by kind</h2>\n<table>"
          "<tr><th>kind</th><th class=\"n\">issued / step</th><th "
          "class=\"n\">exposed</th><th class=\"n\">hidden</th><th "
          "class=\"n\">hidden share</th></tr>\n";
    auto row = [&](llvm::StringRef kind, double time, double exposed,
                   double hide) {
      if (time <= 0)
        return;
      os << "<tr><td>" << kind << "</td><td class=\"n\">" << formatSeconds(time)
         << "</td><td class=\"n\">" << formatSeconds(exposed)
         << "</td><td class=\"n\">" << formatSeconds(hide)
         << "</td><td class=\"n\">"
         << llvm::formatv("{0:F0}%", 100 * hide / time).str() << "</td></tr>\n";
    };
    row("tensor parallel (tp)", p.commTime.tp, p.commExposed.tp, hidden.tp);
    row("context parallel (cp)", p.commTime.cp, p.commExposed.cp, hidden.cp);
    row("expert parallel (ep)", p.commTime.ep, p.commExposed.ep, hidden.ep);
    row("pipeline (pp)", p.commTime.pp, p.commExposed.pp, hidden.pp);
    row("data parallel (dp)", p.commTime.dp, p.commExposed.dp, hidden.dp);
    if (p.commTime.total() <= 0)
      os << "<tr><td colspan=\"5\">none</td></tr>\n";
    os << "</table></section>\n";
  }

  // --- Alternatives --------------------------------------------------------

  void writeAlternatives() {
    auto header = [&](llvm::StringRef id) {
      os << "<table id=\"" << id
         << "\"><tr><th>kind</th><th>change</th><th>plan</th><th "
            "class=\"n\">step time</th><th class=\"n\">MFU</th><th "
            "class=\"n\">memory / GPU</th><th>verdict</th></tr>\n";
    };
    auto row = [&](llvm::StringRef cls, llvm::StringRef kind,
                   llvm::StringRef change, const ParallelPlan &plan,
                   const Prediction &p, llvm::StringRef verdict) {
      os << "<tr class=\"" << cls << "\"><td>" << kind << "</td><td>"
         << escape(change) << "</td><td class=\"mono\">"
         << escape(planSummary(plan)) << "</td><td class=\"n\">"
         << formatSeconds(p.stepTimeS) << "</td><td class=\"n\">"
         << llvm::formatv("{0:F1}%", 100 * p.mfu).str()
         << "</td><td class=\"n\">" << formatBytes(p.memoryPerGpuBytes)
         << "</td><td>" << escape(verdict) << "</td></tr>\n";
    };
    auto alternative = [&](const AlternativeView &alt) {
      row(alt.predicted.fits ? "alt" : "alt oom",
          alt.counterfactual ? "counterfactual" : "runner-up", alt.change,
          alt.plan, alt.predicted, alt.verdict);
    };
    os << "<section><h2>Alternatives</h2>\n<p class=\"note\">The next "
          "fastest plans; the verdict compares each with the chosen plan.</p>"
          "\n";
    header("alternatives");
    row("chosen", "chosen", "", v.plan, v.predicted, "");
    int64_t counterfactuals = 0;
    for (const AlternativeView &alt : v.alternatives)
      if (alt.counterfactual)
        ++counterfactuals;
      else
        alternative(alt);
    os << "</table>\n";
    if (counterfactuals) {
      os << "<details" << (counterfactuals <= 16 ? " open" : "")
         << "><summary>For each searched dimension, the best plan with "
            "another value ("
         << counterfactuals << ")</summary>\n";
      header("counterfactuals");
      for (const AlternativeView &alt : v.alternatives)
        if (alt.counterfactual)
          alternative(alt);
      os << "</table></details>\n";
    }
    if (v.candidatesEvaluated)
      os << "<p class=\"note\">" << v.candidatesEvaluated
         << " candidates priced in " << formatSeconds(v.searchTimeS)
         << "; the whole compile took " << formatSeconds(v.compileTimeS)
         << ".</p>\n";
    os << "</section>\n";
  }
};
} // namespace

std::string dtc::renderReport(const PlanView &view,
                              const TraceComparison *trace) {
  std::string html;
  llvm::raw_string_ostream os(html);
  ReportWriter(view, trace, os).write();
  return html;
}

llvm::Error dtc::writeReport(const PlanView &view, llvm::StringRef path,
                             const TraceComparison *trace) {
  if (llvm::Error err = requirePlanned(view))
    return err;
  std::string html = renderReport(view, trace);
  llvm::SmallString<256> tmp(path);
  tmp += ".partial";
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(tmp, ec);
    if (ec)
      return failure("-o {0}: cannot write: {1}", path, ec.message());
    out << html;
    out.close();
    if (out.has_error()) {
      llvm::sys::fs::remove(tmp);
      return failure("-o {0}: cannot write: {1}", path, out.error().message());
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return failure("-o {0}: cannot write: {1}", path, ec.message());
  }
  return llvm::Error::success();
}
