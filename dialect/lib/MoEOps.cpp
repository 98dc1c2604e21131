//===- MoEOps.cpp - generated op definitions and shared op syntax ---------===//
//
// Verifiers live beside their op family: ParamOps.cpp, ModelOps.cpp,
// RoutingOps.cpp, CollectiveOps.cpp.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::moe;

/// custom<GridAxes>: `[dp, ep]`, stored as a string array.
static ParseResult parseGridAxes(OpAsmParser &parser, ArrayAttr &axes) {
  SmallVector<Attribute> names;
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
        StringRef name;
        if (parser.parseKeyword(&name))
          return failure();
        names.push_back(parser.getBuilder().getStringAttr(name));
        return success();
      }))
    return failure();
  axes = parser.getBuilder().getArrayAttr(names);
  return success();
}

static void printGridAxes(OpAsmPrinter &printer, Operation *, ArrayAttr axes) {
  printer << "[";
  llvm::interleaveComma(axes, printer,
                        [&](Attribute axis) { printer << cast<StringAttr>(axis).getValue(); });
  printer << "]";
}

#include "moe/Dialect/MoE/MoEInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "moe/Dialect/MoE/MoEOps.cpp.inc"
