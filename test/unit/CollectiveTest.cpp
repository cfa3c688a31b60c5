//===- CollectiveTest.cpp - alpha-beta collective formulas ----------------===//
//
// Every formula against a value computed by hand, on a link with round
// numbers: 100 GB/s, 10 us per step, efficiency 1 (so beta = 1e-11 s/B).
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/Collectives.h"

#include <gtest/gtest.h>

using namespace dtc;

namespace {
const Link kLink{100e9, 10e-6, 1.0};
constexpr double kGB = 1e9;
// Relative tolerance for values computed by hand.
constexpr double kTol = 1e-9;

/// Two NVLink domains' worth of round numbers: 100 GB/s inside, 10 GB/s
/// out, no latency, full efficiency.
Cluster roundCluster(int64_t gpusPerNode) {
  Cluster c;
  c.name = "round";
  c.gpusPerNode = gpusPerNode;
  c.intraNodeGBps = 100;
  c.interNodeGBps = 10;
  c.intraNodeEfficiency = c.interNodeEfficiency = 1;
  c.intraNodeLatencyUs = c.interNodeLatencyUs = 0;
  return c;
}
} // namespace

TEST(Collective, RingAllReduce) {
  // 2(n-1) alpha + 2 (n-1)/n S beta = 60 us + 15 ms for n = 4, S = 1 GB.
  EXPECT_NEAR(flatCollectiveTime(Collective::AllReduce, kGB, 4, kLink,
                                 CollectiveAlgorithm::Ring),
              60e-6 + 15e-3, kTol);
}

TEST(Collective, TreeAllReduce) {
  // 2 ceil(log2 n) alpha + 2 S beta = 40 us + 20 ms for n = 4.
  EXPECT_NEAR(flatCollectiveTime(Collective::AllReduce, kGB, 4, kLink,
                                 CollectiveAlgorithm::Tree),
              40e-6 + 20e-3, kTol);
  // n = 5 rounds the depth up: 2 * 3 * 10 us.
  EXPECT_NEAR(flatCollectiveTime(Collective::AllReduce, 0, 5, kLink,
                                 CollectiveAlgorithm::Tree),
              60e-6, kTol);
}

TEST(Collective, BestPicksRingForLargeAndTreeForSmallMessages) {
  EXPECT_NEAR(flatCollectiveTime(Collective::AllReduce, kGB, 4, kLink),
              60e-6 + 15e-3, kTol);
  // 1 KB: ring 60 us + 15 ns, tree 40 us + 20 ns.
  EXPECT_NEAR(flatCollectiveTime(Collective::AllReduce, 1e3, 4, kLink),
              40e-6 + 20e-9, kTol);
}

TEST(Collective, AllGatherAndReduceScatter) {
  // (n-1) alpha + (n-1)/n S beta = 30 us + 7.5 ms.
  EXPECT_NEAR(flatCollectiveTime(Collective::AllGather, kGB, 4, kLink),
              30e-6 + 7.5e-3, kTol);
  EXPECT_NEAR(flatCollectiveTime(Collective::ReduceScatter, kGB, 4, kLink),
              30e-6 + 7.5e-3, kTol);
  // An all-reduce moves exactly a reduce-scatter plus an all-gather.
  EXPECT_NEAR(flatCollectiveTime(Collective::AllReduce, kGB, 4, kLink,
                                 CollectiveAlgorithm::Ring),
              2 * flatCollectiveTime(Collective::AllGather, kGB, 4, kLink),
              kTol);
}

TEST(Collective, AllToAll) {
  // Pairwise exchange: 7 steps, 7/8 of 1 GB leaves each rank.
  EXPECT_NEAR(flatCollectiveTime(Collective::AllToAll, kGB, 8, kLink),
              70e-6 + 8.75e-3, kTol);
}

TEST(Collective, Broadcast) {
  // Pipelined: the buffer crosses each link once. Chain: 3 alpha; tree:
  // ceil(log2 4) = 2 alpha.
  EXPECT_NEAR(flatCollectiveTime(Collective::Broadcast, kGB, 4, kLink,
                                 CollectiveAlgorithm::Ring),
              30e-6 + 10e-3, kTol);
  EXPECT_NEAR(flatCollectiveTime(Collective::Broadcast, kGB, 4, kLink,
                                 CollectiveAlgorithm::Tree),
              20e-6 + 10e-3, kTol);
}

TEST(Collective, SendRecv) {
  EXPECT_NEAR(flatCollectiveTime(Collective::SendRecv, kGB, 2, kLink),
              10e-6 + 10e-3, kTol);
}

TEST(Collective, OneRankCostsNothing) {
  for (Collective kind :
       {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
        Collective::AllToAll, Collective::Broadcast})
    EXPECT_EQ(flatCollectiveTime(kind, kGB, 1, kLink), 0);
}

TEST(Collective, EfficiencyScalesBandwidth) {
  Link half = kLink;
  half.efficiency = 0.5;
  EXPECT_NEAR(flatCollectiveTime(Collective::SendRecv, kGB, 2, half),
              10e-6 + 20e-3, kTol);
}

TEST(Collective, PlacementFollowsStride) {
  // tp = 8 innermost on 8-GPU nodes: one domain.
  GroupPlacement tp = placeGroup(8, 1, 8);
  EXPECT_EQ(tp.perDomain, 8);
  EXPECT_EQ(tp.domains(), 1);
  // dp outside tp = 8: every member in its own node.
  GroupPlacement dp = placeGroup(32, 8, 8);
  EXPECT_EQ(dp.perDomain, 1);
  EXPECT_EQ(dp.domains(), 32);
  // dp outside tp = 2: four members per node, across 4 nodes.
  GroupPlacement mixed = placeGroup(16, 2, 8);
  EXPECT_EQ(mixed.perDomain, 4);
  EXPECT_EQ(mixed.domains(), 4);
  // An NVL72 domain holds a whole tp x cp = 8 x 8 group.
  EXPECT_EQ(placeGroup(8, 8, 72).perDomain, 8);
}

TEST(Collective, GroupInsideOneDomainUsesNvlink) {
  Cluster c = roundCluster(8);
  // 8 GPUs, 800 MB, NVLink 100 GB/s: 2 * 7/8 * 8 ms = 14 ms.
  EXPECT_NEAR(
      collectiveTime(Collective::AllReduce, 0.8e9, placeGroup(8, 1, 8), c),
      14e-3, kTol);
}

TEST(Collective, OneMemberPerDomainUsesScaleOut) {
  Cluster c = roundCluster(8);
  // 4 nodes, 1 GB, 10 GB/s: 2 * 3/4 * 100 ms = 150 ms.
  EXPECT_NEAR(
      collectiveTime(Collective::AllReduce, kGB, placeGroup(4, 8, 8), c),
      150e-3, kTol);
}

TEST(Collective, HierarchicalAllReduce) {
  Cluster c = roundCluster(8);
  // 16 GPUs, 8 per node, 1.6 GB: reduce-scatter in the node
  // (7/8 * 16 ms = 14 ms), all-reduce of 200 MB across 2 nodes on each
  // GPU's own NIC (2 * 1/2 * 20 ms = 20 ms), all-gather in the node (14 ms).
  // The phases stream through one another: the NIC's 20 ms sets the time.
  GroupPlacement g = placeGroup(16, 1, 8);
  ASSERT_EQ(g.perDomain, 8);
  EXPECT_NEAR(collectiveTime(Collective::AllReduce, 1.6e9, g, c), 20e-3, kTol);
  // Latencies do add up: 7 NVLink steps of 2 us each way, and the 2-node
  // all-reduce's 2 steps of 10 us (ring and tree agree for 2).
  c.intraNodeLatencyUs = 2;
  c.interNodeLatencyUs = 10;
  EXPECT_NEAR(collectiveTime(Collective::AllReduce, 1.6e9, g, c),
              20e-3 + 2 * 7 * 2e-6 + 2 * 10e-6, kTol);
  c.intraNodeLatencyUs = c.interNodeLatencyUs = 0;
  // Flat over the scale-out network it would be 2 * 15/16 * 160 ms.
  EXPECT_LT(
      collectiveTime(Collective::AllReduce, 1.6e9, g, c),
      flatCollectiveTime(Collective::AllReduce, 1.6e9, 16, c.interNode()));
}

TEST(Collective, HierarchicalAllGatherAndReduceScatter) {
  Cluster c = roundCluster(8);
  GroupPlacement g = placeGroup(16, 1, 8);
  // All-gather: 200 MB across 2 nodes (1/2 * 20 ms = 10 ms) streamed into
  // 1.6 GB in the node (7/8 * 16 ms = 14 ms): NVLink sets the time.
  EXPECT_NEAR(collectiveTime(Collective::AllGather, 1.6e9, g, c), 14e-3, kTol);
  EXPECT_NEAR(collectiveTime(Collective::ReduceScatter, 1.6e9, g, c), 14e-3,
              kTol);
}

TEST(Collective, HierarchicalAllToAll) {
  Cluster c = roundCluster(8);
  GroupPlacement g = placeGroup(16, 1, 8);
  // Of 1.6 GB, 8/16 leaves the node at 10 GB/s (80 ms) while 7/16 stays on
  // NVLink (7 ms): the NIC bounds it.
  EXPECT_NEAR(collectiveTime(Collective::AllToAll, 1.6e9, g, c), 80e-3, kTol);
}

TEST(Collective, HierarchicalBroadcast) {
  Cluster c = roundCluster(8);
  GroupPlacement g = placeGroup(16, 1, 8);
  // Across the nodes (100 ms at 10 GB/s), streamed on inside (10 ms).
  EXPECT_NEAR(collectiveTime(Collective::Broadcast, kGB, g, c), 100e-3, kTol);
}

TEST(Collective, SendRecvPicksTheLinkBetweenThePair) {
  Cluster c = roundCluster(8);
  EXPECT_NEAR(collectiveTime(Collective::SendRecv, kGB, placeGroup(2, 4, 8), c),
              10e-3, kTol);
  EXPECT_NEAR(collectiveTime(Collective::SendRecv, kGB, placeGroup(2, 8, 8), c),
              100e-3, kTol);
}

TEST(Collective, PresetLatencyAndEfficiencyApply) {
  auto a100 = lookupClusterPreset("a100-80g", 8);
  ASSERT_TRUE(static_cast<bool>(a100));
  Link nvlink = a100->intraNode();
  // 300 GB/s nominal per direction.
  EXPECT_DOUBLE_EQ(nvlink.bytesPerSecond, 300e9);
  double expected = 2 * 7 * nvlink.latencySeconds +
                    2 * 7.0 / 8 * kGB / (300e9 * nvlink.efficiency);
  EXPECT_NEAR(
      collectiveTime(Collective::AllReduce, kGB, placeGroup(8, 1, 8), *a100),
      expected, kTol);
}
