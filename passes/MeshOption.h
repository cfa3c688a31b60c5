//===- MeshOption.h - The mesh a pass option names --------------*- C++ -*-===//
//
// Inside the IR the device mesh is a #dtc.mesh attribute; its text form
// ("dp:2,tp:4") is only what a pass or pipeline option is typed as. These
// read that text, once, where a pass starts: the passes' one reader of mesh
// text, so a bad mesh gets the same error wherever it is typed.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_MESHOPTION_H
#define DTC_PASSES_MESHOPTION_H

#include "dialects/dtc/DtcAttrs.h"
#include "runtime/support/Mesh.h"

#include "mlir/IR/Operation.h"
#include "llvm/Support/Error.h"

namespace dtc {

/// The mesh `text` names ("" is one rank); runtime/support/Mesh.h's error
/// for bad text.
inline llvm::Expected<runtime::Mesh> meshOption(llvm::StringRef text) {
  return runtime::Mesh::parse(text);
}

/// The same as an attribute; failure, after an error at `op`, on bad text.
inline mlir::FailureOr<mlir::dtc::MeshAttr> meshOption(mlir::Operation *op,
                                                       llvm::StringRef text) {
  auto mesh = meshOption(text);
  if (!mesh) {
    op->emitError(llvm::toString(mesh.takeError()));
    return mlir::failure();
  }
  return mlir::dtc::MeshAttr::get(op->getContext(), *mesh);
}

} // namespace dtc

#endif // DTC_PASSES_MESHOPTION_H
