/*===- ScratchPool.h - the kernels' scratch allocator ---------------------===*
 *
 * Generated kernels allocate their intermediates at every call; a step calls
 * the same kernels with the same sizes every time. The pool keeps freed
 * blocks for reuse, up to a limit on in-use + cached bytes (the compiler's
 * scratch bound), so a steady-state step maps no new pages, and it counts the
 * peak in use for the memory report. Thread-safe (kernels allocate from
 * worker threads). Blocks are 128-byte aligned.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOERT_SCRATCHPOOL_H
#define MOERT_SCRATCHPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void *moert_scratch_alloc(size_t size);
void moert_scratch_free(void *ptr);
/* Peak bytes in use (block capacities) since start. */
int64_t moert_scratch_peak(void);
/* Bytes in use + cached above which freed blocks are released instead of
 * cached (0, the default: nothing is cached). */
void moert_scratch_set_limit(int64_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_SCRATCHPOOL_H */
