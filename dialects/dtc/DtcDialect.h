//===- DtcDialect.h - dtc dialect -------------------------------*- C++ -*-===//

#ifndef DTC_DIALECTS_DTC_DTCDIALECT_H
#define DTC_DIALECTS_DTC_DTCDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/dtc/DtcDialect.h.inc"

#endif // DTC_DIALECTS_DTC_DTCDIALECT_H
