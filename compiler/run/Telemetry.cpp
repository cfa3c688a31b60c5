//===- Telemetry.cpp - Traces, per-step figures and guard rails -----------===//

#include "compiler/run/Telemetry.h"

#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace dtc {

namespace rt = runtime;
using rt::TraceClock;

namespace {

/// Track ids of a trace (docs/observability.md).
constexpr int kComputeTrack = 0;
constexpr int kStepTrack = 1;
constexpr int kFirstCommunicationTrack = 2;

std::string quoted(llvm::StringRef text) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::json::Value(text.str());
  return out;
}

int64_t bytesOf(const program::TensorType &type) {
  int64_t n = 1;
  for (int64_t d : type.shape())
    n *= d;
  return n * static_cast<int64_t>(rt::dtypeSize(type.dtype()));
}

std::string typeText(const program::TensorType &type) {
  std::string text;
  for (int64_t d : type.shape())
    text += std::to_string(d) + "x";
  return text + rt::dtypeName(type.dtype()).str();
}

} // namespace

struct TraceWriter::Impl {
  /// What an instruction's events say that does not change from call to
  /// call, rendered once.
  struct Static {
    std::string name;     ///< the event name (starts without "_start")
    std::string args;     ///< ,"function":...: the fixed args
    std::string commArgs; ///< the communication event's fixed args
    int waitIndex = -1;   ///< a start: its wait's instruction index
  };
  std::vector<std::vector<Static>> functions;
  int rank = 0;
  TraceClock::time_point zero;
  std::string path, partial, header;
  std::unique_ptr<llvm::raw_fd_ostream> os;
  bool first = true, closed = false;
  int64_t firstStep = -1, lastStep = -1;
  /// When each communication track is free again.
  std::vector<TraceClock::time_point> lanes;
  struct Interval {
    TraceClock::time_point begin, end;
    const Static *inst;
    int64_t call, microBatch;
  };
  std::vector<Interval> communications;

  double micros(TraceClock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - zero).count();
  }
  void separator() {
    if (!first)
      *os << ",\n";
    first = false;
  }
  void metadata(llvm::StringRef what, int tid, llvm::StringRef name) {
    separator();
    *os << "{\"ph\":\"M\",\"name\":\"" << what << "\",\"pid\":" << rank
        << ",\"tid\":" << tid << ",\"args\":{\"name\":" << quoted(name) << "}}";
  }
  void event(llvm::StringRef category, llvm::StringRef name, int tid,
             TraceClock::time_point begin, TraceClock::time_point end) {
    separator();
    *os << "{\"ph\":\"X\",\"cat\":\"" << category << "\",\"name\":\"" << name
        << "\",\"pid\":" << rank << ",\"tid\":" << tid
        << ",\"ts\":" << llvm::format("%.3f", micros(begin)) << ",\"dur\":"
        << llvm::format("%.3f", std::max(0.0, micros(end) - micros(begin)));
  }
  void dynamicArgs(int64_t step, int64_t call, int64_t microBatch) {
    *os << ",\"args\":{\"step\":" << step << ",\"call\":" << call;
    if (microBatch >= 0)
      *os << ",\"micro_batch\":" << microBatch;
  }
  /// The communication track of an operation from `begin` to `end`.
  int laneOf(TraceClock::time_point begin, TraceClock::time_point end) {
    for (auto [i, free] : llvm::enumerate(lanes))
      if (free <= begin) {
        free = end;
        return kFirstCommunicationTrack + static_cast<int>(i);
      }
    lanes.push_back(end);
    int tid = kFirstCommunicationTrack + static_cast<int>(lanes.size()) - 1;
    metadata("thread_name", tid,
             lanes.size() == 1
                 ? std::string("communication")
                 : "communication " + std::to_string(lanes.size()));
    return tid;
  }
};

TraceWriter::TraceWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TraceWriter::~TraceWriter() {
  if (impl_ && !impl_->closed)
    llvm::consumeError(close("interrupted"));
}

llvm::Expected<std::unique_ptr<TraceWriter>>
TraceWriter::open(llvm::StringRef dir, const program::RankProgram &program,
                  const Identity &identity, TraceClock::time_point zero) {
  auto impl = std::make_unique<Impl>();
  impl->rank = identity.rank;
  impl->zero = zero;
  const rt::Mesh &mesh = *identity.mesh;
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return failure("--trace {0}: cannot create the directory: {1}", dir,
                   ec.message());
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path,
                          llvm::formatv("rank-{0}.trace.json", identity.rank));
  impl->path = path.str().str();
  impl->partial = impl->path + ".partial";
  std::error_code ec;
  impl->os = std::make_unique<llvm::raw_fd_ostream>(impl->partial, ec);
  if (ec)
    return failure("--trace: cannot write {0}: {1}", impl->partial,
                   ec.message());

  // The fixed part of every instruction's events.
  for (const program::Function &f : program.functions()) {
    std::vector<Impl::Static> &statics = impl->functions.emplace_back();
    statics.resize(f.instructions_size());
    llvm::DenseMap<int64_t, int> waitOf; // request -> wait's index
    for (auto [index, inst] : llvm::enumerate(f.instructions()))
      if (inst.op() == "dtc.wait" && inst.attrs().count("request"))
        waitOf[inst.attrs().at("request").i()] = static_cast<int>(index);
    auto types = [&](auto ids, int64_t &bytes) {
      std::string text;
      for (int id : ids) {
        if (id < 0 || id >= f.values_size())
          continue;
        const program::TensorType &t = f.values(id).type();
        text += (text.empty() ? "" : ", ") + typeText(t);
        bytes += bytesOf(t);
      }
      return text;
    };
    for (auto [index, inst] : llvm::enumerate(f.instructions())) {
      Impl::Static &s = statics[index];
      llvm::StringRef op = inst.op();
      int64_t inBytes = 0, outBytes = 0;
      std::string shapes = types(inst.inputs(), inBytes);
      std::string results = types(inst.outputs(), outBytes);
      if (!results.empty())
        shapes += (shapes.empty() ? "-> " : " -> ") + results;
      s.name = op.str();
      std::string common = llvm::formatv(",\"function\":{0},\"index\":{1}",
                                         quoted(f.name()), index)
                               .str();
      if (!inst.loc().empty())
        common += ",\"loc\":" + quoted(inst.loc());
      s.args = common + ",\"shapes\":" + quoted(shapes) +
               ",\"bytes\":" + std::to_string(inBytes + outBytes) + "}}";
      auto request = inst.attrs().find("request");
      if (!op.ends_with("_start") || request == inst.attrs().end())
        continue;
      // The communication: named by its op, with its group and payload.
      auto wait = waitOf.find(request->second.i());
      if (wait == waitOf.end())
        continue;
      s.waitIndex = wait->second;
      std::vector<std::string> axes;
      if (auto a = inst.attrs().find("mesh_axes"); a != inst.attrs().end())
        for (const std::string &axis : a->second.strings().values())
          axes.push_back(axis);
      std::vector<int> ranks;
      if (op == "dtc.send_start" || op == "dtc.recv_start") {
        int64_t offset = inst.attrs().count("peer_offset")
                             ? inst.attrs().at("peer_offset").i()
                             : 0;
        std::optional<int> peer =
            axes.empty() ? std::nullopt
                         : mesh.peer(identity.rank, axes[0], offset);
        ranks = {identity.rank};
        if (peer)
          ranks.push_back(*peer);
      } else if (auto group = mesh.group(identity.rank, axes)) {
        ranks = *group;
      } else {
        llvm::consumeError(group.takeError());
      }
      std::string rankList;
      for (int r : ranks)
        rankList += (rankList.empty() ? "" : ",") + std::to_string(r);
      s.commArgs = common + ",\"wait_index\":" + std::to_string(s.waitIndex) +
                   ",\"request\":" + std::to_string(request->second.i()) +
                   ",\"group\":" + quoted(llvm::join(axes, ",")) +
                   ",\"ranks\":[" + rankList + "],\"bytes\":" +
                   std::to_string(std::max(inBytes, outBytes)) +
                   ",\"shapes\":" + quoted(shapes) + "}}";
    }
  }

  // The header: otherData goes last (close), the events stream.
  llvm::json::Object coordinates;
  std::string title = llvm::formatv("rank {0}", identity.rank).str();
  std::vector<int64_t> at = mesh.coordinates(identity.rank);
  std::string where;
  for (auto [axis, c] : llvm::zip(mesh.axes(), at)) {
    coordinates[axis.name] = c;
    where += (where.empty() ? "" : ", ") + axis.name + " " + std::to_string(c);
  }
  if (!where.empty())
    title += " (" + where + ")";
  llvm::json::Object other{{"schema", "dtc.trace/1"},
                           {"rank", identity.rank},
                           {"world_size", mesh.worldSize()},
                           {"mesh", mesh.str()},
                           {"coordinates", std::move(coordinates)},
                           {"bundle", identity.bundle},
                           {"backend", identity.backend}};
  llvm::raw_string_ostream header(impl->header);
  header << llvm::json::Value(std::move(other));
  *impl->os << "{\"traceEvents\":[\n";
  impl->metadata("process_name", 0, title);
  impl->metadata("thread_name", kComputeTrack, "compute");
  impl->metadata("thread_name", kStepTrack, "steps");
  return std::unique_ptr<TraceWriter>(new TraceWriter(std::move(impl)));
}

llvm::Error TraceWriter::writeStep(int64_t step, TraceClock::time_point begin,
                                   TraceClock::time_point end, double loss,
                                   llvm::ArrayRef<rt::InstructionEvent> events,
                                   llvm::ArrayRef<Call> calls) {
  Impl &t = *impl_;
  if (t.firstStep < 0)
    t.firstStep = step;
  t.lastStep = step;
  t.event("step", llvm::formatv("step {0}", step).str(), kStepTrack, begin,
          end);
  *t.os << ",\"args\":{\"step\":" << step;
  if (std::isfinite(loss))
    *t.os << ",\"loss\":" << llvm::format("%.6g", loss);
  *t.os << "}}";

  t.communications.clear();
  for (const Call &call : calls) {
    // A call runs one function, or (a pipeline step) its chunk functions
    // one after another: each run's events start at its instruction 0.
    size_t runBegin = call.firstEvent;
    for (size_t e = call.firstEvent; e < call.endEvent; ++e) {
      const rt::InstructionEvent &ev = events[e];
      if (ev.instruction == 0)
        runBegin = e;
      if (ev.function < 0 ||
          ev.function >= static_cast<int32_t>(t.functions.size()) ||
          ev.instruction < 0 ||
          ev.instruction >=
              static_cast<int32_t>(t.functions[ev.function].size()))
        continue;
      const Impl::Static &s = t.functions[ev.function][ev.instruction];
      int64_t micro = call.firstMicroBatch < 0 ? -1
                      : ev.microBatch >= 0
                          ? call.firstMicroBatch + ev.microBatch
                          : call.firstMicroBatch;
      t.event("compute", s.name, kComputeTrack, ev.begin, ev.end);
      t.dynamicArgs(step, call.call, micro);
      *t.os << s.args;
      // A start's communication runs until its wait saw it complete (the
      // wait is the same call's event at the wait's instruction index).
      size_t wait = runBegin + static_cast<size_t>(s.waitIndex);
      if (s.waitIndex >= 0 && wait < call.endEvent)
        t.communications.push_back({ev.begin,
                                    std::max(events[wait].completed, ev.begin),
                                    &s, call.call, micro});
    }
  }
  llvm::sort(t.communications,
             [](const Impl::Interval &a, const Impl::Interval &b) {
               return a.begin < b.begin;
             });
  for (const Impl::Interval &c : t.communications) {
    int tid = t.laneOf(c.begin, c.end);
    llvm::StringRef name(c.inst->name);
    t.event("communication", name.drop_back(llvm::StringRef("_start").size()),
            tid, c.begin, c.end);
    t.dynamicArgs(step, c.call, c.microBatch);
    *t.os << c.inst->commArgs;
  }
  if (t.os->has_error())
    return failure("--trace: cannot write {0}: {1}; make room there (or "
                   "pass another --trace DIR); the .partial file is kept",
                   t.partial, t.os->error().message());
  return llvm::Error::success();
}

llvm::Error TraceWriter::close(llvm::StringRef status) {
  Impl &t = *impl_;
  if (t.closed)
    return llvm::Error::success();
  t.closed = true;
  // otherData: the header with the steps and the status added.
  std::string other = t.header;
  other.pop_back(); // the closing brace
  other +=
      llvm::formatv(",\"first_step\":{0},\"last_step\":{1},\"status\":{2}}",
                    t.firstStep, t.lastStep, quoted(status))
          .str();
  *t.os << "\n],\"displayTimeUnit\":\"ms\",\"otherData\":" << other << "}\n";
  t.os->close();
  if (t.os->has_error()) {
    std::string message = t.os->error().message();
    t.os->clear_error();
    return failure("--trace: cannot write {0}: {1}; make room there (or "
                   "pass another --trace DIR); the .partial file is kept",
                   t.partial, message);
  }
  if (std::error_code ec = llvm::sys::fs::rename(t.partial, t.path))
    return failure("--trace: cannot rename {0}: {1}", t.partial, ec.message());
  return llvm::Error::success();
}

llvm::Expected<std::vector<double>>
gatherFromRanks(rt::Communicator *communicator, rt::MemorySpace &memory,
                llvm::ArrayRef<double> values) {
  if (!communicator)
    return std::vector<double>(values.begin(), values.end());
  const rt::Mesh &mesh = communicator->mesh();
  std::vector<std::string> axes;
  for (const rt::Mesh::Axis &axis : mesh.axes())
    axes.push_back(axis.name);
  int64_t n = static_cast<int64_t>(values.size());
  rt::Tensor in(rt::DType::F64, {1, n});
  std::copy(values.begin(), values.end(), in.as<double>());
  rt::Tensor out(rt::DType::F64, {mesh.worldSize(), n});
  rt::Tensor deviceIn = in, deviceOut = out;
  if (!memory.isHost()) {
    auto a = rt::Tensor::allocate(rt::DType::F64, {1, n}, memory);
    if (!a)
      return a.takeError();
    auto b =
        rt::Tensor::allocate(rt::DType::F64, {mesh.worldSize(), n}, memory);
    if (!b)
      return b.takeError();
    deviceIn = std::move(*a);
    deviceOut = std::move(*b);
    if (llvm::Error e =
            memory.copyToDevice(deviceIn.data(), in.data(), in.bytes()))
      return std::move(e);
  }
  // Over every axis, the group is the world in rank order.
  auto request =
      communicator->allGather(axes, deviceIn.ref(), deviceOut.ref(), /*dim=*/0,
                              /*block=*/0);
  if (!request)
    return request.takeError();
  if (llvm::Error e = communicator->wait(*request))
    return std::move(e);
  if (!memory.isHost())
    if (llvm::Error e =
            memory.copyToHost(out.data(), deviceOut.data(), out.bytes()))
      return std::move(e);
  return std::vector<double>(out.as<double>(),
                             out.as<double>() + out.numElements());
}

llvm::Expected<TraceClock::time_point>
agreeOnTimeZero(rt::Communicator *communicator, rt::MemorySpace &memory) {
  TraceClock::time_point steady = TraceClock::now();
  // Microseconds since 1970 are exact in a double.
  double wall = std::chrono::duration<double, std::micro>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  auto all = gatherFromRanks(communicator, memory, {std::floor(wall)});
  if (!all)
    return all.takeError();
  double earliest = *std::min_element(all->begin(), all->end());
  return steady - std::chrono::duration_cast<TraceClock::duration>(
                      std::chrono::duration<double, std::micro>(
                          std::floor(wall) - earliest));
}

std::vector<double> flattenMoeRouting(const rt::MoeRoutingStats &stats,
                                      int64_t layers, int64_t experts,
                                      bool counts) {
  const int64_t width = experts + 3;
  std::vector<double> flat(layers * width, 0.0);
  if (!counts)
    return flat;
  for (const auto &[layer, figures] : stats.layers) {
    if (layer < 0 || layer >= layers)
      continue;
    double *row = flat.data() + layer * width;
    for (int64_t e = 0;
         e < experts && e < static_cast<int64_t>(figures.expertChoices.size());
         ++e)
      row[e] = figures.expertChoices[e];
    row[experts] = figures.dropped;
    row[experts + 1] = figures.auxSum;
    row[experts + 2] = figures.sequences;
  }
  return flat;
}

MoeStepFigures summarizeMoeRouting(llvm::ArrayRef<double> allRanks,
                                   int64_t layers, int64_t experts) {
  const int64_t width = experts + 3;
  std::vector<double> total(layers * width, 0.0);
  for (size_t i = 0; i < allRanks.size(); ++i)
    total[i % total.size()] += allRanks[i];
  MoeStepFigures f;
  double choices = 0, dropped = 0, aux = 0, sequences = 0;
  for (int64_t l = 0; l < layers; ++l) {
    const double *row = total.data() + l * width;
    std::vector<double> tokens(row, row + experts);
    double sum = 0, busiest = 0;
    for (double t : tokens) {
      sum += t;
      busiest = std::max(busiest, t);
    }
    if (sum > 0)
      f.imbalance = std::max(f.imbalance, busiest / (sum / experts) - 1);
    choices += sum;
    dropped += row[experts];
    aux += row[experts + 1];
    sequences += row[experts + 2];
    f.expertTokens.push_back(std::move(tokens));
  }
  f.dropRate = choices > 0 ? dropped / choices : 0;
  f.auxLoss = sequences > 0 ? aux / sequences : 0;
  return f;
}

llvm::json::Object MoeStepFigures::toJson() const {
  llvm::json::Array layers;
  for (const std::vector<double> &tokens : expertTokens) {
    llvm::json::Array counts;
    for (double t : tokens)
      counts.push_back(static_cast<int64_t>(std::llround(t)));
    layers.push_back(std::move(counts));
  }
  return llvm::json::Object{{"expert_tokens", std::move(layers)},
                            {"drop_rate", dropRate},
                            {"aux_loss", auxLoss},
                            {"imbalance", imbalance}};
}

int64_t peakResidentBytes() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024; // Linux: KiB
}

llvm::Expected<std::optional<NonFinite>> findNonFinite(rt::Executor &executor,
                                                       llvm::StringRef role) {
  for (auto [index, v] : llvm::enumerate(executor.program().variables())) {
    if (v.role() != role)
      continue;
    rt::Tensor copy;
    const rt::Tensor *t = executor.variable(v.name());
    if (!t) {
      auto read = executor.readVariable(v.name());
      if (!read)
        return read.takeError();
      copy = std::move(*read);
      t = &copy;
    }
    rt::DType dtype = t->dtype();
    if (dtype != rt::DType::F32 && dtype != rt::DType::F16 &&
        dtype != rt::DType::BF16 && dtype != rt::DType::F64)
      continue;
    const int64_t n = t->numElements();
    auto element = [&](int64_t i) {
      return dtype == rt::DType::F64 ? t->as<double>()[i]
             : dtype == rt::DType::F32
                 ? static_cast<double>(t->as<float>()[i])
                 : static_cast<double>(rt::loadAsFloat(t->ref(), i));
    };
    if (dtype == rt::DType::F32) {
      // The common case, every step: a float is NaN or Inf exactly when its
      // exponent bits are all ones, and an integer max over a block (which
      // vectorizes, unlike a float test) finds whether the block holds one
      // (22 ms for 124 MB here).
      const char *data = static_cast<const char *>(t->data());
      constexpr int64_t kBlock = 4096;
      for (int64_t begin = 0; begin < n; begin += kBlock) {
        int64_t end = std::min(n, begin + kBlock);
        uint32_t largest = 0;
        for (int64_t i = begin; i < end; ++i) {
          uint32_t bits;
          std::memcpy(&bits, data + 4 * i, 4);
          largest = std::max(largest, bits & 0x7fffffffu);
        }
        if (largest < 0x7f800000u)
          continue;
        for (int64_t i = begin; i < end; ++i)
          if (!std::isfinite(element(i)))
            return NonFinite{static_cast<int>(index), i, element(i)};
      }
      continue;
    }
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(element(i)))
        return NonFinite{static_cast<int>(index), i, element(i)};
  }
  return std::nullopt;
}

StragglerWatch::StragglerWatch(double factor,
                               std::vector<std::vector<int>> peers)
    : factor_(factor), peers_(std::move(peers)), total_(peers_.size(), 0),
      named_(peers_.size(), false) {}

std::vector<std::string>
StragglerWatch::addStep(int64_t step, llvm::ArrayRef<double> computeSeconds) {
  std::vector<std::string> warnings;
  if (factor_ <= 0 || computeSeconds.size() != total_.size())
    return warnings;
  // The first step a watch sees warms caches and allocators: skip it.
  if (firstStep_ == 0) {
    firstStep_ = step;
    return warnings;
  }
  for (size_t r = 0; r < total_.size(); ++r)
    total_[r] += computeSeconds[r];
  if (++steps_ < 2)
    return warnings;
  for (size_t r = 0; r < total_.size(); ++r) {
    if (named_[r])
      continue;
    std::vector<double> others;
    for (int peer : peers_[r])
      if (peer != static_cast<int>(r))
        others.push_back(total_[peer]);
    if (others.empty())
      continue;
    std::nth_element(others.begin(), others.begin() + others.size() / 2,
                     others.end());
    double median = others[others.size() / 2];
    double mine = total_[r], perStep = static_cast<double>(steps_);
    // Also 1 ms per step slower in absolute terms: tiny steps are noisy.
    if (mine > factor_ * median && (mine - median) / perStep > 1e-3) {
      named_[r] = true;
      warnings.push_back(
          llvm::formatv("rank {0} is a straggler: {1:f1} ms of compute per "
                        "step, x{2:f2} the median of the {3} other rank(s) "
                        "running its program ({4:f1} ms; steps {5}-{6}, "
                        "--straggler-factor {7})",
                        r, 1e3 * mine / perStep, mine / std::max(median, 1e-12),
                        others.size(), 1e3 * median / perStep, firstStep_ + 1,
                        step, factor_)
              .str());
    }
  }
  return warnings;
}

} // namespace dtc
