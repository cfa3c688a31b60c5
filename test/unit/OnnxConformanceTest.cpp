//===- OnnxConformanceTest.cpp - ONNX node tests through the CPU runtime --===//
//
// Every ONNX backend node test of Debian's libonnx-testdata (single-node
// tests of every op and the multi-node `_expanded` function-body tests) is
// imported, lowered to a runtime program and executed by the CPU backend;
// its outputs must match test_data_set_0 within |a - b| <= 1e-4 + 1e-3 |b|.
//
// Each test is one of: passed; refused at import with a clean one-line
// error (an op, type or mode dtc does not import: counted as not passing);
// or failed (wrong numbers, a crash, an unclean error), which must be listed
// with its reason in test/models/onnx-conformance-known-failures.txt (a
// listed test that now passes fails too, so the list stays honest). At least
// 60% of all tests must pass. Each test runs in a child process so that a
// crash fails that test, not the whole run.
//
//===----------------------------------------------------------------------===//

#include "OnnxNodeTests.h"
#include "RuntimeTestUtil.h"
#include "compiler/run/Run.h"

#include "frontends/onnx/OnnxImporter.h"
#include "runtime/support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

namespace rt = ::dtc::runtime;
namespace dx = ::dtc::onnx;

namespace {

const std::string kKnownFailures =
    std::string(DTC_TEST_MODELS_DIR) + "/onnx-conformance-known-failures.txt";

/// `name: reason` lines; blank lines and `#` comments are skipped.

/// The runtime dtype of an MLIR element type ("f32", "i64", "i1", ...).
rt::DType dtypeOf(mlir::Type type) {
  std::string name;
  llvm::raw_string_ostream os(name);
  os << mlir::cast<mlir::RankedTensorType>(type).getElementType();
  return rt::parseDType(name);
}

/// Element `i` of a runtime tensor, exact for f64 and integers.
double elementAt(const rt::Tensor &t, int64_t i) {
  switch (t.dtype()) {
  case rt::DType::F64:
    return t.as<double>()[i];
  case rt::DType::I64:
  case rt::DType::I32:
  case rt::DType::I8:
  case rt::DType::BOOL:
    return static_cast<double>(rt::loadAsInt(t.ref(), i));
  default:
    return rt::loadAsFloat(t.ref(), i);
  }
}

/// The kind of a refusal, for the summary: what dtc would need to import it.
std::string refusalKind(llvm::StringRef message) {
  if (message.contains("unsupported ONNX op"))
    return "op not lowered";
  if (message.contains("no opset of the default"))
    return "op of another domain (ai.onnx.preview.training)";
  if (message.contains("opset"))
    return "opset below 13 (op not lowered, or its schema changed since)";
  if (message.contains("element type") || message.contains("not a tensor") ||
      message.contains("to string"))
    return "element type, sequence or optional dtc lacks";
  if (message.contains("only on constants"))
    return "host-only op on a run-time input";
  return "mode or form of a lowered op dtc does not import";
}

/// The prefix of runNodeTest's answer when the importer refuses the model.
const std::string kRefused = "import refused: ";

/// Imports, lowers and runs one node test; "" when it matches, else why not.
std::string runNodeTest(const ::dtc::test::NodeTest &test) {
  mlir::MLIRContext ctx;
  auto module = dx::importOnnxFile(test.modelPath, {}, ctx);
  if (!module) {
    // Only a clean bad-input error counts as a refusal; anything else is a
    // failure of the test.
    std::string message;
    bool clean = false;
    llvm::handleAllErrors(
        module.takeError(),
        [&](const ::dtc::DtcError &e) {
          clean = e.getKind() == ::dtc::ErrorKind::BadInput;
          message = e.getMessage();
        },
        [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
    return clean ? kRefused + message : "import failed: " + message;
  }
  auto main = (*module)->lookupSymbol<mlir::func::FuncOp>("main");
  if (!main)
    return "no main function";
  auto files = test.argumentFiles();
  if (files.size() != main.getNumArguments())
    return "main takes " + std::to_string(main.getNumArguments()) +
           " arguments, the test feeds " + std::to_string(files.size());
  std::vector<rt::Tensor> args;
  for (size_t i = 0; i < files.size(); ++i) {
    auto host = ::dtc::test::readNodeTensor(files[i].first, files[i].second);
    if (!host)
      return "cannot read " + files[i].first;
    rt::DType dtype = dtypeOf(main.getArgumentTypes()[i]);
    if (dtype == rt::DType::DTYPE_UNSPECIFIED)
      return "argument " + std::to_string(i) + " has no runtime dtype";
    args.push_back(dtc::toRuntimeTensor(*host, dtype));
  }
  auto outputs = ::dtc::test::runOnCpu(**module, "main", args);
  if (!outputs)
    return "runtime error: " + llvm::toString(outputs.takeError());
  auto expectedFiles = test.outputFiles();
  if (outputs->size() != expectedFiles.size())
    return std::to_string(outputs->size()) + " outputs, expected " +
           std::to_string(expectedFiles.size());
  for (size_t i = 0; i < outputs->size(); ++i) {
    auto expected = ::dtc::test::readNodeTensor(expectedFiles[i].first,
                                                expectedFiles[i].second);
    if (!expected)
      return "cannot read " + expectedFiles[i].first;
    const rt::Tensor &got = (*outputs)[i];
    if (got.shape() != llvm::ArrayRef<int64_t>(expected->shape))
      return "output " + std::to_string(i) + " has shape " +
             dx::shapeString(got.shape()) + ", expected " +
             dx::shapeString(expected->shape);
    for (int64_t j = 0; j < expected->size(); ++j) {
      double a = elementAt(got, j), b = expected->getDouble(j);
      if ((std::isnan(a) && std::isnan(b)) || a == b)
        continue;
      if (!(std::fabs(a - b) <= 1e-4 + 1e-3 * std::fabs(b)))
        return "output " + std::to_string(i) + "[" + std::to_string(j) +
               "] = " + std::to_string(a) + ", expected " + std::to_string(b);
    }
  }
  return "";
}

/// runNodeTest in a child process, so that a crash fails one test instead
/// of ending the run. The parent never runs a kernel (OpenMP's thread pool
/// does not survive fork), so every child starts clean.
std::string runIsolated(const ::dtc::test::NodeTest &test) {
  int fds[2];
  if (pipe(fds) != 0)
    return runNodeTest(test);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return runNodeTest(test);
  }
  if (pid == 0) {
    close(fds[0]);
    std::string why = runNodeTest(test);
    for (size_t done = 0; done < why.size();) {
      ssize_t n = write(fds[1], why.data() + done, why.size() - done);
      if (n <= 0)
        break;
      done += n;
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string why;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;)
    why.append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    return "crashed with signal " + std::to_string(WTERMSIG(status)) +
           (why.empty() ? "" : " (" + why + ")");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "child exited abnormally";
  return why;
}

TEST(OnnxConformance, NodeTestsRunOnTheCpuRuntime) {
  std::map<std::string, std::string> known =
      ::dtc::test::readKnownFailures(kKnownFailures);
  struct Counts {
    int passed = 0, refused = 0, failed = 0;
  };
  std::map<std::string, Counts> perOp;
  std::map<std::string, int> refusalKinds;
  std::vector<std::string> unexpected, nowPassing;
  std::set<std::string> seen;
  int passed = 0, refused = 0, failed = 0;
  bool found = ::dtc::test::forEachNodeTest(
      [&](const ::dtc::test::NodeTest &test) {
        seen.insert(test.name);
        // DTC_CONFORMANCE_TRACE=1 names each test before it runs.
        if (getenv("DTC_CONFORMANCE_TRACE"))
          std::cout << "[ conformance ] run " << test.name << std::endl;
        std::string why = runIsolated(test);
        Counts &op = perOp[test.opType];
        bool listed = known.count(test.name) != 0;
        if (llvm::StringRef(why).starts_with(kRefused)) {
          // A clean one-line error: an op, type or mode dtc does not
          // import. It does not pass; it is no wrong answer either.
          ++refused;
          ++op.refused;
          std::string message = why.substr(kRefused.size());
          ++refusalKinds[refusalKind(message)];
          std::cout << "[ conformance ] refused: " << test.name << ": "
                    << message << "\n";
          if (listed)
            unexpected.push_back(test.name +
                                 " is listed but refused: " + message);
          return;
        }
        if (why.empty()) {
          ++passed;
          ++op.passed;
          if (listed)
            nowPassing.push_back(test.name);
          return;
        }
        ++failed;
        ++op.failed;
        std::cout << "[ conformance ] FAIL " << test.name << ": " << why
                  << (listed ? " (known: " + known[test.name] + ")" : "")
                  << "\n";
        if (!listed)
          unexpected.push_back(test.name + ": " + why);
      },
      /*everyTest=*/true);
  if (!found)
    GTEST_SKIP() << ::dtc::test::kNodeTestDir
                 << " missing (apt install libonnx-testdata)";
  int total = passed + refused + failed;
  ASSERT_EQ(total, static_cast<int>(seen.size()));
  // Ops by how many of their tests do not pass, most first: what to lower
  // next.
  std::vector<std::pair<std::string, Counts>> ops(perOp.begin(), perOp.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto &a, const auto &b) {
    return a.second.refused + a.second.failed >
           b.second.refused + b.second.failed;
  });
  for (const auto &[op, c] : ops)
    std::cout << "[ conformance ] " << op << ": " << c.passed << " passed, "
              << c.refused << " refused, " << c.failed << " failed\n";
  for (const auto &[kind, count] : refusalKinds)
    std::cout << "[ conformance ] refused, " << kind << ": " << count << "\n";
  char percent[16];
  std::snprintf(percent, sizeof(percent), "%.1f", 100.0 * passed / total);
  std::cout << "[ conformance ] passed " << passed << " of " << total
            << " node tests (" << percent << "%); " << refused
            << " refused at import, " << failed
            << " failed (listed in onnx-conformance-known-failures.txt)\n";
  // At least 60% of every node test, refusals counted as not passing.
  EXPECT_GE(passed * 10, total * 6);
  for (const std::string &failure : unexpected)
    ADD_FAILURE() << "not in onnx-conformance-known-failures.txt: " << failure;
  for (const std::string &name : nowPassing)
    ADD_FAILURE() << name
                  << " now passes: remove it from "
                     "onnx-conformance-known-failures.txt";
  for (const auto &[name, reason] : known)
    if (!seen.count(name))
      ADD_FAILURE() << name
                    << " is listed in onnx-conformance-known-failures.txt but "
                       "is no node test";
}

} // namespace
