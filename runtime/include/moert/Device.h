/*===- Device.h - device-resident arenas for device kernels ---------------===*
 *
 * A step program compiled with `moec --target opencl|cuda` runs every kernel
 * on a device. Each of a rank's arenas (its activations, its gradients, each
 * parameter and each AdamW moment) has one device allocation of its size,
 * made at the first step, and a kernel's arguments are device crops of them:
 * the data stays on the device from kernel to kernel and from step to step
 * (docs/Targets.md).
 *
 * Host code (the collectives, the global norm, the load metrics, the loss,
 * the trainer's checkpoints and migrations) reads and writes the host copy.
 * The layer keeps, per arena, the byte ranges whose newest copy is on the
 * host and those whose newest copy is on the device, and copies a range only
 * when the other side needs it:
 * - a kernel's inputs: their host-newer bytes go to the device first;
 * - a kernel's outputs: the device copy becomes the newer one;
 * - before host code reads a range (moert_device_host), its device-newer
 *   bytes come back;
 * - after host code writes a range (moert_device_wrote), the host copy is
 *   the newer one.
 * An argument outside every arena (the tokens, a metric's stack buffer), or
 * one that cannot be a crop, is staged: copied to a device allocation of its
 * own for the call, and back if the kernel wrote it. Plain C, as the step
 * program calls it.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOERT_DEVICE_H
#define MOERT_DEVICE_H

#include "HalideRuntime.h"
#include "moert/DeviceCopies.h"
#include "moert/Program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At the start of each step function: the rank's arenas on `device` (the
 * target's interface; `target` the moec --target, for messages). The first
 * call checks that a device answers and allocates the arenas there, every
 * byte host-newer; later calls return at once unless the trainer changed an
 * arena's host pointer (the arenas are then made anew). 0, or non-zero
 * after one line on stderr. `params` and `num_params`: the program's table,
 * which sizes the parameters and moments as the trainer allocates them. */
int moert_device_attach(moert_context *ctx, const halide_device_interface_t *device,
                        const char *target, const moert_param_info *params, int num_params,
                        int64_t activation_bytes, int64_t gradient_bytes);

/* Around a kernel call: `bufs` are its buffer arguments in the order of its
 * Halide metadata `md`. moert_device_call makes each a device crop of its
 * arena (copying the host-newer bytes of inputs first) or stages it;
 * moert_device_called records what the kernel wrote and releases the crops
 * and staged allocations. Both return 0 or an error code (the message went
 * to Halide's error handler or stderr); called returns `rc` when not 0. */
int moert_device_call(moert_context *ctx, const halide_filter_metadata_t *md,
                      halide_buffer_t *const *bufs, int n);
int moert_device_called(moert_context *ctx, int rc, halide_buffer_t *const *bufs, int n);

/* Host code is about to read or write [p, p + bytes) (bytes < 0: to the end
 * of p's arena): its device-newer bytes come back. A range outside every
 * arena is left alone. 0 or an error code. */
int moert_device_host(moert_context *ctx, const void *p, int64_t bytes);
/* Host code wrote [p, p + bytes) (bytes < 0: to the end of p's arena). */
void moert_device_wrote(moert_context *ctx, const void *p, int64_t bytes);

/* A kernel call staged whole, without arenas (the kernel tests): before
 * it, checks that `device` answers (as moert_device_attach) and marks the
 * call's input buffers host-dirty, so the kernel copies them to the device;
 * after it, copies each of the `n` buffers the device wrote back to the host
 * and releases its device allocation (returns rc, or the first error). */
int moert_device_inputs(const halide_device_interface_t *device, const char *target,
                        const halide_filter_metadata_t *md, halide_buffer_t *const *bufs);
int moert_device_outputs(int rc, halide_buffer_t *const *bufs, int n);

/* The trainer's side (moert_program.device_sync, device_wrote,
 * device_free): every device-newer byte of the rank's arenas to the host
 * (0 or an error code); every byte host-newer after the trainer wrote its
 * state; the device allocations released (after a final sync). */
int moert_device_sync(moert_context *ctx);
void moert_device_wrote_all(moert_context *ctx);
void moert_device_free(moert_context *ctx);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_DEVICE_H */
