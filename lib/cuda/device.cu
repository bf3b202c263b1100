/*
 * device.cu — CUDA device discovery and the device memory backend of the
 * tagged allocator: titan's caching allocator (lib/core/caching.c, PyTorch's
 * CUDACachingAllocator rules) over cudaMalloc/cudaFree, one per device, with
 * cudaMemGetInfo for the capacity in its out-of-memory message; its stats
 * are torchtitan's memory line.  Every CUDA call goes through
 * TITAN_CUDA_CHECK, which records the call's text and CUDA's own error
 * string.
 */
#include <cuda_runtime.h>
#include <pthread.h>
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

/* ---- device memory ------------------------------------------------------
 * The raw backend is cudaMalloc/cudaFree; the caching allocator on top keeps
 * freed blocks and hands them out again without a cudaFree, hence without
 * cudaFree's implicit device synchronization.  That is safe because every op
 * of the CUDA backend runs on its one compute stream (a block freed while
 * queued kernels still use it is reused by kernels queued after them), its
 * grow-only buffers synchronize the stream before freeing, and the copies
 * and memsets below, which run on the legacy default stream (not ordered
 * with the backend's non-blocking stream), synchronize the device before and
 * after. */

#define MAX_DEVICES 64

struct device_ctx {
	int device;
	struct titan_caching *cache; /* created once, never freed (as PyTorch's) */
};

static struct device_ctx ctxs[MAX_DEVICES];
static pthread_mutex_t ctxs_mu = PTHREAD_MUTEX_INITIALIZER;

static void *device_alloc(void *ctx, size_t bytes)
{
	struct device_ctx *c = (struct device_ctx *)ctx;
	void *p = NULL;
	cudaError_t e;

	if ((e = cudaSetDevice(c->device)) == cudaSuccess &&
	    (e = cudaMalloc(&p, bytes ? bytes : 1)) == cudaSuccess)
		return p;
	(void)cudaGetLastError();
	/* out of memory is the caching allocator's to report (it releases its
	 * cache and retries first); anything else is worth a line of its own */
	if (e != cudaErrorMemoryAllocation)
		titan_log_warn("cudaMalloc of %zu bytes on device %d: %s (%s)", bytes, c->device,
			       cudaGetErrorString(e), cudaGetErrorName(e));
	return NULL;
}

static void device_free(void *ctx, void *ptr, size_t bytes)
{
	struct device_ctx *c = (struct device_ctx *)ctx;
	cudaError_t e;

	(void)bytes;
	if ((e = cudaSetDevice(c->device)) != cudaSuccess || (e = cudaFree(ptr)) != cudaSuccess) {
		(void)cudaGetLastError();
		titan_log_warn("cudaFree on device %d: %s (%s)", c->device, cudaGetErrorString(e),
			       cudaGetErrorName(e));
	}
}

static int device_zero(void *ctx, void *ptr, size_t bytes)
{
	struct device_ctx *c = (struct device_ctx *)ctx;

	TITAN_CUDA_CHECK(cudaSetDevice(c->device));
	TITAN_CUDA_CHECK(cudaDeviceSynchronize()); /* a reused block's last readers */
	TITAN_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
	TITAN_CUDA_CHECK(cudaDeviceSynchronize()); /* zero before any stream reads it */
	return 0;
}

static int device_mem_info(void *ctx, int64_t *free_bytes, int64_t *total_bytes)
{
	struct device_ctx *c = (struct device_ctx *)ctx;
	size_t f = 0, t = 0;

	TITAN_CUDA_CHECK(cudaSetDevice(c->device));
	TITAN_CUDA_CHECK(cudaMemGetInfo(&f, &t));
	*free_bytes = (int64_t)f;
	*total_bytes = (int64_t)t;
	return 0;
}

/* The device's caching allocator, created on first use. */
static int device_cache(int device, struct titan_caching **out)
{
	static char names[MAX_DEVICES][16];
	int n, rc = 0;

	*out = NULL;
	if (device < 0 || device >= MAX_DEVICES)
		return titan_error(TITAN_E_INVALID, "CUDA device %d out of range", device);
	if (titan_cuda_device_count(&n) < 0)
		return TITAN_E_DEVICE;
	if (device >= n)
		return titan_error(TITAN_E_DEVICE, "CUDA device %d requested, %d present", device, n);
	pthread_mutex_lock(&ctxs_mu);
	struct device_ctx *c = &ctxs[device];
	if (!c->cache) {
		struct titan_mem_backend raw;
		struct titan_caching_opts o;

		memset(&raw, 0, sizeof(raw));
		memset(&o, 0, sizeof(o));
		c->device = device;
		snprintf(names[device], sizeof(names[device]), "cuda:%d", device);
		raw.name = "cuda";
		raw.alloc = device_alloc;
		raw.free = device_free;
		raw.zero = device_zero;
		raw.ctx = c;
		o.name = names[device];
		o.mem_info = device_mem_info;
		if (!(c->cache = titan_caching_new(&raw, &o)))
			rc = TITAN_E_NOMEM;
	}
	*out = c->cache;
	pthread_mutex_unlock(&ctxs_mu);
	return rc;
}

extern "C" int titan_cuda_mem_backend(int device, struct titan_mem_backend *out)
{
	struct titan_caching *cache;
	int rc;

	if ((rc = device_cache(device, &cache)) < 0)
		return rc;
	titan_caching_backend(cache, out);
	return 0;
}

/* The cache of a device whose backend was handed out, or an error. */
static int cache_of(int device, struct titan_caching **out)
{
	*out = NULL;
	if (device < 0 || device >= MAX_DEVICES)
		return titan_error(TITAN_E_INVALID, "CUDA device %d out of range", device);
	pthread_mutex_lock(&ctxs_mu);
	*out = ctxs[device].cache;
	pthread_mutex_unlock(&ctxs_mu);
	if (!*out)
		return titan_error(TITAN_E_INVALID, "no device memory allocator on CUDA device %d "
				   "(titan_cuda_mem_backend was not called for it)", device);
	return 0;
}

extern "C" int titan_cuda_mem_stats(int device, struct titan_caching_stats *out)
{
	struct titan_caching *cache;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = cache_of(device, &cache)) < 0)
		return rc;
	titan_caching_get_stats(cache, out);
	return 0;
}

extern "C" int titan_cuda_mem_reset_peak(int device)
{
	struct titan_caching *cache;
	int rc;

	if ((rc = cache_of(device, &cache)) < 0)
		return rc;
	titan_caching_reset_peak(cache);
	return 0;
}

extern "C" int64_t titan_cuda_empty_cache(int device)
{
	struct titan_caching *cache;
	int rc;

	if ((rc = cache_of(device, &cache)) < 0)
		return rc;
	return titan_caching_empty_cache(cache);
}

extern "C" int titan_cuda_memcpy(void *dst, const void *src, size_t bytes)
{
	/* cudaMemcpy runs on the legacy default stream, which the backend's
	 * non-blocking compute stream does not wait for, nor it for the stream:
	 * queued work that still reads or writes either side finishes first,
	 * and the copy has landed (a pageable host-to-device copy may return
	 * before its DMA ends) before anything is queued after it */
	TITAN_CUDA_CHECK(cudaDeviceSynchronize());
	TITAN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
	TITAN_CUDA_CHECK(cudaDeviceSynchronize());
	return 0;
}

extern "C" int titan_cuda_synchronize(void)
{
	TITAN_CUDA_CHECK(cudaDeviceSynchronize());
	return 0;
}
