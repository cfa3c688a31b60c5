//===- Optimizer.cpp - Optimizer update operand checks --------------------===//

#include "runtime/core/Optimizer.h"

namespace dtc::runtime {

llvm::Expected<AdamWConfig> readAdamW(const KernelCall &call) {
  if (auto err = expectArity(call, 7, 3))
    return std::move(err);
  const TensorRef &param = call.input(0);
  const char *names[] = {"param", "grad", "exp_avg", "exp_avg_sq"};
  for (size_t i = 0; i < 4; ++i) {
    if (auto err = expectFloat(call, call.input(i), names[i]))
      return std::move(err);
    if (auto err = expectShape(call, call.input(i), param.shape, names[i]))
      return std::move(err);
  }
  for (size_t i = 0; i < 3; ++i) {
    const TensorRef &out = call.output(i);
    const TensorRef &replaced = call.input(i == 0 ? 0 : i + 1);
    if (out.dtype != replaced.dtype)
      return call.error("result " + llvm::Twine(i) + " has dtype " +
                        dtypeName(out.dtype) + ", its operand " +
                        dtypeName(replaced.dtype));
    if (auto err = expectShape(call, out, param.shape, "result"))
      return std::move(err);
  }
  const char *scalars[] = {"lr", "step", "grad_scale"};
  for (size_t i = 4; i < 7; ++i)
    if (!isFloat(call.input(i).dtype) || call.input(i).numElements() != 1)
      return call.error(llvm::Twine(scalars[i - 4]) +
                        " must be a float scalar");
  AdamWConfig config;
  for (auto [attr, value] :
       {std::pair{"beta1", &config.beta1}, std::pair{"beta2", &config.beta2},
        std::pair{"epsilon", &config.epsilon},
        std::pair{"weight_decay", &config.weightDecay}}) {
    llvm::Expected<double> read = call.requiredF64(attr);
    if (!read)
      return read.takeError();
    *value = *read;
  }
  return config;
}

} // namespace dtc::runtime
