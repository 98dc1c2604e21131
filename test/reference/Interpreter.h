//===- Interpreter.h - reference interpreter of the moe dialect -*- C++ -*-===//
//
// Runs a moe step function on concrete tensors in plain C++, in double
// precision, forward and backward ops alike. Owned by the tests: it is the
// oracle for gradient checks now and for generated kernels and multi-rank
// runs later. Simple loops, no performance intent.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TEST_REFERENCE_INTERPRETER_H
#define MOE_TEST_REFERENCE_INTERPRETER_H

#include "mlir/IR/BuiltinOps.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moec::reference {

/// A dense row-major tensor; floats are held as double, ids as int32.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
  std::vector<int32_t> ints;
  bool isInt = false;

  static Tensor zeros(std::vector<int64_t> shape);
  static Tensor ids(std::vector<int64_t> shape, std::vector<int32_t> values);
  int64_t numel() const;
};

class Interpreter {
public:
  explicit Interpreter(mlir::ModuleOp module) : module(module) {}

  /// Current parameter values by name.
  std::map<std::string, Tensor> params;
  /// AdamW moments (m, v) by parameter name, created at the first update.
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> moments;
  /// The value of the last moe.global_norm run (the gradient norm of the
  /// last training step, before clipping).
  double lastGlobalNorm = NAN;
  /// Of the last run, per router or fused gate in order: its balancing loss
  /// (E x sum f_e P_e) and z-loss, before their coefficients.
  std::vector<std::pair<double, double>> lastRouterLosses;

  /// Gives every declared parameter a value from its initialiser, using a
  /// fixed-seed generator (normal and uniform draws are deterministic).
  void initParams(uint64_t seed);

  /// Runs function `name` on `args`. On failure returns false and sets
  /// `error` (an id out of range, an op it does not know, ...).
  bool run(const std::string &name, const std::vector<Tensor> &args, std::vector<Tensor> &results,
           std::string &error);

private:
  mlir::ModuleOp module;
};

} // namespace moec::reference

#endif // MOE_TEST_REFERENCE_INTERPRETER_H
