//===- DtcDialect.cpp - dtc dialect registration --------------------------===//

#include "dialects/dtc/DtcDialect.h"
#include "dialects/dtc/DtcOps.h"

using namespace mlir;
using namespace mlir::dtc;

#include "dialects/dtc/DtcDialect.cpp.inc"

void DtcDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "dialects/dtc/DtcOps.cpp.inc"
      >();
}

Operation *DtcDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                           Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
