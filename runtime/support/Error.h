//===- Error.h - dtc's user-facing errors -----------------------*- C++ -*-===//
//
// Every failure that reaches a user is an llvm::Error carrying a DtcError:
// one line of text (what, where, what to do) and its kind, which decides the
// exit code (SPEC "Exit codes and errors": 2 bad input, 1 the work failed).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_SUPPORT_ERROR_H
#define DTC_RUNTIME_SUPPORT_ERROR_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"

namespace dtc {

enum class ErrorKind {
  /// Bad input or usage: malformed files, unsupported ops, impossible plans.
  BadInput = 2,
  /// The work failed: I/O, a rank died, numerics diverged.
  Failure = 1,
};

class DtcError : public llvm::ErrorInfo<DtcError> {
public:
  static char ID;

  DtcError(ErrorKind kind, std::string message)
      : kind(kind), message(std::move(message)) {}

  ErrorKind getKind() const { return kind; }
  const std::string &getMessage() const { return message; }

  void log(llvm::raw_ostream &os) const override { os << message; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  ErrorKind kind;
  std::string message;
};

/// A bad-input error; `fmt` and `args` as in llvm::formatv.
template <typename... Ts> llvm::Error badInput(const char *fmt, Ts &&...args) {
  return llvm::make_error<DtcError>(
      ErrorKind::BadInput, llvm::formatv(fmt, std::forward<Ts>(args)...).str());
}

/// A failure of the work itself; `fmt` and `args` as in llvm::formatv.
template <typename... Ts> llvm::Error failure(const char *fmt, Ts &&...args) {
  return llvm::make_error<DtcError>(
      ErrorKind::Failure, llvm::formatv(fmt, std::forward<Ts>(args)...).str());
}

/// The same with a message already built (no formatv braces to escape).
inline llvm::Error badInputText(const llvm::Twine &message) {
  return llvm::make_error<DtcError>(ErrorKind::BadInput, message.str());
}
inline llvm::Error failureText(const llvm::Twine &message) {
  return llvm::make_error<DtcError>(ErrorKind::Failure, message.str());
}

/// Prints `dtc: error: <message>` to stderr and returns the exit code of
/// `err` (errors that are not DtcErrors count as failures).
int reportError(llvm::Error err);

} // namespace dtc

#endif // DTC_RUNTIME_SUPPORT_ERROR_H
