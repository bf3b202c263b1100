/*
 * device.cu — CUDA device discovery and the cudaMalloc backend of the tagged
 * allocator.  Every CUDA call goes through TITAN_CUDA_CHECK, which records
 * the call's text and CUDA's own error string.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "titan/cuda.h"

#define TITAN_CUDA_CHECK(call)                                                        \
	do {                                                                          \
		cudaError_t e_ = (call);                                              \
		if (e_ != cudaSuccess) {                                              \
			(void)cudaGetLastError(); /* clear the sticky error */        \
			return titan_error(TITAN_E_DEVICE, "%s: %s (%s)", #call,      \
					   cudaGetErrorString(e_), cudaGetErrorName(e_)); \
		}                                                                     \
	} while (0)

extern "C" bool titan_cuda_built(void)
{
	return true;
}

extern "C" int titan_cuda_device_count(int *n)
{
	*n = 0;
	TITAN_CUDA_CHECK(cudaGetDeviceCount(n));
	return 0;
}

extern "C" int titan_cuda_device_info(int device, struct titan_cuda_device_info *out)
{
	cudaDeviceProp p;

	TITAN_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
	memset(out, 0, sizeof(*out));
	out->index = device;
	snprintf(out->name, sizeof(out->name), "%s", p.name);
	out->cc_major = p.major;
	out->cc_minor = p.minor;
	out->sm_count = p.multiProcessorCount;
	out->total_memory = (int64_t)p.totalGlobalMem;
	return 0;
}

struct device_ctx {
	int device;
};

static void *device_alloc(void *ctx, size_t bytes)
{
	struct device_ctx *c = (struct device_ctx *)ctx;
	void *p = NULL;

	if (cudaSetDevice(c->device) != cudaSuccess)
		return NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	return p;
}

static void device_free(void *ctx, void *ptr, size_t bytes)
{
	(void)ctx;
	(void)bytes;
	cudaFree(ptr);
}

static int device_zero(void *ctx, void *ptr, size_t bytes)
{
	struct device_ctx *c = (struct device_ctx *)ctx;

	TITAN_CUDA_CHECK(cudaSetDevice(c->device));
	TITAN_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
	return 0;
}

extern "C" int titan_cuda_mem_backend(int device, struct titan_mem_backend *out)
{
	static struct device_ctx ctxs[64];
	int n;

	if (device < 0 || device >= 64)
		return titan_error(TITAN_E_INVALID, "CUDA device %d out of range", device);
	if (titan_cuda_device_count(&n) < 0)
		return TITAN_E_DEVICE;
	if (device >= n)
		return titan_error(TITAN_E_DEVICE, "CUDA device %d requested, %d present", device, n);
	ctxs[device].device = device;
	out->name = "cuda";
	out->alloc = device_alloc;
	out->free = device_free;
	out->reserved = NULL;
	out->zero = device_zero;
	out->ctx = &ctxs[device];
	return 0;
}

extern "C" int titan_cuda_memcpy(void *dst, const void *src, size_t bytes)
{
	TITAN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
	return 0;
}

extern "C" int titan_cuda_synchronize(void)
{
	TITAN_CUDA_CHECK(cudaDeviceSynchronize());
	return 0;
}
