/*
 * ops.c — op-level trace events (titan/trace.h titan_trace_ops_install):
 * a backend table whose every entry times the wrapped backend's op and
 * writes a complete event.  Installed by the trainer only while a step is
 * traced, so an untraced step calls the backend's own table directly.
 */
#include "titan/trace.h"

#include <pthread.h>
#include <string.h>

#include "titan/ops.h"

#define MAX_ARGS 8

static struct {
	struct titan_backend *be;           /* the backend wrapped, NULL when none */
	const struct titan_backend_ops *inner;
	struct titan_backend_ops table;     /* be->ops while installed */
	struct titan_trace *trace;
	int64_t step;
	bool launch;
	pthread_t thread;                   /* the one whose spans are open */
} g;

static void record(const char *name, uint64_t t0, const struct titan_trace_arg *a, int n)
{
	struct titan_trace_arg all[MAX_ARGS + 1];
	uint64_t t1 = titan_time_ns();

	/* another thread's op does not nest under this thread's spans, and
	 * the trace writer is not thread-safe */
	if (!g.trace || !pthread_equal(pthread_self(), g.thread))
		return;
	TITAN_ASSERT(n <= MAX_ARGS);
	memcpy(all, a, (size_t)n * sizeof(*a));
	if (g.launch)
		all[n++] = (struct titan_trace_arg){"launch", 1};
	titan_trace_complete_args(g.trace, name, "op", 0, t0, t1, g.step, all, n);
}

/* A wrapper of an op returning int; the args are evaluated before the call. */
#define OP(field, params, call, ...)                                         \
	static int w_##field params                                          \
	{                                                                    \
		const struct titan_trace_arg a[] = {__VA_ARGS__};            \
		uint64_t t0 = titan_time_ns();                               \
		int rc = g.inner->field call;                                \
                                                                             \
		record(#field, t0, a, (int)(sizeof(a) / sizeof(a[0])));     \
		return rc;                                                   \
	}

OP(matmul_fwd,
   (struct titan_backend *be, float *y, const float *x, const float *w, int64_t n, int64_t in,
    int64_t out, bool acc), (be, y, x, w, n, in, out, acc),
   {"m", n}, {"n", out}, {"k", in})
OP(matmul_bwd,
   (struct titan_backend *be, float *dx, float *dw, const float *dy, const float *x,
    const float *w, int64_t n, int64_t in, int64_t out, bool acc),
   (be, dx, dw, dy, x, w, n, in, out, acc),
   {"m", n}, {"n", out}, {"k", in}, {"dx", dx != NULL}, {"dw", dw != NULL})
OP(embedding_fwd,
   (struct titan_backend *be, float *out, const uint32_t *ids, const float *t, int64_t n,
    int64_t v, int64_t c), (be, out, ids, t, n, v, c),
   {"n", n}, {"v", v}, {"c", c})
OP(embedding_bwd,
   (struct titan_backend *be, float *dt, const uint32_t *ids, const float *d, int64_t n,
    int64_t v, int64_t c), (be, dt, ids, d, n, v, c),
   {"n", n}, {"v", v}, {"c", c})
OP(rmsnorm_fwd,
   (struct titan_backend *be, float *y, float *r, const float *x, const float *w, int64_t n,
    int64_t c, float eps), (be, y, r, x, w, n, c, eps),
   {"n", n}, {"c", c})
OP(rmsnorm_bwd,
   (struct titan_backend *be, float *dx, float *dw, const float *dy, const float *x,
    const float *w, const float *r, int64_t n, int64_t c, bool acc),
   (be, dx, dw, dy, x, w, r, n, c, acc),
   {"n", n}, {"c", c})
OP(rope_fwd,
   (struct titan_backend *be, float *x, const float *f, int64_t b, int64_t s, int64_t nh,
    int64_t d), (be, x, f, b, s, nh, d),
   {"batch", b}, {"seq", s}, {"heads", nh}, {"head_dim", d})
OP(rope_bwd,
   (struct titan_backend *be, float *x, const float *f, int64_t b, int64_t s, int64_t nh,
    int64_t d), (be, x, f, b, s, nh, d),
   {"batch", b}, {"seq", s}, {"heads", nh}, {"head_dim", d})
OP(swiglu_fwd,
   (struct titan_backend *be, float *h, const float *a_, const float *b, int64_t n),
   (be, h, a_, b, n), {"n", n})
OP(swiglu_bwd,
   (struct titan_backend *be, float *da, float *db, const float *dh, const float *a_,
    const float *b, int64_t n), (be, da, db, dh, a_, b, n), {"n", n})
OP(attention_fwd,
   (struct titan_backend *be, float *o, float *lse, const float *q, const float *k,
    const float *v, const struct titan_attn_dims *d), (be, o, lse, q, k, v, d),
   {"batch", d->batch}, {"seq", d->seq}, {"heads", d->n_heads}, {"kv_heads", d->n_kv_heads},
   {"head_dim", d->head_dim})
OP(attention_bwd,
   (struct titan_backend *be, float *dq, float *dk, float *dv, const float *dout,
    const float *q, const float *k, const float *v, const float *o, const float *lse,
    const struct titan_attn_dims *d), (be, dq, dk, dv, dout, q, k, v, o, lse, d),
   {"batch", d->batch}, {"seq", d->seq}, {"heads", d->n_heads}, {"kv_heads", d->n_kv_heads},
   {"head_dim", d->head_dim})
OP(attention_part_fwd,
   (struct titan_backend *be, float *o, float *lse, const float *q, const float *k,
    const float *v, const struct titan_attn_part *p, bool merge),
   (be, o, lse, q, k, v, p, merge),
   {"batch", p->batch}, {"tq", p->tq}, {"tk", p->tk}, {"heads", p->n_heads},
   {"kv_heads", p->n_kv_heads}, {"head_dim", p->head_dim}, {"diag", p->diag})
OP(attention_part_bwd,
   (struct titan_backend *be, float *dq, float *dk, float *dv, const float *dout,
    const float *q, const float *k, const float *v, const float *o, const float *lse,
    const struct titan_attn_part *p, bool acc), (be, dq, dk, dv, dout, q, k, v, o, lse, p, acc),
   {"batch", p->batch}, {"tq", p->tq}, {"tk", p->tk}, {"heads", p->n_heads},
   {"kv_heads", p->n_kv_heads}, {"head_dim", p->head_dim}, {"diag", p->diag})
OP(classifier_ce,
   (struct titan_backend *be, double *ls, int64_t *nv, float *dh, float *dw, const float *h,
    const float *w, const int32_t *lab, int64_t n, int64_t c, int64_t v, float gs,
    int64_t chunk), (be, ls, nv, dh, dw, h, w, lab, n, c, v, gs, chunk),
   {"n", n}, {"c", c}, {"v", v}, {"chunk", chunk}, {"grads", dh != NULL})
OP(adamw_step,
   (struct titan_backend *be, float *p, float *m, float *v, const float *gr, int64_t n,
    const struct titan_adamw_hparams *hp, int64_t step, float gm),
   (be, p, m, v, gr, n, hp, step, gm), {"n", n})
OP(sumsq, (struct titan_backend *be, double *o, const float *x, int64_t n), (be, o, x, n),
   {"n", n})
OP(sumsq_multi,
   (struct titan_backend *be, double *o, const float *b, const struct titan_tensor_span *sp,
    int n), (be, o, b, sp, n), {"tensors", n})
OP(adamw_multi,
   (struct titan_backend *be, float *p, float *m, float *v, const float *gr,
    const struct titan_tensor_span *sp, int n, const struct titan_adamw_hparams *hp,
    int64_t step, float gm), (be, p, m, v, gr, sp, n, hp, step, gm), {"tensors", n})
OP(scale, (struct titan_backend *be, float *x, int64_t n, float al), (be, x, n, al), {"n", n})
OP(add, (struct titan_backend *be, float *y, const float *a_, const float *b, int64_t n),
   (be, y, a_, b, n), {"n", n})
OP(copy, (struct titan_backend *be, float *d, const float *s, int64_t n), (be, d, s, n),
   {"n", n})
OP(zero, (struct titan_backend *be, float *x, int64_t n), (be, x, n), {"n", n})
OP(buf_set, (struct titan_backend *be, void *d, const void *h, size_t bytes),
   (be, d, h, bytes), {"bytes", (int64_t)bytes})
OP(buf_get, (struct titan_backend *be, void *h, const void *s, size_t bytes),
   (be, h, s, bytes), {"bytes", (int64_t)bytes})
OP(buf_copy, (struct titan_backend *be, void *d, const void *s, size_t bytes),
   (be, d, s, bytes), {"bytes", (int64_t)bytes})
OP(buf_copy_rows,
   (struct titan_backend *be, float *d, int64_t doff, int64_t dst, const float *s, int64_t soff,
    int64_t sst, int64_t rows, int64_t width), (be, d, doff, dst, s, soff, sst, rows, width),
   {"rows", rows}, {"width", width})
OP(buf_memset, (struct titan_backend *be, void *d, int value, size_t bytes),
   (be, d, value, bytes), {"bytes", (int64_t)bytes})
OP(embedding_part_fwd,
   (struct titan_backend *be, float *out, const uint32_t *ids, const float *w, int64_t n,
    int64_t v0, int64_t V, int64_t C), (be, out, ids, w, n, v0, V, C),
   {"n", n}, {"v0", v0}, {"v", V}, {"c", C})
OP(embedding_part_bwd,
   (struct titan_backend *be, float *dw, const uint32_t *ids, const float *dx, int64_t n,
    int64_t v0, int64_t V, int64_t C), (be, dw, ids, dx, n, v0, V, C),
   {"n", n}, {"v0", v0}, {"v", V}, {"c", C})
OP(ce_part_max,
   (struct titan_backend *be, float *mx, const float *z, int64_t rows, int64_t V),
   (be, mx, z, rows, V), {"rows", rows}, {"v", V})
OP(ce_part_exp,
   (struct titan_backend *be, double *st, float *z, const float *mx, const int32_t *lab,
    int64_t v0, int64_t rows, int64_t V), (be, st, z, mx, lab, v0, rows, V),
   {"rows", rows}, {"v0", v0}, {"v", V})
OP(ce_part_grad,
   (struct titan_backend *be, double *st, float *z, const float *mx, const int32_t *lab,
    int64_t v0, int64_t rows, int64_t V, float gs, bool grads),
   (be, st, z, mx, lab, v0, rows, V, gs, grads),
   {"rows", rows}, {"v0", v0}, {"v", V}, {"grads", grads})

static void *w_buf_alloc(struct titan_backend *be, size_t bytes, enum titan_mem_tag tag)
{
	const struct titan_trace_arg a[] = {{"bytes", (int64_t)bytes}, {"tag", tag}};
	uint64_t t0 = titan_time_ns();
	void *p = g.inner->buf_alloc(be, bytes, tag);

	record("buf_alloc", t0, a, 2);
	return p;
}

static void w_buf_free(struct titan_backend *be, void *buf)
{
	uint64_t t0 = titan_time_ns();

	g.inner->buf_free(be, buf);
	record("buf_free", t0, NULL, 0);
}

int titan_trace_ops_install(struct titan_backend *be, struct titan_trace *t, int64_t step,
			    bool launch)
{
	const struct titan_backend_ops *in = be->ops;
	struct titan_backend_ops *w = &g.table;

	if (g.be)
		return titan_error(TITAN_E_INVALID, "op tracing is already installed on a backend");
	*w = *in; /* name, release and any NULL entry stay the backend's */
#define SET(f) if (in->f) w->f = w_##f
	SET(matmul_fwd); SET(matmul_bwd); SET(embedding_fwd); SET(embedding_bwd);
	SET(rmsnorm_fwd); SET(rmsnorm_bwd); SET(rope_fwd); SET(rope_bwd);
	SET(swiglu_fwd); SET(swiglu_bwd); SET(attention_fwd); SET(attention_bwd);
	SET(attention_part_fwd); SET(attention_part_bwd); SET(classifier_ce);
	SET(adamw_step); SET(sumsq); SET(sumsq_multi); SET(adamw_multi); SET(scale); SET(add); SET(copy); SET(zero);
	SET(buf_alloc); SET(buf_free); SET(buf_set); SET(buf_get); SET(buf_copy);
	SET(buf_copy_rows); SET(buf_memset); SET(embedding_part_fwd); SET(embedding_part_bwd);
	SET(ce_part_max); SET(ce_part_exp); SET(ce_part_grad);
#undef SET
	g.be = be;
	g.inner = in;
	g.trace = t;
	g.step = step;
	g.launch = launch;
	g.thread = pthread_self();
	be->ops = w;
	return 0;
}

void titan_trace_ops_remove(struct titan_backend *be)
{
	if (!be || be != g.be)
		return;
	be->ops = g.inner;
	g.be = NULL;
	g.inner = NULL;
	g.trace = NULL;
}
