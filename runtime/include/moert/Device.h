/*===- Device.h - kernels on a device, staged through host memory ---------===*
 *
 * A step program compiled with `moec --target opencl|cuda` runs every kernel
 * on a device while the arenas (parameters, optimiser state, activations)
 * stay in host memory: each call's inputs are copied to the device and the
 * outputs it wrote back (docs/Targets.md). Released allocations go to
 * Halide's reuse cache where the device API has one (CUDA: the 32 most
 * recently used); elsewhere (OpenCL) each call allocates its device
 * buffers. Plain C, as the step program calls it.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOERT_DEVICE_H
#define MOERT_DEVICE_H

#include "HalideRuntime.h"
#include "moert/DeviceCopies.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Before a kernel call on `device` (the target's interface; `target` the
 * moec --target, for the message): checks once per process that the device
 * answers (0, or non-zero after one line on stderr with the device API's
 * last error; later calls return the first answer) and turns on Halide's
 * device allocation reuse; then marks the call's input buffers (from the
 * kernel's Halide metadata; `bufs` in its argument order) as changed on the
 * host, so the kernel copies them to the device. */
int moert_device_inputs(const halide_device_interface_t *device, const char *target,
                        const halide_filter_metadata_t *md, halide_buffer_t *const *bufs);

/* After a kernel call that returned `rc`: copies each of the `n` buffers the
 * device wrote back to the host and releases its device allocation.
 * Returns rc, or the first copy error. */
int moert_device_outputs(int rc, halide_buffer_t *const *bufs, int n);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_DEVICE_H */
