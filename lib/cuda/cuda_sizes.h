/*
 * cuda_sizes.h — the sizes that decide how much device memory lib/cuda's
 * buffers take, in plain C: the CUDA backend uses them, and titan-estimate's
 * model of titan-train's CUDA path (lib/estimate/gpu_titan.c) replays the
 * same allocations with them, so the two cannot drift apart.
 */
#ifndef TITAN_CUDA_SIZES_H
#define TITAN_CUDA_SIZES_H

#define CUDA_BLAS_WS_BYTES ((size_t)32 << 20) /* cuBLAS asks for 32 MiB on Hopper */
#define CUDA_SCRATCH_MIN ((size_t)1 << 20)    /* cuda_scratch's first size */
/* cuda_grow_buf's headroom: a buffer grows to bytes + bytes / DIV */
#define CUDA_SCRATCH_GROW_DIV 4 /* the op scratch */
#define CUDA_GEMM_GROW_DIV 4    /* bf16 GEMM operands (gemm_ws, bf16_keep) */
#define CUDA_CUDNN_GROW_DIV 8   /* cuDNN attention's staging and workspace */

/* elementwise.cu */
#define CUDA_EW_THREADS 256       /* flat kernels */
#define CUDA_SUMSQ_BLOCKS 1024    /* partial sums of sumsq, at most */
#define CUDA_SUMSQ_PER_THREAD 16
#define CUDA_DW_CHUNKS 128        /* row chunks of the RMSNorm dw reduction, at most */
#define CUDA_DW_ROWS 32           /* rows per chunk, at least */
#define CUDA_MT_CHUNK 65536       /* elements of a multi-tensor chunk */
#define CUDA_MT_PLANS 16          /* span tables kept (two per model part: interleaved PP has several) */

#endif
