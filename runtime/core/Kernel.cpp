//===- Kernel.cpp - The kernel interface of the runtime -------------------===//

#include "runtime/core/Kernel.h"
#include "runtime/support/Error.h"

#include <algorithm>

namespace dtc::runtime {

namespace {
const program::Attribute *findAttr(const program::Instruction &inst,
                                   llvm::StringRef name) {
  auto it = inst.attrs().find(std::string(name));
  return it == inst.attrs().end() ? nullptr : &it->second;
}
} // namespace

bool KernelCall::has(llvm::StringRef attr) const {
  return findAttr(inst_, attr) != nullptr;
}

bool KernelCall::flag(llvm::StringRef attr) const {
  const program::Attribute *a = findAttr(inst_, attr);
  return a && a->kind_case() == program::Attribute::kB && a->b();
}

int64_t KernelCall::i64(llvm::StringRef attr, int64_t defaultValue) const {
  const program::Attribute *a = findAttr(inst_, attr);
  return a && a->kind_case() == program::Attribute::kI ? a->i() : defaultValue;
}

double KernelCall::f64(llvm::StringRef attr, double defaultValue) const {
  return optionalF64(attr).value_or(defaultValue);
}

std::optional<double> KernelCall::optionalF64(llvm::StringRef attr) const {
  const program::Attribute *a = findAttr(inst_, attr);
  if (!a)
    return std::nullopt;
  if (a->kind_case() == program::Attribute::kF)
    return a->f();
  if (a->kind_case() == program::Attribute::kI)
    return static_cast<double>(a->i());
  return std::nullopt;
}

llvm::Expected<int64_t> KernelCall::requiredI64(llvm::StringRef attr) const {
  const program::Attribute *a = findAttr(inst_, attr);
  if (!a || a->kind_case() != program::Attribute::kI)
    return error("missing integer attribute '" + attr +
                 "' (recompile the program: the lowering writes it)");
  return a->i();
}

llvm::Expected<double> KernelCall::requiredF64(llvm::StringRef attr) const {
  if (std::optional<double> value = optionalF64(attr))
    return *value;
  return error("missing float attribute '" + attr +
               "' (recompile the program: the lowering writes it)");
}

llvm::ArrayRef<int64_t> KernelCall::ints(llvm::StringRef attr) const {
  const program::Attribute *a = findAttr(inst_, attr);
  if (!a || a->kind_case() != program::Attribute::kInts)
    return {};
  return llvm::ArrayRef<int64_t>(a->ints().values().data(),
                                 a->ints().values_size());
}

llvm::StringRef KernelCall::str(llvm::StringRef attr) const {
  const program::Attribute *a = findAttr(inst_, attr);
  return a && a->kind_case() == program::Attribute::kS ? llvm::StringRef(a->s())
                                                       : llvm::StringRef();
}

std::vector<std::string> KernelCall::strings(llvm::StringRef attr) const {
  const program::Attribute *a = findAttr(inst_, attr);
  if (!a || a->kind_case() != program::Attribute::kStrings)
    return {};
  return {a->strings().values().begin(), a->strings().values().end()};
}

llvm::Error KernelCall::error(const llvm::Twine &message) const {
  std::string where = inst_.loc().empty() ? "" : " at '" + inst_.loc() + "'";
  return dtc::failureText((inst_.op() + where + ": " + message).str());
}

llvm::Error expectSameShapes(const KernelCall &call,
                             std::initializer_list<const TensorRef *> tensors) {
  const TensorRef &first = **tensors.begin();
  for (const TensorRef *t : tensors)
    if (t->shape != first.shape)
      return call.error("shapes " + shapeString(first.shape) + " and " +
                        shapeString(t->shape) + " differ");
  return llvm::Error::success();
}

llvm::Expected<int64_t> readAxis(const KernelCall &call, int64_t rank,
                                 bool allowRank) {
  llvm::Expected<int64_t> axis = call.requiredI64("axis");
  if (!axis)
    return axis.takeError();
  int64_t normalized = *axis < 0 ? *axis + rank : *axis;
  if (normalized < 0 || normalized > rank || (!allowRank && normalized == rank))
    return call.error("axis " + llvm::Twine(*axis) + " out of range for rank " +
                      llvm::Twine(rank));
  return normalized;
}

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

llvm::Error expectFloat(const KernelCall &call, const TensorRef &t,
                        llvm::StringRef what) {
  if (isFloat(t.dtype))
    return llvm::Error::success();
  return call.error(what + " has unsupported dtype " + dtypeName(t.dtype) +
                    " (expected a float dtype)");
}

llvm::Error expectShape(const KernelCall &call, const TensorRef &t,
                        llvm::ArrayRef<int64_t> shape, llvm::StringRef what) {
  if (llvm::ArrayRef<int64_t>(t.shape) == shape)
    return llvm::Error::success();
  return call.error(what + " has shape " + shapeString(t.shape) +
                    ", expected " + shapeString(shape));
}

llvm::Error expectFloatShape(const KernelCall &call, const TensorRef &t,
                             llvm::ArrayRef<int64_t> shape,
                             llvm::StringRef what) {
  if (auto err = expectFloat(call, t, what))
    return err;
  return expectShape(call, t, shape, what);
}

llvm::Error expectArity(const KernelCall &call, size_t inputs, size_t outputs) {
  if (call.numInputs() >= inputs && call.numOutputs() >= outputs)
    return llvm::Error::success();
  return call.error("expected " + llvm::Twine(inputs) + " inputs and " +
                    llvm::Twine(outputs) + " outputs, got " +
                    llvm::Twine(call.numInputs()) + " and " +
                    llvm::Twine(call.numOutputs()));
}

std::vector<std::string> KernelRegistry::ops() const {
  std::vector<std::string> names;
  for (const auto &entry : kernels_)
    names.push_back(entry.getKey().str());
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace dtc::runtime
