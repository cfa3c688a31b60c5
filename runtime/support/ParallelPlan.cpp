//===- ParallelPlan.cpp - The one typed parallel plan ---------------------===//

#include "runtime/support/ParallelPlan.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

using namespace dtc;

llvm::StringRef dtc::recomputeName(Recompute recompute) {
  switch (recompute) {
  case Recompute::None:
    return "none";
  case Recompute::Selective:
    return "selective";
  case Recompute::Full:
    return "full";
  }
  return "?";
}

std::optional<Recompute> dtc::parseRecompute(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<Recompute>>(name)
      .Case("none", Recompute::None)
      .Case("selective", Recompute::Selective)
      .Case("full", Recompute::Full)
      .Default(std::nullopt);
}

llvm::StringRef dtc::scheduleName(Schedule schedule) {
  switch (schedule) {
  case Schedule::GPipe:
    return "gpipe";
  case Schedule::OneFOneB:
    return "1f1b";
  case Schedule::Interleaved:
    return "interleaved";
  case Schedule::ZeroBubbleH1:
    return "zb-h1";
  }
  return "?";
}

std::optional<Schedule> dtc::parseSchedule(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<Schedule>>(name)
      .Case("gpipe", Schedule::GPipe)
      .Case("1f1b", Schedule::OneFOneB)
      .Case("interleaved", Schedule::Interleaved)
      .Case("zb-h1", Schedule::ZeroBubbleH1)
      .Default(std::nullopt);
}

std::string dtc::scheduleNames() {
  llvm::SmallVector<llvm::StringRef, 4> names;
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved,
                     Schedule::ZeroBubbleH1})
    names.push_back(scheduleName(s));
  return llvm::join(names, ", ");
}

llvm::StringRef dtc::meshAxisName(MeshAxis axis) {
  switch (axis) {
  case MeshAxis::TP:
    return "tp";
  case MeshAxis::CP:
    return "cp";
  case MeshAxis::DP:
    return "dp";
  case MeshAxis::PP:
    return "pp";
  }
  return "?";
}

std::string dtc::meshOrderName(const MeshOrder &order) {
  llvm::SmallVector<llvm::StringRef, 4> names;
  for (MeshAxis axis : llvm::reverse(order))
    names.push_back(meshAxisName(axis));
  return llvm::join(names, ",");
}

std::optional<MeshOrder> dtc::parseMeshOrder(llvm::StringRef outermostFirst) {
  llvm::SmallVector<llvm::StringRef, 4> names;
  outermostFirst.split(names, ',');
  if (names.size() != 4)
    return std::nullopt;
  MeshOrder order;
  for (auto [i, name] : llvm::enumerate(llvm::reverse(names))) {
    std::optional<MeshAxis> axis;
    for (MeshAxis candidate :
         {MeshAxis::TP, MeshAxis::CP, MeshAxis::DP, MeshAxis::PP})
      if (name.trim() == meshAxisName(candidate))
        axis = candidate;
    if (!axis || llvm::is_contained(llvm::ArrayRef(order.data(), i), *axis))
      return std::nullopt;
    order[i] = *axis;
  }
  return order;
}

int64_t ParallelPlan::degree(MeshAxis axis) const {
  switch (axis) {
  case MeshAxis::TP:
    return tp;
  case MeshAxis::CP:
    return cp;
  case MeshAxis::DP:
    return dp;
  case MeshAxis::PP:
    return pp;
  }
  return 1;
}

int64_t ParallelPlan::stride(MeshAxis axis) const {
  int64_t stride = 1;
  for (MeshAxis inner : meshOrder) {
    if (inner == axis)
      return stride;
    stride *= degree(inner);
  }
  return stride;
}
