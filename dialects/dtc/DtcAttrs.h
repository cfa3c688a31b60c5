//===- DtcAttrs.h - dtc dialect attributes ----------------------*- C++ -*-===//

#ifndef DTC_DIALECTS_DTC_DTCATTRS_H
#define DTC_DIALECTS_DTC_DTCATTRS_H

#include "dialects/dtc/DtcDialect.h"
#include "runtime/support/Mesh.h"

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/Error.h"

#include <optional>

#define GET_ATTRDEF_CLASSES
#include "dialects/dtc/DtcAttrs.h.inc"

#endif // DTC_DIALECTS_DTC_DTCATTRS_H
