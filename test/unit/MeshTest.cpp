//===- MeshTest.cpp - The device mesh and split layouts -------------------===//
//
// Mesh: parsing and its errors, rank coordinates, the groups of axis sets
// in group order, pipeline peers. SplitLayout: which elements are a rank's
// part of a (block-interleaved) split dimension, written out by hand.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/CollectiveKernels.h"
#include "runtime/core/Communicator.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace dtc::runtime;

namespace {

Mesh parse(llvm::StringRef text) {
  llvm::Expected<Mesh> mesh = Mesh::parse(text);
  EXPECT_TRUE(static_cast<bool>(mesh)) << llvm::toString(mesh.takeError());
  return mesh ? *mesh : Mesh();
}

std::string parseError(llvm::StringRef text) {
  llvm::Expected<Mesh> mesh = Mesh::parse(text);
  if (mesh)
    return "";
  return llvm::toString(mesh.takeError());
}

std::vector<int> group(const Mesh &mesh, int rank,
                       std::vector<std::string> axes) {
  llvm::Expected<std::vector<int>> g = mesh.group(rank, axes);
  EXPECT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  return g ? *g : std::vector<int>();
}

TEST(MeshTest, ParsesAxesOutermostFirst) {
  Mesh mesh = parse("pp:2, dp:3,tp:4");
  ASSERT_EQ(mesh.axes().size(), 3u);
  EXPECT_EQ(mesh.axes()[0].name, "pp");
  EXPECT_EQ(mesh.axes()[1].size, 3);
  EXPECT_EQ(mesh.worldSize(), 24);
  EXPECT_EQ(mesh.str(), "pp:2,dp:3,tp:4");
  EXPECT_EQ(mesh.axisIndex("tp"), 2);
  EXPECT_EQ(mesh.axisIndex("ep"), -1);
  EXPECT_EQ(parse("").worldSize(), 1);
  EXPECT_EQ(parse("").str(), "");
}

TEST(MeshTest, ParseErrorsNameTheCulprit) {
  EXPECT_NE(parseError("dp").find("bad axis 'dp'"), std::string::npos);
  EXPECT_NE(parseError("dp:0").find("bad axis 'dp:0'"), std::string::npos);
  EXPECT_NE(parseError("dp:x").find("bad axis 'dp:x'"), std::string::npos);
  EXPECT_NE(parseError(":2").find("bad axis ':2'"), std::string::npos);
  EXPECT_NE(parseError("dp:2,dp:2").find("axis 'dp' appears twice"),
            std::string::npos);
}

TEST(MeshTest, CoordinatesAreRowMajor) {
  Mesh mesh = parse("pp:2,dp:3,tp:4");
  // Rank 17 = 1*12 + 1*4 + 1.
  EXPECT_EQ(mesh.coordinates(17), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(mesh.coordinates(23), (std::vector<int64_t>{1, 2, 3}));
  for (int r = 0; r < mesh.worldSize(); ++r)
    EXPECT_EQ(mesh.rankAt(mesh.coordinates(r)), r);
}

TEST(MeshTest, GroupsFollowCoordinatesOnTheirAxes) {
  Mesh mesh = parse("pp:2,dp:3,tp:4");
  // Rank 17 = (1, 1, 1).
  EXPECT_EQ(group(mesh, 17, {"tp"}), (std::vector<int>{16, 17, 18, 19}));
  EXPECT_EQ(group(mesh, 17, {"dp"}), (std::vector<int>{13, 17, 21}));
  EXPECT_EQ(group(mesh, 17, {"pp"}), (std::vector<int>{5, 17}));
  // Outermost axis first, whatever order the attribute names them in.
  std::vector<int> dpTp = {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};
  EXPECT_EQ(group(mesh, 17, {"dp", "tp"}), dpTp);
  EXPECT_EQ(group(mesh, 17, {"tp", "dp"}), dpTp);
  EXPECT_EQ(group(mesh, 17, {"pp", "tp"}),
            (std::vector<int>{4, 5, 6, 7, 16, 17, 18, 19}));
  std::vector<int> all(24);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(group(mesh, 17, {"pp", "dp", "tp"}), all);
  EXPECT_EQ(group(mesh, 17, {}), (std::vector<int>{17}));
  // Every member of a group has the same group.
  for (int r : group(mesh, 6, {"pp", "tp"}))
    EXPECT_EQ(group(mesh, r, {"pp", "tp"}), group(mesh, 6, {"pp", "tp"}));
}

TEST(MeshTest, GroupOfUnknownAxisIsAnError) {
  Mesh mesh = parse("dp:2,tp:2");
  llvm::Expected<std::vector<int>> g = mesh.group(0, {"tp", "ep"});
  ASSERT_FALSE(static_cast<bool>(g));
  EXPECT_NE(llvm::toString(g.takeError()).find("no axis 'ep'"),
            std::string::npos);
}

TEST(MeshTest, PeersAlongOneAxis) {
  Mesh mesh = parse("pp:4,dp:2");
  // Rank 3 = (1, 1).
  EXPECT_EQ(mesh.peer(3, "pp", 1), 5);
  EXPECT_EQ(mesh.peer(3, "pp", -1), 1);
  EXPECT_EQ(mesh.peer(3, "pp", 2), 7);
  EXPECT_EQ(mesh.peer(3, "pp", 3), std::nullopt);
  EXPECT_EQ(mesh.peer(3, "dp", -1), 2);
  EXPECT_EQ(mesh.peer(3, "dp", 1), std::nullopt);
  EXPECT_EQ(mesh.peer(0, "pp", -1), std::nullopt);
  EXPECT_EQ(mesh.peer(0, "ep", 1), std::nullopt);
}

TEST(MeshTest, ParsesReductions) {
  EXPECT_EQ(*parseReduction(""), Reduction::Sum);
  EXPECT_EQ(*parseReduction("sum"), Reduction::Sum);
  EXPECT_EQ(*parseReduction("max"), Reduction::Max);
  EXPECT_EQ(*parseReduction("min"), Reduction::Min);
  llvm::Expected<Reduction> bad = parseReduction("prod");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("'prod'"), std::string::npos);
}

/// The parts of a 2x8 tensor (elements 0..15) split along `dim` in `parts`.
std::vector<std::vector<int32_t>> split(int64_t dim, int64_t block,
                                        int64_t parts) {
  std::vector<int32_t> whole(16);
  std::iota(whole.begin(), whole.end(), 0);
  llvm::Expected<SplitLayout> layout =
      SplitLayout::get({2, 8}, sizeof(int32_t), dim, block, parts);
  EXPECT_TRUE(static_cast<bool>(layout)) << llvm::toString(layout.takeError());
  if (!layout)
    return {};
  std::vector<std::vector<int32_t>> result;
  std::vector<int32_t> back(16, -1);
  for (int64_t p = 0; p < parts; ++p) {
    std::vector<int32_t> part(layout->partBytes() / sizeof(int32_t));
    layout->extract(whole.data(), part.data(), p);
    layout->insert(part.data(), back.data(), p);
    result.push_back(part);
  }
  EXPECT_EQ(back, whole); // the parts tile the whole
  return result;
}

TEST(SplitLayoutTest, PlainAndInterleavedParts) {
  using Parts = std::vector<std::vector<int32_t>>;
  EXPECT_EQ(split(0, 0, 2),
            (Parts{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}));
  EXPECT_EQ(split(1, 0, 2),
            (Parts{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}}));
  // dim 1 read as [2, 4]: each part is a run of 2 of every block of 4.
  EXPECT_EQ(split(1, 4, 2),
            (Parts{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  EXPECT_EQ(
      split(-1, 4, 4),
      (Parts{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(split(1, 8, 1),
            (Parts{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}));
  llvm::Expected<SplitLayout> plain = SplitLayout::get({8, 3}, 4, 0, 0, 4);
  ASSERT_TRUE(static_cast<bool>(plain));
  EXPECT_TRUE(plain->contiguous());
  EXPECT_EQ(plain->partBytes(), 2 * 3 * 4);
}

TEST(SplitLayoutTest, ErrorsSayWhy) {
  auto error = [](llvm::ArrayRef<int64_t> shape, int64_t dim, int64_t block,
                  int64_t parts) {
    llvm::Expected<SplitLayout> layout =
        SplitLayout::get(shape, 4, dim, block, parts);
    return layout ? std::string() : llvm::toString(layout.takeError());
  };
  EXPECT_NE(error({2, 6}, 1, 0, 4).find("does not split into 4 parts"),
            std::string::npos);
  EXPECT_NE(error({2, 6}, 1, 4, 2).find("not a multiple of block 4"),
            std::string::npos);
  EXPECT_NE(error({2, 6}, 1, 3, 2).find("(block 3) does not split"),
            std::string::npos);
  EXPECT_NE(error({2, 6}, 2, 0, 2).find("out of range"), std::string::npos);
}

} // namespace
