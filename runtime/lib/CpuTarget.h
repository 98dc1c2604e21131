//===- CpuTarget.h - does this CPU run the kernels' Halide target? --------===//
//
// A binary's kernels are compiled for one Halide target (moec --host-target;
// "host": the features of the machine that compiled them). Run on a CPU
// without those features they die of an illegal instruction, so the trainer
// checks first and names what is missing. Internal to the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_CPUTARGET_H
#define MOERT_LIB_CPUTARGET_H

#include <string>
#include <vector>

namespace moert {

/// The CPU features (GCC's __builtin_cpu_supports names) that the x86
/// features of a Halide target string (arch-bits-os-feature-...) need;
/// empty for other architectures and for features with no such check.
std::vector<std::string> cpuFeaturesOf(const std::string &halideTarget);

/// Whether this CPU has `feature`, one of cpuFeaturesOf's names (false for
/// another name).
bool cpuHas(const std::string &feature);

/// cpuFeaturesOf(halideTarget) that this CPU lacks, comma-separated; empty
/// when it has them all.
std::string missingCpuFeatures(const std::string &halideTarget);

} // namespace moert

#endif // MOERT_LIB_CPUTARGET_H
