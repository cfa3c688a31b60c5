//===- CheckpointTest.cpp - Checkpoints: format, commit, resharding -------===//
//
// Saves tensors under one plan's layouts with one CheckpointWriter per
// simulated rank, reads them under another plan's layouts and compares with
// the whole tensor cut by ShardLayout::extract (the runtime's independent
// definition of a rank's part). Also: the safetensors bytes, the commit
// protocol with a rank that never finishes, corruption, consolidate.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "compiler/ckpt/Ckpt.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/support/Error.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

namespace rt = dtc::runtime;
using rt::DType;

namespace {

std::vector<std::string> &tempDirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

/// Removes the test's directories when the process ends.
class RemoveTempDirs : public testing::Environment {
public:
  void TearDown() override {
    for (const std::string &dir : tempDirs())
      llvm::sys::fs::remove_directories(dir);
  }
};
[[maybe_unused]] testing::Environment *const removeTempDirs =
    testing::AddGlobalTestEnvironment(new RemoveTempDirs);

std::string tempDir() {
  std::string pattern = testing::TempDir() + "dtc-ckpt-XXXXXX";
  char *dir = mkdtemp(pattern.data());
  EXPECT_NE(dir, nullptr);
  tempDirs().push_back(pattern);
  return pattern;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

/// How one variable is cut: per dim, the mesh axes and interleave block;
/// then ZeRO's flat axes.
struct DimSpec {
  std::vector<std::string> axes;
  int64_t block = 0;
};
struct VarSpec {
  std::string name, role, parameter;
  std::vector<int64_t> global;
  std::vector<DimSpec> dims; ///< empty: whole on every rank
  std::vector<std::string> flat;
  DType dtype = DType::F32;
  std::string key() const {
    return role == "parameter" ? parameter : role + ":" + parameter;
  }
};

rt::Mesh mesh(llvm::StringRef text) {
  auto m = rt::Mesh::parse(text);
  EXPECT_TRUE(static_cast<bool>(m)) << text.str();
  return m ? *m : rt::Mesh();
}

/// The program Variable a partitioner would emit for `s` on `rank`.
dtc::program::Variable variable(const VarSpec &s, const rt::Mesh &m, int rank) {
  dtc::program::Variable v;
  v.set_name(s.name);
  v.set_role(s.role);
  v.set_parameter(s.parameter);
  v.mutable_type()->set_dtype(s.dtype);
  if (s.dims.empty() && s.flat.empty()) {
    for (int64_t d : s.global)
      v.mutable_type()->add_shape(d);
    return v;
  }
  std::vector<int64_t> local;
  for (size_t d = 0; d < s.global.size(); ++d) {
    v.add_global_shape(s.global[d]);
    auto *shard = v.add_shard();
    int64_t parts = 1;
    if (d < s.dims.size()) {
      for (const std::string &a : s.dims[d].axes)
        shard->add_axes(a);
      shard->set_block(s.dims[d].block);
      if (!s.dims[d].axes.empty())
        parts = m.group(rank, s.dims[d].axes)->size();
    }
    local.push_back(s.global[d] / parts);
  }
  if (!s.flat.empty()) {
    for (const std::string &a : s.flat)
      v.add_flat_axes(a);
    int64_t parts = m.group(rank, s.flat)->size();
    v.mutable_type()->add_shape(rt::numElements(local) / parts);
  } else {
    for (int64_t d : local)
      v.mutable_type()->add_shape(d);
  }
  return v;
}

rt::ShardLayout layoutOf(const VarSpec &s, const rt::Mesh &m, int rank) {
  auto layout = rt::ShardLayout::of(variable(s, m, rank), m, rank);
  EXPECT_TRUE(static_cast<bool>(layout))
      << (layout ? "" : llvm::toString(layout.takeError()));
  return *layout;
}

/// A whole tensor whose every element differs (and differs per `seed`).
rt::Tensor wholeTensor(const VarSpec &s, int seed) {
  rt::Tensor t(s.dtype, s.global);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    float value = seed * 1000 + i * 0.25f;
    switch (s.dtype) {
    case DType::F32:
      t.as<float>()[i] = value;
      break;
    case DType::BF16:
      t.as<uint16_t>()[i] = rt::floatToBF16(seed * 64 + (i % 97) * 0.5f);
      break;
    case DType::I64:
      t.as<int64_t>()[i] = seed * 100000 + i;
      break;
    default:
      ADD_FAILURE() << "dtype not covered by the test";
    }
  }
  return t;
}

dtc::program::Program program(const std::vector<VarSpec> &specs,
                              llvm::StringRef meshText) {
  rt::Mesh m = mesh(meshText);
  dtc::program::Program p;
  p.set_mesh(meshText.str());
  p.set_world_size(m.worldSize());
  for (int r = 0; r < m.worldSize(); ++r) {
    auto *rank = p.add_ranks();
    rank->set_rank(r);
    for (const VarSpec &s : specs)
      *rank->add_variables() = variable(s, m, r);
  }
  return p;
}

/// Saves `specs` (values from `wholes`, by key) at `step` from the ranks in
/// `ranks` (default: all), each with its own writer, concurrently; returns
/// rank 0's commit result.
llvm::Error save(const std::string &root, int64_t step,
                 llvm::StringRef meshText, const std::vector<VarSpec> &specs,
                 const std::map<std::string, rt::Tensor> &wholes,
                 rt::WriterOptions options = {}, std::vector<int> ranks = {}) {
  rt::Mesh m = mesh(meshText);
  auto writersTable = rt::ChunkWriters::of(program(specs, meshText));
  if (!writersTable)
    return writersTable.takeError();
  if (ranks.empty())
    for (int r = 0; r < m.worldSize(); ++r)
      ranks.push_back(r);
  std::vector<std::unique_ptr<rt::CheckpointWriter>> writers;
  for (int r : ranks) {
    std::vector<rt::SaveItem> items;
    for (const VarSpec &s : specs) {
      dtc::program::Variable v = variable(s, m, r);
      if (!writersTable->writes(r, v.name()))
        continue;
      rt::ShardLayout layout = layoutOf(s, m, r);
      rt::Tensor value(s.dtype, layout.localShape());
      layout.extract(wholes.at(s.key()).ref(), value.ref());
      items.push_back(
          {*rt::checkpointKey(v), s.parameter, s.role, layout, value});
    }
    writers.push_back(std::make_unique<rt::CheckpointWriter>(
        root, r, m.worldSize(), meshText.str(), options));
    llvm::json::Object meta{
        {"plan", llvm::json::Object{{"mesh", meshText}, {"zero", 1}}},
        {"samples", step * 8}};
    if (llvm::Error err =
            writers.back()->startSave(step, std::move(items), std::move(meta)))
      return err;
  }
  llvm::Error result = llvm::Error::success();
  for (auto [i, w] : llvm::enumerate(writers)) {
    llvm::Error err = w->finish();
    if (ranks[i] == 0)
      result = std::move(err);
    else if (err)
      return err;
  }
  return result;
}

rt::WriterOptions smallBlocks() {
  rt::WriterOptions o;
  o.hashBlockBytes = 16; // several blocks per chunk, partial last blocks
  return o;
}

/// Reads `target`'s key under `targetMesh` on every rank and compares with
/// the whole tensor cut by ShardLayout::extract.
void expectReadsMatch(const rt::Checkpoint &ckpt, const VarSpec &target,
                      llvm::StringRef targetMesh, const rt::Tensor &whole) {
  rt::Mesh m = mesh(targetMesh);
  for (int r = 0; r < m.worldSize(); ++r) {
    rt::ShardLayout layout = layoutOf(target, m, r);
    rt::Tensor expected(target.dtype, layout.localShape());
    layout.extract(whole.ref(), expected.ref());
    rt::Tensor got(target.dtype, layout.localShape());
    std::memset(got.data(), 0xAB, got.bytes());
    ASSERT_EQ(errorText(ckpt.read(target.key(), layout, got.ref())), "")
        << target.key() << " rank " << r;
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.bytes()), 0)
        << target.key() << " under " << targetMesh.str() << " rank " << r;
  }
  auto all = ckpt.readWhole(target.key());
  ASSERT_TRUE(static_cast<bool>(all));
  EXPECT_EQ(std::memcmp(all->data(), whole.data(), whole.bytes()), 0);
}

} // namespace

// --- safetensors ------------------------------------------------------------

TEST(CheckpointSafetensors, HeaderBytesByHand) {
  std::string dir = tempDir();
  std::string file = dir + "/tiny.safetensors";
  rt::Tensor a(DType::F32, {2});
  a.as<float>()[0] = 1.0f;
  a.as<float>()[1] = 2.0f;
  ASSERT_EQ(errorText(rt::writeSafetensors(file, {{"a", a.ref()}})), "");
  // 54 bytes of JSON padded with 2 spaces to 56 = 0x38; then 1.0f, 2.0f.
  std::string expected("\x38\0\0\0\0\0\0\0", 8);
  expected += R"({"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})";
  expected += "  ";
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  EXPECT_EQ(readFile(file), expected);
  EXPECT_FALSE(llvm::sys::fs::exists(file + ".tmp"));
}

TEST(CheckpointSafetensors, RoundTripAndInvalidFiles) {
  std::string dir = tempDir();
  std::string file = dir + "/t.safetensors";
  rt::Tensor f(DType::F32, {2, 3}), b(DType::BF16, {4}), i(DType::I64, {}),
      empty(DType::I32, {0, 5});
  for (int k = 0; k < 6; ++k)
    f.as<float>()[k] = k - 2.5f;
  for (int k = 0; k < 4; ++k)
    b.as<uint16_t>()[k] = rt::floatToBF16(k * 1.5f);
  i.as<int64_t>()[0] = -42;
  ASSERT_EQ(errorText(rt::writeSafetensors(file,
                                           {{"w.f", f.ref()},
                                            {"b", b.ref()},
                                            {"step", i.ref()},
                                            {"none", empty.ref()}},
                                           {{"format", "pt"}})),
            "");
  auto st = rt::SafetensorsFile::open(file);
  ASSERT_TRUE(static_cast<bool>(st)) << llvm::toString(st.takeError());
  ASSERT_EQ(st->entries().size(), 4u);
  EXPECT_EQ(st->metadata().at("format"), "pt");
  // File order is the writer's order; data back to back after the header.
  EXPECT_EQ(st->entries()[0].name, "w.f");
  EXPECT_EQ(st->entries()[0].begin % 8, 0u);
  EXPECT_EQ(st->entries()[1].begin, st->entries()[0].end);
  for (auto [name, t] : std::vector<std::pair<std::string, rt::Tensor *>>{
           {"w.f", &f}, {"b", &b}, {"step", &i}, {"none", &empty}}) {
    auto got = st->read(name);
    ASSERT_TRUE(static_cast<bool>(got)) << name;
    EXPECT_EQ(got->dtype(), t->dtype()) << name;
    EXPECT_EQ(got->shape(), t->shape()) << name;
    EXPECT_EQ(std::memcmp(got->data(), t->data(), t->bytes()), 0) << name;
  }
  // Truncated data and a header length past the end are refused.
  std::string bytes = readFile(file);
  writeFile(file, bytes.substr(0, bytes.size() - 3));
  EXPECT_NE(
      errorText(rt::SafetensorsFile::open(file).takeError()).find("truncated"),
      std::string::npos);
  writeFile(file, std::string("\xff\xff\xff\xff\0\0\0\0{}", 10));
  EXPECT_NE(errorText(rt::SafetensorsFile::open(file).takeError())
                .find("not a safetensors file"),
            std::string::npos);
}

TEST(Checkpoint, ChunkJsonRoundTrip) {
  VarSpec s{"w", "exp_avg", "h.0.w", {12, 8}, {{{"tp"}, 6}, {}}, {"dp"}};
  rt::Mesh m = mesh("dp:2,tp:2");
  for (int r = 0; r < 4; ++r) {
    rt::ShardLayout a = layoutOf(s, m, r);
    llvm::json::Object json = a.chunkJson();
    ASSERT_NE(json.getObject("flat"), nullptr);
    auto b = rt::ShardLayout::fromChunkJson(a.globalShape(), json);
    ASSERT_TRUE(static_cast<bool>(b)) << llvm::toString(b.takeError());
    EXPECT_EQ(b->localShape(), a.localShape());
    EXPECT_EQ(b->flatIndex(), a.flatIndex());
    // Same elements: extract through both.
    rt::Tensor whole = wholeTensor(s, 1);
    rt::Tensor x(DType::F32, a.localShape()), y(DType::F32, b->localShape());
    a.extract(whole.ref(), x.ref());
    b->extract(whole.ref(), y.ref());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.bytes()), 0);
  }
  // Parts that do not divide the dim are refused.
  EXPECT_FALSE(static_cast<bool>(
      rt::ShardLayout::fromParts({10, 4}, {{3, 0, 0}, {1, 0, 0}})));
  llvm::consumeError(
      rt::ShardLayout::fromParts({10, 4}, {{3, 0, 0}, {1, 0, 0}}).takeError());
}

// --- resharding -------------------------------------------------------------

TEST(Checkpoint, TpRowSplitReadsAsColumnSplit) {
  std::string root = tempDir();
  // dp:2 x tp:2: rows over tp; dp replicas are written once.
  std::vector<VarSpec> specs = {
      {"w", "parameter", "h.0.w", {8, 6}, {{{"tp"}}, {}}},
      {"m", "exp_avg", "h.0.w", {8, 6}, {{{"tp"}}, {}}},
      {"g", "grad", "h.0.w", {8, 6}, {{{"tp"}}, {}}},
      {"e", "parameter", "emb", {10, 4}, {{}, {}}, {}, DType::BF16}};
  std::map<std::string, rt::Tensor> wholes = {
      {"h.0.w", wholeTensor(specs[0], 1)},
      {"exp_avg:h.0.w", wholeTensor(specs[1], 2)},
      {"grad/h.0.w", wholeTensor(specs[2], 3)},
      {"emb", wholeTensor(specs[3], 4)}};
  ASSERT_EQ(
      errorText(save(root, 100, "dp:2,tp:2", specs, wholes, smallBlocks())),
      "");
  auto ckpt = rt::Checkpoint::open(root);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(ckpt->step(), 100);
  EXPECT_EQ(ckpt->worldSize(), 4);
  EXPECT_EQ(ckpt->mesh(), "dp:2,tp:2");
  EXPECT_EQ(ckpt->meta().getInteger("samples"), 800);
  // Gradients are not saved; each distinct chunk once, from the lowest rank.
  ASSERT_EQ(ckpt->tensors().size(), 3u);
  EXPECT_EQ(ckpt->find("grad/h.0.w"), nullptr);
  const rt::CheckpointTensor *w = ckpt->find("h.0.w");
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->chunks.size(), 2u);
  EXPECT_EQ(w->chunks[0].file, "rank-00000.safetensors");
  EXPECT_EQ(w->chunks[1].file, "rank-00001.safetensors");
  EXPECT_EQ(w->chunks[1].name, "h.0.w@1");
  EXPECT_EQ(ckpt->find("emb")->chunks.size(), 1u);
  EXPECT_EQ(ckpt->find("exp_avg:h.0.w")->role, "exp_avg");
  EXPECT_EQ(ckpt->find("exp_avg:h.0.w")->parameter, "h.0.w");
  EXPECT_EQ(errorText(ckpt->verify()), "");
  // The dp=1 ranks' files are valid and empty.
  auto rank3 =
      rt::SafetensorsFile::open(root + "/step-00000100/" + rt::rankFileName(3));
  ASSERT_TRUE(static_cast<bool>(rank3));
  EXPECT_TRUE(rank3->entries().empty());

  // Column split over tp:2 and tp:3, rows over 4 ranks, whole.
  VarSpec cols = specs[0];
  cols.dims = {{}, {{"tp"}}};
  expectReadsMatch(*ckpt, cols, "tp:2", wholes["h.0.w"]);
  expectReadsMatch(*ckpt, cols, "tp:3", wholes["h.0.w"]);
  VarSpec rows4 = specs[1];
  rows4.dims = {{{"tp"}}, {}};
  expectReadsMatch(*ckpt, rows4, "tp:4", wholes["exp_avg:h.0.w"]);
  VarSpec emb = specs[3];
  emb.dims = {{{"tp"}}, {{"dp"}}};
  expectReadsMatch(*ckpt, emb, "dp:2,tp:5", wholes["emb"]);
}

TEST(Checkpoint, InterleavedBlockSplitReadsWhole) {
  std::string root = tempDir();
  // A fused QKV: rows [q;k;v] of 6 each... read as runs of 6 cut in 2.
  std::vector<VarSpec> specs = {
      {"qkv", "parameter", "attn.qkv", {12, 4}, {{{"tp"}, 6}, {}}},
      {"qkv2", "exp_avg_sq", "attn.qkv", {12, 4}, {{{"tp"}, 6}, {}}}};
  std::map<std::string, rt::Tensor> wholes = {
      {"attn.qkv", wholeTensor(specs[0], 5)},
      {"exp_avg_sq:attn.qkv", wholeTensor(specs[1], 6)}};
  ASSERT_EQ(errorText(save(root, 7, "tp:2", specs, wholes, smallBlocks())), "");
  auto ckpt = rt::Checkpoint::open(root + "/step-00000007");
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(errorText(ckpt->verify()), "");
  VarSpec whole = specs[0];
  whole.dims.clear();
  expectReadsMatch(*ckpt, whole, "", wholes["attn.qkv"]);
  // Interleaved the other way (3 parts of each run) and contiguous rows.
  VarSpec three = specs[1];
  expectReadsMatch(*ckpt, three, "tp:3", wholes["exp_avg_sq:attn.qkv"]);
  VarSpec contiguous = specs[1];
  contiguous.dims = {{{"tp"}}, {}};
  expectReadsMatch(*ckpt, contiguous, "tp:2", wholes["exp_avg_sq:attn.qkv"]);
}

TEST(Checkpoint, ZeroFlatSplitReadsAsTpDimSplit) {
  std::string root = tempDir();
  // ZeRO over dp:4: each rank holds a quarter of the flattened tensor;
  // with dp:2 x tp:2, the tp shard is cut flat over dp.
  std::vector<VarSpec> specs = {
      {"m", "exp_avg", "h.1.w", {8, 6}, {{}, {}}, {"dp"}},
      {"v", "exp_avg_sq", "h.1.w", {8, 6}, {{}, {}}, {"dp"}},
      {"p", "parameter", "h.1.w", {8, 6}, {{}, {}}, {"dp"}}};
  std::map<std::string, rt::Tensor> wholes = {
      {"exp_avg:h.1.w", wholeTensor(specs[0], 7)},
      {"exp_avg_sq:h.1.w", wholeTensor(specs[1], 8)},
      {"h.1.w", wholeTensor(specs[2], 9)}};
  ASSERT_EQ(errorText(save(root, 3, "dp:4", specs, wholes, smallBlocks())), "");
  auto ckpt = rt::Checkpoint::open(root);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(ckpt->find("h.1.w")->chunks.size(), 4u);
  EXPECT_EQ(errorText(ckpt->verify()), "");
  VarSpec tp = specs[0];
  tp.dims = {{}, {{"tp"}}};
  tp.flat.clear();
  expectReadsMatch(*ckpt, tp, "tp:2", wholes["exp_avg:h.1.w"]);
  // Into tp dim split + ZeRO flat over dp (tp:2 x dp:3 -> 24 / 3 each).
  VarSpec both = specs[1];
  both.dims = {{{"tp"}}, {}};
  both.flat = {"dp"};
  expectReadsMatch(*ckpt, both, "dp:3,tp:2", wholes["exp_avg_sq:h.1.w"]);

  // And back: saved as tp dim split + flat dp, read as flat over dp:4.
  std::string root2 = tempDir();
  std::vector<VarSpec> specs2 = {both};
  ASSERT_EQ(
      errorText(save(root2, 4, "dp:3,tp:2", specs2, wholes, smallBlocks())),
      "");
  auto ckpt2 = rt::Checkpoint::open(root2);
  ASSERT_TRUE(static_cast<bool>(ckpt2)) << llvm::toString(ckpt2.takeError());
  EXPECT_EQ(errorText(ckpt2->verify()), "");
  expectReadsMatch(*ckpt2, specs[1], "dp:4", wholes["exp_avg_sq:h.1.w"]);
}

TEST(Checkpoint, ReplicatedReadsAsSplit) {
  std::string root = tempDir();
  std::vector<VarSpec> specs = {
      {"b", "parameter", "ln.b", {10}},
      {"w", "parameter", "lm.w", {4, 10}, {}, {}, DType::BF16},
      {"n", "parameter", "count", {3}, {}, {}, DType::I64}};
  std::map<std::string, rt::Tensor> wholes = {
      {"ln.b", wholeTensor(specs[0], 10)},
      {"lm.w", wholeTensor(specs[1], 11)},
      {"count", wholeTensor(specs[2], 12)}};
  ASSERT_EQ(errorText(save(root, 1, "dp:2", specs, wholes, smallBlocks())), "");
  auto ckpt = rt::Checkpoint::open(root);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(ckpt->find("ln.b")->chunks.size(), 1u);
  VarSpec b = specs[0];
  b.dims = {{{"tp"}}};
  expectReadsMatch(*ckpt, b, "tp:2", wholes["ln.b"]);
  expectReadsMatch(*ckpt, b, "tp:5", wholes["ln.b"]);
  VarSpec w = specs[1];
  w.dims = {{}, {{"tp"}, 10}};
  expectReadsMatch(*ckpt, w, "tp:5", wholes["lm.w"]);
  w.dims = {{}, {}};
  w.flat = {"dp"};
  expectReadsMatch(*ckpt, w, "dp:4", wholes["lm.w"]);
  expectReadsMatch(*ckpt, specs[2], "", wholes["count"]);
}

// Every pair of a set of cuts (whole, contiguous and interleaved dim
// splits, multi-axis splits, ZeRO flat splits alone and on top of a dim
// split): saved under one, read under the other, on every target rank.
TEST(Checkpoint, EveryCutReadsAsEveryOther) {
  struct Cut {
    std::string mesh;
    std::vector<DimSpec> dims;
    std::vector<std::string> flat;
  };
  std::vector<Cut> cuts = {
      {"", {}, {}},
      {"tp:2", {{{"tp"}}, {}}, {}},
      {"tp:4", {{}, {{"tp"}}}, {}},
      {"tp:2", {{{"tp"}, 6}, {}}, {}},
      {"tp:3", {{{"tp"}, 6}, {}}, {}},
      {"dp:2,tp:2", {{{"tp"}, 6}, {{"dp"}}}, {}},
      {"dp:3", {{}, {}}, {"dp"}},
      {"dp:2,tp:2", {{}, {{"tp"}}}, {"dp"}},
      {"pp:2,dp:2,tp:2", {{{"dp", "tp"}}, {}}, {}},
      {"dp:2,tp:2", {{{"tp"}, 4}, {{"dp"}, 4}}, {}},
  };
  auto specOf = [](const Cut &c) {
    return VarSpec{"w", "parameter", "w", {12, 8}, c.dims, c.flat};
  };
  rt::Tensor whole = wholeTensor(specOf(cuts[0]), 3);
  for (auto [i, from] : llvm::enumerate(cuts)) {
    std::string root = tempDir();
    ASSERT_EQ(errorText(save(root, 1, from.mesh, {specOf(from)}, {{"w", whole}},
                             smallBlocks())),
              "")
        << "cut " << i;
    auto ckpt = rt::Checkpoint::open(root);
    ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
    EXPECT_EQ(errorText(ckpt->verify()), "") << "cut " << i;
    for (const Cut &to : cuts) {
      SCOPED_TRACE("from cut " + std::to_string(i) + " to " + to.mesh);
      expectReadsMatch(*ckpt, specOf(to), to.mesh, whole);
    }
  }
}

TEST(Checkpoint, ChunkWritersMatchReplicas) {
  std::vector<VarSpec> specs = {
      {"w", "parameter", "h.0.w", {8, 6}, {{{"tp"}}, {}}},
      {"m", "exp_avg", "h.0.w", {8, 6}, {{{"tp"}}, {}}, {"dp"}},
      {"g", "grad", "h.0.w", {8, 6}, {{{"tp"}}, {}}}};
  dtc::program::Program p = program(specs, "dp:2,tp:2");
  auto table = rt::ChunkWriters::of(p);
  ASSERT_TRUE(static_cast<bool>(table));
  // Parameter: replicated over dp, written by dp index 0 (ranks 0, 1).
  EXPECT_TRUE(table->writes(0, "w"));
  EXPECT_TRUE(table->writes(1, "w"));
  EXPECT_FALSE(table->writes(2, "w"));
  EXPECT_FALSE(table->writes(3, "w"));
  // ZeRO-cut moments: every rank holds a distinct chunk.
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(table->writes(r, "m")) << r;
  EXPECT_FALSE(table->writes(0, "g"));
  rt::Mesh m = mesh("dp:2,tp:2");
  auto one = rt::writesChunk(p, m, p.ranks(3).variables(0), 3);
  ASSERT_TRUE(static_cast<bool>(one));
  EXPECT_FALSE(*one);
}

// --- commit protocol, corruption --------------------------------------------

TEST(Checkpoint, SaveWithoutEveryManifestIsNotCommitted) {
  std::string root = tempDir();
  std::vector<VarSpec> specs = {
      {"w", "parameter", "h.0.w", {8, 6}, {{{"tp"}}, {}}}};
  std::map<std::string, rt::Tensor> wholes = {
      {"h.0.w", wholeTensor(specs[0], 1)}};
  ASSERT_EQ(errorText(save(root, 10, "tp:2", specs, wholes)), "");
  // Step 20: rank 1 dies before writing anything.
  wholes["h.0.w"] = wholeTensor(specs[0], 2);
  rt::WriterOptions options;
  options.commitTimeout = std::chrono::milliseconds(100);
  std::string err =
      errorText(save(root, 20, "tp:2", specs, wholes, options, {0}));
  EXPECT_NE(err.find("rank(s) 1 wrote no manifest"), std::string::npos) << err;
  EXPECT_TRUE(llvm::sys::fs::exists(root + "/step-00000020/rank-00000.json"));
  EXPECT_FALSE(llvm::sys::fs::exists(root + "/step-00000020/COMMITTED"));
  EXPECT_FALSE(llvm::sys::fs::exists(root + "/step-00000020/index.json"));
  EXPECT_EQ(readFile(root + "/latest"), "step-00000010\n");
  auto ckpt = rt::Checkpoint::open(root);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(ckpt->step(), 10);
  auto w = ckpt->readWhole("h.0.w");
  ASSERT_TRUE(static_cast<bool>(w));
  EXPECT_EQ(w->as<float>()[5], wholeTensor(specs[0], 1).as<float>()[5]);
  std::string partial =
      errorText(rt::Checkpoint::open(root + "/step-00000020").takeError());
  EXPECT_NE(partial.find("step-00000020: not committed (interrupted save)"),
            std::string::npos)
      << partial;
  // The CLI reports the partial step and still succeeds on the root.
  std::string out;
  llvm::raw_string_ostream os(out);
  EXPECT_EQ(errorText(dtc::verifyCheckpoint(root, os)), "");
  EXPECT_NE(out.find("step-00000020: not committed (interrupted save); "
                     "ignored"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("step-00000010: ok"), std::string::npos) << out;
}

// A save that fails after COMMITTED but before `latest` is replaced (no
// space left for latest.tmp: test/cli/ckpt-disk-full.test) leaves a
// committed step and no `latest`. The root still opens, verifies and
// resumes at the newest committed step, not at an uncommitted later one.
TEST(Checkpoint, MissingLatestFallsBackToNewestCommittedStep) {
  std::string root = tempDir();
  std::vector<VarSpec> specs = {
      {"w", "parameter", "h.0.w", {8, 6}, {{{"tp"}}, {}}}};
  std::map<std::string, rt::Tensor> wholes = {
      {"h.0.w", wholeTensor(specs[0], 1)}};
  // Before any save completes: no committed step, no `latest`.
  rt::WriterOptions options;
  options.commitTimeout = std::chrono::milliseconds(100);
  llvm::consumeError(save(root, 5, "tp:2", specs, wholes, options, {1}));
  std::string none = errorText(rt::latestStep(root).takeError());
  EXPECT_NE(none.find("no 'latest' file (no committed checkpoint here)"),
            std::string::npos)
      << none;

  ASSERT_EQ(errorText(save(root, 10, "tp:2", specs, wholes)), "");
  wholes["h.0.w"] = wholeTensor(specs[0], 2);
  ASSERT_EQ(errorText(save(root, 20, "tp:2", specs, wholes)), "");
  wholes["h.0.w"] = wholeTensor(specs[0], 3);
  llvm::consumeError(save(root, 30, "tp:2", specs, wholes, options, {0}));
  ASSERT_FALSE(llvm::sys::fs::exists(root + "/step-00000030/COMMITTED"));
  ASSERT_FALSE(llvm::sys::fs::remove(root + "/latest"));

  auto latest = rt::latestStep(root);
  ASSERT_TRUE(static_cast<bool>(latest)) << llvm::toString(latest.takeError());
  EXPECT_EQ(*latest, root + "/step-00000020");
  auto ckpt = rt::Checkpoint::open(root);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(ckpt->step(), 20);
  auto w = ckpt->readWhole("h.0.w");
  ASSERT_TRUE(static_cast<bool>(w)) << llvm::toString(w.takeError());
  EXPECT_EQ(w->as<float>()[7], wholeTensor(specs[0], 2).as<float>()[7]);
  std::string out;
  llvm::raw_string_ostream os(out);
  EXPECT_EQ(errorText(dtc::verifyCheckpoint(root, os)), "");
  EXPECT_NE(out.find("verified 2 committed steps (latest step-00000020), 2 "
                     "partial ignored"),
            std::string::npos)
      << out;
}

TEST(Checkpoint, StaleManifestOfAnotherSaveIsNotMerged) {
  std::string root = tempDir();
  std::vector<VarSpec> specs = {
      {"w", "parameter", "h.0.w", {8, 6}, {{{"tp"}}, {}}}};
  std::map<std::string, rt::Tensor> wholes = {
      {"h.0.w", wholeTensor(specs[0], 1)}};
  rt::WriterOptions options;
  options.commitTimeout = std::chrono::milliseconds(100);
  options.saveId = "run-a";
  // Run A: rank 0 died; rank 1 left its manifest.
  llvm::consumeError(save(root, 30, "tp:2", specs, wholes, options, {1}));
  // Run B's rank 0 must not merge run A's manifest of rank 1.
  options.saveId = "run-b";
  std::string err =
      errorText(save(root, 30, "tp:2", specs, wholes, options, {0}));
  EXPECT_NE(err.find("rank(s) 1"), std::string::npos) << err;
  EXPECT_FALSE(llvm::sys::fs::exists(root + "/step-00000030/COMMITTED"));
  // With both of run B's ranks it commits.
  EXPECT_EQ(errorText(save(root, 30, "tp:2", specs, wholes, options)), "");
  EXPECT_TRUE(llvm::sys::fs::exists(root + "/step-00000030/COMMITTED"));
}

TEST(Checkpoint, FlippedByteIsNamedByVerifyAndRead) {
  std::string root = tempDir();
  std::vector<VarSpec> specs = {
      {"w", "parameter", "h.0.w", {8, 6}, {{{"tp"}}, {}}}};
  std::map<std::string, rt::Tensor> wholes = {
      {"h.0.w", wholeTensor(specs[0], 1)}};
  ASSERT_EQ(errorText(save(root, 5, "tp:2", specs, wholes, smallBlocks())), "");
  std::string dir = root + "/step-00000005";
  auto ckpt = rt::Checkpoint::open(dir);
  ASSERT_TRUE(static_cast<bool>(ckpt));
  // Flip the last byte of rank 1's chunk (rows 6..7 of the tensor).
  const rt::CheckpointChunk &chunk = ckpt->find("h.0.w")->chunks[1];
  ASSERT_EQ(chunk.file, "rank-00001.safetensors");
  std::string file = dir + "/" + chunk.file;
  std::string bytes = readFile(file);
  uint64_t at = chunk.offset + chunk.bytes - 1;
  bytes[at] ^= 0x10;
  writeFile(file, bytes);

  std::string verify = errorText(ckpt->verify());
  EXPECT_NE(verify.find("h.0.w: rank-00001.safetensors: hash mismatch in "
                        "bytes ["),
            std::string::npos)
      << verify;
  // A target needing only untouched blocks reads fine (ranged reads); one
  // needing the flipped block is refused.
  VarSpec rows = specs[0];
  rt::Mesh m4 = mesh("tp:4");
  rt::ShardLayout third = layoutOf(rows, m4, 2), last = layoutOf(rows, m4, 3);
  rt::Tensor out(DType::F32, third.localShape());
  EXPECT_EQ(errorText(ckpt->read("h.0.w", third, out.ref())), "");
  std::string read = errorText(ckpt->read("h.0.w", last, out.ref()));
  // Hash blocks of 16 bytes start at the chunk's first byte.
  uint64_t block = chunk.offset + (at - chunk.offset) / 16 * 16;
  uint64_t end = std::min<uint64_t>(block + 16, chunk.offset + chunk.bytes);
  EXPECT_NE(read.find("h.0.w: rank-00001.safetensors: hash mismatch in bytes "
                      "[" +
                      std::to_string(block) + ", " + std::to_string(end) + ")"),
            std::string::npos)
      << read << " (chunk at " << chunk.offset << ")";
  std::string out2;
  llvm::raw_string_ostream os(out2);
  llvm::Error cli = dtc::verifyCheckpoint(root, os);
  ASSERT_TRUE(static_cast<bool>(cli));
  llvm::handleAllErrors(std::move(cli), [](const dtc::DtcError &e) {
    EXPECT_EQ(e.getKind(), dtc::ErrorKind::BadInput);
    EXPECT_NE(e.getMessage().find("rank-00001.safetensors"), std::string::npos);
  });
}

TEST(Checkpoint, VerifyFindsMissingChunks) {
  std::string root = tempDir();
  std::vector<VarSpec> specs = {
      {"w", "parameter", "h.0.w", {8, 6}, {{{"tp"}}, {}}}};
  std::map<std::string, rt::Tensor> wholes = {
      {"h.0.w", wholeTensor(specs[0], 1)}};
  ASSERT_EQ(errorText(save(root, 5, "tp:2", specs, wholes)), "");
  std::string index = root + "/step-00000005/index.json";
  auto json = llvm::json::parse(readFile(index));
  ASSERT_TRUE(static_cast<bool>(json));
  json->getAsObject()
      ->getObject("tensors")
      ->getObject("h.0.w")
      ->getArray("chunks")
      ->erase(json->getAsObject()
                  ->getObject("tensors")
                  ->getObject("h.0.w")
                  ->getArray("chunks")
                  ->begin());
  std::string text;
  llvm::raw_string_ostream os(text);
  os << *json;
  os.flush();
  writeFile(index, text);
  auto ckpt = rt::Checkpoint::open(root);
  ASSERT_TRUE(static_cast<bool>(ckpt));
  std::string verify = errorText(ckpt->verify());
  EXPECT_NE(verify.find("h.0.w: 1 chunks for 2 parts"), std::string::npos)
      << verify;
  std::string read = errorText(ckpt->readWhole("h.0.w").takeError());
  EXPECT_NE(read.find("h.0.w: no chunk holds element 0"), std::string::npos)
      << read;
  // A missing rank file is refused at open.
  llvm::sys::fs::remove(root + "/step-00000005/rank-00001.safetensors");
  std::string open = errorText(rt::Checkpoint::open(root).takeError());
  EXPECT_NE(open.find("rank-00001.safetensors: missing"), std::string::npos)
      << open;
}

// --- consolidate ------------------------------------------------------------

namespace {
/// Saves a small two-plan-worthy model under tp:2 x dp:2 with ZeRO moments.
std::map<std::string, rt::Tensor> saveModel(const std::string &root) {
  std::vector<VarSpec> specs = {
      {"w0", "parameter", "h.0.w", {8, 6}, {{{"tp"}}, {}}},
      {"w1", "parameter", "h.0.qkv", {12, 4}, {{{"tp"}, 6}, {}}},
      {"b0", "parameter", "h.0.b", {6}},
      {"e", "parameter", "wte", {10, 4}, {}, {}, DType::BF16},
      {"m0", "exp_avg", "h.0.w", {8, 6}, {{{"tp"}}, {}}, {"dp"}}};
  std::map<std::string, rt::Tensor> wholes;
  for (auto [i, s] : llvm::enumerate(specs))
    wholes[s.key()] = wholeTensor(s, static_cast<int>(i) + 1);
  EXPECT_EQ(errorText(save(root, 2, "dp:2,tp:2", specs, wholes)), "");
  return wholes;
}
} // namespace

TEST(Checkpoint, ConsolidateWritesWholeParameters) {
  std::string root = tempDir();
  std::map<std::string, rt::Tensor> wholes = saveModel(root);
  std::string file = root + "/model.safetensors";
  std::string text;
  llvm::raw_string_ostream os(text);
  ASSERT_EQ(
      errorText(dtc::consolidateCheckpoint(root, file, /*force=*/false, os)),
      "");
  EXPECT_NE(text.find("4 parameters"), std::string::npos) << text;
  auto st = rt::SafetensorsFile::open(file);
  ASSERT_TRUE(static_cast<bool>(st)) << llvm::toString(st.takeError());
  ASSERT_EQ(st->entries().size(), 4u); // moments are not model weights
  for (const char *name : {"h.0.w", "h.0.qkv", "h.0.b", "wte"}) {
    auto t = st->read(name);
    ASSERT_TRUE(static_cast<bool>(t)) << name;
    const rt::Tensor &whole = wholes.at(name);
    EXPECT_EQ(t->shape(), whole.shape()) << name;
    EXPECT_EQ(t->dtype(), whole.dtype()) << name;
    EXPECT_EQ(std::memcmp(t->data(), whole.data(), whole.bytes()), 0) << name;
  }
  // inspect lists the tensors; a failed consolidate leaves no file.
  std::string listing;
  llvm::raw_string_ostream los(listing);
  ASSERT_EQ(errorText(dtc::inspectCheckpoint(root, los)), "");
  EXPECT_NE(listing.find("exp_avg:h.0.w"), std::string::npos) << listing;
  EXPECT_NE(listing.find("step-00000002  committed (latest)"),
            std::string::npos)
      << listing;
  std::string bad = root + "/missing-dir/x.safetensors";
  EXPECT_NE(errorText(dtc::consolidateCheckpoint(root, bad, false, os)), "");
  EXPECT_FALSE(llvm::sys::fs::exists(bad));
}

// Nothing of the user's is lost (issue 61): an existing output is refused
// unless --force, and a symbolic link planted at the temporary name is
// replaced, never written through.
TEST(Checkpoint, ConsolidateNeverOverwritesWhatItDidNotWrite) {
  std::string root = tempDir();
  saveModel(root);
  std::string file = root + "/model.safetensors";
  std::string victim = root + "/victim.txt";
  auto writeText = [](const std::string &path, llvm::StringRef text) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    os << text;
  };
  auto readText = [](const std::string &path) {
    auto buffer = llvm::MemoryBuffer::getFile(path);
    return buffer ? (*buffer)->getBuffer().str() : std::string("<missing>");
  };
  writeText(file, "the user's file");
  writeText(victim, "keep");
  std::string text;
  llvm::raw_string_ostream os(text);
  std::string err =
      errorText(dtc::consolidateCheckpoint(root, file, /*force=*/false, os));
  EXPECT_NE(err.find("exists; pass --force to replace it"), std::string::npos)
      << err;
  EXPECT_EQ(readText(file), "the user's file");
  // --force replaces it, through a fresh temporary: the planted link at
  // `<file>.tmp` is removed, its target untouched.
  ASSERT_FALSE(llvm::sys::fs::create_link(victim, file + ".tmp"));
  ASSERT_EQ(
      errorText(dtc::consolidateCheckpoint(root, file, /*force=*/true, os)),
      "");
  EXPECT_EQ(readText(victim), "keep");
  EXPECT_TRUE(static_cast<bool>(rt::SafetensorsFile::open(file)));
  EXPECT_FALSE(llvm::sys::fs::exists(file + ".tmp"));
  // A directory is never an output.
  err = errorText(dtc::consolidateCheckpoint(root, root, /*force=*/true, os));
  EXPECT_NE(err.find("is a directory"), std::string::npos) << err;
}

// Python's safetensors loads the consolidated file, run by the project's
// interpreter (DTC_PYTHON: scripts/setup.sh installs safetensors there).
TEST(Checkpoint, ConsolidatedFileLoadsInPython) {
  std::string root = tempDir();
  std::map<std::string, rt::Tensor> wholes = saveModel(root);
  std::string file = root + "/model.safetensors";
  std::string text;
  llvm::raw_string_ostream os(text);
  ASSERT_EQ(
      errorText(dtc::consolidateCheckpoint(root, file, /*force=*/false, os)),
      "");
  // Python prints name, shape and the f32 sums; compare with ours.
  std::string script = root + "/check.py";
  // numpy has no bfloat16: the bf16 tensor is checked by its header.
  writeFile(
      script,
      "import sys\n"
      "from safetensors import safe_open\n"
      "with safe_open(sys.argv[1], framework='np') as f:\n"
      "    w = f.get_tensor('h.0.w')\n"
      "    q = f.get_tensor('h.0.qkv')\n"
      "    print(sorted(f.keys()), list(w.shape),\n"
      "          '%.6f' % w.sum(dtype='float64'), '%.6f' % q[5, 3],\n"
      "          f.get_slice('wte').get_dtype(), f.metadata()['format'])\n"
      "with safe_open(sys.argv[2], framework='np') as f:\n"
      "    print(sorted(f.keys()))\n");
  std::string outFile = root + "/py.txt";
  // A rank file is a valid safetensors file too.
  std::string rankFile = root + "/step-00000002/rank-00001.safetensors";
  ASSERT_EQ(std::system((std::string(DTC_PYTHON) + " " + script + " " + file +
                         " " + rankFile + " > " + outFile)
                            .c_str()),
            0);
  double sum = 0;
  const rt::Tensor &w = wholes.at("h.0.w");
  for (int64_t i = 0; i < w.numElements(); ++i)
    sum += w.as<float>()[i];
  std::string got = readFile(outFile);
  float qkv = wholes.at("h.0.qkv").as<float>()[5 * 4 + 3];
  EXPECT_EQ(got, llvm::formatv("['h.0.b', 'h.0.qkv', 'h.0.w', 'wte'] [8, 6] "
                               "{0:F6} {1:F6} BF16 pt\n"
                               "['exp_avg:h.0.w@2', 'h.0.qkv@1', 'h.0.w@1']\n",
                               sum, qkv)
                     .str());
}

// --- fuzz-checkpoint regressions (test/fuzz/regressions/ckpt-*.bin) --------
//
// Sizes in index.json and safetensors headers are untrusted: each case below
// made the reader allocate what a field claimed (terabytes) or accept a shape
// whose element count wraps. They must end in one-line errors instead.

namespace {
/// A tp:2 checkpoint of h.0.w [8, 6] split over rows; returns its step dir.
std::string savedRowSplit() {
  std::string root = tempDir();
  std::vector<VarSpec> specs = {
      {"w", "parameter", "h.0.w", {8, 6}, {{{"tp"}}, {}}}};
  std::map<std::string, rt::Tensor> wholes = {
      {"h.0.w", wholeTensor(specs[0], 1)}};
  EXPECT_EQ(errorText(save(root, 5, "tp:2", specs, wholes)), "");
  return root + "/step-00000005";
}

/// Rewrites `dir`'s index.json through `edit`.
void editIndex(const std::string &dir,
               llvm::function_ref<void(llvm::json::Object &)> edit) {
  std::string file = dir + "/index.json";
  auto json = llvm::json::parse(readFile(file));
  ASSERT_TRUE(static_cast<bool>(json));
  edit(*json->getAsObject());
  std::string text;
  llvm::raw_string_ostream os(text);
  os << *json;
  os.flush();
  writeFile(file, text);
}

llvm::json::Object &chunkOf(llvm::json::Object &index, llvm::StringRef key,
                            size_t i) {
  return *(*index.getObject("tensors")->getObject(key)->getArray("chunks"))[i]
              .getAsObject();
}

std::string openError(const std::string &dir) {
  return errorText(rt::Checkpoint::open(dir).takeError());
}
} // namespace

TEST(CheckpointFuzzRegression, ShapeWhoseElementCountOverflows) {
  // ckpt-shape-overflow: 3*5*17*257*641*65537*6700417 = 2^64 - 1 wrapped to
  // -1 element, so bytes -4 matched it and readWhole sized a tensor by it.
  std::string dir = savedRowSplit();
  editIndex(dir, [](llvm::json::Object &index) {
    (*index.getObject("tensors")->getObject("h.0.w"))["shape"] =
        llvm::json::Array{3, 5, 17, 257, 641, 65537, 6700417};
  });
  EXPECT_NE(openError(dir).find("tensor 'h.0.w': invalid shape"),
            std::string::npos)
      << openError(dir);

  // The same in a safetensors header: [2^62 + 1, 4] wraps to 4 elements,
  // which 16 data bytes matched.
  std::string file = tempDir() + "/t.safetensors";
  std::string header = "{\"t\":{\"dtype\":\"F32\",\"shape\":"
                       "[4611686018427387905,4],\"data_offsets\":[0,16]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  writeFile(file, bytes + header + std::string(16, '\0'));
  EXPECT_NE(errorText(rt::SafetensorsFile::open(file).takeError())
                .find("tensor 't': invalid shape"),
            std::string::npos);
}

TEST(CheckpointFuzzRegression, ChunkPastItsFileOrOverlapping) {
  // ckpt-chunk-past-file: a chunk of 8 GiB in a small file, in one hash
  // block, had readWhole (and readBlocks) allocate 8 GiB before reading.
  std::string dir = savedRowSplit();
  std::string index = readFile(dir + "/index.json");
  uint64_t size0 = readFile(dir + "/rank-00000.safetensors").size();
  editIndex(dir, [](llvm::json::Object &index) {
    chunkOf(index, "h.0.w", 1)["offset"] = int64_t(1) << 40;
  });
  EXPECT_NE(openError(dir).find("tensor 'h.0.w': chunk 'h.0.w@1' at bytes "
                                "[1099511627776, +96) lies past the end of "
                                "rank-00001.safetensors"),
            std::string::npos)
      << openError(dir);
  // Negative sizes are refused as such.
  writeFile(dir + "/index.json", index);
  editIndex(dir, [](llvm::json::Object &index) {
    chunkOf(index, "h.0.w", 1)["bytes"] = -4;
  });
  EXPECT_NE(openError(dir).find("a chunk lacks file, name, offset, bytes"),
            std::string::npos)
      << openError(dir);
  // Two chunks on the same bytes: both in range, but together they would
  // let a tensor claim more than the files hold.
  writeFile(dir + "/index.json", index);
  uint64_t offset0 = 0;
  editIndex(dir, [&](llvm::json::Object &index) {
    offset0 = *chunkOf(index, "h.0.w", 0).getInteger("offset");
    chunkOf(index, "h.0.w", 1)["file"] = "rank-00000.safetensors";
    chunkOf(index, "h.0.w", 1)["offset"] = offset0 - 8;
  });
  ASSERT_EQ(offset0 + 96, size0); // rank 0's file ends with its chunk
  EXPECT_NE(openError(dir).find("rank-00000.safetensors: chunks at bytes " +
                                std::to_string(offset0 - 8) + " and " +
                                std::to_string(offset0) + " overlap"),
            std::string::npos)
      << openError(dir);
  // The untouched index still opens and verifies.
  writeFile(dir + "/index.json", index);
  auto ckpt = rt::Checkpoint::open(dir);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(errorText(ckpt->verify()), "");
}

TEST(CheckpointFuzzRegression, HugeTensorWithoutChunks) {
  // ckpt-no-chunks-huge: a [2^40] F32 tensor with no chunks: verify sized a
  // per-element map and readWhole a tensor by it (4 TiB each).
  std::string dir = savedRowSplit();
  editIndex(dir, [](llvm::json::Object &index) {
    (*index.getObject("tensors"))["big"] =
        llvm::json::Object{{"shape", llvm::json::Array{int64_t(1) << 40}},
                           {"dtype", "F32"},
                           {"chunks", llvm::json::Array{}}};
  });
  auto ckpt = rt::Checkpoint::open(dir);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(errorText(ckpt->verify()),
            "big: its chunks hold 0 bytes of its 4398046511104; some "
            "elements are in no chunk");
  EXPECT_EQ(errorText(ckpt->readWhole("big").takeError()),
            "big: no chunk holds element 0 (the checkpoint's index is "
            "incomplete)");
  // The other tensor still reads.
  EXPECT_TRUE(static_cast<bool>(ckpt->readWhole("h.0.w")));
}

TEST(CheckpointFuzzRegression, TinyChunksOfAHugeTensorCutTwoWays) {
  // ckpt-verify-mixed-huge: chunks of 1 and 2 elements of a [2^40] tensor
  // (cut in 2^40 and 2^39 parts: two families), valid in their file.
  std::string dir = tempDir();
  rt::Tensor a(DType::F32, {1}), b(DType::F32, {2});
  ASSERT_EQ(
      errorText(rt::writeSafetensors(dir + "/rank-00000.safetensors",
                                     {{"t@0", a.ref()}, {"t@1", b.ref()}})),
      "");
  auto file = rt::SafetensorsFile::open(dir + "/rank-00000.safetensors");
  ASSERT_TRUE(static_cast<bool>(file));
  llvm::json::Array chunks;
  for (auto [name, parts] : std::vector<std::pair<std::string, int64_t>>{
           {"t@0", int64_t(1) << 40}, {"t@1", int64_t(1) << 39}}) {
    const rt::SafetensorsEntry *e = file->find(name);
    ASSERT_NE(e, nullptr);
    chunks.push_back(llvm::json::Object{
        {"file", "rank-00000.safetensors"},
        {"name", name},
        {"dims", llvm::json::Array{llvm::json::Object{
                     {"parts", parts}, {"index", 0}, {"block", 0}}}},
        {"offset", static_cast<int64_t>(e->begin)},
        {"bytes", static_cast<int64_t>(e->bytes())},
        {"sha256", "0"},
        {"block_sha256", llvm::json::Array{"0"}}});
  }
  llvm::json::Object index{
      {"schema", "dtc.checkpoint/1"},
      {"step", 1},
      {"world_size", 1},
      {"mesh", "dp:1"},
      {"hash_block_bytes", 16},
      {"tensors", llvm::json::Object{
                      {"t", llvm::json::Object{
                                {"shape", llvm::json::Array{int64_t(1) << 40}},
                                {"dtype", "F32"},
                                {"chunks", std::move(chunks)}}}}}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(index));
  os.flush();
  writeFile(dir + "/index.json", text);
  writeFile(dir + "/COMMITTED", "");
  auto ckpt = rt::Checkpoint::open(dir);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(errorText(ckpt->verify()),
            "t: its chunks hold 12 bytes of its 4398046511104; some elements "
            "are in no chunk");
  // Element 0 is in t@0, 1 in t@1, 2 in neither.
  EXPECT_EQ(errorText(ckpt->readWhole("t").takeError()),
            "t: no chunk holds element 2 (the checkpoint's index is "
            "incomplete)");
}

TEST(CheckpointFuzzRegression, DeeplyNestedJson) {
  // ckpt-deep-json: 65536 '[' as index.json overflowed the stack in
  // llvm::json::parse (one recursion per level); the safetensors header
  // went through the same parser.
  std::string dir = savedRowSplit();
  std::string deep(1 << 20, '[');
  writeFile(dir + "/index.json", deep);
  EXPECT_NE(openError(dir).find("index.json: invalid JSON: nested deeper "
                                "than 256 levels"),
            std::string::npos)
      << openError(dir);
  std::string file = dir + "/rank-00000.safetensors";
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<char>((deep.size() >> (8 * i)) & 0xff);
  writeFile(file, length + deep);
  EXPECT_NE(errorText(rt::SafetensorsFile::open(file).takeError())
                .find("invalid safetensors header: nested deeper than 256 "
                      "levels"),
            std::string::npos);
  // Brackets inside strings do not count.
  std::string header =
      "{\"__metadata__\":{\"k\":\"" + std::string(1000, '[') + "\"}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  writeFile(file, length + header);
  EXPECT_EQ(errorText(rt::SafetensorsFile::open(file).takeError()), "");
}
