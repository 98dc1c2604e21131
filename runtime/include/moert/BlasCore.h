//===- BlasCore.h - OpenBLAS kernels for CPUs it does not recognise -*- C++ -*-===//

#ifndef MOERT_BLASCORE_H
#define MOERT_BLASCORE_H

namespace moert {

/// Before anything else in main: when OpenBLAS chose kernels weaker than
/// this CPU runs (a release older than the CPU) and OPENBLAS_CORETYPE is
/// unset, executes the binary again (same arguments) with the best core
/// named; returns otherwise.
void selectBlasCore(char **argv);

} // namespace moert

#endif // MOERT_BLASCORE_H
