//===- LayoutFileTest.cpp - layout.json's placements ----------------------===//
//
// writeLayoutFile/readLayoutFile: a program's variables written as
// placement rules and read back give, on every rank, the chunk the
// program's own variable gives (ShardLayout::of); rank sets; and the
// errors a damaged file gets.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/LayoutFile.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

using namespace dtc;
using namespace dtc::runtime;

namespace {

struct VarSpec {
  std::string name, role = "parameter", parameter;
  std::vector<int64_t> global;
  std::vector<std::vector<std::string>> dims; ///< axes per dim; empty: whole
  std::vector<int64_t> blocks;                ///< per dim; empty: 0
  std::vector<std::string> flat;
};

/// The variable a rank's program declares for `s` on `mesh`.
program::Variable variable(const VarSpec &s, const Mesh &mesh) {
  program::Variable v;
  v.set_name(s.name);
  v.set_role(s.role);
  v.set_parameter(s.parameter.empty() ? s.name : s.parameter);
  v.mutable_type()->set_dtype(program::F32);
  auto size = [&](llvm::ArrayRef<std::string> axes) {
    int64_t n = 1;
    for (const std::string &a : axes)
      n *= mesh.axes()[mesh.axisIndex(a)].size;
    return n;
  };
  std::vector<int64_t> local = s.global;
  if (!s.dims.empty() || !s.flat.empty()) {
    for (size_t d = 0; d < s.global.size(); ++d) {
      v.add_global_shape(s.global[d]);
      program::DimShard *dim = v.add_shard();
      if (d < s.dims.size()) {
        for (const std::string &a : s.dims[d])
          dim->add_axes(a);
        local[d] /= size(s.dims[d]);
      }
      dim->set_block(d < s.blocks.size() ? s.blocks[d] : 0);
    }
  }
  if (!s.flat.empty()) {
    for (const std::string &a : s.flat)
      v.add_flat_axes(a);
    local = {numElements(local) / size(s.flat)};
  }
  for (int64_t d : local)
    v.mutable_type()->add_shape(d);
  return v;
}

LayoutFile read(llvm::StringRef text) {
  auto file = readLayoutFile(text, "layout.json");
  EXPECT_TRUE(static_cast<bool>(file))
      << (file ? "" : llvm::toString(file.takeError()));
  return file ? std::move(*file) : LayoutFile();
}

std::string readError(llvm::StringRef text) {
  auto file = readLayoutFile(text, "layout.json");
  return file ? "" : llvm::toString(file.takeError());
}

bool sameChunk(const ShardLayout &a, const ShardLayout &b) {
  if (a.globalShape() != b.globalShape() || a.localShape() != b.localShape() ||
      a.flatParts() != b.flatParts() || a.flatIndex() != b.flatIndex() ||
      a.dimParts().size() != b.dimParts().size())
    return false;
  for (size_t d = 0; d < a.dimParts().size(); ++d) {
    const ShardLayout::DimPart &x = a.dimParts()[d], &y = b.dimParts()[d];
    if (x.parts != y.parts || x.index != y.index || x.block != y.block)
      return false;
  }
  return true;
}

/// Every rank's chunk from the file equals the one its program gives.
void expectSameChunks(const program::Program &p) {
  LayoutFile file = read(writeLayoutFile(p));
  auto mesh = Mesh::parse(p.mesh());
  ASSERT_TRUE(static_cast<bool>(mesh));
  size_t checked = 0;
  for (int rank = 0; rank < p.world_size(); ++rank) {
    const program::RankProgram *program = rankProgramOf(p, rank);
    ASSERT_NE(program, nullptr);
    for (const program::Variable &v : program->variables()) {
      const LayoutFile::Tensor *tensor = file.find(v.name());
      ASSERT_NE(tensor, nullptr) << v.name();
      auto fromFile = file.chunkOf(*tensor, rank);
      ASSERT_TRUE(static_cast<bool>(fromFile))
          << llvm::toString(fromFile.takeError());
      ASSERT_TRUE(fromFile->has_value()) << v.name() << " on rank " << rank;
      auto fromProgram = ShardLayout::of(v, *mesh, rank);
      ASSERT_TRUE(static_cast<bool>(fromProgram));
      EXPECT_TRUE(sameChunk(**fromFile, *fromProgram))
          << v.name() << " on rank " << rank;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u);
}

const char *kMesh = "pp:2,dp:2,tp:2";

/// Two pipeline stages of four ranks; a tied embedding on both, cut over
/// tp by rows on stage 0 and whole on stage 1.
program::Program pipelineProgram() {
  auto mesh = Mesh::parse(kMesh);
  program::Program p;
  p.set_mesh(kMesh);
  p.set_world_size(8);
  std::vector<std::vector<VarSpec>> stages = {
      {{"wte", "parameter", "", {64, 16}, {{"tp"}}},
       {"qkv", "parameter", "", {16, 48}, {{}, {"tp"}}, {0, 16}},
       {"exp_avg:qkv",
        "exp_avg",
        "qkv",
        {16, 48},
        {{}, {"tp"}},
        {0, 16},
        {"dp"}},
       {"ln", "parameter", "", {16}, {}, {}, {"dp", "tp"}}},
      {{"wte", "parameter", "", {64, 16}},
       {"head.bias", "parameter", "", {64}}}};
  for (int stage = 0; stage < 2; ++stage) {
    program::RankProgram *r = p.add_ranks();
    r->set_rank(stage * 4);
    for (int rank = stage * 4; rank < stage * 4 + 4; ++rank)
      r->add_ranks(rank);
    for (const VarSpec &s : stages[stage])
      *r->add_variables() = variable(s, *mesh);
  }
  return p;
}

} // namespace

TEST(LayoutFile, RankSetsRoundTrip) {
  EXPECT_EQ(formatRankSet({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(formatRankSet({5}), "5");
  auto ranks = parseRankSet("0-3,8,10-11", 12);
  ASSERT_TRUE(static_cast<bool>(ranks));
  EXPECT_EQ(*ranks, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  for (const char *bad : {"", "3-1", "0-12", "4,2", "a", "1-", "-1"}) {
    auto parsed = parseRankSet(bad, 12);
    EXPECT_FALSE(static_cast<bool>(parsed)) << bad;
    if (!parsed)
      llvm::consumeError(parsed.takeError());
  }
}

TEST(LayoutFile, EveryRankGetsItsProgramsChunk) {
  expectSameChunks(pipelineProgram());
}

TEST(LayoutFile, OneRulePerPlacementNotPerRank) {
  program::Program p = pipelineProgram();
  LayoutFile file = read(writeLayoutFile(p));
  EXPECT_EQ(file.meshText, kMesh);
  EXPECT_EQ(file.worldSize, 8);
  const LayoutFile::Tensor *wte = file.find("wte");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{64, 16}));
  // Stage 0's tp rows and stage 1's whole copy: two placements.
  ASSERT_EQ(wte->placements.size(), 2u);
  EXPECT_EQ(wte->placements[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(wte->placements[1].ranks, (std::vector<int>{4, 5, 6, 7}));
  // Rank 3 = (pp 0, dp 1, tp 1): rows 32-63 of the embedding; rank 6 the
  // whole of it; ZeRO's moment of qkv on rank 3 is flat part 1 of 2.
  auto rows = file.chunkOf(*wte, 3);
  ASSERT_TRUE(rows && rows->has_value());
  EXPECT_EQ((*rows)->dimParts()[0].parts, 2);
  EXPECT_EQ((*rows)->dimParts()[0].index, 1);
  EXPECT_EQ((*rows)->localShape(), (llvm::ArrayRef<int64_t>{32, 16}));
  auto whole = file.chunkOf(*wte, 6);
  ASSERT_TRUE(whole && whole->has_value());
  EXPECT_TRUE((*whole)->isWhole());
  auto moment = file.chunkOf(*file.find("exp_avg:qkv"), 3);
  ASSERT_TRUE(moment && moment->has_value());
  EXPECT_EQ((*moment)->flatParts(), 2);
  EXPECT_EQ((*moment)->flatIndex(), 1);
  EXPECT_EQ((*moment)->localShape(), (llvm::ArrayRef<int64_t>{192}));
  // head.bias lives on stage 1 only.
  auto none = file.chunkOf(*file.find("head.bias"), 1);
  ASSERT_TRUE(static_cast<bool>(none));
  EXPECT_FALSE(none->has_value());
}

TEST(LayoutFile, DeterministicText) {
  EXPECT_EQ(writeLayoutFile(pipelineProgram()),
            writeLayoutFile(pipelineProgram()));
}

TEST(LayoutFile, DamagedFilesNameTheFault) {
  std::string good = writeLayoutFile(pipelineProgram());
  // The first `from` after `after`.
  auto replaced = [&](llvm::StringRef from, llvm::StringRef to,
                      llvm::StringRef after = "") {
    std::string text = good;
    size_t at = text.find(from.str(), text.find(after.str()));
    EXPECT_NE(at, std::string::npos) << from.str();
    if (at != std::string::npos)
      text.replace(at, from.size(), to.str());
    return text;
  };
  std::string e = readError(replaced("dtc.layout/2", "dtc.layout/1"));
  EXPECT_NE(e.find("schema is not \"dtc.layout/2\""), std::string::npos) << e;
  e = readError(replaced("\"tp\"", "\"xp\""));
  EXPECT_NE(e.find("tensor 'exp_avg:qkv'"), std::string::npos) << e;
  EXPECT_NE(e.find("not one of mesh"), std::string::npos) << e;
  e = readError(replaced("\"0-3\"", "\"0-9\""));
  EXPECT_NE(e.find("rank set '0-9'"), std::string::npos) << e;
  // wte's 64 rows, cut over tp = 2 on stage 0, become 63.
  e = readError(replaced("64", "63", "\"wte\""));
  EXPECT_NE(e.find("not cut into 2 equal parts"), std::string::npos) << e;
  e = readError(replaced("\"world_size\": 8", "\"world_size\": 4"));
  EXPECT_NE(e.find("world_size 4"), std::string::npos) << e;
  EXPECT_NE(readError("[1, 2"), "");
}
