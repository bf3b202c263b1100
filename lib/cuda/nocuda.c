/*
 * nocuda.c — the CUDA layer's entry points for builds without nvcc
 * (make CUDA=no or no toolkit found): each reports that CUDA is not built.
 */
#include "titan/cuda.h"

#include <stdio.h>
#include <string.h>

#include "config.h"

#if !TITAN_HAVE_CUDA
#define NOT_BUILT() \
	titan_error(TITAN_E_UNSUPPORTED, "titan was built without CUDA (rebuild with make CUDA=yes)")

bool titan_cuda_built(void)
{
	return false;
}

int titan_cuda_device_count(int *n)
{
	*n = 0;
	return NOT_BUILT();
}

int titan_cuda_device_info(int device, struct titan_cuda_device_info *out)
{
	(void)device;
	(void)out;
	return NOT_BUILT();
}

int titan_cuda_mem_backend(int device, struct titan_mem_backend *out)
{
	(void)device;
	(void)out;
	return NOT_BUILT();
}

int titan_cuda_mem_stats(int device, struct titan_caching_stats *out)
{
	(void)device;
	memset(out, 0, sizeof(*out));
	return NOT_BUILT();
}

int titan_cuda_mem_reset_peak(int device)
{
	(void)device;
	return NOT_BUILT();
}

int64_t titan_cuda_empty_cache(int device)
{
	(void)device;
	return NOT_BUILT();
}

int titan_cuda_memcpy(void *dst, const void *src, size_t bytes)
{
	(void)dst;
	(void)src;
	(void)bytes;
	return NOT_BUILT();
}

int titan_cuda_synchronize(void)
{
	return NOT_BUILT();
}

int titan_backend_cuda_init(struct titan_backend *be, const struct titan_cuda_opts *o,
			    struct titan_allocator *alloc)
{
	(void)be;
	(void)o;
	(void)alloc;
	return NOT_BUILT();
}

int titan_cuda_set_attention(struct titan_backend *be, enum titan_cuda_attn mode)
{
	(void)be;
	(void)mode;
	return NOT_BUILT();
}

int titan_cuda_attention_info(struct titan_backend *be, struct titan_cuda_attn_info *out)
{
	(void)be;
	memset(out, 0, sizeof(*out));
	return NOT_BUILT();
}

int titan_cuda_attention_graph_check(const struct titan_attn_dims *d, char *why, size_t n)
{
	(void)d;
	snprintf(why, n, "built without CUDA");
	return 1;
}
#else
/* ISO C forbids an empty translation unit. */
typedef int titan_cuda_built_with_nvcc;
#endif
