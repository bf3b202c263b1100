/*
 * profile.cu — per-op GPU time of the CUDA backend (TITAN_CUDA_PROFILE=1):
 * every op of the table is bracketed by two CUDA events on the backend's
 * stream; elapsed times are summed per op (resolved in batches, so the
 * events cost no synchronisation inside a step) and printed to stderr as a
 * table when the backend is released.  The GPU time of an op includes the
 * gaps its launches leave; the sum over ops against the wall-clock time of
 * a run shows the host-side overhead.  What runs before the end of the first
 * optimizer step (adamw_multi) is the warm-up and is not counted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_impl.h"

enum {
	P_MATMUL_FWD, P_MATMUL_BWD, P_EMB_FWD, P_EMB_BWD, P_RMS_FWD, P_RMS_BWD, P_ROPE_FWD,
	P_ROPE_BWD, P_SWIGLU_FWD, P_SWIGLU_BWD, P_ATT_FWD, P_ATT_BWD, P_ATT_PART_FWD,
	P_ATT_PART_BWD, P_CE, P_ADAMW, P_SUMSQ, P_SCALE, P_ADD, P_COPY, P_ZERO, P_SUMSQ_MULTI,
	P_ADAMW_MULTI, P_NOPS
};

static const char *const names[P_NOPS] = {
	"matmul_fwd", "matmul_bwd", "embedding_fwd", "embedding_bwd", "rmsnorm_fwd",
	"rmsnorm_bwd", "rope_fwd", "rope_bwd", "swiglu_fwd", "swiglu_bwd", "attention_fwd",
	"attention_bwd", "attention_part_fwd", "attention_part_bwd", "classifier_ce",
	"adamw_step", "sumsq", "scale", "add", "copy", "zero", "sumsq_multi", "adamw_multi",
};

#define PENDING 512

struct prof {
	const struct titan_backend_ops *inner;
	cudaEvent_t ev[PENDING][2];
	int op[PENDING];
	int npend;
	double ms[P_NOPS];
	int64_t calls[P_NOPS];
	bool warm; /* the first optimizer step is over: counting */
};

static struct prof *prof_of(struct titan_backend *be);

static void resolve(struct prof *p)
{
	for (int i = 0; i < p->npend; i++) {
		float ms = 0;

		cudaEventSynchronize(p->ev[i][1]);
		if (cudaEventElapsedTime(&ms, p->ev[i][0], p->ev[i][1]) == cudaSuccess)
			p->ms[p->op[i]] += ms;
		p->calls[p->op[i]]++;
	}
	p->npend = 0;
}

static void begin(struct titan_backend *be, struct prof *p)
{
	if (p->npend == PENDING)
		resolve(p);
	cudaEventRecord(p->ev[p->npend][0], cuda_of(be)->stream);
}

static int end(struct titan_backend *be, struct prof *p, int op, int rc)
{
	cudaEventRecord(p->ev[p->npend][1], cuda_of(be)->stream);
	p->op[p->npend++] = op;
	return rc;
}

#define WRAP(field, id, params, args)                                        \
	static int prof_##field params                                       \
	{                                                                    \
		struct prof *p = prof_of(be);                                \
		begin(be, p);                                                \
		return end(be, p, id, p->inner->field args);                 \
	}

WRAP(matmul_fwd, P_MATMUL_FWD,
     (struct titan_backend *be, float *y, const float *x, const float *w, int64_t n, int64_t in,
      int64_t out, bool acc), (be, y, x, w, n, in, out, acc))
WRAP(matmul_bwd, P_MATMUL_BWD,
     (struct titan_backend *be, float *dx, float *dw, const float *dy, const float *x,
      const float *w, int64_t n, int64_t in, int64_t out, bool acc),
     (be, dx, dw, dy, x, w, n, in, out, acc))
WRAP(embedding_fwd, P_EMB_FWD,
     (struct titan_backend *be, float *out, const uint32_t *ids, const float *t, int64_t n,
      int64_t v, int64_t c), (be, out, ids, t, n, v, c))
WRAP(embedding_bwd, P_EMB_BWD,
     (struct titan_backend *be, float *dt, const uint32_t *ids, const float *d, int64_t n,
      int64_t v, int64_t c), (be, dt, ids, d, n, v, c))
WRAP(rmsnorm_fwd, P_RMS_FWD,
     (struct titan_backend *be, float *y, float *r, const float *x, const float *w, int64_t n,
      int64_t c, float eps), (be, y, r, x, w, n, c, eps))
WRAP(rmsnorm_bwd, P_RMS_BWD,
     (struct titan_backend *be, float *dx, float *dw, const float *dy, const float *x,
      const float *w, const float *r, int64_t n, int64_t c, bool acc),
     (be, dx, dw, dy, x, w, r, n, c, acc))
WRAP(rope_fwd, P_ROPE_FWD,
     (struct titan_backend *be, float *x, const float *f, int64_t b, int64_t s, int64_t nh,
      int64_t d), (be, x, f, b, s, nh, d))
WRAP(rope_bwd, P_ROPE_BWD,
     (struct titan_backend *be, float *x, const float *f, int64_t b, int64_t s, int64_t nh,
      int64_t d), (be, x, f, b, s, nh, d))
WRAP(swiglu_fwd, P_SWIGLU_FWD,
     (struct titan_backend *be, float *h, const float *a, const float *b, int64_t n),
     (be, h, a, b, n))
WRAP(swiglu_bwd, P_SWIGLU_BWD,
     (struct titan_backend *be, float *da, float *db, const float *dh, const float *a,
      const float *b, int64_t n), (be, da, db, dh, a, b, n))
WRAP(attention_fwd, P_ATT_FWD,
     (struct titan_backend *be, float *o, float *lse, const float *q, const float *k,
      const float *v, const struct titan_attn_dims *d), (be, o, lse, q, k, v, d))
WRAP(attention_bwd, P_ATT_BWD,
     (struct titan_backend *be, float *dq, float *dk, float *dv, const float *dout,
      const float *q, const float *k, const float *v, const float *o, const float *lse,
      const struct titan_attn_dims *d), (be, dq, dk, dv, dout, q, k, v, o, lse, d))
WRAP(attention_part_fwd, P_ATT_PART_FWD,
     (struct titan_backend *be, float *o, float *lse, const float *q, const float *k,
      const float *v, const struct titan_attn_part *pa, bool merge),
     (be, o, lse, q, k, v, pa, merge))
WRAP(attention_part_bwd, P_ATT_PART_BWD,
     (struct titan_backend *be, float *dq, float *dk, float *dv, const float *dout,
      const float *q, const float *k, const float *v, const float *o, const float *lse,
      const struct titan_attn_part *pa, bool acc),
     (be, dq, dk, dv, dout, q, k, v, o, lse, pa, acc))
WRAP(classifier_ce, P_CE,
     (struct titan_backend *be, double *ls, int64_t *nv, float *dh, float *dw, const float *h,
      const float *w, const int32_t *lab, int64_t n, int64_t c, int64_t v, float gs,
      int64_t chunk), (be, ls, nv, dh, dw, h, w, lab, n, c, v, gs, chunk))
WRAP(adamw_step, P_ADAMW,
     (struct titan_backend *be, float *p_, float *m, float *v, const float *g, int64_t n,
      const struct titan_adamw_hparams *hp, int64_t step, float gm),
     (be, p_, m, v, g, n, hp, step, gm))
WRAP(sumsq, P_SUMSQ, (struct titan_backend *be, double *o, const float *x, int64_t n),
     (be, o, x, n))
WRAP(scale, P_SCALE, (struct titan_backend *be, float *x, int64_t n, float a), (be, x, n, a))
WRAP(add, P_ADD, (struct titan_backend *be, float *y, const float *a, const float *b, int64_t n),
     (be, y, a, b, n))
WRAP(copy, P_COPY, (struct titan_backend *be, float *d, const float *s, int64_t n),
     (be, d, s, n))
WRAP(zero, P_ZERO, (struct titan_backend *be, float *x, int64_t n), (be, x, n))
WRAP(sumsq_multi, P_SUMSQ_MULTI,
     (struct titan_backend *be, double *o, const float *b, const struct titan_tensor_span *s,
      int n), (be, o, b, s, n))

/* The first optimizer step ends the warm-up: what ran before it (cuBLAS's
 * algorithm selection, cuDNN's plan builds, first-touch allocations, all
 * host time that the events count as GPU time) is dropped from the table. */
static int prof_adamw_multi(struct titan_backend *be, float *p_, float *m, float *v,
			    const float *g, const struct titan_tensor_span *s, int n,
			    const struct titan_adamw_hparams *hp, int64_t step, float gm)
{
	struct prof *p = prof_of(be);
	int rc;

	begin(be, p);
	rc = end(be, p, P_ADAMW_MULTI, p->inner->adamw_multi(be, p_, m, v, g, s, n, hp, step, gm));
	if (!p->warm) {
		resolve(p);
		memset(p->ms, 0, sizeof(p->ms));
		memset(p->calls, 0, sizeof(p->calls));
		p->warm = true;
	}
	return rc;
}

static struct prof *g_prof; /* one profiled backend per process */

static struct prof *prof_of(struct titan_backend *be)
{
	(void)be;
	return g_prof;
}

static void prof_release(struct titan_backend *be)
{
	struct prof *p = g_prof;
	double total = 0;

	if (p) {
		resolve(p);
		for (int i = 0; i < P_NOPS; i++)
			total += p->ms[i];
		fprintf(stderr, "[titan] CUDA op profile (TITAN_CUDA_PROFILE=1): GPU time per op, "
			"%.1f ms in all%s\n%-18s %10s %12s %7s %10s\n", total,
			p->warm ? " after the first optimizer step (warm-up not counted)" : "",
			"op", "calls", "ms",
			"share", "us/call");
		for (int i = 0; i < P_NOPS; i++)
			if (p->calls[i])
				fprintf(stderr, "%-18s %10lld %12.1f %6.1f%% %10.1f\n", names[i],
					(long long)p->calls[i], p->ms[i],
					total > 0 ? 100.0 * p->ms[i] / total : 0.0,
					1000.0 * p->ms[i] / (double)p->calls[i]);
		for (int i = 0; i < PENDING; i++) {
			cudaEventDestroy(p->ev[i][0]);
			cudaEventDestroy(p->ev[i][1]);
		}
		p->inner->release(be);
		free(p);
		g_prof = NULL;
	}
}

static const struct titan_backend_ops prof_ops = {
	.name = "cuda",
	.release = prof_release,
	.matmul_fwd = prof_matmul_fwd,
	.matmul_bwd = prof_matmul_bwd,
	.embedding_fwd = prof_embedding_fwd,
	.embedding_bwd = prof_embedding_bwd,
	.rmsnorm_fwd = prof_rmsnorm_fwd,
	.rmsnorm_bwd = prof_rmsnorm_bwd,
	.rope_fwd = prof_rope_fwd,
	.rope_bwd = prof_rope_bwd,
	.swiglu_fwd = prof_swiglu_fwd,
	.swiglu_bwd = prof_swiglu_bwd,
	.attention_fwd = prof_attention_fwd,
	.attention_bwd = prof_attention_bwd,
	.attention_part_fwd = prof_attention_part_fwd,
	.attention_part_bwd = prof_attention_part_bwd,
	.classifier_ce = prof_classifier_ce,
	.adamw_step = prof_adamw_step,
	.sumsq = prof_sumsq,
	.scale = prof_scale,
	.add = prof_add,
	.copy = prof_copy,
	.zero = prof_zero,
	.sumsq_multi = prof_sumsq_multi,
	.adamw_multi = prof_adamw_multi,
	/* buffer ops are transfers, not ops: not timed */
	CUDA_BUF_OPS,
	CUDA_VOCAB_OPS, /* not timed either (TP only) */
};

/* Wraps be's table when TITAN_CUDA_PROFILE is set (once per process). */
void cuda_profile_wrap(struct titan_backend *be)
{
	const char *e = getenv("TITAN_CUDA_PROFILE");
	struct prof *p;

	if (!e || !*e || !strcmp(e, "0") || g_prof || !(p = (struct prof *)calloc(1, sizeof(*p))))
		return;
	for (int i = 0; i < PENDING; i++)
		if (cudaEventCreate(&p->ev[i][0]) != cudaSuccess ||
		    cudaEventCreate(&p->ev[i][1]) != cudaSuccess) {
			free(p); /* (leaks the events made so far: profiling is off) */
			return;
		}
	p->inner = be->ops;
	g_prof = p;
	be->ops = &prof_ops;
}
