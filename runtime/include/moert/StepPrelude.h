/*===- StepPrelude.h - what every generated step program starts with ------===*
 *
 * Included once by each translation unit of a step program moec emits
 * (codegen/lib/StepProgram.cpp), after HalideRuntime.h: the views that
 * present planned buffers to Halide kernels, the element types, and the
 * handlers that route kernel errors to the step's return code (never an
 * abort) and kernel scratch to the runtime's pool (moert/ScratchPool.h).
 * Compiled and tested on its own by test/codegen/StepPreludeTest.cpp.
 *
 * Its definitions are internal to the including translation unit (an
 * anonymous namespace): every part of a long step has its own copy, and
 * each installs the same handlers.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOERT_STEPPRELUDE_H
#define MOERT_STEPPRELUDE_H

#include "HalideRuntime.h"
#include "moert/ScratchPool.h"

#include <cstdint>
#include <cstdio>
#include <initializer_list>

namespace {
/// A buffer of up to 4 dimensions as a Halide kernel argument.
struct View {
  halide_buffer_t b;
  halide_dimension_t d[4];
};
const halide_type_t f32 = {halide_type_float, 32, 1};
const halide_type_t bf16 = {halide_type_bfloat, 16, 1};
const halide_type_t f16 = {halide_type_float, 16, 1};
const halide_type_t i32 = {halide_type_int, 32, 1};
// Kernel errors (bad ids, shapes) are reported, never aborts: the step
// returns the error code and the trainer stops with a message.
void reportKernelError(void *, const char *message) {
  std::fprintf(stderr, "kernel error: %s\n", message);
}
// Kernel scratch comes from the runtime's pool (reused blocks, counted).
void *poolMalloc(void *, size_t size) { return moert_scratch_alloc(size); }
void poolFree(void *, void *ptr) { moert_scratch_free(ptr); }
struct InstallHandler {
  InstallHandler() {
    halide_set_error_handler(reportKernelError);
    halide_set_custom_malloc(poolMalloc);
    halide_set_custom_free(poolFree);
  }
} installHandler;

/// `p` as a dense buffer of type `t`, extents innermost first.
View view(const void *p, halide_type_t t, std::initializer_list<int> extents) {
  View v = {};
  v.b.host = (uint8_t *)p;
  v.b.type = t;
  v.b.dimensions = (int)extents.size();
  v.b.dim = v.d;
  int stride = 1, i = 0;
  for (int e : extents) {
    v.d[i].min = 0;
    v.d[i].extent = e;
    v.d[i].stride = stride;
    stride *= e;
    ++i;
  }
  return v;
}
} // namespace

#endif /* MOERT_STEPPRELUDE_H */
