//===- CollectiveMpiTest.cpp - The collective kernels over MPI ------------===//
//
// Run under mpirun with the mesh as argument (ctest does, see
// CMakeLists.txt): every rank builds collective instructions by hand, runs
// them through the CPU registry's kernels with an MpiCommunicator, and checks
// the results against expectations computed here from the known inputs of
// every rank (element i of rank r's input is 100 * r + i), with this file's
// own group arithmetic. A plain main: any failed check makes the rank exit
// nonzero, which fails mpirun.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/CollectiveKernels.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/mpi/MpiCommunicator.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <tuple>

using namespace dtc;
using namespace dtc::runtime;

namespace {

int checks = 0, failures = 0;
int worldRank = 0;

void check(bool ok, const llvm::Twine &what) {
  ++checks;
  if (!ok) {
    ++failures;
    llvm::errs() << "rank " << worldRank << ": FAILED: " << what << "\n";
  }
}

/// Checks that `err` is an error whose message contains `needle`.
void checkError(llvm::Error err, llvm::StringRef needle,
                const llvm::Twine &what) {
  if (!err) {
    check(false, what + ": expected an error containing '" + needle + "'");
    return;
  }
  std::string message = llvm::toString(std::move(err));
  check(llvm::StringRef(message).contains(needle),
        what + ": error '" + message + "' lacks '" + needle + "'");
}

void checkOk(llvm::Error err, const llvm::Twine &what) {
  if (err)
    check(false, what + ": " + llvm::toString(std::move(err)));
  else
    check(true, what);
}

//===----------------------------------------------------------------------===//
// Independent mesh arithmetic (not Mesh's)
//===----------------------------------------------------------------------===//

struct TestMesh {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  int world = 1;

  int64_t coord(int rank, size_t axis) const {
    int64_t stride = 1;
    for (size_t a = axis + 1; a < sizes.size(); ++a)
      stride *= sizes[a];
    return rank / stride % sizes[axis];
  }
  bool inAxes(size_t axis, const std::vector<std::string> &axes) const {
    return std::find(axes.begin(), axes.end(), names[axis]) != axes.end();
  }
  /// The ranks equal to `rank` outside `axes`, ascending: row-major ranks
  /// with the other coordinates fixed ascend with the group coordinates in
  /// mesh order, which is the group order.
  std::vector<int> group(int rank, const std::vector<std::string> &axes) const {
    std::vector<int> ranks;
    for (int q = 0; q < world; ++q) {
      bool same = true;
      for (size_t a = 0; a < sizes.size(); ++a)
        if (!inAxes(a, axes) && coord(q, a) != coord(rank, a))
          same = false;
      if (same)
        ranks.push_back(q);
    }
    return ranks;
  }
  /// The rank at `offset` along `axis`, or -1.
  int peer(int rank, const std::string &axis, int64_t offset) const {
    for (size_t a = 0; a < sizes.size(); ++a) {
      if (names[a] != axis)
        continue;
      int64_t c = coord(rank, a) + offset;
      if (c < 0 || c >= sizes[a])
        return -1;
      int64_t stride = 1;
      for (size_t b = a + 1; b < sizes.size(); ++b)
        stride *= sizes[b];
      return static_cast<int>(rank + offset * stride);
    }
    return -1;
  }
};

std::vector<int64_t> unravel(int64_t flat, llvm::ArrayRef<int64_t> shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

int64_t ravel(llvm::ArrayRef<int64_t> index, llvm::ArrayRef<int64_t> shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + index[d];
  return flat;
}

/// Rank q's input element i.
double inputValue(int q, int64_t i) { return 100.0 * q + i; }

Tensor makeInput(int q, DType dtype, llvm::ArrayRef<int64_t> shape) {
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    double v = inputValue(q, i);
    switch (dtype) {
    case DType::F32:
      t.as<float>()[i] = static_cast<float>(v);
      break;
    case DType::F64:
      t.as<double>()[i] = v;
      break;
    case DType::I64:
      t.as<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    case DType::I32:
      t.as<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    default:
      break;
    }
  }
  return t;
}

double element(const Tensor &t, int64_t i) {
  switch (t.dtype()) {
  case DType::F32:
    return t.as<float>()[i];
  case DType::F64:
    return t.as<double>()[i];
  case DType::I64:
    return static_cast<double>(t.as<int64_t>()[i]);
  case DType::I32:
    return t.as<int32_t>()[i];
  default:
    return NAN;
  }
}

/// Fills `t` with a value no expectation has, so unwritten elements show.
void poison(Tensor &t) {
  for (int64_t i = 0; i < t.numElements(); ++i)
    if (t.dtype() == DType::F32)
      t.as<float>()[i] = -12345.0f;
}

/// Compares every element of `t` with expected(i); reports the first miss.
void checkTensor(const Tensor &t,
                 const std::function<double(int64_t)> &expected,
                 const std::string &what) {
  for (int64_t i = 0; i < t.numElements(); ++i) {
    double want = expected(i), got = element(t, i);
    if (want != got) {
      check(false, what + ": element " + llvm::Twine(i) + " is " +
                       std::to_string(got) + ", expected " +
                       std::to_string(want));
      return;
    }
  }
  check(true, what);
}

//===----------------------------------------------------------------------===//
// Running instructions through the kernels
//===----------------------------------------------------------------------===//

struct Harness {
  TestMesh mesh;
  int rank = 0;
  KernelRegistry registry;
  ExecutionContext context;
  int64_t nextRequest = 100;

  llvm::Error run(const program::Instruction &inst,
                  llvm::ArrayRef<TensorRef> inputs,
                  llvm::MutableArrayRef<TensorRef> outputs,
                  ExecutionContext *ctx) {
    KernelFn fn = registry.lookup(inst.op());
    if (!fn)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "no kernel for " + inst.op());
    KernelCall call(inst, inputs, outputs, ctx);
    return fn(call);
  }
  llvm::Error run(const program::Instruction &inst,
                  llvm::ArrayRef<TensorRef> inputs,
                  llvm::MutableArrayRef<TensorRef> outputs) {
    return run(inst, inputs, outputs, &context);
  }

  /// dtc.wait of `request` on `buffer` (none for a send).
  llvm::Error wait(int64_t request, const Tensor *buffer);

  /// Start + wait of a collective from `in` into `out`.
  llvm::Error collective(program::Instruction inst, const Tensor &in,
                         Tensor &out) {
    int64_t request = nextRequest++;
    (*inst.mutable_attrs())["request"].set_i(request);
    TensorRef ins[] = {in.ref()};
    TensorRef outs[] = {out.ref()};
    if (auto err = run(inst, ins, outs))
      return err;
    return wait(request, &out);
  }
};

program::Instruction
instruction(llvm::StringRef op, const std::vector<std::string> &axes,
            std::initializer_list<std::pair<const char *, int64_t>> ints = {},
            llvm::StringRef reduction = "") {
  program::Instruction inst;
  inst.set_op(op.str());
  inst.set_loc("test");
  auto &attrs = *inst.mutable_attrs();
  auto *strings = attrs["mesh_axes"].mutable_strings();
  for (const std::string &axis : axes)
    strings->add_values(axis);
  for (auto [name, value] : ints)
    attrs[name].set_i(value);
  if (!reduction.empty())
    attrs["reduction"].set_s(reduction.str());
  return inst;
}

llvm::Error Harness::wait(int64_t request, const Tensor *buffer) {
  program::Instruction inst =
      instruction("dtc.wait", {}, {{"request", request}});
  if (!buffer)
    return run(inst, {}, {});
  TensorRef ins[] = {buffer->ref()};
  TensorRef outs[] = {buffer->ref()};
  return run(inst, ins, outs);
}

std::string axesText(const std::vector<std::string> &axes) {
  return "[" + llvm::join(axes, ",") + "]";
}

//===----------------------------------------------------------------------===//
// The tests
//===----------------------------------------------------------------------===//

void testAllReduce(Harness &h, const std::vector<std::string> &axes) {
  std::vector<int> group = h.mesh.group(h.rank, axes);
  llvm::SmallVector<int64_t> shape = {3, 5};
  struct Case {
    DType dtype;
    const char *reduction;
  };
  for (Case c :
       {Case{DType::F32, "sum"}, Case{DType::F32, "max"},
        Case{DType::F32, "min"}, Case{DType::F32, ""}, Case{DType::F64, "sum"},
        Case{DType::I64, "max"}, Case{DType::I32, "sum"}}) {
    Tensor in = makeInput(h.rank, c.dtype, shape);
    Tensor out(c.dtype, shape);
    poison(out);
    std::string what = "all_reduce " + std::string(c.reduction) + " " +
                       dtypeName(c.dtype).str() + " over " + axesText(axes);
    if (auto err = h.collective(
            instruction("dtc.all_reduce_start", axes, {}, c.reduction), in,
            out)) {
      check(false, what + ": " + llvm::toString(std::move(err)));
      continue;
    }
    llvm::StringRef red = c.reduction;
    checkTensor(
        out,
        [&](int64_t i) {
          double acc = red == "min" ? 1e30 : red == "max" ? -1e30 : 0;
          for (int q : group) {
            double v = inputValue(q, i);
            acc = red == "min"   ? std::min(acc, v)
                  : red == "max" ? std::max(acc, v)
                                 : acc + v;
          }
          return acc;
        },
        what);
  }
}

/// The source of element `o` of an all-gather's result (shape `out`) along
/// `dim` with `block` (0: plain) over a group of n: the group position and
/// the flat index into that rank's input.
std::pair<int64_t, int64_t> gatherSource(llvm::ArrayRef<int64_t> out, int64_t o,
                                         int64_t dim, int64_t block,
                                         int64_t n) {
  std::vector<int64_t> index = unravel(o, out);
  int64_t size = out[dim], b = block ? block : size, run = b / n;
  int64_t k = index[dim] / b, w = index[dim] % b;
  int64_t position = w / run;
  std::vector<int64_t> inShape(out.begin(), out.end());
  inShape[dim] = size / n;
  index[dim] = k * run + w % run;
  return {position, ravel(index, inShape)};
}

struct SplitCase {
  int64_t dim, block;
  llvm::SmallVector<int64_t> partShape; // the per-rank part
  int64_t wholeFactorDim;               // dim scaled by n in the whole
};

std::vector<SplitCase> splitCases(int64_t n) {
  return {{0, 0, {2, 3}, 0},
          {1, 0, {2, 3}, 1},
          // dim 1 read as [3, 2n], each rank's run of 2 per block.
          {1, 2 * n, {2, 6, 2}, 1}};
}

void testAllGather(Harness &h, const std::vector<std::string> &axes) {
  std::vector<int> group = h.mesh.group(h.rank, axes);
  int64_t n = group.size();
  for (const SplitCase &c : splitCases(n)) {
    llvm::SmallVector<int64_t> whole = c.partShape;
    whole[c.dim] *= n;
    Tensor in = makeInput(h.rank, DType::F32, c.partShape);
    Tensor out(DType::F32, whole);
    poison(out);
    std::string what = "all_gather dim " + std::to_string(c.dim) + " block " +
                       std::to_string(c.block) + " over " + axesText(axes);
    if (auto err =
            h.collective(instruction("dtc.all_gather_start", axes,
                                     {{"dim", c.dim}, {"block", c.block}}),
                         in, out)) {
      check(false, what + ": " + llvm::toString(std::move(err)));
      continue;
    }
    checkTensor(
        out,
        [&](int64_t o) {
          auto [position, i] = gatherSource(whole, o, c.dim, c.block, n);
          return inputValue(group[position], i);
        },
        what);
  }
}

void testReduceScatter(Harness &h, const std::vector<std::string> &axes) {
  std::vector<int> group = h.mesh.group(h.rank, axes);
  int64_t n = group.size();
  int64_t me = std::find(group.begin(), group.end(), h.rank) - group.begin();
  for (const char *reduction : {"sum", "max"})
    for (const SplitCase &c : splitCases(n)) {
      llvm::SmallVector<int64_t> whole = c.partShape;
      whole[c.dim] *= n;
      Tensor in = makeInput(h.rank, DType::F32, whole);
      Tensor out(DType::F32, c.partShape);
      poison(out);
      std::string what = "reduce_scatter " + std::string(reduction) + " dim " +
                         std::to_string(c.dim) + " block " +
                         std::to_string(c.block) + " over " + axesText(axes);
      if (auto err = h.collective(
              instruction("dtc.reduce_scatter_start", axes,
                          {{"dim", c.dim}, {"block", c.block}}, reduction),
              in, out)) {
        check(false, what + ": " + llvm::toString(std::move(err)));
        continue;
      }
      // Element o of my part is the element of the whole whose gather
      // source is (me, o).
      std::vector<int64_t> sourceOf(out.numElements(), -1);
      for (int64_t w = 0; w < numElements(whole); ++w) {
        auto [position, i] = gatherSource(whole, w, c.dim, c.block, n);
        if (position == me)
          sourceOf[i] = w;
      }
      bool sum = llvm::StringRef(reduction) == "sum";
      checkTensor(
          out,
          [&](int64_t o) {
            double acc = sum ? 0 : -1e30;
            for (int q : group)
              acc = sum ? acc + inputValue(q, sourceOf[o])
                        : std::max(acc, inputValue(q, sourceOf[o]));
            return acc;
          },
          what);
    }
}

void testAllToAll(Harness &h, const std::vector<std::string> &axes) {
  std::vector<int> group = h.mesh.group(h.rank, axes);
  int64_t n = group.size();
  int64_t me = std::find(group.begin(), group.end(), h.rank) - group.begin();
  llvm::SmallVector<int64_t> inShape = {2 * n, 3 * n, 2};
  for (auto [split, concat] :
       {std::pair<int64_t, int64_t>{0, 1}, {1, 0}, {1, 1}, {0, 2}}) {
    llvm::SmallVector<int64_t> part = inShape;
    part[split] /= n;
    llvm::SmallVector<int64_t> outShape = part;
    outShape[concat] *= n;
    Tensor in = makeInput(h.rank, DType::F32, inShape);
    Tensor out(DType::F32, outShape);
    poison(out);
    std::string what = "all_to_all split " + std::to_string(split) +
                       " concat " + std::to_string(concat) + " over " +
                       axesText(axes);
    if (auto err = h.collective(
            instruction("dtc.all_to_all_start", axes,
                        {{"split_dim", split}, {"concat_dim", concat}}),
            in, out)) {
      check(false, what + ": " + llvm::toString(std::move(err)));
      continue;
    }
    checkTensor(
        out,
        [&](int64_t o) {
          // Received parts are concatenated along concat in group order;
          // sender j sent me (position me) its part `me` along split.
          std::vector<int64_t> index = unravel(o, outShape);
          int64_t sender = index[concat] / part[concat];
          index[concat] %= part[concat];
          index[split] += me * part[split];
          return inputValue(group[sender], ravel(index, inShape));
        },
        what);
  }
}

void testSendRecv(Harness &h, const std::string &axis) {
  // Two sends in flight to each neighbour, both directions at once.
  llvm::SmallVector<int64_t> shape = {4, 3};
  auto value = [](int from, int which, int64_t i) {
    return 1000.0 * from + 100.0 * which + i;
  };
  struct Pending {
    int64_t request;
    std::unique_ptr<Tensor> buffer; // null for a send
    int from = -1, which = 0;
  };
  std::vector<Pending> pending;
  for (int64_t offset : {1, -1}) {
    int to = h.mesh.peer(h.rank, axis, offset);
    if (to < 0)
      continue;
    for (int which = 0; which < 2; ++which) {
      auto buffer = std::make_unique<Tensor>(DType::F32, shape);
      for (int64_t i = 0; i < buffer->numElements(); ++i)
        buffer->as<float>()[i] = value(h.rank, which, i);
      int64_t request = h.nextRequest++;
      program::Instruction inst =
          instruction("dtc.send_start", {axis},
                      {{"peer_offset", offset}, {"request", request}});
      TensorRef ins[] = {buffer->ref()};
      checkOk(h.run(inst, ins, {}),
              "send_start " + std::to_string(offset) + " along " + axis);
      // The send's buffer must live until its wait.
      pending.push_back({request, nullptr, -1, which});
      pending.back().buffer = std::move(buffer);
      pending.back().from = -2; // marks a send
    }
  }
  for (int64_t offset : {1, -1}) {
    int from = h.mesh.peer(h.rank, axis, offset);
    if (from < 0)
      continue;
    for (int which = 0; which < 2; ++which) {
      auto buffer = std::make_unique<Tensor>(DType::F32, shape);
      poison(*buffer);
      int64_t request = h.nextRequest++;
      program::Instruction inst =
          instruction("dtc.recv_start", {axis},
                      {{"peer_offset", offset}, {"request", request}});
      TensorRef outs[] = {buffer->ref()};
      checkOk(h.run(inst, {}, outs),
              "recv_start " + std::to_string(offset) + " along " + axis);
      pending.push_back({request, std::move(buffer), from, which});
    }
  }
  // Wait in reverse order of the starts.
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
    bool isSend = it->from == -2;
    checkOk(h.wait(it->request, isSend ? nullptr : it->buffer.get()),
            "wait for send/recv along " + axis);
    if (isSend)
      continue;
    int from = it->from, which = it->which;
    checkTensor(
        *it->buffer, [&](int64_t i) { return value(from, which, i); },
        "recv " + std::to_string(which) + " from rank " + std::to_string(from) +
            " along " + axis);
  }
  // Mismatched sizes: MPI's truncation error and a short message come back
  // from the receiver's wait (MPI errors return, never abort).
  for (auto [sent, expected, needle] :
       {std::tuple<int64_t, int64_t, const char *>{12, 6, "MPI error"},
        {6, 12, "received 24 bytes, expected 48"}}) {
    Tensor out(DType::F32, {sent}), in(DType::F32, {expected});
    int64_t request = h.nextRequest++;
    if (h.mesh.peer(h.rank, axis, 1) >= 0) {
      TensorRef ins[] = {out.ref()};
      checkOk(h.run(instruction("dtc.send_start", {axis},
                                {{"peer_offset", 1}, {"request", request}}),
                    ins, {}),
              "mismatched send_start");
      checkOk(h.wait(request, nullptr), "mismatched send completes");
    }
    request = h.nextRequest++;
    if (h.mesh.peer(h.rank, axis, -1) >= 0) {
      TensorRef outs[] = {in.ref()};
      checkOk(h.run(instruction("dtc.recv_start", {axis},
                                {{"peer_offset", -1}, {"request", request}}),
                    {}, outs),
              "mismatched recv_start");
      checkError(h.wait(request, &in), needle,
                 "recv of " + std::to_string(sent) + " floats into " +
                     std::to_string(expected));
    }
  }
  // No peer past the end of the axis: a clear error, nothing started.
  for (int64_t offset : {1, -1})
    if (h.mesh.peer(h.rank, axis, offset) < 0) {
      Tensor buffer(DType::F32, shape);
      TensorRef ins[] = {buffer.ref()};
      checkError(h.run(instruction("dtc.send_start", {axis},
                                   {{"peer_offset", offset},
                                    {"request", h.nextRequest++}}),
                       ins, {}),
                 "no such peer", "send past the end of " + axis);
    }
}

void testShardSlice(Harness &h, const std::vector<std::string> &axes) {
  std::vector<int> group = h.mesh.group(h.rank, axes);
  int64_t n = group.size();
  int64_t me = std::find(group.begin(), group.end(), h.rank) - group.begin();
  for (const SplitCase &c : splitCases(n)) {
    llvm::SmallVector<int64_t> whole = c.partShape;
    whole[c.dim] *= n;
    // Replicated: every rank holds rank 0's values.
    Tensor in = makeInput(0, DType::F32, whole);
    Tensor out(DType::F32, c.partShape);
    poison(out);
    TensorRef ins[] = {in.ref()};
    TensorRef outs[] = {out.ref()};
    std::string what = "shard_slice dim " + std::to_string(c.dim) + " block " +
                       std::to_string(c.block) + " over " + axesText(axes);
    checkOk(h.run(instruction("dtc.shard_slice", axes,
                              {{"dim", c.dim}, {"block", c.block}}),
                  ins, outs),
            what);
    std::vector<int64_t> sourceOf(out.numElements(), -1);
    for (int64_t w = 0; w < numElements(whole); ++w) {
      auto [position, i] = gatherSource(whole, w, c.dim, c.block, n);
      if (position == me)
        sourceOf[i] = w;
    }
    checkTensor(
        out, [&](int64_t o) { return inputValue(0, sourceOf[o]); }, what);
  }
}

void testOverlap(Harness &h, mpi::MpiCommunicator &comm) {
  // A 16 MiB all-reduce completes while this thread computes and makes no
  // MPI call: the progress thread, woken by computing() as the executor
  // does before a compute kernel, moves it.
  llvm::SmallVector<int64_t> shape = {4 << 20};
  Tensor in(DType::F32, shape), out(DType::F32, shape);
  for (int64_t i = 0; i < in.numElements(); ++i)
    in.as<float>()[i] = static_cast<float>(h.rank + 1 + i % 1000);
  int64_t request = h.nextRequest++;
  TensorRef ins[] = {in.ref()};
  TensorRef outs[] = {out.ref()};
  checkOk(h.run(instruction("dtc.all_reduce_start", h.mesh.names,
                            {{"request", request}}),
                ins, outs),
          "overlap: start");
  Request started = h.context.pending.count(request)
                        ? h.context.pending[request]
                        : Request(-1);
  comm.computing();
  auto begin = std::chrono::steady_clock::now();
  volatile double sink = 0;
  int64_t rounds = 0;
  while (!comm.isComplete(started) &&
         std::chrono::steady_clock::now() - begin < std::chrono::seconds(60)) {
    double acc = 0; // compute, touching only the input
    for (int64_t i = 0; i < 1 << 16; ++i)
      acc += in.as<float>()[i] * 0.5;
    sink = sink + acc;
    ++rounds;
  }
  check(comm.isComplete(started),
        "overlap: the all-reduce completed during compute, before its wait");
  checkOk(h.wait(request, &out), "overlap: wait");
  int64_t groupSum = h.mesh.world * (h.mesh.world + 1) / 2;
  checkTensor(
      out,
      [&](int64_t i) {
        return static_cast<double>(groupSum + h.mesh.world * (i % 1000));
      },
      "overlap: all-reduce result");
}

/// The cases the direct exchanges (MpiCommunicator.cpp) handle apart: an
/// all-reduce in place, one with fewer elements than ranks (empty blocks),
/// and several all-reduces, gathers and reduce-scatters in flight on one
/// group at once, started at different times on different ranks so their
/// second stages are posted in different orders.
void testDirectExchanges(Harness &h, mpi::MpiCommunicator &comm,
                         const std::vector<std::string> &axes) {
  std::vector<int> group = h.mesh.group(h.rank, axes);
  int64_t n = group.size();
  std::string over = " over " + axesText(axes);
  auto groupSum = [&](int64_t i) {
    double acc = 0;
    for (int q : group)
      acc += inputValue(q, i);
    return acc;
  };
  for (int64_t elements : {int64_t(1), n - 1, 4 * n + 3}) {
    if (elements <= 0)
      continue;
    llvm::SmallVector<int64_t> shape = {elements};
    Tensor buffer = makeInput(h.rank, DType::F32, shape);
    std::string what = "all_reduce in place of " + std::to_string(elements) +
                       " elements" + over;
    llvm::Expected<Request> request =
        comm.allReduce(axes, buffer.ref(), buffer.ref(), Reduction::Sum);
    checkOk(request ? comm.wait(*request) : request.takeError(), what);
    checkTensor(buffer, groupSum, what);
  }

  // Equal sizes, so a message matched to the wrong operation would fit.
  constexpr int kJobs = 6;
  constexpr int64_t kElements = 3000;
  auto jobValue = [](int job, int q, int64_t i) {
    return 1000.0 * (job + 1) + inputValue(q, i);
  };
  std::vector<Tensor> ins, outs;
  std::vector<Request> requests;
  int64_t me = std::find(group.begin(), group.end(), h.rank) - group.begin();
  for (int job = 0; job < kJobs; ++job) {
    int kind = job % 3; // all-reduce, all-gather, reduce-scatter
    Tensor in(DType::F32, {kind == 1 ? kElements / n : kElements});
    for (int64_t i = 0; i < in.numElements(); ++i)
      in.as<float>()[i] = static_cast<float>(jobValue(job, h.rank, i));
    Tensor out(DType::F32, {kind == 2   ? kElements / n
                            : kind == 1 ? kElements / n * n
                                        : kElements});
    poison(out);
    llvm::Expected<Request> request =
        kind == 0   ? comm.allReduce(axes, in.ref(), out.ref(), Reduction::Sum)
        : kind == 1 ? comm.allGather(axes, in.ref(), out.ref(), 0, 0)
                    : comm.reduceScatter(axes, in.ref(), out.ref(), 0, 0,
                                         Reduction::Sum);
    if (!request) {
      checkOk(request.takeError(), "in flight: start " + std::to_string(job));
      return;
    }
    requests.push_back(*request);
    ins.push_back(std::move(in));
    outs.push_back(std::move(out));
    // The first rank of the group starts late, the others early.
    if (me == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Waited in reverse: nothing depends on the order of waits.
  for (int job = kJobs; job-- > 0;)
    checkOk(comm.wait(requests[job]), "in flight: wait " + std::to_string(job));
  for (int job = 0; job < kJobs; ++job) {
    int kind = job % 3;
    std::string what = std::string(kind == 0   ? "all_reduce"
                                   : kind == 1 ? "all_gather"
                                               : "reduce_scatter") +
                       " " + std::to_string(job) + " of " +
                       std::to_string(kJobs) + " in flight" + over;
    int64_t part = kElements / n;
    checkTensor(
        outs[job],
        [&](int64_t i) {
          if (kind == 1)
            return jobValue(job, group[i / part], i % part);
          double acc = 0;
          int64_t at = kind == 2 ? me * part + i : i;
          for (int q : group)
            acc += jobValue(job, q, at);
          return acc;
        },
        what);
  }
}

void testErrors(Harness &h, const std::vector<std::string> &axes) {
  llvm::SmallVector<int64_t> shape = {2, 3};
  Tensor in = makeInput(h.rank, DType::F32, shape), out(DType::F32, shape);
  TensorRef ins[] = {in.ref()};
  TensorRef outs[] = {out.ref()};
  // No communicator (a single-rank run).
  ExecutionContext alone;
  checkError(h.run(instruction("dtc.all_reduce_start", axes, {{"request", 1}}),
                   ins, outs, &alone),
             "run it with `dtc run`", "all_reduce without a communicator");
  checkError(h.run(instruction("dtc.all_reduce_start", axes, {{"request", 1}}),
                   ins, outs, nullptr),
             "no communicator", "all_reduce without a context");
  // Waiting for a request never started.
  checkError(h.wait(987654, &out), "request 987654 is not in flight",
             "wait for an unknown request");
  // Starting a request twice: the second start fails, the first completes.
  int64_t request = h.nextRequest++;
  checkOk(
      h.run(instruction("dtc.all_reduce_start", axes, {{"request", request}}),
            ins, outs),
      "first start");
  checkError(
      h.run(instruction("dtc.all_reduce_start", axes, {{"request", request}}),
            ins, outs),
      "already in flight", "double start");
  checkOk(h.wait(request, &out), "wait after a double start");
  checkError(h.wait(request, &out), "not in flight", "second wait");
  // Missing request, unknown axis, wrong shapes, bf16: errors, no traffic.
  checkError(h.run(instruction("dtc.all_reduce_start", axes), ins, outs),
             "'request'", "start without a request");
  checkError(h.run(instruction("dtc.all_reduce_start", {"nope"},
                               {{"request", h.nextRequest++}}),
                   ins, outs),
             "no axis 'nope'", "unknown axis");
  Tensor wrong(DType::F32, {3, 3});
  TensorRef wrongs[] = {wrong.ref()};
  checkError(h.run(instruction("dtc.all_gather_start", axes,
                               {{"dim", 0}, {"request", h.nextRequest++}}),
                   ins, wrongs),
             "all_gather over", "all_gather into a wrong shape");
  Tensor half(DType::BF16, shape), half2(DType::BF16, shape);
  TensorRef halfIn[] = {half.ref()};
  TensorRef halfOut[] = {half2.ref()};
  checkError(h.run(instruction("dtc.all_reduce_start", axes,
                               {{"request", h.nextRequest++}}),
                   halfIn, halfOut),
             "does not reduce bf16", "bf16 all_reduce");
  // shard_slice with no communicator: a group of one copies, anything else
  // needs the mesh.
  checkOk(h.run(instruction("dtc.shard_slice", axes, {{"dim", 0}}), ins, outs,
                &alone),
          "shard_slice alone copies");
  checkTensor(
      out, [&](int64_t i) { return inputValue(h.rank, i); },
      "shard_slice alone: the copy");
  Tensor small(DType::F32, {1, 3});
  TensorRef smalls[] = {small.ref()};
  checkError(h.run(instruction("dtc.shard_slice", axes, {{"dim", 0}}), ins,
                   smalls, &alone),
             "no communicator", "shard_slice alone into a part");
}

} // namespace

int main(int argc, char **argv) {
  if (auto err = mpi::initializeMpi(&argc, &argv)) {
    llvm::errs() << llvm::toString(std::move(err)) << "\n";
    return 1;
  }
  int status = 0;
  {
    llvm::StringRef meshText = argc > 1 ? argv[1] : "";
    llvm::Expected<Mesh> mesh = Mesh::parse(meshText);
    if (!mesh) {
      llvm::errs() << llvm::toString(mesh.takeError()) << "\n";
      mpi::finalizeMpi();
      return 1;
    }
    check(mpi::launchedByMpi(), "launchedByMpi under mpirun");
    // A mesh of the wrong size is refused on every rank alike.
    Mesh tooBig({{"x", mesh->worldSize() + 1}});
    llvm::Expected<std::unique_ptr<mpi::MpiCommunicator>> bad =
        mpi::MpiCommunicator::create(tooBig);
    checkError(bad ? llvm::Error::success() : bad.takeError(),
               "run with -np " + std::to_string(mesh->worldSize() + 1),
               "create with the wrong world size");

    // The buffers of an operation left unwaited outlive the communicator,
    // whose destructor completes it.
    Tensor unwaitedIn(DType::F32, {1 << 16}),
        unwaitedOut(DType::F32, {1 << 16});
    llvm::Expected<std::unique_ptr<mpi::MpiCommunicator>> comm =
        mpi::MpiCommunicator::create(*mesh);
    if (!comm) {
      llvm::errs() << llvm::toString(comm.takeError()) << "\n";
      mpi::finalizeMpi();
      return 1;
    }
    Harness h;
    h.rank = (*comm)->rank();
    worldRank = h.rank;
    for (const Mesh::Axis &axis : mesh->axes()) {
      h.mesh.names.push_back(axis.name);
      h.mesh.sizes.push_back(axis.size);
    }
    h.mesh.world = mesh->worldSize();
    cpu::registerCpuKernels(h.registry);
    h.context.communicator = comm->get();

    // Every subset of the axes (the empty one: a group of one), and all
    // axes named innermost first (the group order stays the mesh's).
    std::vector<std::vector<std::string>> axesSets;
    size_t numAxes = h.mesh.names.size();
    for (unsigned mask = 0; mask < (1u << numAxes); ++mask) {
      std::vector<std::string> axes;
      for (size_t a = 0; a < numAxes; ++a)
        if (mask & (1u << a))
          axes.push_back(h.mesh.names[a]);
      axesSets.push_back(axes);
    }
    if (numAxes > 1)
      axesSets.push_back({h.mesh.names.rbegin(), h.mesh.names.rend()});
    for (const std::vector<std::string> &axes : axesSets) {
      testAllReduce(h, axes);
      testAllGather(h, axes);
      testReduceScatter(h, axes);
      testAllToAll(h, axes);
      testShardSlice(h, axes);
      testDirectExchanges(h, **comm, axes);
    }
    for (const std::string &name : h.mesh.names)
      testSendRecv(h, name);
    testOverlap(h, **comm);
    testErrors(h, h.mesh.names);
    check(h.context.pending.empty(), "every started request was waited");
    llvm::Expected<Request> unwaited = (*comm)->allReduce(
        h.mesh.names, unwaitedIn.ref(), unwaitedOut.ref(), Reduction::Sum);
    checkOk(unwaited.takeError(), "an all-reduce left unwaited");

    llvm::outs() << "rank " << h.rank << " of mesh '" << mesh->str()
                 << "': " << checks << " checks, " << failures << " failures\n";
    status = failures ? 1 : 0;
  }
  mpi::finalizeMpi();
  return status;
}
