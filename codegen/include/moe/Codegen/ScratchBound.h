//===- ScratchBound.h - the scratch one generated kernel may use -*- C++ -*-===//
//
// The bytes of scratch a kernel of a moe-halide-gen generator allocates while
// it runs: its compute_root intermediates under the generator's schedule
// (codegen/generators/*; keep in step with them), plus the pool's per-block
// slack. The compiler sums no two kernels (they run one at a time): the
// largest bound is the program's planned scratch. The kernel tests measure
// each generated variant's peak against it. Plain C++ (no MLIR).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CODEGEN_SCRATCHBOUND_H
#define MOE_CODEGEN_SCRATCHBOUND_H

#include <cstdint>
#include <string>
#include <vector>

namespace moec::codegen {

/// The value of `key=` in `key=value` GeneratorParams: an integer, 1 for
/// `true`, 0 when absent or anything else.
int64_t paramValue(const std::vector<std::string> &params, const std::string &key);

/// The scratch bound of generator `generator` under `params`, in bytes.
int64_t scratchBound(const std::string &generator, const std::vector<std::string> &params);

} // namespace moec::codegen

#endif // MOE_CODEGEN_SCRATCHBOUND_H
