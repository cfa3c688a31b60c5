//===- RankShow.cpp - dtc plan show --rank: one rank's program ------------===//
//
// Summarizes the program that one rank runs, from the bundle's program.pb:
// its place in the program's mesh and pipeline, its variables by role, and
// per function the compute by op, the collectives by kind and group, the
// point-to-point transfers and the arena. Plain counting over the protobuf;
// nothing is run.
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/Inspect.h"
#include "compiler/inspect/InstructionCost.h"

#include "compiler/support/ProgramFile.h"
#include "runtime/support/Error.h"

#include "runtime/core/Communicator.h"
#include "runtime/core/Shard.h"
#include "runtime/core/Tensor.h"
#include "runtime/proto/program.pb.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <map>

using namespace dtc;

static int64_t dtypeBytes(program::DType dtype) {
  return static_cast<int64_t>(runtime::dtypeSize(dtype));
}

static int64_t typeBytes(const program::TensorType &type) {
  int64_t elements = 1;
  for (int64_t dim : type.shape())
    elements *= dim;
  return elements * dtypeBytes(type.dtype());
}

/// The "dtc." prefix adds nothing in a summary.
static std::string shortOp(llvm::StringRef op) {
  op.consume_front("dtc.");
  return op.str();
}

/// Sorted by count, most first; ties by name.
static std::vector<std::pair<std::string, int64_t>>
byCount(const std::map<std::string, int64_t> &counts) {
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(),
                                                      counts.end());
  llvm::stable_sort(
      sorted, [](const auto &a, const auto &b) { return a.second > b.second; });
  return sorted;
}

static FunctionSummary summarizeFunction(const program::Function &fn) {
  FunctionSummary s;
  s.name = fn.name();
  s.instructions = fn.instructions_size();
  s.arenaBytes = fn.arena_bytes();
  s.liveBytesPeak = fn.live_bytes_peak();
  s.temporariesBytes = fn.temporaries_bytes();
  llvm::DenseMap<int32_t, int64_t> bytesOf;
  for (const program::Value &value : fn.values())
    bytesOf[value.id()] = typeBytes(value.type());
  auto bytes = [&](llvm::ArrayRef<int32_t> ids) -> int64_t {
    return ids.empty() ? 0 : bytesOf.lookup(ids.front());
  };

  std::map<std::string, int64_t> ops;
  // Keyed by (kind, axes) and (kind, axis, offset): std::map keeps the
  // output order independent of the program's.
  std::map<std::pair<std::string, std::string>, CollectiveSummary> colls;
  std::map<std::tuple<std::string, std::string, int64_t>, TransferSummary>
      transfers;
  for (const program::Instruction &inst : fn.instructions()) {
    std::string op = shortOp(inst.op());
    if (op == "wait") {
      ++s.waits;
      continue;
    }
    llvm::StringRef kind(op);
    if (!kind.consume_back("_start")) {
      ++s.compute;
      ++ops[op];
      continue;
    }
    llvm::SmallVector<std::string, 2> axes;
    auto found = inst.attrs().find("mesh_axes");
    if (found != inst.attrs().end())
      for (const std::string &axis : found->second.strings().values())
        axes.push_back(axis);
    std::string group = llvm::join(axes, ",");
    if (kind == "send" || kind == "recv") {
      int64_t offset = 0;
      auto peer = inst.attrs().find("peer_offset");
      if (peer != inst.attrs().end())
        offset = peer->second.i();
      TransferSummary &t = transfers[{kind.str(), group, offset}];
      t.kind = kind.str();
      t.axis = group;
      t.peerOffset = offset;
      ++t.count;
      // A send's payload is its input, a recv's the tensor it fills.
      t.bytes +=
          kind == "send"
              ? bytes(llvm::ArrayRef(inst.inputs().data(), inst.inputs_size()))
              : bytes(
                    llvm::ArrayRef(inst.outputs().data(), inst.outputs_size()));
      ++s.transfers;
      continue;
    }
    CollectiveSummary &c = colls[{kind.str(), group}];
    c.kind = kind.str();
    c.axes = group;
    ++c.count;
    // What this rank puts in: the input buffer.
    int64_t size =
        bytes(llvm::ArrayRef(inst.inputs().data(), inst.inputs_size()));
    c.bytes += size;
    ++c.bySize[size];
    ++s.collectives;
  }
  s.ops = byCount(ops);
  for (auto &[key, c] : colls)
    s.collectiveGroups.push_back(std::move(c));
  for (auto &[key, t] : transfers)
    s.transferGroups.push_back(std::move(t));
  return s;
}

llvm::Expected<std::optional<RankProgramSummary>>
dtc::summarizeRankProgram(llvm::StringRef bundle, int64_t rank) {
  llvm::SmallString<256> path(bundle);
  llvm::sys::path::append(path, "program.pb");
  if (!llvm::sys::fs::exists(path))
    return std::nullopt;
  auto read = readBundleProgram(bundle, "program.pb", "");
  if (!read)
    return read.takeError();
  program::Program proto = std::move(*read);
  int64_t world = std::max<int64_t>(proto.world_size(), 1);
  if (rank < 0 || rank >= world)
    return badInput("--rank {0}: {1} has {2} ranks, 0 to {3}", rank, path,
                    world, world - 1);
  auto mesh = runtime::Mesh::parse(proto.mesh());
  if (!mesh)
    return badInput("{0}: mesh \"{1}\": {2}", path, proto.mesh(),
                    llvm::toString(mesh.takeError()));
  if (mesh->worldSize() != world)
    return badInput("{0}: mesh \"{1}\" has {2} ranks but world size is {3}",
                    path, proto.mesh(), mesh->worldSize(), world);

  const program::RankProgram *mine = runtime::rankProgramOf(proto, rank);
  if (!mine)
    return badInput("{0} holds no program for rank {1}; recompile the bundle "
                    "with 'dtc compile'",
                    path, rank);

  RankProgramSummary s;
  s.path = std::string(path);
  s.mode = proto.mode();
  s.mesh = proto.mesh();
  s.worldSize = world;
  s.rank = rank;
  if (mine->ranks_size() == 0)
    s.sharedWith.push_back(mine->rank());
  else
    s.sharedWith.assign(mine->ranks().begin(), mine->ranks().end());
  llvm::sort(s.sharedWith);
  std::vector<int64_t> coords = mesh->coordinates(rank);
  for (auto [axis, coord] : llvm::zip(mesh->axes(), coords)) {
    s.coordinates.push_back({axis.name, coord});
    if (axis.name == "pp") {
      s.stage = coord;
      s.stages = axis.size;
    }
  }

  // Roles in the order a training step creates them; unknown ones after.
  static const char *const kRoles[] = {"parameter", "grad", "exp_avg",
                                       "exp_avg_sq"};
  std::map<std::string, RoleSummary> roles;
  for (const program::Variable &var : mine->variables()) {
    RoleSummary &r = roles[var.role().empty() ? "other" : var.role()];
    ++r.count;
    r.bytes += typeBytes(var.type());
    ++s.variables;
    s.variableBytes += typeBytes(var.type());
  }
  for (const char *role : kRoles) {
    auto it = roles.find(role);
    if (it == roles.end())
      continue;
    it->second.role = role;
    s.roles.push_back(it->second);
    roles.erase(it);
  }
  for (auto &[role, r] : roles) {
    r.role = role;
    s.roles.push_back(r);
  }
  s.constants = mine->constants_size();
  const int64_t microBatches =
      std::max<int64_t>(1, proto.training().micro_batches_per_call());
  for (const program::Function &fn : mine->functions()) {
    if (!fn.has_pipeline()) {
      s.functions.push_back(summarizeFunction(fn));
      continue;
    }
    // A pipeline step holds no instructions: what one step runs is its
    // schedule over the chunk functions.
    auto step = expandPipelineStep(*mine, fn, microBatches);
    if (!step)
      return step.takeError();
    FunctionSummary summary = summarizeFunction(step->function);
    const program::Pipeline &p = fn.pipeline();
    summary.schedule =
        llvm::formatv("{0}{1} over {2} micro-batches, stage {3} of {4}",
                      p.virtual_stages() > 1 ? "interleaved " : "",
                      p.schedule(), microBatches, p.stage(), p.stages())
            .str();
    // Each function run starts at its instruction 0; the last is the loss.
    for (const InstructionOrigin &origin : step->origins)
      if (origin.function && origin.index == 0)
        ++summary.passes;
    summary.passes = std::max<int64_t>(0, summary.passes - 1);
    s.functions.push_back(std::move(summary));
  }
  return s;
}

/// "4 x 8.19 KB" when every buffer has one size, else the sizes (largest
/// first, at most three) and the total.
static std::string formatSizes(const CollectiveSummary &c) {
  if (c.bySize.size() == 1)
    return llvm::formatv("{0} x {1}", c.count,
                         formatBytes(c.bySize.begin()->first))
        .str();
  llvm::SmallVector<std::string, 4> parts;
  for (auto [size, count] : llvm::reverse(c.bySize)) {
    if (parts.size() == 3) {
      parts.push_back("...");
      break;
    }
    parts.push_back(llvm::formatv("{0} x {1}", count, formatBytes(size)));
  }
  return llvm::formatv("{0} ({1}; {2} in all)", c.count,
                       llvm::join(parts, ", "), formatBytes(c.bytes))
      .str();
}

static std::string formatPeer(const TransferSummary &t) {
  return llvm::formatv("{0}{1}{2}", t.axis, t.peerOffset < 0 ? "" : "+",
                       t.peerOffset)
      .str();
}

void dtc::printRankProgram(const RankProgramSummary &s,
                           llvm::raw_ostream &out) {
  llvm::SmallVector<std::string, 4> coords;
  for (const auto &[axis, coord] : s.coordinates)
    coords.push_back(llvm::formatv("{0}={1}", axis, coord).str());
  std::string where =
      s.mesh.empty()
          ? std::string("one rank, no mesh")
          : llvm::formatv("{0} in mesh {1}", llvm::join(coords, " "), s.mesh)
                .str();
  std::string stage =
      s.stage
          ? llvm::formatv("pipeline stage {0} of {1}", *s.stage, s.stages).str()
          : std::string("no pipeline");
  std::vector<int64_t> shared(s.sharedWith.begin(), s.sharedWith.end());
  std::string sharing =
      shared.size() == 1 ? std::string("a program of its own")
                         : "program shared by ranks " + formatRanks(shared, 4);
  out << llvm::formatv("position  {0}; {1}; {2}\n", where, stage, sharing);

  llvm::SmallVector<std::string, 4> roles;
  for (const RoleSummary &r : s.roles)
    roles.push_back(
        llvm::formatv("{0} {1} {2}", r.count, r.role, formatBytes(r.bytes))
            .str());
  std::string byRole = llvm::join(roles, ", ");
  out << llvm::formatv("program   {0} mode, world size {1}: {2} variables "
                       "({3}{4}{5}), {6} constants\n",
                       s.mode, s.worldSize, s.variables, byRole,
                       byRole.empty() ? "" : "; ", formatBytes(s.variableBytes),
                       s.constants);
  for (const FunctionSummary &fn : s.functions) {
    if (!fn.schedule.empty())
      out << llvm::formatv("  {0,-14} schedule {1}: {2} passes; per step {3} "
                           "instructions ({4} compute, {5} collective{6}, {7} "
                           "send/recv, {8} wait{9})\n",
                           fn.name, fn.schedule, fn.passes, fn.instructions,
                           fn.compute, fn.collectives,
                           fn.collectives == 1 ? "" : "s", fn.transfers,
                           fn.waits, fn.waits == 1 ? "" : "s");
    else
      out << llvm::formatv("  {0,-14} {1} instructions ({2} compute, {3} "
                           "collective{4}, {5} send/recv, {6} wait{7}), arena "
                           "{8}, live peak {9}\n",
                           fn.name, fn.instructions, fn.compute, fn.collectives,
                           fn.collectives == 1 ? "" : "s", fn.transfers,
                           fn.waits, fn.waits == 1 ? "" : "s",
                           formatBytes(fn.arenaBytes),
                           formatBytes(fn.liveBytesPeak));
    llvm::SmallVector<std::string, 8> top;
    for (const auto &[op, count] : llvm::ArrayRef(fn.ops).take_front(6))
      top.push_back(llvm::formatv("{0} {1}", count, op).str());
    if (fn.ops.size() > 6)
      top.push_back(llvm::formatv("... ({0} kinds)", fn.ops.size()).str());
    if (!top.empty())
      out << "    compute     " << llvm::join(top, ", ") << "\n";
    for (const CollectiveSummary &c : fn.collectiveGroups)
      out << llvm::formatv("    collective  {0} over {1}: {2}\n", c.kind,
                           c.axes.empty() ? std::string("all ranks") : c.axes,
                           formatSizes(c));
    for (const TransferSummary &t : fn.transferGroups)
      out << llvm::formatv("    {0,-11} {1} {2} {3}: {4}\n", t.kind, t.count,
                           t.kind == "send" ? "to" : "from", formatPeer(t),
                           formatBytes(t.bytes));
  }
}
