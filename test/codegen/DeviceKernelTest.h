//===- DeviceKernelTest.h - the kernel tests on an OpenCL device -*- C++ -*-===//
//
// MoEKernelTestsOpenCL runs the kernel tests with every kernel (but the
// OpenBLAS variants) generated for Halide's OpenCL target and called through
// a wrapper (DeviceWrapper.cmake) that stages its buffers as the step
// program of `moec --target opencl` does. Device intermediates come from the
// device API, not moert's scratch pool, so ScratchWithin checks only what
// stays on the host there.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TEST_DEVICEKERNELTEST_H
#define MOEC_TEST_DEVICEKERNELTEST_H

#include "HalideRuntimeOpenCL.h"
#include "moert/Device.h"

namespace kerneltest {

inline int deviceReady() { return moert_device_ready(halide_opencl_device_interface(), "opencl"); }

} // namespace kerneltest

#endif // MOEC_TEST_DEVICEKERNELTEST_H
