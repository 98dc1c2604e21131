/*===- DeviceCopies.h - the device staging's byte counts ------------------===*
 *
 * What the staging of device kernels (Device.h) copied, per thread (a rank's
 * traffic). No Halide types: the trainer reads it in every binary.
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

#ifdef __cplusplus
}
#endif

#endif /* MOERT_DEVICECOPIES_H */
