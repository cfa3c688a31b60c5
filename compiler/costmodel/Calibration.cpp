//===- Calibration.cpp - Published runs to check the model against --------===//

#include "compiler/costmodel/Calibration.h"

#include "runtime/support/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace dtc;

std::string CalibrationRun::label() const {
  std::string recompute = recomputeName(plan.recompute).str();
  return (set == CalibrationSet::SC21 ? "SC21 " : "MLSys23 ") + model +
         (set == CalibrationSet::MLSys23 ? " " + recompute : "");
}

llvm::SmallVector<std::string> dtc::splitCsvRecord(llvm::StringRef line) {
  llvm::SmallVector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        fields.back() += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      fields.emplace_back();
    } else if (ch != '\r') {
      fields.back() += ch;
    }
  }
  return fields;
}

int CsvTable::column(llvm::StringRef name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name)
      return static_cast<int>(i);
  return -1;
}

llvm::StringRef CsvTable::cell(const llvm::SmallVector<std::string> &row,
                               llvm::StringRef name) const {
  int i = column(name);
  return i >= 0 && i < static_cast<int>(row.size())
             ? llvm::StringRef(row[i]).trim()
             : "";
}

llvm::Expected<CsvTable> dtc::readCsv(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return badInput("{0}: cannot read it: {1}", path,
                    buffer.getError().message());
  CsvTable table;
  llvm::SmallVector<llvm::StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n', -1, /*KeepEmpty=*/false);
  // A quoted field may hold a newline: join lines until quotes balance.
  std::string record;
  for (llvm::StringRef line : lines) {
    record += line.str();
    if (llvm::count(record, '"') % 2) {
      record += '\n';
      continue;
    }
    if (!llvm::StringRef(record).trim().empty()) {
      if (table.header.empty())
        table.header = splitCsvRecord(record);
      else
        table.rows.push_back(splitCsvRecord(record));
    }
    record.clear();
  }
  if (table.header.empty())
    return badInput("{0}: empty file", path);
  return table;
}

/// A number from a cell, ignoring the trailing `?` of uncertain cells.
bool dtc::parseCsvNumber(llvm::StringRef cell, double &out) {
  cell = cell.trim().rtrim('?');
  return !cell.empty() && !cell.getAsDouble(out);
}

static bool integer(llvm::StringRef cell, int64_t &out) {
  cell = cell.trim().rtrim('?');
  return !cell.empty() && !cell.getAsInteger(10, out);
}

llvm::Expected<std::vector<CalibrationRun>>
dtc::loadCalibrationRuns(llvm::StringRef dataDir) {
  llvm::SmallString<256> runsPath(dataDir), launchPath(dataDir);
  llvm::sys::path::append(runsPath, "published_runs_calibration.csv");
  llvm::sys::path::append(launchPath, "sc21_table1_launch.csv");
  auto runs = readCsv(runsPath);
  if (!runs)
    return runs.takeError();
  auto launch = readCsv(launchPath);
  if (!launch)
    return launch.takeError();

  struct Launch {
    int64_t microBatch, vpp;
    bool overlap;
  };
  llvm::StringMap<Launch> launches;
  for (const auto &row : launch->rows) {
    Launch l;
    if (row.size() < 4 || !integer(row[1], l.microBatch) ||
        !integer(row[2], l.vpp))
      return badInput("{0}: malformed row '{1}'", launchPath,
                      llvm::join(row, ","));
    l.overlap = row[3] == "torch";
    launches[row[0]] = l;
  }

  const CsvTable &t = *runs;
  auto col = [&](llvm::StringRef name) { return t.column(name); };
  for (llvm::StringRef name :
       {"source", "model", "layers", "hidden", "heads", "ffn_hidden", "seq_len",
        "vocab", "num_gpus", "tp", "pp", "dp", "vpp", "micro_batch",
        "global_batch", "recompute", "tflops_per_gpu", "notes"})
    if (col(name) < 0)
      return badInput("{0}: no column '{1}'", runsPath, name);

  std::vector<CalibrationRun> result;
  for (const auto &row : t.rows) {
    auto cell = [&](llvm::StringRef name) -> llvm::StringRef {
      int i = col(name);
      return i < static_cast<int>(row.size()) ? llvm::StringRef(row[i]) : "";
    };
    CalibrationRun run;
    llvm::StringRef source = cell("source");
    if (source.starts_with("Narayanan"))
      run.set = CalibrationSet::SC21;
    else if (source.starts_with("Korthikanti"))
      run.set = CalibrationSet::MLSys23;
    else
      continue;
    run.model = cell("model").str();

    // Megatron's GPT of 2021-22: fp16, dropout, tied embeddings, unfused
    // attention (before FlashAttention reached Megatron).
    TransformerSpec &spec = run.spec;
    spec.name = run.model;
    spec.dtype = DType::F16;
    spec.dropout = true;
    spec.tiedEmbeddings = true;
    ParallelPlan &plan = run.plan;
    plan.fusedAttention = false;
    if (!integer(cell("layers"), spec.layers) ||
        !integer(cell("hidden"), spec.hidden) ||
        !integer(cell("heads"), spec.heads) ||
        !integer(cell("ffn_hidden"), spec.ffnHidden) ||
        !integer(cell("seq_len"), spec.seqLen) ||
        !integer(cell("vocab"), spec.vocab) ||
        !integer(cell("num_gpus"), run.gpus) || !integer(cell("tp"), plan.tp) ||
        !integer(cell("pp"), plan.pp) || !integer(cell("dp"), plan.dp))
      return badInput("{0}: row {1} lacks a model or parallel size", runsPath,
                      run.model);
    llvm::StringRef recompute = cell("recompute").rtrim('?');
    if (recompute == "selective") {
      plan.recompute = Recompute::Selective;
      plan.sequenceParallel = true; // The paper pairs the two.
    } else {
      plan.recompute = Recompute::Full;
    }

    if (run.set == CalibrationSet::SC21) {
      auto it = launches.find(run.model);
      if (it == launches.end())
        return badInput("{0}: no launch settings for {1}", launchPath,
                        run.model);
      plan.microBatch = it->second.microBatch;
      plan.vpp = it->second.vpp;
      plan.overlapGradReduce = it->second.overlap;
      plan.overlapTpComm = false;
      if (!parseCsvNumber(cell("tflops_per_gpu"), run.measuredHwTflops))
        return badInput("{0}: {1} has no tflops_per_gpu", runsPath, run.model);
    } else {
      // Only rows that state a step time can be checked.
      llvm::StringRef notes = cell("notes");
      size_t at = notes.find("step_time_s=");
      if (at == llvm::StringRef::npos)
        continue;
      llvm::StringRef value =
          notes.drop_front(at + strlen("step_time_s=")).split(';').first;
      if (!parseCsvNumber(value, run.measuredStepTimeS))
        return badInput("{0}: {1}: malformed step_time_s", runsPath, run.model);
      if (!integer(cell("micro_batch"), plan.microBatch))
        return badInput("{0}: {1} has no micro_batch", runsPath, run.model);
      if (!integer(cell("vpp"), plan.vpp))
        plan.vpp = 1;
    }
    if (!integer(cell("global_batch"), plan.globalBatch))
      return badInput("{0}: {1} has no global_batch", runsPath, run.model);
    plan.schedule = plan.vpp > 1 ? Schedule::Interleaved : Schedule::OneFOneB;
    result.push_back(std::move(run));
  }
  return result;
}

namespace {
/// What a corpus row leaves out but its model's public configuration
/// states (Hugging Face config.json / the MLPerf reference model).
struct KnownModel {
  llvm::StringRef prefix;
  int64_t vocab;
  bool gated, tied;
  bool dropout = false;
  bool causal = true;
  int64_t context = 0; ///< Its trained context: the sequence when unstated.
};
constexpr KnownModel kKnownModels[] = {
    // MLPerf's GPT-3: the GPT-2 BPE (50257) padded by Megatron to 51200.
    {"GPT-3 175B", 51200, false, true},
    {"Llama 2", 32000, true, false},
    {"Llama 3", 128256, true, false},
    {"Qwen3-235B", 151936, true, false},
    {"GPT-2", 50257, false, true, /*dropout=*/true, /*causal=*/true, 1024},
    {"BERT", 30522, false, true, /*dropout=*/true, /*causal=*/false, 512},
};

/// The parallel sizes a corpus row may leave out (1 when unstated), its
/// ZeRO stage (column `zeroColumn`), recompute and schedule.
template <typename CellFn>
void readOptionalPlanCells(CellFn cell, llvm::StringRef zeroColumn,
                           ParallelPlan &plan) {
  if (!integer(cell("cp"), plan.cp))
    plan.cp = 1;
  if (!integer(cell("ep"), plan.ep))
    plan.ep = 1;
  if (!integer(cell("vpp"), plan.vpp))
    plan.vpp = 1;
  int64_t zero = 0;
  if (integer(cell(zeroColumn), zero))
    plan.zero = static_cast<int>(zero);
  llvm::StringRef recompute = cell("recompute");
  plan.recompute = recompute.starts_with("full")        ? Recompute::Full
                   : recompute.starts_with("selective") ? Recompute::Selective
                                                        : Recompute::None;
  plan.schedule = plan.vpp > 1 ? Schedule::Interleaved : Schedule::OneFOneB;
}

const KnownModel *findKnownModel(llvm::StringRef model) {
  for (const KnownModel &k : kKnownModels)
    if (model.starts_with(k.prefix))
      return &k;
  return nullptr;
}

/// The cluster preset of a corpus `gpu` cell, or "" when there is none.
llvm::StringRef presetOfGpu(llvm::StringRef gpu) {
  return llvm::StringSwitch<llvm::StringRef>(gpu)
      .Case("A100-SXM4-80GB", "a100-80g")
      .Case("H100-SXM5-80GB", "h100")
      .Case("H200-SXM-141GB", "h200")
      .Case("B200", "b200")
      .Case("GB200", "gb200-nvl72")
      .Default("");
}
} // namespace

/// `dataDir`/corpus/`file`, refused unless it has every column of `columns`.
static llvm::Expected<CsvTable>
readCorpusTable(llvm::StringRef dataDir, llvm::StringRef file,
                llvm::ArrayRef<llvm::StringRef> columns) {
  llvm::SmallString<256> path(dataDir);
  llvm::sys::path::append(path, "corpus", file);
  auto table = readCsv(path);
  if (!table)
    return table.takeError();
  for (llvm::StringRef name : columns)
    if (table->column(name) < 0)
      return badInput("{0}: no column '{1}'", path, name);
  return table;
}

llvm::Expected<std::vector<CorpusRun>>
dtc::loadCorpusRuns(llvm::StringRef dataDir,
                    std::vector<std::string> *skipped) {
  auto table = readCorpusTable(
      dataDir, "runs.csv",
      {"source",       "model",     "layers",     "hidden",
       "heads",        "kv_heads",  "ffn_hidden", "seq_len",
       "experts",      "topk",      "gpu",        "num_gpus",
       "tp",           "pp",        "dp",         "cp",
       "ep",           "vpp",       "zero_stage", "micro_batch",
       "global_batch", "recompute", "dtype",      "sequence_parallel",
       "step_time_s",  "lora"});
  if (!table)
    return table.takeError();
  const CsvTable &t = *table;

  std::vector<CorpusRun> result;
  for (const auto &row : t.rows) {
    auto cell = [&](llvm::StringRef name) -> llvm::StringRef {
      int i = t.column(name);
      return i < static_cast<int>(row.size()) ? llvm::StringRef(row[i]).trim()
                                              : "";
    };
    CorpusRun run;
    run.label = cell("source").str();
    run.model = cell("model").str();
    auto skip = [&](const llvm::Twine &why) {
      if (skipped)
        skipped->push_back(run.label + " (" + run.model + "): " + why.str());
    };
    // The publication: an MLPerf round, else the source cell itself.
    llvm::StringRef label = run.label;
    if (label.consume_front("MLPerf Training "))
      run.source = ("MLPerf Training " + label.split(' ').first).str();
    else
      run.source = label.split(' ').first.str();
    if (!parseCsvNumber(cell("step_time_s"), run.measuredStepTimeS)) {
      skip("no step time");
      continue;
    }
    if (cell("lora") == "1") {
      skip("LoRA fine-tuning (a frozen base is not modeled)");
      continue;
    }
    run.clusterPreset = presetOfGpu(cell("gpu")).str();
    if (run.clusterPreset.empty()) {
      skip("no cluster preset for GPU " + cell("gpu"));
      continue;
    }
    TransformerSpec &spec = run.spec;
    spec.name = run.model;
    llvm::StringRef dtype = cell("dtype");
    if (dtype == "fp8")
      spec.dtype = DType::FP8;
    else if (dtype == "bf16")
      spec.dtype = DType::BF16;
    else {
      skip(dtype.empty() ? "its dtype is not stated" : "dtype " + dtype);
      continue;
    }
    const KnownModel *known = findKnownModel(run.model);
    if (!known) {
      skip("no public configuration for the vocabulary");
      continue;
    }
    spec.vocab = known->vocab;
    spec.gatedMlp = known->gated;
    spec.tiedEmbeddings = known->tied;
    ParallelPlan &plan = run.plan;
    int64_t sequenceParallel = 0;
    if (!integer(cell("layers"), spec.layers) ||
        !integer(cell("hidden"), spec.hidden) ||
        !integer(cell("heads"), spec.heads) ||
        !integer(cell("ffn_hidden"), spec.ffnHidden) ||
        !integer(cell("seq_len"), spec.seqLen) ||
        !integer(cell("num_gpus"), run.gpus) || !integer(cell("tp"), plan.tp) ||
        !integer(cell("pp"), plan.pp) || !integer(cell("dp"), plan.dp) ||
        !integer(cell("micro_batch"), plan.microBatch) ||
        !integer(cell("global_batch"), plan.globalBatch)) {
      skip("a model or parallel size is not stated");
      continue;
    }
    if (!integer(cell("kv_heads"), spec.kvHeads))
      spec.kvHeads = 0;
    if (!integer(cell("experts"), spec.experts))
      spec.experts = 1;
    if (!integer(cell("topk"), spec.topK))
      spec.topK = 1;
    readOptionalPlanCells(cell, "zero_stage", plan);
    if (integer(cell("sequence_parallel"), sequenceParallel))
      plan.sequenceParallel = sequenceParallel != 0;
    spec.fp8Weights = cell("fp8_params") == "1";
    result.push_back(std::move(run));
  }
  return result;
}

llvm::Expected<std::vector<CapacityCase>>
dtc::loadCapacityCases(llvm::StringRef dataDir,
                       std::vector<std::string> *skipped) {
  llvm::SmallString<256> path(dataDir);
  llvm::sys::path::append(path, "corpus", "oom_configs.csv");
  auto table = readCorpusTable(dataDir, "oom_configs.csv",
                               {"source",
                                "source_locator",
                                "model",
                                "outcome",
                                "oom_cause",
                                "stated_memory_gb",
                                "gpu",
                                "hbm_gb",
                                "layers",
                                "hidden",
                                "heads",
                                "kv_heads",
                                "ffn_hidden",
                                "vocab",
                                "seq",
                                "tp",
                                "pp",
                                "dp",
                                "cp",
                                "ep",
                                "vpp",
                                "zero",
                                "micro_batch",
                                "global_batch",
                                "dtype",
                                "recompute",
                                "sequence_parallel",
                                "flash_attention",
                                "framework"});
  if (!table)
    return table.takeError();
  const CsvTable &t = *table;

  std::vector<CapacityCase> result;
  for (const auto &row : t.rows) {
    auto cell = [&](llvm::StringRef name) { return t.cell(row, name); };
    CapacityCase c;
    c.label =
        (cell("source").split(' ').first + " " + cell("source_locator")).str();
    c.model = cell("model").str();
    c.framework = cell("framework").str();
    c.gpu = cell("gpu").str();
    auto skip = [&](const llvm::Twine &why) {
      if (skipped)
        skipped->push_back(c.model + " (" + c.label + "): " + why.str());
    };
    llvm::StringRef outcome = cell("outcome");
    if (outcome != "oom" && outcome != "fits" && outcome != "boundary")
      return badInput("{0}: outcome '{1}' is not oom, fits or boundary", path,
                      outcome);
    c.ranOutOfMemory = outcome == "oom";
    c.oomCause = cell("oom_cause").str();
    if (c.ranOutOfMemory && c.oomCause != "capacity" &&
        c.oomCause != "fragmentation" && c.oomCause != "framework")
      return badInput("{0}: {1}: oom_cause '{2}' is not capacity, "
                      "fragmentation or framework",
                      path, c.label, c.oomCause);
    if (!parseCsvNumber(cell("hbm_gb"), c.hbmGB))
      return badInput("{0}: {1} has no hbm_gb", path, c.label);
    if (!parseCsvNumber(cell("stated_memory_gb"), c.statedGB))
      c.statedGB = 0;
    const KnownModel *known = findKnownModel(c.model);
    if (!known) {
      skip("no public configuration for model '" + c.model + "'");
      continue;
    }
    TransformerSpec &spec = c.spec;
    spec.name = c.model;
    std::optional<DType> dtype = parseDType(cell("dtype"));
    if (!dtype) {
      skip("dtype '" + cell("dtype") + "'");
      continue;
    }
    spec.dtype = *dtype;
    spec.gatedMlp = known->gated;
    spec.tiedEmbeddings = known->tied;
    spec.dropout = known->dropout;
    spec.causal = known->causal;
    if (!integer(cell("vocab"), spec.vocab))
      spec.vocab = known->vocab;
    if (!integer(cell("seq"), spec.seqLen))
      spec.seqLen = known->context;
    if (!integer(cell("ffn_hidden"), spec.ffnHidden))
      spec.ffnHidden = 0;
    if (!integer(cell("kv_heads"), spec.kvHeads))
      spec.kvHeads = 0;
    ParallelPlan &plan = c.plan;
    if (!integer(cell("layers"), spec.layers) ||
        !integer(cell("hidden"), spec.hidden) ||
        !integer(cell("heads"), spec.heads) || !integer(cell("tp"), plan.tp) ||
        !integer(cell("pp"), plan.pp) ||
        !integer(cell("micro_batch"), plan.microBatch) || !spec.seqLen) {
      skip("a model or parallel size is not stated");
      continue;
    }
    // A source that gives no replica count ran on one or more GPUs; the
    // per-GPU bytes of plain data parallelism do not depend on how many.
    if (!integer(cell("dp"), plan.dp))
      plan.dp = 1;
    readOptionalPlanCells(cell, "zero", plan);
    // Unstated: enough micro-batches to fill the pipeline, its worst case.
    if (!integer(cell("global_batch"), plan.globalBatch))
      plan.globalBatch = plan.microBatch * plan.dp * plan.pp * plan.vpp;
    plan.sequenceParallel = cell("sequence_parallel") == "yes";
    plan.fusedAttention = cell("flash_attention") != "no";
    result.push_back(std::move(c));
  }
  return result;
}
