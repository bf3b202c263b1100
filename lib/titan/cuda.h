/*
 * titan/cuda.h — the CUDA device layer: device discovery and the device
 * memory backend of the tagged allocator (the caching allocator of
 * titan/core.h over cudaMalloc).  Built from the .cu files of lib/cuda when
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
#include "titan/ops.h"

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
/* The titan_mem_backend of `device`'s caching allocator (titan/core.h:
 * PyTorch's rules — 512-byte rounding, 2 MiB segments for requests up to
 * 1 MiB, 20 MiB for 1-10 MiB, larger ones rounded to 2 MiB — over
 * cudaMalloc/cudaFree).  One cache per device, created on the first call
 * and kept for the process; every call returns the same cache.  Freed
 * blocks are handed out again without synchronizing: free a block only
 * when no queued work on a stream other than the one that will reuse it
 * still touches it (the backend's ops all run on one compute stream).  Out
 * of memory: the cache is released and cudaMalloc retried once, then NULL
 * with TITAN_E_NOMEM naming the request, the active and reserved bytes and
 * the device's capacity and free bytes (cudaMemGetInfo). */
int titan_cuda_mem_backend(int device, struct titan_mem_backend *out);
/* Stats of that cache (torchtitan's max_active/max_reserved, peaks since
 * the last reset, num_alloc_retries, num_ooms); TITAN_E_INVALID when
 * titan_cuda_mem_backend was not called for `device`. */
int titan_cuda_mem_stats(int device, struct titan_caching_stats *out);
int titan_cuda_mem_reset_peak(int device);
/* torch.cuda.empty_cache(): cudaFree of every cached segment with nothing
 * live in it; the bytes released, or a negative titan_err. */
int64_t titan_cuda_empty_cache(int device);
/* Copy between host and device memory (kind inferred by CUDA's UVA).
 * Synchronizes the device before and after (the copy runs on the legacy
 * default stream, not ordered with the backend's compute stream). */
int titan_cuda_memcpy(void *dst, const void *src, size_t bytes);
/* Waits for the work queued on the current device. */
int titan_cuda_synchronize(void);

/* ---- the CUDA backend of titan/ops.h ------------------------------------
 * Same ops and semantics as the CPU table, on device pointers (fp32
 * storage).  GEMMs run through cuBLAS with the compute mode below; every
 * other op is a kernel of lib/cuda with the CPU op as its test oracle.
 * Differences from the CPU contract: reductions run in a fixed order per
 * launch configuration (run-to-run identical on one GPU model) but not in
 * the CPU's order (no atomics anywhere: a run repeats itself bit for bit);
 * ids/labels are not range-checked on the device (the caller checks them on
 * the host, as lib/train does).  TITAN_CUDA_MATMUL_BF16 also runs
 * attention on tensor cores (bf16 operands, fp32 softmax and accumulation)
 * for head_dim 33..128. */
enum titan_cuda_matmul {
	TITAN_CUDA_MATMUL_FP32 = 0, /* fp32 FMA (CUBLAS_COMPUTE_32F) */
	TITAN_CUDA_MATMUL_TF32,     /* tensor cores, tf32 inputs, fp32 accumulate */
	TITAN_CUDA_MATMUL_BF16,     /* tensor cores, bf16 inputs, fp32 accumulate */
};

struct titan_cuda_opts {
	int device;                   /* CUDA device index */
	enum titan_cuda_matmul matmul;
};

/* Fills *be with the CUDA table on o->device: a stream, cuBLAS handles,
 * and `alloc` (a device allocator, e.g. over titan_cuda_mem_backend) for
 * workspace.  TITAN_E_UNSUPPORTED without CUDA in the build, TITAN_E_DEVICE
 * without a usable device. */
int titan_backend_cuda_init(struct titan_backend *be, const struct titan_cuda_opts *o,
			    struct titan_allocator *alloc);

/* Attention of a CUDA backend in TITAN_CUDA_MATMUL_BF16 mode (lib/cuda/
 * cudnn_attn.cu): plain causal attention_fwd/bwd (no document ids, head_dim
 * a multiple of 8 up to 128) run cuDNN 9's fused flash attention when
 * libcudnn.so.9 loads (dlopen; TITAN_CUDNN_LIB names another file), else
 * titan's own kernels; the FP32 and TF32 modes, parts and document masks
 * always run titan's.  The default is TITAN_CUDA_ATTN from the environment
 * (titan, cudnn-fast, else cudnn). */
enum titan_cuda_attn {
	TITAN_CUDA_ATTN_CUDNN = 0,  /* cuDNN, deterministic backward (bit-reproducible) */
	TITAN_CUDA_ATTN_TITAN,      /* titan's kernels */
	TITAN_CUDA_ATTN_CUDNN_FAST, /* cuDNN's default backward: dQ accumulated with
				     * atomics, not bit-reproducible (cudnn-fast) */
};
int titan_cuda_set_attention(struct titan_backend *be, enum titan_cuda_attn mode);

struct titan_cuda_attn_info {
	bool cudnn;          /* cuDNN selected and loaded (a handle exists) */
	int version;         /* cudnnGetVersion(), e.g. 91900 */
	char why[400];       /* when !cudnn: why titan's kernels run */
	int64_t fwd_calls, bwd_calls; /* attention calls cuDNN ran */
	int64_t fallbacks;   /* shapes whose graph cuDNN refused (logged) */
};
/* Loads cuDNN (when selected) and fills *out. */
int titan_cuda_attention_info(struct titan_backend *be, struct titan_cuda_attn_info *out);
/* Builds cuDNN's forward and backward graphs of a shape as far as that
 * needs no device (tensors, operations, operation graph, heuristics
 * descriptor): 0, or 1 when cuDNN does not load (why), or < 0 with the
 * failing call and cuDNN's message. */
int titan_cuda_attention_graph_check(const struct titan_attn_dims *d, char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
