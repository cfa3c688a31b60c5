//===- Spec.cpp - What the cost model is asked about ----------------------===//

#include "compiler/costmodel/Spec.h"

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
  }
  return "?";
}

std::optional<Schedule> dtc::parseSchedule(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<Schedule>>(name)
      .Case("gpipe", Schedule::GPipe)
      .Case("1f1b", Schedule::OneFOneB)
      .Case("interleaved", Schedule::Interleaved)
      .Default(std::nullopt);
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
