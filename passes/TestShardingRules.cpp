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
  void runOnOperation() override {
    getOperation()->walk([](ShardingRuleOpInterface rule) {
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
      LLVM_DEBUG(llvm::dbgs() << "dtc-test-sharding-rules: " << rule->getName()
                              << ", " << iterators.size() << " loops\n");
    });
  }
};
} // namespace
