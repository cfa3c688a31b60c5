//===- TestShardingRules.cpp - expose sharding rules to lit tests ---------===//

#include "dialects/dtc/DtcOps.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "dtc-test-sharding-rules"

namespace mlir::dtc {
#define GEN_PASS_DEF_DTCTESTSHARDINGRULES
#include "passes/Passes.h.inc"
} // namespace mlir::dtc

using namespace mlir;
using namespace mlir::dtc;

namespace {
struct DtcTestShardingRulesPass
    : mlir::dtc::impl::DtcTestShardingRulesBase<DtcTestShardingRulesPass> {
  using Base::Base;

  void runOnOperation() override {
    getOperation()->walk([&](ShardingRuleOpInterface rule) {
      Builder b(rule->getContext());
      SmallVector<Attribute> iterators;
      for (utils::IteratorType type : rule.getLoopIteratorTypes())
        iterators.push_back(
            b.getStringAttr(utils::stringifyIteratorType(type)));
      SmallVector<Attribute> maps;
      for (AffineMap map : rule.getIndexingMaps())
        maps.push_back(AffineMapAttr::get(map));
      rule->setAttr("dtc.iterator_types", b.getArrayAttr(iterators));
      rule->setAttr("dtc.indexing_maps", b.getArrayAttr(maps));
      if (loopKinds) {
        SmallVector<Attribute> kinds;
        for (auto [loop, type] : llvm::enumerate(rule.getLoopIteratorTypes())) {
          int64_t l = static_cast<int64_t>(loop);
          StringRef kind = rule.isVocabParallelLoop(l) ? "vocab-parallel"
                           : type == utils::IteratorType::parallel ? "parallel"
                           : rule.isSumReductionLoop(l)            ? "sum"
                                                                   : "max-like";
          kinds.push_back(b.getStringAttr(kind));
        }
        rule->setAttr("dtc.loop_kinds", b.getArrayAttr(kinds));
        SmallVector<int64_t> means;
        for (int64_t l = 0, e = iterators.size(); l < e; ++l)
          if (rule.isMeanLoop(l))
            means.push_back(l);
        if (!means.empty())
          rule->setAttr("dtc.mean_loops", b.getDenseI64ArrayAttr(means));
        if (rule.sumsOverParallelLoops())
          rule->setAttr("dtc.sums_over_parallel_loops", b.getUnitAttr());
      }
      LLVM_DEBUG(llvm::dbgs() << "dtc-test-sharding-rules: " << rule->getName()
                              << ", " << iterators.size() << " loops\n");
    });
  }
};
} // namespace
