//===- Passes.td - dtc passes ------------------------------*- tablegen -*-===//
//
// Every dtc pass is declared here once (name, options, docs); dtc-opt and
// the compile pipeline both register from this list.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_TD
#define DTC_PASSES_TD

include "mlir/Pass/PassBase.td"

def DtcSimplify : Pass<"dtc-simplify"> {
  let summary = "Fold and canonicalize dtc ops and drop dead ones";
  let description = [{
    Applies the dtc dialect's folders and canonicalization patterns to a
    fixed point: identities (`x + 0`, `x * 1`, identity transposes, reshapes
    and slices), constant folding of elementwise ops, merged chains of
    reshapes and transposes; then erases side-effect-free ops whose results
    are unused. The importer relies on it to clean up exported graphs.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect"];
  let options = [
    Option<"maxIterations", "max-iterations", "int64_t",
           /*default=*/"10",
           "Give up (and report an error) after this many rewrite rounds">,
  ];
}

def DtcTestShardingRules : Pass<"dtc-test-sharding-rules"> {
  let summary = "Attach each op's sharding rule as attributes (for tests)";
  let description = [{
    Sets `dtc.iterator_types` and `dtc.indexing_maps` on every op that
    implements ShardingRuleOpInterface, so lit tests can check the rules
    that propagation and the cost model will read.
  }];
}

#endif // DTC_PASSES_TD
