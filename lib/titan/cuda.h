/*
 * titan/cuda.h — the CUDA device layer: device discovery and the device
 * memory backend of the tagged allocator.  Built from the .cu files of lib/cuda when
 * nvcc is present (make CUDA=auto|yes); otherwise every call returns
 * TITAN_E_UNSUPPORTED.  Without a GPU or driver the calls fail cleanly with
 * CUDA's own message (e.g. "CUDA driver version is insufficient for CUDA
 * runtime version") so tools can fall back to the CPU.
 */
#ifndef TITAN_CUDA_H
#define TITAN_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "titan/core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct titan_cuda_device_info {
	int index;
	char name[256];
	int cc_major, cc_minor;      /* compute capability */
	int sm_count;
	int64_t total_memory;        /* bytes */
};

/* true when this libtitan was built with CUDA. */
bool titan_cuda_built(void);
/* Number of usable devices in *n (0 + TITAN_E_DEVICE with CUDA's message
 * when there is no driver or device). */
int titan_cuda_device_count(int *n);
int titan_cuda_device_info(int device, struct titan_cuda_device_info *out);
/* A titan_mem_backend allocating with cudaMalloc on `device`. */
int titan_cuda_mem_backend(int device, struct titan_mem_backend *out);
/* Copy between host and device memory (kind inferred by CUDA's UVA). */
int titan_cuda_memcpy(void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
