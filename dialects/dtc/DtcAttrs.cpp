//===- DtcAttrs.cpp - dtc dialect attributes ------------------------------===//
//
// #dtc.sharding: parser, printer and verifier.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcAttrs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::dtc;

static SmallVector<StringRef> axisNames(ArrayAttr axes) {
  SmallVector<StringRef> names;
  for (Attribute axis : axes)
    names.push_back(cast<StringAttr>(axis).getValue());
  return names;
}

SmallVector<StringRef> ShardingAttr::getDimAxes(unsigned dim) const {
  return axisNames(cast<ArrayAttr>(getDims()[dim]));
}

SmallVector<StringRef> ShardingAttr::getPartialAxes() const {
  return axisNames(getPartial());
}

bool ShardingAttr::isReplicated() const {
  return getPartial().empty() && llvm::all_of(getDims(), [](Attribute dim) {
           return cast<ArrayAttr>(dim).empty();
         });
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayAttr dims, ArrayRef<int64_t> blocks,
                                   ArrayAttr partial) {
  if (blocks.size() != dims.size())
    return emitError() << "sharding has " << dims.size() << " dims but "
                       << blocks.size() << " blocks";
  llvm::StringSet<> seen;
  auto checkAxes = [&](Attribute attr) -> LogicalResult {
    auto axes = dyn_cast<ArrayAttr>(attr);
    if (!axes)
      return emitError() << "sharding axes must be a list of strings";
    for (Attribute axis : axes) {
      auto name = dyn_cast<StringAttr>(axis);
      if (!name || name.getValue().empty())
        return emitError() << "mesh axis must be a non-empty string";
      if (!seen.insert(name.getValue()).second)
        return emitError() << "mesh axis \"" << name.getValue()
                           << "\" used more than once";
    }
    return success();
  };
  for (auto [dim, block] : llvm::zip(dims, blocks)) {
    if (failed(checkAxes(dim)))
      return failure();
    if (block < 0)
      return emitError() << "interleave block must be positive, got " << block;
    if (block > 0 && cast<ArrayAttr>(dim).empty())
      return emitError() << "interleave block on a dim that is not split";
  }
  return checkAxes(partial);
}

/// `["a", "b"]`
static ParseResult parseAxes(AsmParser &parser,
                             SmallVectorImpl<Attribute> &out) {
  Builder b(parser.getContext());
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
    std::string name;
    if (parser.parseString(&name))
      return failure();
    out.push_back(b.getStringAttr(name));
    return success();
  });
}

static void printAxes(AsmPrinter &printer, ArrayAttr axes) {
  printer << "[";
  llvm::interleaveComma(axes, printer, [&](Attribute axis) {
    printer << "\"" << cast<StringAttr>(axis).getValue() << "\"";
  });
  printer << "]";
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  Builder b(parser.getContext());
  SmallVector<Attribute> dims;
  SmallVector<int64_t> blocks;
  SmallVector<Attribute> partial;
  llvm::SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        SmallVector<Attribute> axes;
        if (parseAxes(parser, axes))
          return failure();
        int64_t block = 0;
        if (succeeded(parser.parseOptionalColon()) &&
            parser.parseInteger(block))
          return failure();
        dims.push_back(b.getArrayAttr(axes));
        blocks.push_back(block);
        return success();
      }))
    return {};
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("partial") || parser.parseEqual() ||
        parseAxes(parser, partial))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<ShardingAttr>(loc, parser.getContext(),
                                         b.getArrayAttr(dims), blocks,
                                         b.getArrayAttr(partial));
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  llvm::interleaveComma(llvm::zip(getDims(), getBlocks()), printer,
                        [&](auto pair) {
                          auto [dim, block] = pair;
                          printAxes(printer, cast<ArrayAttr>(dim));
                          if (block > 0)
                            printer << ":" << block;
                        });
  printer << "]";
  if (!getPartial().empty()) {
    printer << ", partial = ";
    printAxes(printer, getPartial());
  }
  printer << ">";
}

#define GET_ATTRDEF_CLASSES
#include "dialects/dtc/DtcAttrs.cpp.inc"

void DtcDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/dtc/DtcAttrs.cpp.inc"
      >();
}
