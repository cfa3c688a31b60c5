//===- Error.cpp - dtc's user-facing errors -------------------------------===//

#include "runtime/support/Error.h"

#include "llvm/Support/raw_ostream.h"

char dtc::DtcError::ID = 0;

int dtc::reportError(llvm::Error err) {
  int code = static_cast<int>(ErrorKind::Failure);
  llvm::handleAllErrors(
      std::move(err),
      // One write per line: the ranks of a job share mpirun's stderr, and
      // lines written in pieces interleave when two ranks fail at once.
      [&](const DtcError &e) {
        code = static_cast<int>(e.getKind());
        llvm::errs() << ("dtc: error: " + e.getMessage() + "\n");
      },
      [&](const llvm::ErrorInfoBase &e) {
        llvm::errs() << ("dtc: error: " + e.message() + "\n");
      });
  return code;
}
