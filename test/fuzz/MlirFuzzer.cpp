//===- MlirFuzzer.cpp - libFuzzer target: moe IR as moe-opt reads it ------===//
//
// Bytes as MLIR source with the dialects moe-opt registers: parsed, verified
// (every moe verifier, the attribute parsers of #moe.grid, #moe.placement,
// #moe.codec, ...), and printed. Contract: a module that verifies prints to
// text that parses and verifies again and prints the same.
//
//===----------------------------------------------------------------------===//

#include "FuzzContract.h"
#include "FuzzMLIRContext.h"
#include "moec/contract/NestingDepth.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

static std::string print(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext &ctx = moec::fuzz::context();
  // A null-terminated copy, as moe-opt's file buffers are (MLIR's lexer
  // relies on the terminator).
  std::string source(reinterpret_cast<const char *>(data), size);
  // moe-opt refuses it before parsing.
  if (moec::contract::findTooDeep(source, moec::contract::kMaxMlirNesting,
                                  moec::contract::kMlirNesting))
    return 0;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &ctx, "fuzz.mlir");
  if (!module || mlir::failed(mlir::verify(*module)))
    return 0;
  std::string first = print(*module);
  mlir::OwningOpRef<mlir::ModuleOp> again =
      mlir::parseSourceString<mlir::ModuleOp>(first, &ctx, "printed.mlir");
  if (!again)
    moec::fuzz::broken("a verified module prints to text that does not parse:\n" + first);
  if (mlir::failed(mlir::verify(*again)))
    moec::fuzz::broken("a verified module prints to text that does not verify:\n" + first);
  if (print(*again) != first)
    moec::fuzz::broken("printing is not stable:\n" + first);
  return 0;
}
