/*===- DeviceCopies.h - the device layer's byte counts and kernel times ---===*
 *
 * What the staging of device kernels (Device.h) copied, per thread (a rank's
 * traffic), and, when profiling, each kernel's time (device or host). No
 * Halide types: the trainer reads them in every binary.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOERT_DEVICECOPIES_H
#define MOERT_DEVICECOPIES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* This thread's bytes copied host-to-device (bytes[0]) and device-to-host
 * (bytes[1]) since the last call, which resets them (the metrics'
 * device_copy_bytes). */
void moert_device_copied(int64_t bytes[2]);

/* Adds to this thread's counts (the staging calls' bookkeeping). */
void moert_device_count(int64_t toDevice, int64_t toHost);

/* Kernel profiling (the trainer's --profile-kernels): while on for this
 * thread (a rank), each kernel call adds its time to the kernel's row (the
 * rows are the process's). A device kernel call waits for the device before
 * and after the kernel; off by default, since the waits cost the overlap of
 * host code with device kernels. */
void moert_kernel_profile_enable(int on);
int moert_kernel_profile_enabled(void);
void moert_kernel_profile_add(const char *kernel, double seconds);
/* Host kernels: the clock in seconds (> 0) when this thread is profiling,
 * else 0; moert_kernel_profile_since adds the time since `start` (from the
 * clock) to the kernel's row. A step program brackets each call with them. */
double moert_kernel_profile_clock(void);
void moert_kernel_profile_since(const char *kernel, double start);
/* Row i (in first-call order): the kernel's name (valid until this thread's
 * next call), calls and seconds; returns 0 past the last row. */
int moert_kernel_profile_row(int i, const char **kernel, int64_t *calls, double *seconds);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_DEVICECOPIES_H */
