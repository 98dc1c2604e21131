//===- TestUtils.h - shared fixtures of the C++ unit tests ------*- C++ -*-===//

#ifndef MOE_TEST_UNITTESTS_TESTUTILS_H
#define MOE_TEST_UNITTESTS_TESTUTILS_H

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/InitAllDialects.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace moe_test {

/// A context with the moe tools' dialects loaded, recording every error.
class MoETest : public ::testing::Test {
protected:
  MoETest() {
    mlir::DialectRegistry registry;
    mlir::moe::registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    handler =
        std::make_unique<mlir::ScopedDiagnosticHandler>(&context, [this](mlir::Diagnostic &diag) {
          errors.push_back(diag.str());
          return mlir::success();
        });
  }

  /// Parses `source` as a module (null on error; errors recorded).
  mlir::OwningOpRef<mlir::ModuleOp> parse(llvm::StringRef source) {
    return mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  }

  mlir::MLIRContext context;
  std::vector<std::string> errors;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
};

/// Prints `op` in the custom form.
inline std::string print(mlir::Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

} // namespace moe_test

#endif // MOE_TEST_UNITTESTS_TESTUTILS_H
