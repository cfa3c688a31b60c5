//===- DtcAttrs.cpp - dtc dialect attributes ------------------------------===//
//
// #dtc.sharding and #dtc.mesh: parsers, printers, verifiers, and the
// conversions between #dtc.mesh and the runtime's mesh.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcAttrs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/Sequence.h"
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

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

MeshAttr MeshAttr::get(MLIRContext *context, const ::dtc::runtime::Mesh &mesh) {
  Builder b(context);
  SmallVector<Attribute> names;
  SmallVector<int64_t> sizes;
  for (const Axis &axis : mesh.axes()) {
    names.push_back(b.getStringAttr(axis.name));
    sizes.push_back(axis.size);
  }
  return Base::get(context, b.getArrayAttr(names), sizes);
}

llvm::Expected<MeshAttr> MeshAttr::parseText(MLIRContext *context,
                                             StringRef text) {
  // The runtime's parser is the one definition of the syntax, and it
  // checks what verify() does.
  auto mesh = ::dtc::runtime::Mesh::parse(text);
  if (!mesh)
    return mesh.takeError();
  return get(context, *mesh);
}

::dtc::runtime::Mesh MeshAttr::getMesh() const {
  SmallVector<Axis> axes = getAxes();
  return ::dtc::runtime::Mesh(std::vector<Axis>(axes.begin(), axes.end()));
}

std::string MeshAttr::str() const { return getMesh().str(); }

StringRef MeshAttr::getAxisName(unsigned axis) const {
  return cast<StringAttr>(getNames()[axis]).getValue();
}

SmallVector<MeshAttr::Axis> MeshAttr::getAxes() const {
  SmallVector<Axis> axes;
  for (unsigned i = 0, e = getNumAxes(); i < e; ++i)
    axes.push_back({getAxisName(i).str(), getAxisSize(i)});
  return axes;
}

std::optional<unsigned> MeshAttr::getAxisIndex(StringRef name) const {
  for (unsigned i = 0, e = getNumAxes(); i < e; ++i)
    if (getAxisName(i) == name)
      return i;
  return std::nullopt;
}

int64_t MeshAttr::getWorldSize() const {
  int64_t n = 1;
  for (int64_t size : getSizes())
    n *= size;
  return n;
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayAttr names, ArrayRef<int64_t> sizes) {
  if (names.size() != sizes.size())
    return emitError() << "mesh has " << names.size() << " axis names but "
                       << sizes.size() << " sizes";
  llvm::StringSet<> seen;
  for (auto [attr, size] : llvm::zip(names, sizes)) {
    auto name = dyn_cast<StringAttr>(attr);
    if (!name || name.getValue().empty())
      return emitError() << "mesh axis must have a non-empty name";
    if (!seen.insert(name.getValue()).second)
      return emitError() << "mesh axis \"" << name.getValue()
                         << "\" appears twice";
    if (size < 1)
      return emitError() << "mesh axis \"" << name.getValue()
                         << "\" must have size >= 1, got " << size;
  }
  return success();
}

/// `<[dp = 2, tp = 4]>`; a name that is not a bare identifier is quoted.
Attribute MeshAttr::parse(AsmParser &parser, Type) {
  Builder b(parser.getContext());
  SmallVector<Attribute> names;
  SmallVector<int64_t> sizes;
  llvm::SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                     [&] {
                                       std::string name;
                                       int64_t size = 0;
                                       if (parser.parseKeywordOrString(&name) ||
                                           parser.parseEqual() ||
                                           parser.parseInteger(size))
                                         return failure();
                                       names.push_back(b.getStringAttr(name));
                                       sizes.push_back(size);
                                       return success();
                                     }) ||
      parser.parseGreater())
    return {};
  return parser.getChecked<MeshAttr>(loc, parser.getContext(),
                                     b.getArrayAttr(names), sizes);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  llvm::interleaveComma(llvm::seq<unsigned>(0, getNumAxes()), printer,
                        [&](unsigned i) {
                          printer.printKeywordOrString(getAxisName(i));
                          printer << " = " << getAxisSize(i);
                        });
  printer << "]>";
}

#define GET_ATTRDEF_CLASSES
#include "dialects/dtc/DtcAttrs.cpp.inc"

void DtcDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/dtc/DtcAttrs.cpp.inc"
      >();
}
