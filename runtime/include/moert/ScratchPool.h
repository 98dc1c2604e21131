/*===- ScratchPool.h - the kernels' scratch allocator ---------------------===*
 *
 * Generated kernels allocate their intermediates at every call; a step calls
 * the same kernels with the same sizes every time. The pool carves them out
 * of one region of the compiler's scratch bound, mapped once (first fit,
 * coalescing): kernels run one at a time and free everything before they
 * return, so the blocks of kernels of different shapes share pages, and a
 * steady-state step maps and faults in nothing. It counts the peak in use
 * for the memory report. Thread-safe (kernels allocate from worker threads).
 * Blocks are 128-byte aligned.
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
/* Starts a new peak from the bytes in use now (the kernel tests measure
 * each kernel's own peak). */
void moert_scratch_reset_peak(void);
/* Maps a region of `bytes` for the blocks (0, the default: no region, every
 * block comes from the system allocator; so do blocks the region cannot
 * hold). Returns 0, or -1 while blocks of the current region are still out
 * or when mapping failed (the pool then has no region). */
int moert_scratch_set_limit(int64_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_SCRATCHPOOL_H */
