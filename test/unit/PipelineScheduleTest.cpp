//===- PipelineScheduleTest.cpp - Schedules as action lists ---------------===//
//
// The zero-bubble schedule (ZB-H1) as runtime/core/PipelineSchedule.h
// derives it: the pass orders are written out by hand from the rule (1F1B's
// forwards and input gradients; stage s runs the weight gradient of
// micro-batch i after the input gradient of i + s), and every action list
// is checked for what the executor relies on: each weight gradient after
// its input gradient, the gradient sent right after the input gradient
// that made it (before any weight gradient), the simulator's consent.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/PipelineSchedule.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

using namespace dtc::runtime;

namespace {

PipelineShape shape(llvm::StringRef schedule, int64_t stages, int64_t micro,
                    int64_t vpp = 1) {
  PipelineShape s;
  s.schedule = schedule.str();
  s.stages = stages;
  s.virtualStages = vpp;
  s.microBatches = micro;
  return s;
}

std::string order(const PipelineShape &sh, int64_t stage) {
  std::vector<std::string> names;
  for (const PipelinePass &p : pipelinePasses(sh, stage))
    names.push_back(passName(sh, stage, p));
  return llvm::join(names, " ");
}

TEST(PipelineSchedule, ZeroBubbleH1PassOrderAtTwoStages) {
  PipelineShape sh = shape("zb-h1", 2, 4);
  // Stage 0: one warm-up forward, then F, B, W (no delay on stage 0).
  EXPECT_EQ(order(sh, 0),
            "F0.0 F0.1 B0.0 W0.0 F0.2 B0.1 W0.1 F0.3 B0.2 W0.2 B0.3 W0.3");
  // Stage 1 delays each weight gradient by one micro-batch: its input
  // gradients go upstream first.
  EXPECT_EQ(order(sh, 1),
            "F1.0 B1.0 F1.1 B1.1 W1.0 F1.2 B1.2 W1.1 F1.3 B1.3 W1.2 W1.3");
  // 1F1B is unchanged: one backward per micro-batch, no W.
  EXPECT_EQ(order(shape("1f1b", 2, 4), 1),
            "F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3");
}

TEST(PipelineSchedule, ZeroBubbleH1ActionLists) {
  for (int64_t stages : {2, 4})
    for (int64_t micro : {1, 2, 3, 8}) {
      PipelineShape sh = shape("zb-h1", stages, micro);
      for (bool overlap : {false, true}) {
        auto actions = pipelineActions(sh, overlap);
        ASSERT_TRUE(static_cast<bool>(actions))
            << llvm::toString(actions.takeError());
        ASSERT_EQ(static_cast<int64_t>(actions->size()), stages);
        for (int64_t s = 0; s < stages; ++s) {
          SCOPED_TRACE("pp=" + std::to_string(stages) + " m=" +
                       std::to_string(micro) + " stage " + std::to_string(s));
          std::set<int64_t> forwards, inputs, weights;
          int64_t sends = 0;
          const std::vector<PipelineAction> &list = (*actions)[s];
          for (size_t i = 0; i < list.size(); ++i) {
            const PipelineAction &a = list[i];
            EXPECT_NE(a.kind, PipelineAction::Backward) << "unsplit backward";
            if (a.kind == PipelineAction::Forward)
              forwards.insert(a.micro);
            if (a.kind == PipelineAction::BackwardInput) {
              EXPECT_TRUE(s == stages - 1 || forwards.count(a.micro));
              inputs.insert(a.micro);
              // The gradient upstream leaves before anything else runs.
              if (s > 0) {
                ASSERT_LT(i + 1, list.size());
                EXPECT_EQ(list[i + 1].kind, PipelineAction::Send);
                EXPECT_EQ(list[i + 1].message.kind, PipelineMessage::Gradient);
                EXPECT_EQ(list[i + 1].message.micro, a.micro);
                EXPECT_EQ(list[i + 1].peer, -1);
              }
            }
            if (a.kind == PipelineAction::BackwardWeight) {
              EXPECT_TRUE(inputs.count(a.micro)) << "W before its B";
              EXPECT_TRUE(weights.insert(a.micro).second);
              // Micro-batches' weight gradients run in order.
              EXPECT_EQ(*weights.rbegin(), a.micro);
            }
            if (a.kind == PipelineAction::Send &&
                a.message.kind == PipelineMessage::Gradient) {
              // Sent in micro-batch order.
              EXPECT_EQ(a.message.micro, sends++);
            }
          }
          EXPECT_EQ(static_cast<int64_t>(inputs.size()), micro);
          EXPECT_EQ(static_cast<int64_t>(weights.size()), micro);
          EXPECT_EQ(sends, s > 0 ? micro : 0);
          // At most p micro-batches whose weight gradient is pending (the
          // forward done, W not): 1F1B's first stage's peak.
          int64_t pending = 0, peak = 0;
          for (const PipelineAction &a : list) {
            if (a.kind == PipelineAction::Forward ||
                (s == stages - 1 && a.kind == PipelineAction::BackwardInput))
              peak = std::max(peak, ++pending);
            if (a.kind == PipelineAction::BackwardWeight)
              --pending;
          }
          EXPECT_LE(peak, std::min(stages, micro));
        }
      }
    }
}

TEST(PipelineSchedule, ZeroBubbleH1RunsOneChunkPerStage) {
  auto actions = pipelineActions(shape("zb-h1", 2, 4, 2), false);
  ASSERT_FALSE(static_cast<bool>(actions));
  std::string message = llvm::toString(actions.takeError());
  EXPECT_NE(message.find("virtual stages"), std::string::npos) << message;
  EXPECT_NE(message.find("zb-h1"), std::string::npos) << message;
}

TEST(PipelineSchedule, UnknownScheduleIsRefused) {
  llvm::Error e = checkPipelineShape(shape("zb-h9", 2, 4));
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("zb-h9"), std::string::npos);
}

} // namespace
