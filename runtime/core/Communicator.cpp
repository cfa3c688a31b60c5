//===- Communicator.cpp - The device mesh of a program --------------------===//

#include "runtime/core/Communicator.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cstdlib>

namespace dtc::runtime {

Communicator::~Communicator() = default;

llvm::Expected<Reduction> parseReduction(llvm::StringRef name) {
  if (name.empty() || name == "sum")
    return Reduction::Sum;
  if (name == "max")
    return Reduction::Max;
  if (name == "min")
    return Reduction::Min;
  return dtc::failureText("unknown reduction '" + name + "'");
}

std::optional<int> launcherLocalRank() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                           "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return std::nullopt;
}

} // namespace dtc::runtime
