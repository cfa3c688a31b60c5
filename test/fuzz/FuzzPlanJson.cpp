//===- FuzzPlanJson.cpp - libFuzzer target for a bundle's plan.json -------===//
//
// Bytes -> parsePlanView -> every inspection command over the view: `plan
// show` (without --rank: that reads program.pb), `plan explain`, `plan diff`
// of the plan against itself and `plan report`'s HTML. Any input must end
// in text or a clean llvm::Error: a plan.json is a file users keep, edit and
// hand to dtc, so no field it holds may crash, hang or exhaust the tool.
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/Inspect.h"
#include "compiler/inspect/PlanView.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>

namespace {

void consume(llvm::Error err) {
  if (!err)
    return;
  if (std::getenv("DTC_FUZZ_VERBOSE"))
    llvm::errs() << llvm::toString(std::move(err)) << "\n";
  else
    llvm::consumeError(std::move(err));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<dtc::PlanView> view = dtc::parsePlanView(text, "plan.json");
  if (!view) {
    consume(view.takeError());
    return 0;
  }
  llvm::raw_null_ostream out;
  consume(dtc::showPlan(*view, std::nullopt, out));
  consume(dtc::explainPlan(*view, /*k=*/3, out));
  consume(dtc::diffPlans(*view, *view, out));
  // As `dtc plan report` (writeReport) does: only a bundle with a plan.
  if (view->planned) {
    std::string html = dtc::renderReport(*view);
    (void)html;
  }
  return 0;
}
