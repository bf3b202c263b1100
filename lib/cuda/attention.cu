/*
 * attention.cu — causal grouped-query scaled-dot-product attention on the
 * GPU, forward and backward, flash-attention style (Dao et al. 2022,
 * FlashAttention-2's loop order): keys are visited in tiles with an online
 * softmax, the log-sum-exp of every query row is saved, and backward
 * recomputes the probabilities from it.  The CPU twin is lib/cpu/attention.c
 * (same formulas, same order of the online-softmax updates); results differ
 * from it by rounding only (reduction trees, expf's last bit).
 *
 * Context parallelism's parts (attention_part_fwd/bwd) and the document mask
 * (block_causal: attention_fwd/bwd with document ids) run on plain fp32
 * kernels of their own, in every matmul mode: see "parts and document
 * masks" near the end.  The causal op without documents has two
 * implementations.  With matmul mode TITAN_CUDA_MATMUL_BF16 and head dims
 * 33..128, bf16 tensor-core kernels (FlashAttention-2's mixed precision; see
 * "bf16 tensor-core path" below; rel. error ~3e-3).  Otherwise (FP32, TF32,
 * or other head dims) the fp32 kernels described here:
 * fp32 in and out, fp32 FMA math (no tensor cores).  Scores are scaled
 * in fp32 as on the CPU: p = expf(s·scale − m) with scale = 1/sqrt(D) (full
 * precision expf, ≤ 2 ulp; no log2e pre-scaling, so no extra rounding of the
 * exponent; --use_fast_math would break the 1e-5 agreement with the CPU).  Tiles are 64 queries × 64 keys whatever be->attn_block_q/k
 * say (those only change rounding).  Head dims up to 128: D is padded with
 * zeros to DP = 16, 32, 64 or 128 in shared memory (padded columns add 0 to
 * the scores and are never stored).  Any T: the last tile is partial; its
 * rows past T are zero-filled and masked, never stored.
 *
 * Thread layout, the same in every kernel: threads (ty, tx), tx in 0..15,
 * 16·RY threads.  In a 64×64 score tile a thread holds rows ty + RY·i
 * (RM = 64/RY of them) and columns tx + 16·j (j < 4) in registers; in a
 * 64×DP output tile it holds the same rows and DP/16 columns (tx·VW..+VW,
 * then +16·VW, VW = min(DP/16, 4)).  The 16 threads of a row are one
 * half-warp, so row max/sum are 4 shuffles.  Shared tiles of width DP have
 * row stride DP + 4: the score product reads rows of the column operand
 * as float4 at stride (DP+4)/4 (odd) 16-byte units, conflict-free.
 *
 *  forward    grid (B·H, query tiles, heaviest first), 128 threads (RM 8).
 *             Per block Q tile resident; per key tile at or before the
 *             query tile: S = Q·Kᵀ, online softmax, P to shared (over the
 *             K tile), O += P·V.  Shared: Q, K/P, V = 3 × 64·(DP+4)
 *             floats (51 KiB at D 64, 99 KiB at D 128).  168 registers
 *             at D 64 (3 blocks per SM), 214 at D 128.
 *  backward   1. Di[b,h,t] = rowsum(dout·out) (double sum, one warp per
 *                row) into cuda_scratch: B·H·T floats.
 *             2. dK/dV: grid (B·Hkv, key tiles), 256 threads (RM 4).  A
 *                block owns a key tile of one kv head (K, V resident) and
 *                loops over the query heads of its group, then the query
 *                tiles at or after the key tile: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ,
 *                P = exp(S·scale − lse), dS = P·(dP − Di)·scale, dV +=
 *                Pᵀ·dO, dK += dSᵀ·Q, accumulated in registers in the
 *                CPU's order (head, query tile, query row); no atomics.
 *                Shared: K, V, Q, dO, one 64×68 tile for Pᵀ then dSᵀ,
 *                lse and Di = 86 KiB at D 64, 150 KiB at D 128.
 *                128 registers at D 64 (2 blocks per SM), ≤ 204 at 128.
 *             3. dQ: grid (B·H, query tiles), 256 threads.  A block owns a
 *                query tile (Q, dO, lse, Di resident) and loops over the
 *                key tiles at or before it: S, dP, dS again, dQ += dS·K.
 *                Recomputing S and dP costs two more 64×64×D products per
 *                tile pair than atomics would, but dq is deterministic.
 *                Shared: Q, dO, K, V/dS = 68 KiB at D 64, 132 KiB at 128;
 *                128 registers at D 64 (2 blocks per SM), ≤ 160 at 128.
 * (ptxas, sm_80 and sm_90: no spills.)  No double buffering yet: a
 * tile's global loads are hidden only by the other blocks of the SM.
 * Every kernel is deterministic: fixed loop orders, no atomics.  Backward
 * at D > 64 needs up to 150 KiB of shared memory per block: A100 and H100
 * have it; sm_86/89 parts (99 KiB) do not, and the op fails with a message
 * there.
 */
#include <math.h>

#include "cuda_impl.h"

#define TILE 64  /* queries and keys per tile */
#define XS 68    /* row stride of the 64×64 P / dS tile in shared memory */

/* max/sum over the 16 lanes of a half-warp (the threads of one row) */
static __device__ __forceinline__ float row_max16(float x)
{
	x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
	x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
	x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
	return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
}

static __device__ __forceinline__ float row_sum16(float x)
{
	x += __shfl_xor_sync(0xffffffffu, x, 8);
	x += __shfl_xor_sync(0xffffffffu, x, 4);
	x += __shfl_xor_sync(0xffffffffu, x, 2);
	return x + __shfl_xor_sync(0xffffffffu, x, 1);
}

/* Shared tile dst[64][ld] = rows src[r·stride + c] for r < rows, c < D, 0
 * elsewhere (c < DP).  vec4: D % 4 == 0 and src 16-byte aligned. */
template <int DP, int NT>
static __device__ __forceinline__ void load_tile(float *dst, int ld, const float *__restrict__ src,
						 int64_t stride, int rows, int D, bool vec4)
{
	const int tid = threadIdx.x;

	if (vec4) {
		constexpr int W = DP / 4;
#pragma unroll 4
		for (int e = tid; e < TILE * W; e += NT) {
			const int r = e / W, c = e % W * 4;
			float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

			if (r < rows && c < D)
				x = __ldg((const float4 *)(src + r * stride + c));
			*(float4 *)(dst + r * ld + c) = x;
		}
	} else {
#pragma unroll 4
		for (int e = tid; e < TILE * DP; e += NT) {
			const int r = e / DP, c = e % DP;

			dst[r * ld + c] = r < rows && c < D ? __ldg(src + r * stride + c) : 0.0f;
		}
	}
}

/* acc[i][j] = Σ_d A[ty+RY·i][d]·B[tx+16·j][d], d = 0..DP−1 in order, one
 * FMA each (the CPU's order).  A, B shared, row strides lda, ldb (multiples
 * of 4; ldb/4 odd for conflict-free B reads). */
template <int DP, int RM>
static __device__ __forceinline__ void mm_abt(float (&acc)[RM][4], const float *A, int lda,
					      const float *B, int ldb, int ty, int tx)
{
	constexpr int RY = TILE / RM;
	const float *a0 = A + ty * lda, *b0 = B + tx * ldb;

#pragma unroll
	for (int i = 0; i < RM; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0f;
#pragma unroll 1
	for (int d = 0; d < DP; d += 4) {
		float4 a[RM], b[4];

#pragma unroll
		for (int i = 0; i < RM; i++)
			a[i] = *(const float4 *)(a0 + RY * i * lda + d);
#pragma unroll
		for (int j = 0; j < 4; j++)
			b[j] = *(const float4 *)(b0 + 16 * j * ldb + d);
#pragma unroll
		for (int i = 0; i < RM; i++)
#pragma unroll
			for (int j = 0; j < 4; j++) {
				acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
				acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
				acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
				acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
			}
	}
}

/* Column of the u-th of the OC output columns a thread holds. */
template <int OC>
static __device__ __forceinline__ int out_col(int u, int tx)
{
	constexpr int VW = OC < 4 ? OC : 4;

	return u / VW * 16 * VW + tx * VW + u % VW;
}

/* acc[i][u] += Σ_c P[ty+RY·i][c]·B[c][out_col(u)], c = 0..63 in order.  P
 * (row stride ldp) and B (ldb) shared, strides multiples of 4. */
template <int RM, int OC>
static __device__ __forceinline__ void mm_ab(float (&acc)[RM][OC], const float *P, int ldp,
					     const float *B, int ldb, int ty, int tx)
{
	constexpr int RY = TILE / RM, VW = OC < 4 ? OC : 4;
	const float *p0 = P + ty * ldp, *bc = B + tx * VW;

#pragma unroll 1
	for (int c = 0; c < TILE; c += 4) {
		float4 p[RM];

#pragma unroll
		for (int i = 0; i < RM; i++)
			p[i] = *(const float4 *)(p0 + RY * i * ldp + c);
#pragma unroll
		for (int cc = 0; cc < 4; cc++) {
			const float *br = bc + (c + cc) * ldb;
			float bv[OC];

#pragma unroll
			for (int w = 0; w < OC / VW; w++) {
				if (VW == 4) {
					const float4 x = *(const float4 *)(br + 64 * w);

					bv[4 * w] = x.x;
					bv[4 * w + 1] = x.y;
					bv[4 * w + 2] = x.z;
					bv[4 * w + 3] = x.w;
				} else if (VW == 2) {
					const float2 x = *(const float2 *)br;

					bv[0] = x.x;
					bv[1] = x.y;
				} else {
					bv[0] = br[0];
				}
			}
#pragma unroll
			for (int i = 0; i < RM; i++) {
				const float pv = cc == 0 ? p[i].x : cc == 1 ? p[i].y
							  : cc == 2 ? p[i].z : p[i].w;
#pragma unroll
				for (int u = 0; u < OC; u++)
					acc[i][u] = fmaf(pv, bv[u], acc[i][u]);
			}
		}
	}
}

/* Row stride of D-wide shared tiles, and of the buffer the 64×64 P/dS tile
 * may share with one of them. */
template <int DP>
struct attn_geom {
	static constexpr int LD = DP + 4;
	static constexpr int LDX = LD > XS ? LD : XS;
	static constexpr size_t fwd_smem = (size_t)TILE * (2 * LD + LDX) * sizeof(float);
	static constexpr size_t dq_smem = (size_t)TILE * (3 * LD + LDX) * sizeof(float);
	static constexpr size_t dkdv_smem = (size_t)TILE * (4 * LD + XS + 2) * sizeof(float);
};

/* Threads per block (16·RY) and blocks per SM the register budget aims at. */
#define FWD_RM 8
#define BWD_RM 4
#define NT_OF(rm) (16 * (TILE / (rm)))
#define MINB_FWD(dp) ((dp) >= 128 ? 2 : (dp) >= 64 ? 3 : 4)
#define MINB_BWD(dp) ((dp) >= 128 ? 1 : 2)

struct attn_args {
	int T, H, Hkv, D, rep, nqt;
	float scale;
	bool vec4;
};

template <int DP>
static __global__ void __launch_bounds__(NT_OF(FWD_RM), MINB_FWD(DP))
attn_fwd_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ q,
		const float *__restrict__ k, const float *__restrict__ v, struct attn_args a)
{
	constexpr int RM = FWD_RM, RY = TILE / RM, NT = NT_OF(RM), OC = DP / 16;
	constexpr int LD = attn_geom<DP>::LD, LDX = attn_geom<DP>::LDX;
	extern __shared__ float4 smem4[];
	float *qs = (float *)smem4, *ks = qs + TILE * LD, *vs = ks + TILE * LDX;
	float *ps = ks; /* P overwrites K once the scores are in registers */
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
	const int b = blockIdx.x / a.H, h = blockIdx.x % a.H, g = h / a.rep;
	const int qt = a.nqt - 1 - (int)blockIdx.y, t0 = qt * TILE; /* later tiles first */
	const int64_t qstr = (int64_t)a.H * a.D, kstr = (int64_t)a.Hkv * a.D;
	const float *kb = k + (int64_t)b * a.T * kstr + g * a.D;
	const float *vb = v + (int64_t)b * a.T * kstr + g * a.D;
	float o[RM][OC], m[RM], l[RM];

	load_tile<DP, NT>(qs, LD, q + ((int64_t)b * a.T + t0) * qstr + h * a.D, qstr,
			  min(TILE, a.T - t0), a.D, a.vec4);
#pragma unroll
	for (int i = 0; i < RM; i++) {
		m[i] = -INFINITY;
		l[i] = 0.0f;
#pragma unroll
		for (int u = 0; u < OC; u++)
			o[i][u] = 0.0f;
	}
	/* key tiles 0..qt: later keys are masked for every row */
	for (int kt = 0; kt <= qt; kt++) {
		const int s0 = kt * TILE;
		float s[RM][4];

		load_tile<DP, NT>(ks, LD, kb + s0 * kstr, kstr, min(TILE, a.T - s0), a.D, a.vec4);
		load_tile<DP, NT>(vs, LD, vb + s0 * kstr, kstr, min(TILE, a.T - s0), a.D, a.vec4);
		__syncthreads();
		mm_abt<DP, RM>(s, qs, LD, ks, LD, ty, tx); /* S = Q·Kᵀ */
		/* Online softmax.  Row t sees keys s <= t: only the diagonal tile
		 * (s0 == t0) masks, and there key s0 (column 0) is visible to
		 * every row, so the new max is finite and corr = exp(m − mx) is
		 * 0 on the first tile (m = −inf), as on the CPU. */
#pragma unroll
		for (int i = 0; i < RM; i++) {
			const int t = t0 + ty + RY * i;
			float mx = -INFINITY, sum = 0.0f;

#pragma unroll
			for (int j = 0; j < 4; j++) {
				const bool vis = kt < qt || s0 + tx + 16 * j <= t;

				s[i][j] = vis ? s[i][j] * a.scale : -INFINITY;
				mx = fmaxf(mx, s[i][j]);
			}
			mx = fmaxf(row_max16(mx), m[i]);
			const float corr = expf(m[i] - mx);
#pragma unroll
			for (int j = 0; j < 4; j++) {
				s[i][j] = s[i][j] == -INFINITY ? 0.0f : expf(s[i][j] - mx);
				sum += s[i][j];
			}
			l[i] = l[i] * corr + row_sum16(sum);
			m[i] = mx;
#pragma unroll
			for (int u = 0; u < OC; u++)
				o[i][u] *= corr;
		}
		__syncthreads(); /* every thread is done reading K */
#pragma unroll
		for (int i = 0; i < RM; i++)
#pragma unroll
			for (int j = 0; j < 4; j++)
				ps[(ty + RY * i) * LDX + tx + 16 * j] = s[i][j];
		__syncthreads();
		mm_ab<RM, OC>(o, ps, LDX, vs, LD, ty, tx); /* O += P·V */
		__syncthreads(); /* before the next tile overwrites K/P and V */
	}
#pragma unroll
	for (int i = 0; i < RM; i++) {
		const int t = t0 + ty + RY * i;

		if (t >= a.T)
			continue;
		const float inv = 1.0f / l[i];
		float *orow = out + ((int64_t)b * a.T + t) * qstr + h * a.D;

#pragma unroll
		for (int u = 0; u < OC; u++) {
			const int c = out_col<OC>(u, tx);

			if (c < a.D)
				orow[c] = o[i][u] * inv;
		}
		if (tx == 0)
			lse[((int64_t)b * a.H + h) * a.T + t] = m[i] + logf(l[i]);
	}
}

/* Di[b,h,t] = Σ_d dout·out (products and sum in double, rounded once, as
 * the CPU's dot8d), one warp per token row n = (b·T + t)·H + h. */
static __global__ void attn_di_kernel(float *__restrict__ di, const float *__restrict__ dout,
			       const float *__restrict__ out, int64_t rows, int T, int H, int D)
{
	const int lane = threadIdx.x & 31;
	const int64_t nw = (int64_t)gridDim.x * blockDim.x / 32;

	for (int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; n < rows; n += nw) {
		const float *go = dout + n * D, *o = out + n * D;
		double acc = 0.0;

		for (int c = lane; c < D; c += 32)
			acc += (double)go[c] * (double)o[c];
		for (int s = 16; s > 0; s >>= 1)
			acc += __shfl_xor_sync(0xffffffffu, acc, s);
		if (lane == 0) {
			const int64_t bt = n / H, h = n % H, b = bt / T, t = bt % T;

			di[(b * H + h) * T + t] = (float)acc;
		}
	}
}

/* dK and dV of one key tile of one kv head: see the top of the file. */
template <int DP>
static __global__ void __launch_bounds__(NT_OF(BWD_RM), MINB_BWD(DP))
attn_dkdv_kernel(float *__restrict__ dk, float *__restrict__ dv, const float *__restrict__ dout,
		 const float *__restrict__ q, const float *__restrict__ k,
		 const float *__restrict__ v, const float *__restrict__ lse,
		 const float *__restrict__ di, struct attn_args a)
{
	constexpr int RM = BWD_RM, RY = TILE / RM, NT = NT_OF(RM), OC = DP / 16;
	constexpr int LD = attn_geom<DP>::LD;
	extern __shared__ float4 smem4[];
	float *ks = (float *)smem4, *vs = ks + TILE * LD, *qs = vs + TILE * LD;
	float *dos = qs + TILE * LD, *xs = dos + TILE * LD, *lses = xs + TILE * XS;
	float *dis = lses + TILE;
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
	const int b = blockIdx.x / a.Hkv, g = blockIdx.x % a.Hkv;
	const int kt = (int)blockIdx.y, s0 = kt * TILE; /* earlier tiles (more work) first */
	const int64_t qstr = (int64_t)a.H * a.D, kstr = (int64_t)a.Hkv * a.D;
	const int64_t koff = ((int64_t)b * a.T + s0) * kstr + g * a.D;
	float dka[RM][OC], dva[RM][OC];

	load_tile<DP, NT>(ks, LD, k + koff, kstr, min(TILE, a.T - s0), a.D, a.vec4);
	load_tile<DP, NT>(vs, LD, v + koff, kstr, min(TILE, a.T - s0), a.D, a.vec4);
#pragma unroll
	for (int i = 0; i < RM; i++)
#pragma unroll
		for (int u = 0; u < OC; u++)
			dka[i][u] = dva[i][u] = 0.0f;
	/* the CPU's order: head, then query tile (dk/dv get their terms in it) */
	for (int h = g * a.rep; h < (g + 1) * a.rep; h++) {
		const float *lrow = lse + ((int64_t)b * a.H + h) * a.T;
		const float *drow = di + ((int64_t)b * a.H + h) * a.T;

		/* query tiles that see a key of this tile: t0 + 63 >= s0 */
		for (int qt = kt; qt < a.nqt; qt++) {
			const int t0 = qt * TILE;
			const int64_t qoff = ((int64_t)b * a.T + t0) * qstr + h * a.D;
			float st[RM][4], dpt[RM][4];

			/* (the previous iteration ended with a barrier) */
			load_tile<DP, NT>(qs, LD, q + qoff, qstr, min(TILE, a.T - t0), a.D, a.vec4);
			load_tile<DP, NT>(dos, LD, dout + qoff, qstr, min(TILE, a.T - t0), a.D,
					  a.vec4);
			if (threadIdx.x < TILE) {
				const int t = t0 + threadIdx.x;

				lses[threadIdx.x] = t < a.T ? lrow[t] : 0.0f;
				dis[threadIdx.x] = t < a.T ? drow[t] : 0.0f;
			}
			__syncthreads();
			mm_abt<DP, RM>(st, ks, LD, qs, LD, ty, tx);   /* Sᵀ = K·Qᵀ */
			mm_abt<DP, RM>(dpt, vs, LD, dos, LD, ty, tx); /* dPᵀ = V·dOᵀ */
			/* key s = s0 + row is seen by query t = t0 + column when
			 * s <= t < T (only the diagonal and the last tile mask) */
			float lc[4], dc[4];

#pragma unroll
			for (int j = 0; j < 4; j++) {
				lc[j] = lses[tx + 16 * j];
				dc[j] = dis[tx + 16 * j];
			}
#pragma unroll
			for (int i = 0; i < RM; i++) {
				const int s = s0 + ty + RY * i;

#pragma unroll
				for (int j = 0; j < 4; j++) {
					const int t = t0 + tx + 16 * j;
					const bool vis = (qt > kt || s <= t) && t < a.T;
					const float p = vis ? expf(st[i][j] * a.scale - lc[j]) : 0.0f;

					dpt[i][j] = p * (dpt[i][j] - dc[j]) * a.scale;
					xs[(ty + RY * i) * XS + tx + 16 * j] = p;
				}
			}
			__syncthreads();
			mm_ab<RM, OC>(dva, xs, XS, dos, LD, ty, tx); /* dV += Pᵀ·dO */
			__syncthreads();
#pragma unroll
			for (int i = 0; i < RM; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					xs[(ty + RY * i) * XS + tx + 16 * j] = dpt[i][j];
			__syncthreads();
			mm_ab<RM, OC>(dka, xs, XS, qs, LD, ty, tx); /* dK += dSᵀ·Q */
			__syncthreads();
		}
	}
#pragma unroll
	for (int i = 0; i < RM; i++) {
		const int s = s0 + ty + RY * i;

		if (s >= a.T)
			continue;
		float *dkrow = dk + ((int64_t)b * a.T + s) * kstr + g * a.D;
		float *dvrow = dv + ((int64_t)b * a.T + s) * kstr + g * a.D;

#pragma unroll
		for (int u = 0; u < OC; u++) {
			const int c = out_col<OC>(u, tx);

			if (c < a.D) {
				dkrow[c] = dka[i][u];
				dvrow[c] = dva[i][u];
			}
		}
	}
}

/* dQ of one query tile of one head: see the top of the file. */
template <int DP>
static __global__ void __launch_bounds__(NT_OF(BWD_RM), MINB_BWD(DP))
attn_dq_kernel(float *__restrict__ dq, const float *__restrict__ dout,
	       const float *__restrict__ q, const float *__restrict__ k,
	       const float *__restrict__ v, const float *__restrict__ lse,
	       const float *__restrict__ di, struct attn_args a)
{
	constexpr int RM = BWD_RM, RY = TILE / RM, NT = NT_OF(RM), OC = DP / 16;
	constexpr int LD = attn_geom<DP>::LD, LDX = attn_geom<DP>::LDX;
	extern __shared__ float4 smem4[];
	float *qs = (float *)smem4, *dos = qs + TILE * LD, *ks = dos + TILE * LD;
	float *vs = ks + TILE * LD;
	float *xs = vs; /* dS overwrites V once dP is in registers */
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
	const int b = blockIdx.x / a.H, h = blockIdx.x % a.H, g = h / a.rep;
	const int qt = a.nqt - 1 - (int)blockIdx.y, t0 = qt * TILE; /* later tiles first */
	const int64_t qstr = (int64_t)a.H * a.D, kstr = (int64_t)a.Hkv * a.D;
	const int64_t qoff = ((int64_t)b * a.T + t0) * qstr + h * a.D;
	const float *kb = k + (int64_t)b * a.T * kstr + g * a.D;
	const float *vb = v + (int64_t)b * a.T * kstr + g * a.D;
	const float *lrow = lse + ((int64_t)b * a.H + h) * a.T;
	const float *drow = di + ((int64_t)b * a.H + h) * a.T;
	float dqa[RM][OC], lr[RM], dr[RM];

	load_tile<DP, NT>(qs, LD, q + qoff, qstr, min(TILE, a.T - t0), a.D, a.vec4);
	load_tile<DP, NT>(dos, LD, dout + qoff, qstr, min(TILE, a.T - t0), a.D, a.vec4);
#pragma unroll
	for (int i = 0; i < RM; i++) {
		const int t = t0 + ty + RY * i;

		lr[i] = t < a.T ? lrow[t] : 0.0f;
		dr[i] = t < a.T ? drow[t] : 0.0f;
#pragma unroll
		for (int u = 0; u < OC; u++)
			dqa[i][u] = 0.0f;
	}
	/* key tiles 0..qt, ascending: the CPU's order of dq's terms */
	for (int kt = 0; kt <= qt; kt++) {
		const int s0 = kt * TILE;
		float s[RM][4], dp[RM][4];

		load_tile<DP, NT>(ks, LD, kb + s0 * kstr, kstr, min(TILE, a.T - s0), a.D, a.vec4);
		load_tile<DP, NT>(vs, LD, vb + s0 * kstr, kstr, min(TILE, a.T - s0), a.D, a.vec4);
		__syncthreads();
		mm_abt<DP, RM>(s, qs, LD, ks, LD, ty, tx);   /* S = Q·Kᵀ */
		mm_abt<DP, RM>(dp, dos, LD, vs, LD, ty, tx); /* dP = dO·Vᵀ */
#pragma unroll
		for (int i = 0; i < RM; i++) {
			const int t = t0 + ty + RY * i;

#pragma unroll
			for (int j = 0; j < 4; j++) {
				const bool vis = kt < qt || s0 + tx + 16 * j <= t;
				const float p = vis ? expf(s[i][j] * a.scale - lr[i]) : 0.0f;

				dp[i][j] = p * (dp[i][j] - dr[i]) * a.scale;
			}
		}
		__syncthreads(); /* every thread is done reading V */
#pragma unroll
		for (int i = 0; i < RM; i++)
#pragma unroll
			for (int j = 0; j < 4; j++)
				xs[(ty + RY * i) * LDX + tx + 16 * j] = dp[i][j];
		__syncthreads();
		mm_ab<RM, OC>(dqa, xs, LDX, ks, LD, ty, tx); /* dQ += dS·K */
		__syncthreads(); /* before the next tile overwrites K and V/dS */
	}
#pragma unroll
	for (int i = 0; i < RM; i++) {
		const int t = t0 + ty + RY * i;

		if (t >= a.T)
			continue;
		float *dqrow = dq + ((int64_t)b * a.T + t) * qstr + h * a.D;

#pragma unroll
		for (int u = 0; u < OC; u++) {
			const int c = out_col<OC>(u, tx);

			if (c < a.D)
				dqrow[c] = dqa[i][u];
		}
	}
}

/* ---- bf16 tensor-core path (TITAN_CUDA_MATMUL_BF16) ----------------------- *
 *
 * Mixed precision as FlashAttention-2: q, k, v, dout are rounded to bf16 when
 * a tile is staged into shared memory, every product runs on the tensor
 * cores (mma.sync m16n8k16 bf16 × bf16 → fp32), softmax statistics, P, dP,
 * dS and all accumulators are fp32; P and dS are rounded to bf16 only as
 * MMA operands.  Global tensors stay fp32.  Exponentials in base 2:
 * p = exp2f(s·scale·log2e − m₂) (m₂, lse₂ in log2 units; lse stored in
 * natural units).  Only head dims 33..128 (padded to DP = 64 or 128) take
 * this path; smaller heads use the fp32 kernels above in every mode.
 *
 * Block = 4 warps, a 64-row tile, each warp owns 16 rows (queries in the
 * forward and dQ kernels, keys in the dK/dV kernel); key / query tiles of 64.
 * Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16, g = lane/4, c = lane%4):
 *   A 16×16 row: a0 = A[g][2c..2c+1], a1 = A[g+8][2c..], a2 = A[g][2c+8..],
 *                a3 = A[g+8][2c+8..]   (lower column in the low 16 bits)
 *   B 16×8 col:  b0 = B[2c..2c+1][g], b1 = B[2c+8..2c+9][g]
 *   C/D 16×8:    d0,d1 = D[g][2c..2c+1], d2,d3 = D[g+8][2c..2c+1]
 * So the accumulators of two adjacent 8-column score tiles are exactly the A
 * fragment of the next product (P and dS never leave registers).  Operands
 * needed transposed (V in O += P·V, dO and Q in the dK/dV kernel, K in dQ)
 * are read from their row-major tiles with ldmatrix.trans.  Shared tiles are
 * bf16 [64][DP + 8]: row stride ≡ 4 words mod 32, so the 32-bit fragment
 * loads (8 rows × 4 words) and the ldmatrix phases are conflict-free.
 */
#define TC_NT 128
#define LOG2E_F 1.4426950408889634f
#define LN2_F 0.6931471805599453f

template <int DP>
struct tc_geom {
	static constexpr int LDB = DP + 8; /* bf16 elements per shared row */
	static constexpr size_t tile = (size_t)TILE * LDB * sizeof(__nv_bfloat16);
	static constexpr size_t fwd_smem = 3 * tile;
	static constexpr size_t dkdv_smem = 4 * tile + 2 * TILE * sizeof(float);
	static constexpr size_t dq_smem = 4 * tile;
};

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x = lo: low half */

	return *(uint32_t *)&v;
}

static __device__ __forceinline__ uint32_t lds32(const __nv_bfloat16 *p)
{
	return *(const uint32_t *)p;
}

/* d += a·b, m16n8k16, bf16 operands, fp32 accumulators */
static __device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4],
						uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four transposed 8×8 b16 matrices: lane l gives the address of row l%8 of
 * matrix l/8; r[i] = (M_i[2c][g], M_i[2c+1][g]). */
static __device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16 *p)
{
	const unsigned addr = (unsigned)__cvta_generic_to_shared(p);

	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

/* A fragment of rows r0..r0+15, columns k0..k0+15 of a row-major tile */
static __device__ __forceinline__ void lda_frag(uint32_t (&a)[4], const __nv_bfloat16 *X, int ld,
						int r0, int k0, int g, int c)
{
	const __nv_bfloat16 *p = X + (r0 + g) * ld + k0 + 2 * c;

	a[0] = lds32(p);
	a[1] = lds32(p + 8 * ld);
	a[2] = lds32(p + 8);
	a[3] = lds32(p + 8 * ld + 8);
}

/* acc[j] (j < 8) = X[r0..r0+15] · Y[8j..8j+7]ᵀ over DP columns: the scores of
 * 16 rows of X against the 64 rows of Y (both row-major, stride ld). */
template <int DP>
static __device__ __forceinline__ void mma_abt_16x64(float (&acc)[8][4], const __nv_bfloat16 *X,
						     const __nv_bfloat16 *Y, int ld, int r0,
						     int g, int c)
{
#pragma unroll
	for (int j = 0; j < 8; j++)
		acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
	for (int kk = 0; kk < DP / 16; kk++) {
		uint32_t a[4];

		lda_frag(a, X, ld, r0, kk * 16, g, c);
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const __nv_bfloat16 *p = Y + (8 * j + g) * ld + kk * 16 + 2 * c;

			mma_bf16(acc[j], a, lds32(p), lds32(p + 8));
		}
	}
}

/* acc[n] (n < DP/8) += P·Y: P the 16×64 fp32 tile in accumulator layout
 * (p[j], j < 8 column tiles of 8), rounded to bf16 as the A operand; Y a
 * row-major [64][DP] tile (stride ld), read transposed by ldmatrix. */
template <int DP>
static __device__ __forceinline__ void mma_pv(float (&acc)[DP / 8][4], const float (&p)[8][4],
					      const __nv_bfloat16 *Y, int ld, int lane)
{
	const int mrow = (lane >> 3 & 1) * 8 + (lane & 7), mcol = (lane >> 4) * 8;

#pragma unroll
	for (int kk = 0; kk < 4; kk++) {
		const uint32_t a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]),
				       pack_bf16(p[2 * kk][2], p[2 * kk][3]),
				       pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
				       pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};

#pragma unroll
		for (int np = 0; np < DP / 16; np++) {
			uint32_t b[4];

			ldsm_x4_t(b, Y + (kk * 16 + mrow) * ld + np * 16 + mcol);
			mma_bf16(acc[2 * np], a, b[0], b[1]);
			mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
		}
	}
}

/* Shared bf16 tile dst[64][ld] = rows src[r·stride + c] for r < rows, c < D,
 * 0 elsewhere (c < DP).  vec4: D % 4 == 0 and src 16-byte aligned. */
template <int DP>
static __device__ __forceinline__ void stage_bf16(__nv_bfloat16 *dst, int ld,
						  const float *__restrict__ src, int64_t stride,
						  int rows, int D, bool vec4)
{
	const int tid = threadIdx.x;

	if (vec4) {
		constexpr int W = DP / 4;
#pragma unroll 4
		for (int e = tid; e < TILE * W; e += TC_NT) {
			const int r = e / W, c = e % W * 4;
			float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

			if (r < rows && c < D)
				x = __ldg((const float4 *)(src + r * stride + c));
			*(uint2 *)(dst + r * ld + c) = make_uint2(pack_bf16(x.x, x.y),
								  pack_bf16(x.z, x.w));
		}
	} else {
		constexpr int W = DP / 2;
#pragma unroll 4
		for (int e = tid; e < TILE * W; e += TC_NT) {
			const int r = e / W, c = e % W * 2;
			const float x0 = r < rows && c < D ? __ldg(src + r * stride + c) : 0.0f;
			const float x1 = r < rows && c + 1 < D ? __ldg(src + r * stride + c + 1)
							       : 0.0f;

			*(uint32_t *)(dst + r * ld + c) = pack_bf16(x0, x1);
		}
	}
}

template <int DP>
static __global__ void __launch_bounds__(TC_NT)
attn_fwd_tc_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ q,
		   const float *__restrict__ k, const float *__restrict__ v, struct attn_args a)
{
	constexpr int LDB = tc_geom<DP>::LDB, NO = DP / 8;
	extern __shared__ float4 smem4[];
	__nv_bfloat16 *qs = (__nv_bfloat16 *)smem4, *ks = qs + TILE * LDB, *vs = ks + TILE * LDB;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
	const int b = blockIdx.x / a.H, h = blockIdx.x % a.H, gk = h / a.rep;
	const int qt = a.nqt - 1 - (int)blockIdx.y, t0 = qt * TILE; /* later tiles first */
	const int64_t qstr = (int64_t)a.H * a.D, kstr = (int64_t)a.Hkv * a.D;
	const float *kb = k + (int64_t)b * a.T * kstr + gk * a.D;
	const float *vb = v + (int64_t)b * a.T * kstr + gk * a.D;
	const float sl2 = a.scale * LOG2E_F;
	const int tr0 = t0 + 16 * w + g; /* this thread's rows: tr0, tr0 + 8 */
	uint32_t qf[DP / 16][4];
	float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

	stage_bf16<DP>(qs, LDB, q + ((int64_t)b * a.T + t0) * qstr + h * a.D, qstr,
		       min(TILE, a.T - t0), a.D, a.vec4);
	__syncthreads();
#pragma unroll
	for (int kk = 0; kk < DP / 16; kk++)
		lda_frag(qf[kk], qs, LDB, 16 * w, kk * 16, g, c);
#pragma unroll
	for (int n = 0; n < NO; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	for (int kt = 0; kt <= qt; kt++) {
		const int s0 = kt * TILE;
		float s[8][4];

		__syncthreads(); /* the previous tile's K and V are no longer read */
		stage_bf16<DP>(ks, LDB, kb + s0 * kstr, kstr, min(TILE, a.T - s0), a.D, a.vec4);
		stage_bf16<DP>(vs, LDB, vb + s0 * kstr, kstr, min(TILE, a.T - s0), a.D, a.vec4);
		__syncthreads();
#pragma unroll
		for (int j = 0; j < 8; j++)
			s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < DP / 16; kk++)
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const __nv_bfloat16 *p = ks + (8 * j + g) * LDB + kk * 16 + 2 * c;

				mma_bf16(s[j], qf[kk], lds32(p), lds32(p + 8));
			}
		/* Online softmax (log2 units).  Only the diagonal tile masks;
		 * its key s0 is visible to every row (row >= t0 = s0), so the
		 * new max is finite and corr = exp2(−inf) = 0 on the first tile. */
		float mx[2] = {m[0], m[1]};

#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int col = s0 + 8 * j + 2 * c + (e & 1), row = tr0 + (e >> 1) * 8;
				const float x = kt < qt || col <= row ? s[j][e] * sl2 : -INFINITY;

				s[j][e] = x;
				mx[e >> 1] = fmaxf(mx[e >> 1], x);
			}
#pragma unroll
		for (int r = 0; r < 2; r++) {
			mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
			mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
			const float corr = exp2f(m[r] - mx[r]);

			l[r] *= corr;
			m[r] = mx[r];
#pragma unroll
			for (int n = 0; n < NO; n++) {
				o[n][2 * r] *= corr;
				o[n][2 * r + 1] *= corr;
			}
		}
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const float p = exp2f(s[j][e] - m[e >> 1]); /* −inf → 0 */

				s[j][e] = p;
				l[e >> 1] += p; /* this thread's share; the quad sums at the end */
			}
		mma_pv<DP>(o, s, vs, LDB, lane); /* O += P·V */
	}
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int t = tr0 + 8 * r;

		l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
		l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
		if (t >= a.T)
			continue;
		const float inv = 1.0f / l[r];
		float *orow = out + ((int64_t)b * a.T + t) * qstr + h * a.D;

#pragma unroll
		for (int n = 0; n < NO; n++) {
			const int col = 8 * n + 2 * c;

			if (col < a.D)
				orow[col] = o[n][2 * r] * inv;
			if (col + 1 < a.D)
				orow[col + 1] = o[n][2 * r + 1] * inv;
		}
		if (c == 0)
			lse[((int64_t)b * a.H + h) * a.T + t] = (m[r] + log2f(l[r])) * LN2_F;
	}
}

/* dK and dV of one 64-key tile of one kv head (each warp: 16 keys), looping
 * over the group's heads and the query tiles at or after the key tile (the
 * fp32 kernel's order); Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, Pᵀ = exp2(Sᵀ·scale₂ − lse₂),
 * dSᵀ = Pᵀ∘(dPᵀ − Di), dV += Pᵀ·dO, dK += dSᵀ·Q (·scale at the end). */
template <int DP>
static __global__ void __launch_bounds__(TC_NT)
attn_dkdv_tc_kernel(float *__restrict__ dk, float *__restrict__ dv, const float *__restrict__ dout,
		    const float *__restrict__ q, const float *__restrict__ k,
		    const float *__restrict__ v, const float *__restrict__ lse,
		    const float *__restrict__ di, struct attn_args a)
{
	constexpr int LDB = tc_geom<DP>::LDB, NO = DP / 8;
	extern __shared__ float4 smem4[];
	__nv_bfloat16 *ks = (__nv_bfloat16 *)smem4, *vs = ks + TILE * LDB, *qs = vs + TILE * LDB;
	__nv_bfloat16 *dos = qs + TILE * LDB;
	float *lses = (float *)(dos + TILE * LDB), *dis = lses + TILE;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
	const int b = blockIdx.x / a.Hkv, gk = blockIdx.x % a.Hkv;
	const int kt = (int)blockIdx.y, s0 = kt * TILE; /* earlier tiles (more work) first */
	const int64_t qstr = (int64_t)a.H * a.D, kstr = (int64_t)a.Hkv * a.D;
	const int64_t koff = ((int64_t)b * a.T + s0) * kstr + gk * a.D;
	const float sl2 = a.scale * LOG2E_F;
	const int sr0 = s0 + 16 * w + g; /* this thread's keys: sr0, sr0 + 8 */
	float dka[NO][4], dva[NO][4];

	stage_bf16<DP>(ks, LDB, k + koff, kstr, min(TILE, a.T - s0), a.D, a.vec4);
	stage_bf16<DP>(vs, LDB, v + koff, kstr, min(TILE, a.T - s0), a.D, a.vec4);
#pragma unroll
	for (int n = 0; n < NO; n++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			dka[n][e] = dva[n][e] = 0.0f;
	for (int h = gk * a.rep; h < (gk + 1) * a.rep; h++) {
		const float *lrow = lse + ((int64_t)b * a.H + h) * a.T;
		const float *drow = di + ((int64_t)b * a.H + h) * a.T;

		for (int qt = kt; qt < a.nqt; qt++) {
			const int t0 = qt * TILE;
			const int64_t qoff = ((int64_t)b * a.T + t0) * qstr + h * a.D;
			float st[8][4], dpt[8][4];

			__syncthreads(); /* the previous Q, dO, lse, Di are no longer read */
			stage_bf16<DP>(qs, LDB, q + qoff, qstr, min(TILE, a.T - t0), a.D, a.vec4);
			stage_bf16<DP>(dos, LDB, dout + qoff, qstr, min(TILE, a.T - t0), a.D,
				       a.vec4);
			if (threadIdx.x < TILE) {
				const int t = t0 + threadIdx.x;

				lses[threadIdx.x] = t < a.T ? lrow[t] * LOG2E_F : 0.0f;
				dis[threadIdx.x] = t < a.T ? drow[t] : 0.0f;
			}
			__syncthreads();
			mma_abt_16x64<DP>(st, ks, qs, LDB, 16 * w, g, c);   /* Sᵀ = K·Qᵀ */
			mma_abt_16x64<DP>(dpt, vs, dos, LDB, 16 * w, g, c); /* dPᵀ = V·dOᵀ */
			/* key s (row) is seen by query t (column) when s <= t < T */
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int tc = 8 * j + 2 * c + (e & 1), t = t0 + tc;
					const int s = sr0 + (e >> 1) * 8;
					const bool vis = (qt > kt || s <= t) && t < a.T;
					const float p = vis ? exp2f(st[j][e] * sl2 - lses[tc]) : 0.0f;

					st[j][e] = p;
					dpt[j][e] = p * (dpt[j][e] - dis[tc]);
				}
			mma_pv<DP>(dva, st, dos, LDB, lane);  /* dV += Pᵀ·dO */
			mma_pv<DP>(dka, dpt, qs, LDB, lane);  /* dK += dSᵀ·Q */
		}
	}
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int s = sr0 + 8 * r;

		if (s >= a.T)
			continue;
		float *dkrow = dk + ((int64_t)b * a.T + s) * kstr + gk * a.D;
		float *dvrow = dv + ((int64_t)b * a.T + s) * kstr + gk * a.D;

#pragma unroll
		for (int n = 0; n < NO; n++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int col = 8 * n + 2 * c + e;

				if (col < a.D) {
					dkrow[col] = dka[n][2 * r + e] * a.scale;
					dvrow[col] = dva[n][2 * r + e];
				}
			}
	}
}

/* dQ of one 64-query tile of one head (each warp: 16 queries), key tiles
 * 0..qt ascending: S, dP, dS recomputed, dQ += dS·K (·scale at the end). */
template <int DP>
static __global__ void __launch_bounds__(TC_NT)
attn_dq_tc_kernel(float *__restrict__ dq, const float *__restrict__ dout,
		  const float *__restrict__ q, const float *__restrict__ k,
		  const float *__restrict__ v, const float *__restrict__ lse,
		  const float *__restrict__ di, struct attn_args a)
{
	constexpr int LDB = tc_geom<DP>::LDB, NO = DP / 8;
	extern __shared__ float4 smem4[];
	__nv_bfloat16 *qs = (__nv_bfloat16 *)smem4, *dos = qs + TILE * LDB;
	__nv_bfloat16 *ks = dos + TILE * LDB, *vs = ks + TILE * LDB;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
	const int b = blockIdx.x / a.H, h = blockIdx.x % a.H, gk = h / a.rep;
	const int qt = a.nqt - 1 - (int)blockIdx.y, t0 = qt * TILE; /* later tiles first */
	const int64_t qstr = (int64_t)a.H * a.D, kstr = (int64_t)a.Hkv * a.D;
	const int64_t qoff = ((int64_t)b * a.T + t0) * qstr + h * a.D;
	const float *kb = k + (int64_t)b * a.T * kstr + gk * a.D;
	const float *vb = v + (int64_t)b * a.T * kstr + gk * a.D;
	const float *lrow = lse + ((int64_t)b * a.H + h) * a.T;
	const float *drow = di + ((int64_t)b * a.H + h) * a.T;
	const float sl2 = a.scale * LOG2E_F;
	const int tr0 = t0 + 16 * w + g; /* this thread's rows: tr0, tr0 + 8 */
	float dqa[NO][4], lr[2], dr[2];

	stage_bf16<DP>(qs, LDB, q + qoff, qstr, min(TILE, a.T - t0), a.D, a.vec4);
	stage_bf16<DP>(dos, LDB, dout + qoff, qstr, min(TILE, a.T - t0), a.D, a.vec4);
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int t = tr0 + 8 * r;

		lr[r] = t < a.T ? lrow[t] * LOG2E_F : 0.0f;
		dr[r] = t < a.T ? drow[t] : 0.0f;
	}
#pragma unroll
	for (int n = 0; n < NO; n++)
		dqa[n][0] = dqa[n][1] = dqa[n][2] = dqa[n][3] = 0.0f;
	for (int kt = 0; kt <= qt; kt++) {
		const int s0 = kt * TILE;
		float s[8][4], dp[8][4];

		__syncthreads(); /* the previous K and V are no longer read */
		stage_bf16<DP>(ks, LDB, kb + s0 * kstr, kstr, min(TILE, a.T - s0), a.D, a.vec4);
		stage_bf16<DP>(vs, LDB, vb + s0 * kstr, kstr, min(TILE, a.T - s0), a.D, a.vec4);
		__syncthreads();
		mma_abt_16x64<DP>(s, qs, ks, LDB, 16 * w, g, c);   /* S = Q·Kᵀ */
		mma_abt_16x64<DP>(dp, dos, vs, LDB, 16 * w, g, c); /* dP = dO·Vᵀ */
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int col = s0 + 8 * j + 2 * c + (e & 1), row = tr0 + (e >> 1) * 8;
				const bool vis = kt < qt || col <= row;
				const float p = vis ? exp2f(s[j][e] * sl2 - lr[e >> 1]) : 0.0f;

				dp[j][e] = p * (dp[j][e] - dr[e >> 1]);
			}
		mma_pv<DP>(dqa, dp, ks, LDB, lane); /* dQ += dS·K */
	}
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int t = tr0 + 8 * r;

		if (t >= a.T)
			continue;
		float *dqrow = dq + ((int64_t)b * a.T + t) * qstr + h * a.D;

#pragma unroll
		for (int n = 0; n < NO; n++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int col = 8 * n + 2 * c + e;

				if (col < a.D)
					dqrow[col] = dqa[n][2 * r + e] * a.scale;
			}
	}
}

/* ---- host side ------------------------------------------------------------ */

static bool aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* Checks the dims (as the CPU op, plus the CUDA limits) and fills *a.
 * Returns 1 when there is nothing to do (B or T is 0). */
static int attn_prepare(const struct titan_attn_dims *d, struct attn_args *a, int *dp)
{
	if (d->batch < 0 || d->seq < 0 || d->n_heads <= 0 || d->n_kv_heads <= 0 ||
	    d->head_dim <= 0 || d->n_heads % d->n_kv_heads != 0)
		return titan_error(TITAN_E_INVALID,
				   "attention: bad dims B=%lld T=%lld H=%lld Hkv=%lld D=%lld (Hkv must divide H)",
				   (long long)d->batch, (long long)d->seq, (long long)d->n_heads,
				   (long long)d->n_kv_heads, (long long)d->head_dim);
	if (d->head_dim > 128)
		return titan_error(TITAN_E_INVALID,
				   "attention: head_dim %lld is not supported by the CUDA backend "
				   "(at most 128)", (long long)d->head_dim);
	if (d->batch == 0 || d->seq == 0)
		return 1;
	if ((d->seq + TILE - 1) / TILE > 65535 || d->batch * d->n_heads > INT32_MAX)
		return titan_error(TITAN_E_INVALID,
				   "attention: B=%lld T=%lld H=%lld too large for the CUDA kernels "
				   "(T <= %d, B*H < 2^31)", (long long)d->batch, (long long)d->seq,
				   (long long)d->n_heads, 65535 * TILE);
	a->T = (int)d->seq;
	a->H = (int)d->n_heads;
	a->Hkv = (int)d->n_kv_heads;
	a->D = (int)d->head_dim;
	a->rep = a->H / a->Hkv;
	a->nqt = (a->T + TILE - 1) / TILE;
	a->scale = (float)(1.0 / sqrt((double)d->head_dim));
	*dp = a->D <= 16 ? 16 : a->D <= 32 ? 32 : a->D <= 64 ? 64 : 128;
	return 0;
}

/* Allows `kernel` `bytes` of dynamic shared memory, or says the device has
 * too little. */
static int attn_smem(struct titan_backend *be, const void *kernel, size_t bytes, int D)
{
	int dev = cuda_of(be)->device, optin = 0;

	CU_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
	if (bytes > (size_t)optin)
		return titan_error(TITAN_E_INVALID,
				   "attention: head_dim %d needs %zu bytes of shared memory per "
				   "block, CUDA device %d has %d", D, bytes, dev, optin);
	if (bytes > 48 * 1024)
		CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
					      (int)bytes));
	return 0;
}

template <int DP>
static int attn_fwd_launch(struct titan_backend *be, float *out, float *lse, const float *q,
			   const float *k, const float *v, const struct attn_args *a,
			   int64_t batch)
{
	const size_t smem = attn_geom<DP>::fwd_smem;
	const dim3 grid((unsigned)(batch * a->H), (unsigned)a->nqt);
	int rc = attn_smem(be, (const void *)attn_fwd_kernel<DP>, smem, a->D);

	if (rc < 0)
		return rc;
	attn_fwd_kernel<DP><<<grid, NT_OF(FWD_RM), smem, cuda_of(be)->stream>>>(out, lse, q, k,
										 v, *a);
	CU_LAUNCHED("attention_fwd");
	return 0;
}

template <int DP>
static int attn_bwd_launch(struct titan_backend *be, float *dq, float *dk, float *dv,
			   const float *dout, const float *q, const float *k, const float *v,
			   const float *lse, const float *di, const struct attn_args *a,
			   int64_t batch)
{
	const size_t smem_kv = attn_geom<DP>::dkdv_smem, smem_q = attn_geom<DP>::dq_smem;
	cudaStream_t st = cuda_of(be)->stream;
	int rc;

	if ((rc = attn_smem(be, (const void *)attn_dkdv_kernel<DP>, smem_kv, a->D)) < 0 ||
	    (rc = attn_smem(be, (const void *)attn_dq_kernel<DP>, smem_q, a->D)) < 0)
		return rc;
	attn_dkdv_kernel<DP><<<dim3((unsigned)(batch * a->Hkv), (unsigned)a->nqt), NT_OF(BWD_RM),
			       smem_kv, st>>>(dk, dv, dout, q, k, v, lse, di, *a);
	CU_LAUNCHED("attention_bwd dk/dv");
	attn_dq_kernel<DP><<<dim3((unsigned)(batch * a->H), (unsigned)a->nqt), NT_OF(BWD_RM),
			     smem_q, st>>>(dq, dout, q, k, v, lse, di, *a);
	CU_LAUNCHED("attention_bwd dq");
	return 0;
}

/* The bf16 tensor-core kernels (matmul mode TITAN_CUDA_MATMUL_BF16, DP 64 or
 * 128 only). */
template <int DP>
static int attn_fwd_tc_launch(struct titan_backend *be, float *out, float *lse, const float *q,
			      const float *k, const float *v, const struct attn_args *a,
			      int64_t batch)
{
	const size_t smem = tc_geom<DP>::fwd_smem;
	const dim3 grid((unsigned)(batch * a->H), (unsigned)a->nqt);
	int rc = attn_smem(be, (const void *)attn_fwd_tc_kernel<DP>, smem, a->D);

	if (rc < 0)
		return rc;
	attn_fwd_tc_kernel<DP><<<grid, TC_NT, smem, cuda_of(be)->stream>>>(out, lse, q, k, v,
									   *a);
	CU_LAUNCHED("attention_fwd (bf16)");
	return 0;
}

template <int DP>
static int attn_bwd_tc_launch(struct titan_backend *be, float *dq, float *dk, float *dv,
			      const float *dout, const float *q, const float *k, const float *v,
			      const float *lse, const float *di, const struct attn_args *a,
			      int64_t batch)
{
	const size_t smem_kv = tc_geom<DP>::dkdv_smem, smem_q = tc_geom<DP>::dq_smem;
	cudaStream_t st = cuda_of(be)->stream;
	int rc;

	if ((rc = attn_smem(be, (const void *)attn_dkdv_tc_kernel<DP>, smem_kv, a->D)) < 0 ||
	    (rc = attn_smem(be, (const void *)attn_dq_tc_kernel<DP>, smem_q, a->D)) < 0)
		return rc;
	attn_dkdv_tc_kernel<DP><<<dim3((unsigned)(batch * a->Hkv), (unsigned)a->nqt), TC_NT,
				  smem_kv, st>>>(dk, dv, dout, q, k, v, lse, di, *a);
	CU_LAUNCHED("attention_bwd dk/dv (bf16)");
	attn_dq_tc_kernel<DP><<<dim3((unsigned)(batch * a->H), (unsigned)a->nqt), TC_NT, smem_q,
				st>>>(dq, dout, q, k, v, lse, di, *a);
	CU_LAUNCHED("attention_bwd dq (bf16)");
	return 0;
}

/* bf16 tensor cores for head dims 33..128 in TITAN_CUDA_MATMUL_BF16 mode;
 * smaller heads (and the FP32 / TF32 modes) use the fp32 kernels. */
static bool attn_use_tc(struct titan_backend *be, int dp)
{
	return cuda_of(be)->matmul == TITAN_CUDA_MATMUL_BF16 && (dp == 64 || dp == 128);
}

/* ---- parts and document masks: plain fp32 kernels ------------------------ *
 *
 * attention_part_fwd/bwd (titan/ops.h struct titan_attn_part: the blocks of
 * context parallelism), and attention_fwd/bwd with document ids
 * (block_causal), which run as the part tq = tk = T, diag 0 — the CPU twin's
 * own structure (lib/cpu/attention.c part_fwd/part_bwd).  Written to be
 * plainly correct, not fast: no tensor cores, no register tiling.  One warp
 * per query row (forward, dQ) or key row (dK/dV); PART_ROWS rows per block
 * share the tiles of PART_TILE keys (queries) staged in shared memory, row
 * stride D + 1 (a lane reading its own row of a tile hits its own bank).
 * A lane owns head-dim elements d = lane + 32·i of its row's accumulators.
 *
 * The CPU's arithmetic, operation for operation: every score and dP is one
 * fmaf chain over d = 0..D−1 from 0 (a lane computes the whole dot of its
 * key), scaled and shifted with separately rounded __fmul_rn/__fsub_rn (the
 * CPU is compiled without contraction); the online softmax visits the keys
 * in tiles that start at multiples of 64, the CPU's default blocks
 * (TITAN_ATTN_BLOCK), and adds P·V, dS·K, Pᵀ·dO and dSᵀ·Q in the CPU's order
 * (keys ascending; heads, then queries ascending), from the old value under
 * `accumulate`.  What differs is expf/logf's last bit and the order of two
 * sums (the softmax denominator's, and Di's in double).
 *
 * Masks: query row t sees key s when s <= t + diag (diag clamped to tk) and,
 * with documents, k_doc[s] == q_doc[t].  The ids ascend along a row, so a
 * row's visible keys are one run [lo, hi) (part_keys: binary searches) and
 * a key's queries one run too (part_queries).  Document ids are host memory
 * (ops.h): each call copies them (packed [B, tq] and [B, tk]) into device
 * scratch first, a pageable copy, so the host waits there for the stream.
 */
#define PART_TILE 64            /* keys (queries) per shared tile: TITAN_ATTN_BLOCK */
#define PART_ROWS 8             /* rows (warps) per block */
#define PART_NT (32 * PART_ROWS)
#define PART_DW 4               /* accumulators a lane holds: D <= 128 */
#define FULL_MASK 0xffffffffu

struct part_args {
	int tq, tk, H, Hkv, D, rep;
	int64_t qst, kst;      /* batch row b's rows: b·qst + t, b·kst + s */
	int64_t diag;          /* clamped to tk */
	float scale;
	bool merge, acc;
	const int32_t *qd, *kd; /* device, packed [B, tq] and [B, tk]; NULL: no documents */
};

static __device__ __forceinline__ float warp_max(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, o));
	return x;
}

static __device__ __forceinline__ float warp_sum(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x += __shfl_xor_sync(FULL_MASK, x, o);
	return x;
}

/* Σ_d a[d]·b[d], d = 0..D−1 in order, one fmaf each (the CPU's tiles) */
static __device__ __forceinline__ float dot_in_order(const float *a, const float *b, int D)
{
	float s = 0.0f;

	for (int d = 0; d < D; d++)
		s = fmaf(a[d], b[d], s);
	return s;
}

/* The first i in [lo, hi) with d[i] >= x (hi when none); with d[i] > x. */
static __device__ int dev_doc_lower(const int32_t *d, int lo, int hi, int32_t x)
{
	while (lo < hi) {
		const int mid = lo + (hi - lo) / 2;

		if (d[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static __device__ int dev_doc_upper(const int32_t *d, int lo, int hi, int32_t x)
{
	while (lo < hi) {
		const int mid = lo + (hi - lo) / 2;

		if (d[mid] <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The keys [*lo, *hi) query row t of batch row b sees. */
static __device__ void part_keys(const struct part_args &a, int b, int t, int *lo, int *hi)
{
	int64_t n = (int64_t)t + a.diag + 1;

	*lo = 0;
	*hi = (int)(n < 0 ? 0 : n > a.tk ? a.tk : n);
	if (a.qd) {
		const int32_t *kd = a.kd + (int64_t)b * a.tk, x = a.qd[(int64_t)b * a.tq + t];

		*lo = dev_doc_lower(kd, 0, *hi, x);
		*hi = dev_doc_upper(kd, *lo, *hi, x);
	}
}

/* The query rows [*lo, *hi) that see key s of batch row b. */
static __device__ void part_queries(const struct part_args &a, int b, int s, int *lo, int *hi)
{
	int64_t f = (int64_t)s - a.diag;

	*lo = (int)(f < 0 ? 0 : f > a.tq ? a.tq : f);
	*hi = a.tq;
	if (a.qd) {
		const int32_t *qd = a.qd + (int64_t)b * a.tq, x = a.kd[(int64_t)b * a.tk + s];

		*lo = dev_doc_lower(qd, *lo, a.tq, x);
		*hi = dev_doc_upper(qd, *lo, a.tq, x);
	}
}

/* Every thread: the union [*blo, *bhi) of the runs [lo, hi) of the
 * block's rows (warps), through rlo/rhi [PART_ROWS] in shared memory;
 * *blo >= *bhi when all are empty.  One barrier (the callers write rlo/rhi
 * once). */
static __device__ void block_run(int *rlo, int *rhi, int lo, int hi, int *blo, int *bhi)
{
	if ((threadIdx.x & 31) == 0) {
		rlo[threadIdx.x >> 5] = lo;
		rhi[threadIdx.x >> 5] = hi;
	}
	__syncthreads();
	*blo = INT32_MAX;
	*bhi = 0;
	for (int r = 0; r < PART_ROWS; r++)
		if (rlo[r] < rhi[r]) {
			*blo = min(*blo, rlo[r]);
			*bhi = max(*bhi, rhi[r]);
		}
}

/* A lane's accumulators of a row: x[i] = row[lane + 32·i] (those < D) when
 * `use`, else 0; and back. */
static __device__ __forceinline__ void acc_load(float (&x)[PART_DW], const float *row, bool use,
						int lane, int D)
{
#pragma unroll
	for (int i = 0; i < PART_DW; i++) {
		const int d = lane + 32 * i;

		x[i] = use && d < D ? row[d] : 0.0f;
	}
}

/* x[i] += c·row[lane + 32·i] (one fmaf; those < D) */
static __device__ __forceinline__ void acc_axpy(float (&x)[PART_DW], float c, const float *row,
						int lane, int D)
{
#pragma unroll
	for (int i = 0; i < PART_DW; i++) {
		const int d = lane + 32 * i;

		if (d < D)
			x[i] = fmaf(c, row[d], x[i]);
	}
}

static __device__ __forceinline__ void acc_store(float *row, const float (&x)[PART_DW], int lane,
						 int D)
{
#pragma unroll
	for (int i = 0; i < PART_DW; i++) {
		const int d = lane + 32 * i;

		if (d < D)
			row[d] = x[i];
	}
}

/* dst[r·ld + c] = src[r·stride + c] for r < rows, c < D; 0 for rows <= r
 * < PART_TILE.  All threads of the block. */
static __device__ void part_load(float *dst, int ld, const float *__restrict__ src,
				 int64_t stride, int rows, int D)
{
	for (int e = threadIdx.x; e < PART_TILE * D; e += PART_NT) {
		const int r = e / D, c = e % D;

		dst[r * ld + c] = r < rows ? src[r * stride + c] : 0.0f;
	}
}

/* Forward: grid (B·H, query rows / PART_ROWS).  Shared: the K tile, then
 * the V tile (PART_TILE × (D+1)), and each warp's query row (D). */
static __global__ void __launch_bounds__(PART_NT)
part_fwd_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ q,
		const float *__restrict__ k, const float *__restrict__ v, struct part_args a)
{
	extern __shared__ float4 smem4[];
	__shared__ int rlo[PART_ROWS], rhi[PART_ROWS];
	const int D = a.D, LDT = D + 1;
	float *kv = (float *)smem4, *qs = kv + PART_TILE * LDT;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int b = blockIdx.x / a.H, h = blockIdx.x % a.H, g = h / a.rep;
	const int t = blockIdx.y * PART_ROWS + w;
	const bool row = t < a.tq;
	const int64_t qstr = (int64_t)a.H * D, kstr = (int64_t)a.Hkv * D;
	const int64_t qrow = ((int64_t)b * a.qst + t) * qstr + h * D;
	const int64_t lrow = ((int64_t)b * a.H + h) * a.qst + t;
	float *qw = qs + w * D, o[PART_DW], m = -INFINITY, l = 0.0f;
	int lo = 0, hi = 0, blo, bhi;

	if (row) {
		part_keys(a, b, t, &lo, &hi);
		for (int d = lane; d < D; d += 32)
			qw[d] = q[qrow + d];
	}
	/* merge: the online softmax goes on from the row's (out, lse): m = lse,
	 * l = 1, o = out */
	if (row && a.merge) {
		m = lse[lrow];
		l = 1.0f;
	}
	acc_load(o, out + qrow, row && a.merge, lane, D);
	block_run(rlo, rhi, lo, hi, &blo, &bhi);
	for (int s0 = blo / PART_TILE * PART_TILE; s0 < bhi; s0 += PART_TILE) {
		const int nk = min(PART_TILE, a.tk - s0);
		const int jlo = max(lo - s0, 0), jhi = min(hi - s0, nk); /* this row's */
		const bool act = jlo < jhi;                              /* the warp's */
		float p0 = 0.0f, p1 = 0.0f;

		__syncthreads(); /* the previous V tile is no longer read */
		part_load(kv, LDT, k + ((int64_t)b * a.kst + s0) * kstr + g * D, kstr, nk, D);
		__syncthreads();
		if (act) {
			const bool v0 = lane >= jlo && lane < jhi;
			const bool v1 = lane + 32 >= jlo && lane + 32 < jhi;
			const float x0 = v0 ? __fmul_rn(dot_in_order(qw, kv + lane * LDT, D), a.scale)
					    : -INFINITY;
			const float x1 = v1 ? __fmul_rn(dot_in_order(qw, kv + (lane + 32) * LDT, D),
							a.scale) : -INFINITY;
			const float mx = fmaxf(warp_max(fmaxf(x0, x1)), m);
			const float corr = expf(__fsub_rn(m, mx)); /* exp(−inf) = 0 */

			p0 = v0 ? expf(__fsub_rn(x0, mx)) : 0.0f;
			p1 = v1 ? expf(__fsub_rn(x1, mx)) : 0.0f;
			l = __fadd_rn(__fmul_rn(l, corr), warp_sum(p0 + p1));
			m = mx;
#pragma unroll
			for (int i = 0; i < PART_DW; i++)
				o[i] = __fmul_rn(o[i], corr);
		}
		__syncthreads(); /* every warp is done with K */
		part_load(kv, LDT, v + ((int64_t)b * a.kst + s0) * kstr + g * D, kstr, nk, D);
		__syncthreads();
		for (int j = jlo; j < jhi; j++) /* O += P·V, keys in order */
			acc_axpy(o, __shfl_sync(FULL_MASK, j < 32 ? p0 : p1, j & 31), kv + j * LDT,
				 lane, D);
	}
	if (!row || (a.merge && lo >= hi)) /* merge: a row that sees no key keeps its bits */
		return;
	if (l == 0.0f) { /* no key at all: out 0, lse −inf */
		for (int d = lane; d < D; d += 32)
			out[qrow + d] = 0.0f;
		if (lane == 0)
			lse[lrow] = -INFINITY;
		return;
	}
	const float inv = __fdiv_rn(1.0f, l);

#pragma unroll
	for (int i = 0; i < PART_DW; i++)
		o[i] = __fmul_rn(o[i], inv);
	acc_store(out + qrow, o, lane, D);
	if (lane == 0)
		lse[lrow] = __fadd_rn(m, logf(l));
}

/* Di[(b·H + h)·tq + t] = Σ_d dout·out of query row t (products and sum in
 * double, rounded once, as the CPU's dot8d), one warp per (b, t, h). */
static __global__ void part_di_kernel(float *__restrict__ di, const float *__restrict__ dout,
				      const float *__restrict__ out, int64_t B, struct part_args a)
{
	const int lane = threadIdx.x & 31;
	const int64_t rows = B * a.tq * a.H, nw = (int64_t)gridDim.x * blockDim.x / 32;

	for (int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; n < rows; n += nw) {
		const int64_t h = n % a.H, bt = n / a.H, t = bt % a.tq, b = bt / a.tq;
		const int64_t off = ((b * a.qst + t) * a.H + h) * a.D;
		double s = 0.0;

		for (int c = lane; c < a.D; c += 32)
			s += (double)dout[off + c] * (double)out[off + c];
		for (int o = 16; o > 0; o >>= 1)
			s += __shfl_xor_sync(FULL_MASK, s, o);
		if (lane == 0)
			di[(b * a.H + h) * a.tq + t] = (float)s;
	}
}

/* P and dS of one visible (query, key) pair from the raw score and dP:
 * p = exp(s·scale − lse), ds = p·(dp − Di)·scale (the CPU's roundings). */
static __device__ __forceinline__ void part_grad(float s, float dp, float lse, float di,
						 float scale, float *p, float *ds)
{
	*p = expf(__fsub_rn(__fmul_rn(s, scale), lse));
	*ds = __fmul_rn(__fmul_rn(*p, __fsub_rn(dp, di)), scale);
}

/* dQ: grid (B·H, query rows / PART_ROWS), a warp per query row; keys in
 * order: dq += dS·K.  Shared: K and V tiles, each warp's q and dout rows. */
static __global__ void __launch_bounds__(PART_NT)
part_dq_kernel(float *__restrict__ dq, const float *__restrict__ dout, const float *__restrict__ q,
	       const float *__restrict__ k, const float *__restrict__ v,
	       const float *__restrict__ lse, const float *__restrict__ di, struct part_args a)
{
	extern __shared__ float4 smem4[];
	__shared__ int rlo[PART_ROWS], rhi[PART_ROWS];
	const int D = a.D, LDT = D + 1;
	float *kt = (float *)smem4, *vt = kt + PART_TILE * LDT, *qs = vt + PART_TILE * LDT;
	float *dos = qs + PART_ROWS * D;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int b = blockIdx.x / a.H, h = blockIdx.x % a.H, g = h / a.rep;
	const int t = blockIdx.y * PART_ROWS + w;
	const bool row = t < a.tq;
	const int64_t qstr = (int64_t)a.H * D, kstr = (int64_t)a.Hkv * D;
	const int64_t qrow = ((int64_t)b * a.qst + t) * qstr + h * D;
	float *qw = qs + w * D, *dow = dos + w * D, acc[PART_DW], lr = 0.0f, dr = 0.0f;
	int lo = 0, hi = 0, blo, bhi;

	if (row) {
		part_keys(a, b, t, &lo, &hi);
		lr = lse[((int64_t)b * a.H + h) * a.qst + t];
		dr = di[((int64_t)b * a.H + h) * a.tq + t];
		for (int d = lane; d < D; d += 32) {
			qw[d] = q[qrow + d];
			dow[d] = dout[qrow + d];
		}
	}
	acc_load(acc, dq + qrow, row && a.acc, lane, D);
	block_run(rlo, rhi, lo, hi, &blo, &bhi);
	for (int s0 = blo / PART_TILE * PART_TILE; s0 < bhi; s0 += PART_TILE) {
		const int nk = min(PART_TILE, a.tk - s0);
		const int jlo = max(lo - s0, 0), jhi = min(hi - s0, nk);
		const int64_t koff = ((int64_t)b * a.kst + s0) * kstr + g * D;
		float ds0 = 0.0f, ds1 = 0.0f, p;

		__syncthreads(); /* the previous tiles are no longer read */
		part_load(kt, LDT, k + koff, kstr, nk, D);
		part_load(vt, LDT, v + koff, kstr, nk, D);
		__syncthreads();
		if (lane >= jlo && lane < jhi)
			part_grad(dot_in_order(qw, kt + lane * LDT, D),
				  dot_in_order(dow, vt + lane * LDT, D), lr, dr, a.scale, &p, &ds0);
		if (lane + 32 >= jlo && lane + 32 < jhi)
			part_grad(dot_in_order(qw, kt + (lane + 32) * LDT, D),
				  dot_in_order(dow, vt + (lane + 32) * LDT, D), lr, dr, a.scale, &p,
				  &ds1);
		for (int j = jlo; j < jhi; j++) /* dQ += dS·K, keys in order */
			acc_axpy(acc, __shfl_sync(FULL_MASK, j < 32 ? ds0 : ds1, j & 31),
				 kt + j * LDT, lane, D);
	}
	if (row)
		acc_store(dq + qrow, acc, lane, D);
}

/* dK, dV: grid (B·Hkv, key rows / PART_ROWS), a warp per key row of a kv
 * head; the group's heads in order, then its queries in order: dv +=
 * Pᵀ·dO, dk += dSᵀ·Q.  Shared: Q and dO tiles, their lse and Di, each
 * warp's k and v rows. */
static __global__ void __launch_bounds__(PART_NT)
part_dkdv_kernel(float *__restrict__ dk, float *__restrict__ dv, const float *__restrict__ dout,
		 const float *__restrict__ q, const float *__restrict__ k,
		 const float *__restrict__ v, const float *__restrict__ lse,
		 const float *__restrict__ di, struct part_args a)
{
	extern __shared__ float4 smem4[];
	__shared__ int rlo[PART_ROWS], rhi[PART_ROWS];
	__shared__ float lt[PART_TILE], dt[PART_TILE];
	const int D = a.D, LDT = D + 1;
	float *qt = (float *)smem4, *dot = qt + PART_TILE * LDT, *ks = dot + PART_TILE * LDT;
	float *vs = ks + PART_ROWS * D;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int b = blockIdx.x / a.Hkv, g = blockIdx.x % a.Hkv;
	const int s = blockIdx.y * PART_ROWS + w;
	const bool row = s < a.tk;
	const int64_t qstr = (int64_t)a.H * D, kstr = (int64_t)a.Hkv * D;
	const int64_t krow = ((int64_t)b * a.kst + s) * kstr + g * D;
	float *kw = ks + w * D, *vw = vs + w * D, dka[PART_DW], dva[PART_DW];
	int lo = 0, hi = 0, blo, bhi;

	if (row) {
		part_queries(a, b, s, &lo, &hi);
		for (int d = lane; d < D; d += 32) {
			kw[d] = k[krow + d];
			vw[d] = v[krow + d];
		}
	}
	acc_load(dka, dk + krow, row && a.acc, lane, D);
	acc_load(dva, dv + krow, row && a.acc, lane, D);
	block_run(rlo, rhi, lo, hi, &blo, &bhi);
	for (int h = g * a.rep; h < (g + 1) * a.rep; h++) {
		const int64_t lh = ((int64_t)b * a.H + h) * a.qst, dh = ((int64_t)b * a.H + h) * a.tq;

		for (int t0 = blo / PART_TILE * PART_TILE; t0 < bhi; t0 += PART_TILE) {
			const int nq = min(PART_TILE, a.tq - t0);
			const int ilo = max(lo - t0, 0), ihi = min(hi - t0, nq);
			const int64_t qoff = ((int64_t)b * a.qst + t0) * qstr + h * D;
			float p0 = 0.0f, p1 = 0.0f, ds0 = 0.0f, ds1 = 0.0f;

			__syncthreads(); /* the previous tiles are no longer read */
			part_load(qt, LDT, q + qoff, qstr, nq, D);
			part_load(dot, LDT, dout + qoff, qstr, nq, D);
			if ((int)threadIdx.x < nq) {
				lt[threadIdx.x] = lse[lh + t0 + threadIdx.x];
				dt[threadIdx.x] = di[dh + t0 + threadIdx.x];
			}
			__syncthreads();
			if (lane >= ilo && lane < ihi)
				part_grad(dot_in_order(qt + lane * LDT, kw, D),
					  dot_in_order(dot + lane * LDT, vw, D), lt[lane], dt[lane],
					  a.scale, &p0, &ds0);
			if (lane + 32 >= ilo && lane + 32 < ihi)
				part_grad(dot_in_order(qt + (lane + 32) * LDT, kw, D),
					  dot_in_order(dot + (lane + 32) * LDT, vw, D),
					  lt[lane + 32], dt[lane + 32], a.scale, &p1, &ds1);
			for (int i = ilo; i < ihi; i++) { /* queries in order */
				acc_axpy(dva, __shfl_sync(FULL_MASK, i < 32 ? p0 : p1, i & 31),
					 dot + i * LDT, lane, D);
				acc_axpy(dka, __shfl_sync(FULL_MASK, i < 32 ? ds0 : ds1, i & 31),
					 qt + i * LDT, lane, D);
			}
		}
	}
	if (row) {
		acc_store(dk + krow, dka, lane, D);
		acc_store(dv + krow, dva, lane, D);
	}
}

/* Fills *a from a checked part, with the CUDA limits, and puts the
 * document ids (if any) into device scratch after `di_floats` floats of
 * room for Di (*di, NULL when 0).  Returns 1 when there is nothing to
 * compute (no batch row, or neither queries nor keys). */
static int part_prepare(struct titan_backend *be, const struct titan_attn_part *p,
			struct part_args *a, int64_t di_floats, float **di)
{
	const int64_t B = p->batch, ndoc = p->q_doc ? B * (p->tq + p->tk) : 0;
	cudaStream_t st = cuda_of(be)->stream;
	char *scratch;

	if (p->head_dim > 128)
		return titan_error(TITAN_E_INVALID,
				   "attention part: head_dim %lld is not supported by the CUDA "
				   "backend (at most 128)", (long long)p->head_dim);
	if (B == 0 || (p->tq == 0 && p->tk == 0))
		return 1;
	if (p->tq > INT32_MAX - PART_ROWS || p->tk > INT32_MAX - PART_ROWS ||
	    (p->tq + PART_ROWS - 1) / PART_ROWS > 65535 ||
	    (p->tk + PART_ROWS - 1) / PART_ROWS > 65535 || B * p->n_heads > INT32_MAX ||
	    p->n_heads > INT32_MAX)
		return titan_error(TITAN_E_INVALID,
				   "attention part: B=%lld Tq=%lld Tk=%lld H=%lld too large for the "
				   "CUDA kernels (Tq, Tk <= %d, B*H < 2^31)", (long long)B,
				   (long long)p->tq, (long long)p->tk, (long long)p->n_heads,
				   65535 * PART_ROWS);
	a->tq = (int)p->tq;
	a->tk = (int)p->tk;
	a->H = (int)p->n_heads;
	a->Hkv = (int)p->n_kv_heads;
	a->D = (int)p->head_dim;
	a->rep = a->H / a->Hkv;
	a->qst = p->q_stride;
	a->kst = p->k_stride;
	a->diag = p->diag > p->tk ? p->tk : p->diag;
	a->scale = (float)(1.0 / sqrt((double)p->head_dim));
	a->merge = a->acc = false;
	a->qd = a->kd = NULL;
	if (di)
		*di = NULL;
	if (di_floats + ndoc == 0)
		return 0;
	if (!(scratch = (char *)cuda_scratch(be, (size_t)(di_floats + ndoc) * 4)))
		return TITAN_E_NOMEM;
	if (di)
		*di = (float *)scratch;
	if (!ndoc)
		return 0;
	a->qd = (const int32_t *)(scratch + di_floats * 4);
	a->kd = a->qd + B * p->tq;
	if (p->tq)
		CU_CHECK(cudaMemcpy2DAsync((void *)a->qd, (size_t)p->tq * 4, p->q_doc,
					   (size_t)p->q_stride * 4, (size_t)p->tq * 4, (size_t)B,
					   cudaMemcpyHostToDevice, st));
	if (p->tk)
		CU_CHECK(cudaMemcpy2DAsync((void *)a->kd, (size_t)p->tk * 4, p->k_doc,
					   (size_t)p->k_stride * 4, (size_t)p->tk * 4, (size_t)B,
					   cudaMemcpyHostToDevice, st));
	return 0;
}

static size_t part_fwd_smem(int D)
{
	return ((size_t)PART_TILE * (D + 1) + (size_t)PART_ROWS * D) * sizeof(float);
}

static size_t part_bwd_smem(int D)
{
	return (2 * (size_t)PART_TILE * (D + 1) + 2 * (size_t)PART_ROWS * D) * sizeof(float);
}

/* Forward of a checked part (attention_part_fwd; attention_fwd with
 * documents). */
static int part_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
		    const float *k, const float *v, const struct titan_attn_part *p, bool merge)
{
	struct part_args a;
	int rc = part_prepare(be, p, &a, 0, NULL);
	size_t smem;

	if (rc != 0)
		return rc < 0 ? rc : 0;
	if (p->tq == 0)
		return 0;
	a.merge = merge;
	smem = part_fwd_smem(a.D);
	if ((rc = attn_smem(be, (const void *)part_fwd_kernel, smem, a.D)) < 0)
		return rc;
	part_fwd_kernel<<<dim3((unsigned)(p->batch * a.H), (unsigned)((a.tq + PART_ROWS - 1) /
								       PART_ROWS)),
			  PART_NT, smem, cuda_of(be)->stream>>>(out, lse, q, k, v, a);
	CU_LAUNCHED("attention_part_fwd");
	return 0;
}

/* Backward of a checked part (attention_part_bwd; attention_bwd with
 * documents): Di, then dQ (query rows), then dK/dV (key rows). */
static int part_bwd(struct titan_backend *be, float *dq, float *dk, float *dv, const float *dout,
		    const float *q, const float *k, const float *v, const float *out,
		    const float *lse, const struct titan_attn_part *p, bool accumulate)
{
	const int64_t rows = p->batch * p->tq * p->n_heads;
	cudaStream_t st = cuda_of(be)->stream;
	struct part_args a;
	float *di = NULL;
	int rc = part_prepare(be, p, &a, rows, &di);
	size_t smem;

	if (rc != 0)
		return rc < 0 ? rc : 0;
	a.acc = accumulate;
	smem = part_bwd_smem(a.D);
	if ((rc = attn_smem(be, (const void *)part_dq_kernel, smem, a.D)) < 0 ||
	    (rc = attn_smem(be, (const void *)part_dkdv_kernel, smem, a.D)) < 0)
		return rc;
	if (rows > 0) {
		part_di_kernel<<<cuda_blocks(rows * 32, 256), 256, 0, st>>>(di, dout, out, p->batch,
									      a);
		CU_LAUNCHED("attention_part_bwd Di");
		part_dq_kernel<<<dim3((unsigned)(p->batch * a.H),
				      (unsigned)((a.tq + PART_ROWS - 1) / PART_ROWS)),
				 PART_NT, smem, st>>>(dq, dout, q, k, v, lse, di, a);
		CU_LAUNCHED("attention_part_bwd dq");
	}
	if (a.tk > 0) {
		part_dkdv_kernel<<<dim3((unsigned)(p->batch * a.Hkv),
					(unsigned)((a.tk + PART_ROWS - 1) / PART_ROWS)),
				   PART_NT, smem, st>>>(dk, dv, dout, q, k, v, lse, di, a);
		CU_LAUNCHED("attention_part_bwd dk/dv");
	}
	return 0;
}

int cuda_attention_part_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
			    const float *k, const float *v, const struct titan_attn_part *p,
			    bool merge)
{
	int rc = titan_attn_part_check(p);

	return rc < 0 ? rc : part_fwd(be, out, lse, q, k, v, p, merge);
}

int cuda_attention_part_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
			    const float *dout, const float *q, const float *k, const float *v,
			    const float *out, const float *lse, const struct titan_attn_part *p,
			    bool accumulate)
{
	int rc = titan_attn_part_check(p);

	return rc < 0 ? rc : part_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, p, accumulate);
}

/* block_causal: the causal op with document ids is the part tq = tk = T,
 * diag 0 (as on the CPU). */
static struct titan_attn_part doc_part(const struct titan_attn_dims *d)
{
	return (struct titan_attn_part){d->batch, d->seq, d->seq, d->seq, d->seq, d->n_heads,
					d->n_kv_heads, d->head_dim, 0, d->doc, d->doc};
}

int cuda_attention_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
		       const float *k, const float *v, const struct titan_attn_dims *d)
{
	struct attn_args a;
	int dp = 0, rc = attn_prepare(d, &a, &dp);

	if (rc != 0)
		return rc < 0 ? rc : 0;
	if (d->doc) { /* block_causal: the part kernels */
		const struct titan_attn_part p = doc_part(d);

		if ((rc = titan_attn_docs_check(d->doc, d->batch, d->seq, d->seq, "token")) < 0)
			return rc;
		return part_fwd(be, out, lse, q, k, v, &p, false);
	}
	if ((rc = cudnn_attn_fwd(be, out, lse, q, k, v, d)) <= 0) /* 1: not cuDNN */
		return rc;
	a.vec4 = a.D % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v);
	if (attn_use_tc(be, dp))
		return dp == 64 ? attn_fwd_tc_launch<64>(be, out, lse, q, k, v, &a, d->batch)
				: attn_fwd_tc_launch<128>(be, out, lse, q, k, v, &a, d->batch);
	switch (dp) {
	case 16:
		return attn_fwd_launch<16>(be, out, lse, q, k, v, &a, d->batch);
	case 32:
		return attn_fwd_launch<32>(be, out, lse, q, k, v, &a, d->batch);
	case 64:
		return attn_fwd_launch<64>(be, out, lse, q, k, v, &a, d->batch);
	default:
		return attn_fwd_launch<128>(be, out, lse, q, k, v, &a, d->batch);
	}
}

int cuda_attention_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
		       const float *dout, const float *q, const float *k, const float *v,
		       const float *out, const float *lse, const struct titan_attn_dims *d)
{
	struct attn_args a;
	int dp = 0, rc = attn_prepare(d, &a, &dp);
	const int64_t rows = d->batch * d->seq * d->n_heads;
	float *di;

	if (rc != 0)
		return rc < 0 ? rc : 0;
	if (d->doc) { /* block_causal: the part kernels */
		const struct titan_attn_part p = doc_part(d);

		if ((rc = titan_attn_docs_check(d->doc, d->batch, d->seq, d->seq, "token")) < 0)
			return rc;
		return part_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, &p, false);
	}
	if ((rc = cudnn_attn_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, d)) <= 0)
		return rc;
	a.vec4 = a.D % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) &&
		 aligned16(dout);
	if (!(di = (float *)cuda_scratch(be, (size_t)rows * sizeof(float))))
		return TITAN_E_NOMEM;
	attn_di_kernel<<<cuda_blocks(rows * 32, 256), 256, 0, cuda_of(be)->stream>>>(
		di, dout, out, rows, a.T, a.H, a.D);
	CU_LAUNCHED("attention_bwd Di");
	if (attn_use_tc(be, dp))
		return dp == 64 ? attn_bwd_tc_launch<64>(be, dq, dk, dv, dout, q, k, v, lse, di, &a,
							 d->batch)
				: attn_bwd_tc_launch<128>(be, dq, dk, dv, dout, q, k, v, lse, di,
							  &a, d->batch);
	switch (dp) {
	case 16:
		return attn_bwd_launch<16>(be, dq, dk, dv, dout, q, k, v, lse, di, &a, d->batch);
	case 32:
		return attn_bwd_launch<32>(be, dq, dk, dv, dout, q, k, v, lse, di, &a, d->batch);
	case 64:
		return attn_bwd_launch<64>(be, dq, dk, dv, dout, q, k, v, lse, di, &a, d->batch);
	default:
		return attn_bwd_launch<128>(be, dq, dk, dv, dout, q, k, v, lse, di, &a, d->batch);
	}
}
