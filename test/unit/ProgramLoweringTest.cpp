//===- ProgramLoweringTest.cpp - Program lowering and executor ------------===//

#include "RuntimeTestUtil.h"

#include "dialects/dtc/DtcDialect.h"
#include "passes/lowering/ProgramLowering.h"
#include "runtime/core/Executor.h"
#include "runtime/cpu/CpuKernels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace {

namespace rt = dtc::runtime;

struct Parsed {
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

std::unique_ptr<Parsed> parse(llvm::StringRef source) {
  auto parsed = std::make_unique<Parsed>();
  parsed->context.loadDialect<mlir::func::FuncDialect, mlir::dtc::DtcDialect>();
  parsed->module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &parsed->context);
  return parsed;
}

const dtc::program::Value &valueOfResult(const dtc::program::Function &f,
                                         int result) {
  return f.values(f.results(result).value());
}

// A chain of 4 KiB temporaries: %a lives to the end; every other value dies
// at the next op, which is elementwise and so writes over it. Two buffers
// suffice where five values are computed.
TEST(ProgramLowering, ReusesBuffersOfDeadTemporaries) {
  auto p = parse(R"(
    func.func @chain(%x: tensor<1024xf32>) -> tensor<1024xf32> {
      %a = dtc.exp %x : tensor<1024xf32>
      %b = dtc.tanh %a : tensor<1024xf32>
      %c = dtc.exp %b : tensor<1024xf32>
      %d = dtc.add %c, %x : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
      %e = dtc.mul %d, %a : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
      return %e : tensor<1024xf32>
    })");
  ASSERT_TRUE(p->module);
  auto program = dtc::lowerToRankProgram(*p->module);
  ASSERT_TRUE(static_cast<bool>(program))
      << llvm::toString(program.takeError());
  const auto &f = program->functions(0);
  EXPECT_EQ(f.instructions_size(), 5);
  EXPECT_EQ(f.temporaries_bytes(), 5 * 4096);
  EXPECT_EQ(f.live_bytes_peak(), 2 * 4096);
  EXPECT_EQ(f.arena_bytes(), 2 * 4096);
  auto offset = [&](int instruction) {
    return f.values(f.instructions(instruction).outputs(0)).arena_offset();
  };
  // %b, %c, %d, %e share one buffer; %a has the other.
  EXPECT_EQ(offset(2), offset(1));
  EXPECT_EQ(offset(3), offset(1));
  EXPECT_EQ(offset(4), offset(1));
  EXPECT_NE(offset(0), offset(1));
}

// An operand still read later is never overwritten.
TEST(ProgramLowering, LiveOperandIsNotOverwritten) {
  auto p = parse(R"(
    func.func @keep(%x: tensor<1024xf32>) -> (tensor<1024xf32>, tensor<1024xf32>) {
      %a = dtc.exp %x : tensor<1024xf32>
      %b = dtc.tanh %a : tensor<1024xf32>
      return %a, %b : tensor<1024xf32>, tensor<1024xf32>
    })");
  ASSERT_TRUE(p->module);
  auto program = dtc::lowerToRankProgram(*p->module);
  ASSERT_TRUE(static_cast<bool>(program))
      << llvm::toString(program.takeError());
  const auto &f = program->functions(0);
  EXPECT_NE(f.values(f.instructions(0).outputs(0)).arena_offset(),
            f.values(f.instructions(1).outputs(0)).arena_offset());
  EXPECT_EQ(f.arena_bytes(), 2 * 4096);
}

TEST(ProgramLowering, ReshapeIsAViewAndEmitsNothing) {
  auto p = parse(R"(
    func.func @view(%x: tensor<2x3xf32>) -> tensor<6xf32> {
      %w = dtc.parameter "w" : tensor<3x2xf32>
      %r = dtc.reshape %w : (tensor<3x2xf32>) -> tensor<6xf32>
      %e = dtc.exp %r : tensor<6xf32>
      return %e : tensor<6xf32>
    })");
  ASSERT_TRUE(p->module);
  auto program = dtc::lowerToRankProgram(*p->module);
  ASSERT_TRUE(static_cast<bool>(program))
      << llvm::toString(program.takeError());
  const auto &f = program->functions(0);
  ASSERT_EQ(f.instructions_size(), 1);
  EXPECT_EQ(f.instructions(0).op(), "dtc.exp");
  EXPECT_EQ(f.values(f.instructions(0).inputs(0)).state(), "w");
  ASSERT_EQ(program->variables_size(), 1);
  EXPECT_EQ(program->variables(0).role(), "parameter");
  EXPECT_EQ(program->variables(0).fallback_init(), "normal");
}

// A variable updated by an op that is its last reader is updated in place:
// the result's storage is the variable itself, no temporary, no copy.
TEST(ProgramLowering, VariableUpdateIsInPlace) {
  auto p = parse(R"(
    func.func @accumulate(%acc: tensor<8xf32> {dtc.state = "grad:w", dtc.state_role = "grad", dtc.state_of = "w"},
                          %g: tensor<8xf32>) -> (tensor<8xf32> {dtc.state = "grad:w"}) {
      %sum = dtc.add %acc, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
      return %sum : tensor<8xf32>
    })");
  ASSERT_TRUE(p->module);
  auto program = dtc::lowerToRankProgram(*p->module);
  ASSERT_TRUE(static_cast<bool>(program))
      << llvm::toString(program.takeError());
  const auto &f = program->functions(0);
  EXPECT_EQ(valueOfResult(f, 0).state(), "grad:w");
  EXPECT_EQ(f.arena_bytes(), 0);
  ASSERT_EQ(program->variables_size(), 1);
  EXPECT_EQ(program->variables(0).role(), "grad");
  EXPECT_EQ(program->variables(0).parameter(), "w");
  EXPECT_EQ(f.arguments_size(), 1);
}

// Reading the variable after the update forbids the in-place write.
TEST(ProgramLowering, VariableReadLaterIsNotOverwritten) {
  auto p = parse(R"(
    func.func @late(%acc: tensor<8xf32> {dtc.state = "v"}, %g: tensor<8xf32>)
        -> (tensor<8xf32> {dtc.state = "v"}, tensor<8xf32>) {
      %sum = dtc.add %acc, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
      %old = dtc.exp %acc : tensor<8xf32>
      return %sum, %old : tensor<8xf32>, tensor<8xf32>
    })");
  ASSERT_TRUE(p->module);
  auto program = dtc::lowerToRankProgram(*p->module);
  ASSERT_TRUE(static_cast<bool>(program))
      << llvm::toString(program.takeError());
  EXPECT_TRUE(valueOfResult(program->functions(0), 0).has_arena_offset());
}

TEST(ProgramLowering, UnsupportedTypeIsAnError) {
  auto p = parse(R"(
    func.func @f(%x: tensor<?xf32>) -> tensor<?xf32> {
      return %x : tensor<?xf32>
    })");
  ASSERT_TRUE(p->module);
  auto program = dtc::lowerToRankProgram(*p->module);
  ASSERT_FALSE(static_cast<bool>(program));
  EXPECT_NE(
      llvm::toString(program.takeError()).find("no runtime representation"),
      std::string::npos);
}

TEST(Executor, RunsAndUpdatesVariables) {
  auto p = parse(R"(
    func.func @step(%acc: tensor<4xf32> {dtc.state = "acc"}, %g: tensor<4xf32> {dtc.name = "g"})
        -> (tensor<4xf32> {dtc.state = "acc"}, tensor<4xf32>) {
      %w = dtc.parameter "w" : tensor<4xf32>
      %sum = dtc.add %acc, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      %out = dtc.mul %sum, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      return %sum, %out : tensor<4xf32>, tensor<4xf32>
    })");
  ASSERT_TRUE(p->module);
  auto program = dtc::lowerToRankProgram(*p->module);
  ASSERT_TRUE(static_cast<bool>(program))
      << llvm::toString(program.takeError());
  rt::KernelRegistry kernels;
  rt::cpu::registerCpuKernels(kernels);
  auto executor = rt::Executor::create(*program, kernels);
  ASSERT_TRUE(static_cast<bool>(executor))
      << llvm::toString(executor.takeError());
  rt::Executor &ex = **executor;
  float *w = ex.variable("w")->as<float>();
  for (int i = 0; i < 4; ++i)
    w[i] = static_cast<float>(i);
  rt::Tensor g = dtc::test::makeF32({4}, {1, 1, 1, 1});
  for (int call = 1; call <= 3; ++call) {
    auto out = ex.run("step", {g});
    ASSERT_TRUE(static_cast<bool>(out)) << llvm::toString(out.takeError());
    ASSERT_EQ(out->size(), 1u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(ex.variable("acc")->as<float>()[i], call);
      EXPECT_EQ((*out)[0].as<float>()[i], call * i);
    }
  }
  // Wrong shape: the error names the input.
  rt::Tensor bad = dtc::test::makeF32({5}, {1, 1, 1, 1, 1});
  auto out = ex.run("step", {bad});
  ASSERT_FALSE(static_cast<bool>(out));
  EXPECT_EQ(llvm::toString(out.takeError()),
            "input 'g' must be 4xf32, got 5xf32");
}

TEST(Executor, MissingKernelIsNamed) {
  auto p = parse(R"(
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %y = dtc.exp %x : tensor<4xf32>
      return %y : tensor<4xf32>
    })");
  ASSERT_TRUE(p->module);
  auto program = dtc::lowerToRankProgram(*p->module);
  ASSERT_TRUE(static_cast<bool>(program));
  rt::KernelRegistry empty;
  auto executor = rt::Executor::create(*program, empty);
  ASSERT_FALSE(static_cast<bool>(executor));
  EXPECT_NE(llvm::toString(executor.takeError()).find("no kernel for dtc.exp"),
            std::string::npos);
}

} // namespace
