/*
 * cpu_impl.h — private to lib/cpu: the CPU backend's op functions (gathered
 * into the table by backend.c) and shared helpers.
 */
#ifndef TITAN_CPU_IMPL_H
#define TITAN_CPU_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "titan/core.h"
#include "titan/ops.h"

/* Hot kernels are compiled for the x86-64 psABI levels (baseline SSE2, v3 =
 * AVX2+FMA, v4 = AVX-512 F/BW/DQ/VL) and one is picked once, at backend
 * init (titan_cpu_isa_init: the best the CPU has, or TITAN_CPU_ISA).  The
 * files are built as ISO C (-std=c17 implies -ffp-contract=off: a·b + c is
 * never fused; FMA appears only where fmaf() is written) and the kernels
 * never reassociate, so every path gives the same bits (test_cpu_simd
 * checks each against the baseline one on every path the CPU has).
 *
 *   static inline TITAN_CPU_BODY void k_body(float *y, int64_t n) { ... }
 *   TITAN_CPU_DISPATCH_VOID(k, (float *y, int64_t n), (y, n))
 *
 * defines k_base, k_avx2 and k_avx512 (the body compiled for each level)
 * and a static k() that calls the selected one; TITAN_CPU_DISPATCH(ret,
 * ...) the same for a kernel returning a value. */
enum titan_cpu_isa {
	TITAN_CPU_ISA_BASE = 0,   /* x86-64 baseline (SSE2), or any other CPU */
	TITAN_CPU_ISA_AVX2 = 1,   /* x86-64-v3: AVX2, FMA */
	TITAN_CPU_ISA_AVX512 = 2, /* x86-64-v4: AVX-512 F, BW, DQ, VL */
};

/* The path the kernels run (read on every call; written only by
 * titan_cpu_isa_init/_set, outside parallel regions). */
extern enum titan_cpu_isa titan_cpu_isa;

/* The best level this CPU runs (TITAN_CPU_ISA_BASE off x86-64 or when the
 * build has one path). */
enum titan_cpu_isa titan_cpu_isa_best(void);

/* "baseline", "avx2", "avx512" */
const char *titan_cpu_isa_name(enum titan_cpu_isa isa);

/* Selects `isa`; TITAN_E_UNSUPPORTED (naming the CPU's best) when the CPU
 * or the build does not have it.  For tests and titan_cpu_isa_init. */
int titan_cpu_isa_set(enum titan_cpu_isa isa);

/* The best level, or the one the environment's TITAN_CPU_ISA names
 * (baseline|avx2|avx512; empty or unset: the best): TITAN_E_INVALID for
 * another word, TITAN_E_UNSUPPORTED for a level the CPU lacks. */
int titan_cpu_isa_init(void);

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TITAN_CPU_MULTI_ISA 1
#define TITAN_CPU_BODY __attribute__((always_inline))
/* `ret` is `return` for a kernel with a value, empty for a void one
 * (`return f();` of a void f is not ISO C) */
#define TITAN_CPU_VARIANTS_(type, ret, name, params, args) \
	static type name##_base params { ret name##_body args; } \
	__attribute__((target("arch=x86-64-v3"))) \
	static type name##_avx2 params { ret name##_body args; } \
	__attribute__((target("arch=x86-64-v4"))) \
	static type name##_avx512 params { ret name##_body args; } \
	static type name params \
	{ \
		if (titan_cpu_isa == TITAN_CPU_ISA_AVX512) { \
			ret name##_avx512 args; \
		} else if (titan_cpu_isa == TITAN_CPU_ISA_AVX2) { \
			ret name##_avx2 args; \
		} else { \
			ret name##_base args; \
		} \
	}
#else
#define TITAN_CPU_MULTI_ISA 0
#define TITAN_CPU_BODY
#define TITAN_CPU_VARIANTS_(type, ret, name, params, args) \
	static type name params { ret name##_body args; }
#endif
#define TITAN_CPU_DISPATCH(type, name, params, args) \
	TITAN_CPU_VARIANTS_(type, return, name, params, args)
#define TITAN_CPU_DISPATCH_VOID(name, params, args) \
	TITAN_CPU_VARIANTS_(void, , name, params, args)

/* exp(x) in float for vectorised loops (Cephes expf: Cody–Waite reduction,
 * degree-6 polynomial, 2^n from the exponent bits).  Checked against exp()
 * on every float in [−87.3, 88.3]: at most 0.99 ulp (glibc expf: 0.50);
 * exp(0) = 1 exactly; 0 below −87.3365 (no subnormals), +inf above
 * 88.3763, NaN stays NaN.  Range checks are integer bit blends: GCC will
 * not if-convert float selects under -ftrapping-math, and these keep the
 * loops vectorised on every ISA.  Plain IEEE operations only: scalar,
 * SSE2, AVX2 and AVX-512 code give the same bits (checked on all 2^32
 * inputs when it was written). */
static inline float titan_cpu_expf(float x)
{
	uint32_t ux;
	memcpy(&ux, &x, sizeof(ux));
	const uint32_t mag = ux & 0x7fffffffu, sign = ux & 0x80000000u;
	const uint32_t negm = 0u - (ux >> 31);
	/* |x| limit: 88.3762626647949f (0x42b0c0a5) for x > 0,
	 * 87.3365447505531f (0x42aeac50) for x < 0 */
	const uint32_t lim = 0x42b0c0a5u ^ ((0x42b0c0a5u ^ 0x42aeac50u) & negm);
	const uint32_t bigm = 0u - (uint32_t)(mag > lim);
	const uint32_t uc = (ux & ~bigm) | ((sign | lim) & bigm);
	float xc;
	memcpy(&xc, &uc, sizeof(xc));
	float n = xc * 1.44269504088896341f;
	n = (n + 12582912.0f) - 12582912.0f; /* round to nearest, |n| <= 127 */
	float r = xc - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	const float z = r * r;
	float y = 1.9875691500e-4f;
	y = y * r + 1.3981999507e-3f;
	y = y * r + 8.3334519073e-3f;
	y = y * r + 4.1665795894e-2f;
	y = y * r + 1.6666665459e-1f;
	y = y * r + 5.0000001201e-1f;
	y = y * z + r + 1.0f;
	const int32_t e = ((int32_t)n + 127) * (1 << 23);
	float sc;
	memcpy(&sc, &e, sizeof(sc));
	const float res = y * sc;
	uint32_t ur;
	memcpy(&ur, &res, sizeof(ur));
	/* out of range: +inf above, 0 below; NaN in, NaN out */
	const uint32_t nanm = 0u - (uint32_t)(mag > 0x7f800000u);
	ur = (ur & ~bigm) | ((0x7f800000u & ~negm) & bigm);
	ur = (ur & ~nanm) | (ux & nanm);
	float out;
	memcpy(&out, &ur, sizeof(out));
	return out;
}

/* Σ x[0..n) with element j added to lane j % 8 and the lanes combined
 * pairwise: a fixed order that vectorises (float and double lanes). */
static inline float titan_cpu_sum8f(const float *x, int64_t n)
{
	float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int64_t j = 0;
	for (; j + 8 <= n; j += 8)
		for (int u = 0; u < 8; u++)
			a[u] += x[j + u];
	for (int u = 0; j < n; j++, u++)
		a[u] += x[j];
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static inline double titan_cpu_sum8d(const float *x, int64_t n)
{
	double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int64_t j = 0;
	for (; j + 8 <= n; j += 8)
		for (int u = 0; u < 8; u++)
			a[u] += (double)x[j + u];
	for (int u = 0; j < n; j++, u++)
		a[u] += (double)x[j];
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Σ x[j]·y[j] in double (products exact in double), lanes as above. */
static inline double titan_cpu_dot8d(const float *x, const float *y, int64_t n)
{
	double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int64_t j = 0;
	for (; j + 8 <= n; j += 8)
		for (int u = 0; u < 8; u++)
			a[u] += (double)x[j + u] * (double)y[j + u];
	for (int u = 0; j < n; j++, u++)
		a[u] += (double)x[j] * (double)y[j];
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Threads for an OpenMP region of `work` independent items: at most
 * be->nthreads, at least 1, and 1 for tiny jobs (the split never changes
 * results, only speed). */
int titan_cpu_threads(const struct titan_backend *be, int64_t work);

/* Workspace from be->alloc (TITAN_MEM_WORKSPACE); NULL + TITAN_E_NOMEM. */
void *titan_cpu_workspace(struct titan_backend *be, size_t bytes);
void titan_cpu_workspace_free(struct titan_backend *be, void *p);

/* Products and sums for the workspace sizes (titan/ops.h): -1 when an
 * operand is -1 or the result does not fit in 64 bits. */
static inline int64_t titan_cpu_ws_mul(int64_t a, int64_t b)
{
	int64_t r;

	return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

static inline int64_t titan_cpu_ws_add(int64_t a, int64_t b)
{
	int64_t r;

	return a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) ? -1 : r;
}

/* Row-major C[m,n] = alpha·op(A)·op(B) + beta·C (beta 0: C not read), op =
 * transpose when ta/tb.  OpenBLAS cblas_sgemm when built with it, one
 * thread per tile of C (tiles fixed by the shape, so results do not depend
 * on the thread count; call it outside OpenMP regions), else a plain OpenMP
 * loop.  Dimensions must
 * fit BLAS's int: TITAN_E_INVALID otherwise. */
int titan_cpu_sgemm(struct titan_backend *be, bool ta, bool tb, int64_t m,
		    int64_t n, int64_t k, float alpha, const float *a,
		    int64_t lda, const float *b, int64_t ldb, float beta,
		    float *c, int64_t ldc);

/* matmul.c */
int titan_cpu_matmul_fwd(struct titan_backend *be, float *y, const float *x,
			 const float *w, int64_t n, int64_t in, int64_t out,
			 bool accumulate);
int titan_cpu_matmul_bwd(struct titan_backend *be, float *dx, float *dw,
			 const float *dy, const float *x, const float *w,
			 int64_t n, int64_t in, int64_t out, bool accumulate_dx);

/* elementwise.c */
int titan_cpu_embedding_fwd(struct titan_backend *be, float *out,
			    const uint32_t *ids, const float *table, int64_t n,
			    int64_t v, int64_t c);
int titan_cpu_embedding_bwd(struct titan_backend *be, float *dtable,
			    const uint32_t *ids, const float *dout, int64_t n,
			    int64_t v, int64_t c);
int titan_cpu_swiglu_fwd(struct titan_backend *be, float *h, const float *a,
			 const float *b, int64_t n);
int titan_cpu_swiglu_bwd(struct titan_backend *be, float *da, float *db,
			 const float *dh, const float *a, const float *b,
			 int64_t n);
int titan_cpu_scale(struct titan_backend *be, float *x, int64_t n, float alpha);
int titan_cpu_add(struct titan_backend *be, float *y, const float *a,
		  const float *b, int64_t n);
int titan_cpu_copy(struct titan_backend *be, float *dst, const float *src,
		   int64_t n);
int titan_cpu_zero(struct titan_backend *be, float *x, int64_t n);

/* norm.c */
int titan_cpu_rmsnorm_fwd(struct titan_backend *be, float *y, float *rstd,
			  const float *x, const float *w, int64_t n, int64_t c,
			  float eps);
int titan_cpu_rmsnorm_bwd(struct titan_backend *be, float *dx, float *dw,
			  const float *dy, const float *x, const float *w,
			  const float *rstd, int64_t n, int64_t c,
			  bool accumulate_dx);

/* rope.c */
int titan_cpu_rope_fwd(struct titan_backend *be, float *x, const float *freqs,
		       int64_t batch, int64_t seq, int64_t nh, int64_t head_dim);
int titan_cpu_rope_bwd(struct titan_backend *be, float *dx, const float *freqs,
		       int64_t batch, int64_t seq, int64_t nh, int64_t head_dim);

/* attention.c */
int titan_cpu_attention_fwd(struct titan_backend *be, float *out, float *lse,
			    const float *q, const float *k, const float *v,
			    const struct titan_attn_dims *d);
int titan_cpu_attention_bwd(struct titan_backend *be, float *dq, float *dk,
			    float *dv, const float *dout, const float *q,
			    const float *k, const float *v, const float *out,
			    const float *lse, const struct titan_attn_dims *d);
int titan_cpu_attention_part_fwd(struct titan_backend *be, float *out, float *lse,
				 const float *q, const float *k, const float *v,
				 const struct titan_attn_part *p, bool merge);
int titan_cpu_attention_part_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
				 const float *dout, const float *q, const float *k,
				 const float *v, const float *out, const float *lse,
				 const struct titan_attn_part *p, bool accumulate);

/* loss.c */
int titan_cpu_classifier_ce(struct titan_backend *be, double *loss_sum,
			    int64_t *n_valid, float *dh, float *dw,
			    const float *h, const float *w,
			    const int32_t *labels, int64_t n, int64_t c,
			    int64_t v, float grad_scale, int64_t chunk);

/* optim.c */
int titan_cpu_adamw_step(struct titan_backend *be, float *p, float *m,
			 float *v, const float *g, int64_t n,
			 const struct titan_adamw_hparams *hp, int64_t step,
			 float grad_mul);
int titan_cpu_sumsq(struct titan_backend *be, double *out, const float *x,
		    int64_t n);

/* vocab.c: the vocabulary-parallel pieces (titan/ops.h) */
int titan_cpu_embedding_part_fwd(struct titan_backend *be, float *out, const uint32_t *ids,
				 const float *w, int64_t n, int64_t v0, int64_t V, int64_t C);
int titan_cpu_embedding_part_bwd(struct titan_backend *be, float *dw, const uint32_t *ids,
				 const float *dx, int64_t n, int64_t v0, int64_t V, int64_t C);
int titan_cpu_ce_part_max(struct titan_backend *be, float *mx, const float *z, int64_t rows,
			  int64_t V);
int titan_cpu_ce_part_exp(struct titan_backend *be, double *st, float *z, const float *mx,
			  const int32_t *labels, int64_t v0, int64_t rows, int64_t V);
int titan_cpu_ce_part_grad(struct titan_backend *be, double *st, float *z, const float *mx,
			   const int32_t *labels, int64_t v0, int64_t rows, int64_t V, float gs,
			   bool grads);

#endif
