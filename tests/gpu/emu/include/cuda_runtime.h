// The GPU emulator's stand-in for the CUDA toolkit's <cuda_runtime.h> (see scd_emu/device.h): the
// emulated kernels are compiled against these headers, never the toolkit's.
#ifndef SCD_TESTS_GPU_EMU_CUDA_RUNTIME_H_
#define SCD_TESTS_GPU_EMU_CUDA_RUNTIME_H_
#include "scd_emu/device.h"
#endif  // SCD_TESTS_GPU_EMU_CUDA_RUNTIME_H_
