/*
 * cpu.c — the memory of titan-train's CPU path, to the byte: what
 * tools/train/titan-train.c, lib/train/llama.c (titan_llama_new) and the
 * CPU ops of lib/cpu allocate through the host tagged allocator, under the
 * same tags, at the same moments of a step.  The sizes come from the same
 * macros the ops use (TITAN_ATTN_BLOCK, TITAN_SUMSQ_CHUNK in titan/ops.h,
 * TITAN_CE_CHUNK in titan/train.h); the buffer list mirrors the code, and
 * tests/bats/titan-estimate.bats runs titan-train and compares, so a change
 * there that is not mirrored here fails `make test`.
 */
#include "est_impl.h"
#include "titan/ops.h"
#include "titan/train.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_N 1024           /* titan-train.c measure_peak: 3 n x n fp32 matrices */

int est_cpu_model(const struct titan_model_dims *d, const struct titan_est_opts *o,
		  struct titan_estimate *e)
{
	struct titan_param_table t;
	struct titan_est_rank *r;
	struct est_num n = {false};
	const int64_t B = o->local_batch, S = o->seq_len, L = d->n_layers, C = d->dim;
	const int64_t H = d->n_heads, Hkv = d->n_kv_heads, D = d->head_dim, F = d->ffn_hidden;
	const int64_t V = d->vocab_size, q = H * D, kv = Hkv * D, bq = TITAN_ATTN_BLOCK;
	int64_t N, threads, kept = 0, nckpt = 0, set, arena, chunk, sumsq = 0, x;
	int m_start = -1, m_fwd, m_loss, m_rec = -1, m_bwd, m_norm, m_opt, m_log = -1;
	uint32_t all, rc_at;
	int rc;

	if ((rc = titan_param_table_init(&t, d, NULL)) < 0)
		return rc;
	if (!(e->ranks = calloc(1, sizeof(*e->ranks)))) {
		titan_param_table_release(&t);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	e->nranks = 1;
	e->stages_per_rank = e->nstages = e->pp_microbatches = 1;
	r = &e->ranks[0];
	r->nstages = 1;
	r->layers = L;
	r->first = r->last = true;
	r->params_local = t.numel;
	r->params_shard = t.local_numel;
	arena = est_mul(&n, t.arena_floats, 4);
	for (int i = 0; i < t.n; i++) {
		int64_t parts = (t.params[i].local_numel + TITAN_SUMSQ_CHUNK - 1) / TITAN_SUMSQ_CHUNK;

		if (parts > sumsq)
			sumsq = parts;
	}
	titan_param_table_release(&t);
	threads = o->threads > 0 ? o->threads : omp_get_max_threads();
	if (threads < 1)
		threads = 1;
	N = est_mul(&n, B, S);
	e->tokens_per_step = est_mul(&n, N, o->accum);
	for (int64_t b = 0; b < L; b++) {
		if (est_block_ckpt(o, b))
			nckpt++;
		else
			kept++;
	}

	/* moments in the order a step meets them */
	if (o->cpu_peak_probe)
		m_start = est_moment(r, TITAN_EST_PHASE_STARTUP, "startup", "sgemm peak probe (setup)");
	m_fwd = est_moment(r, TITAN_EST_PHASE_FORWARD, "forward", "attention forward");
	m_loss = est_moment(r, TITAN_EST_PHASE_LOSS, "loss", "classifier + cross-entropy");
	if (nckpt && est_block_ckpt(o, L - 1))
		m_rec = est_moment(r, TITAN_EST_PHASE_BACKWARD, "recompute",
				   "recompute: attention forward");
	m_bwd = est_moment(r, TITAN_EST_PHASE_BACKWARD, "backward", "attention backward");
	if (nckpt && m_rec < 0)
		m_rec = est_moment(r, TITAN_EST_PHASE_BACKWARD, "recompute",
				   "recompute: attention forward");
	m_norm = est_moment(r, TITAN_EST_PHASE_BACKWARD, "gradnorm", "gradient norm");
	m_opt = est_moment(r, TITAN_EST_PHASE_OPTIMIZER, "optim", "AdamW step");
	(void)m_opt;
	if (o->cpu_metrics_jsonl)
		m_log = est_moment(r, TITAN_EST_PHASE_OPTIMIZER, "log", "metrics.jsonl row");
	/* titan-train runs the probe before it builds the model: only the
	 * probe is live at start-up */
	all = EST_ALL & ~(m_start >= 0 ? EST_AT(m_start) : 0u);

	/* titan_llama_new: arenas of lib/model (params, grads, 2 moments) */
	est_item(r, "weights (fp32 arena)", TITAN_MEM_PARAMS, arena, all);
	est_item(r, "gradients (fp32 arena)", TITAN_MEM_GRADS, arena, all);
	est_item(r, "AdamW exp_avg + exp_avg_sq (2 arenas)", TITAN_MEM_OPTIM,
		 est_mul(&n, arena, 2), all);
	est_item(r, "RoPE table", TITAN_MEM_OTHER, est_mul(&n, est_mul(&n, S, D), 4), all);
	est_item(r, "block inputs (n_layers + 1)", TITAN_MEM_ACTIVATIONS,
		 est_mul(&n, est_mul(&n, est_mul(&n, L + 1, N), C), 4), all);
	/* struct acts: xn1 rstd1 q k v att lse h xn2 rstd2 a b g */
	set = est_add(&n, est_mul(&n, N, 3 * C + 2 * q + 2 * kv + H + 3 * F), est_mul(&n, N, 2));
	set = est_mul(&n, set, 4);
	if (o->ac == TITAN_EST_AC_OP) {
		/* selective 'op': each block keeps q v att lse a; one shared set
		 * of what backward recomputes: xn1 rstd1 k h xn2 rstd2 b g */
		char what[80];
		int64_t keep = est_mul(&n, est_mul(&n, N, 2 * q + kv + H + F), 4);

		snprintf(what, sizeof(what), "per-op saved tensors of %lld block(s)", (long long)L);
		est_item(r, what, TITAN_MEM_ACTIVATIONS, est_mul(&n, keep, L), all);
		est_item(r, "per-op recompute set (one block)", TITAN_MEM_ACTIVATIONS,
			 est_mul(&n, est_mul(&n, N, 3 * C + kv + 2 * F + 2), 4), all);
	} else {
		if (kept) {
			char what[72];

			snprintf(what, sizeof(what), "saved activations of %lld block(s)",
				 (long long)kept);
			est_item(r, what, TITAN_MEM_ACTIVATIONS, est_mul(&n, set, kept), all);
		}
		if (o->ac != TITAN_EST_AC_NONE)
			est_item(r, "recompute set (one block)", TITAN_MEM_ACTIVATIONS, set, all);
	}
	est_item(r, "final norm output + 1/rms", TITAN_MEM_ACTIVATIONS,
		 est_mul(&n, est_add(&n, est_mul(&n, N, C), N), 4), all);
	est_item(r, "token ids", TITAN_MEM_DATA, est_mul(&n, N, 4), all);
	est_item(r, "backward scratch", TITAN_MEM_WORKSPACE,
		 est_mul(&n, est_mul(&n, N, 3 * C + 2 * q + 2 * kv + F), 4), all);
	/* titan-train: inputs and labels of every microbatch of a step */
	est_item(r, "inputs + labels (all microbatches)", TITAN_MEM_DATA,
		 est_mul(&n, est_mul(&n, e->tokens_per_step, 2), 4), all);

	/* transient workspace of the ops (lib/cpu) */
	if (m_start >= 0)
		est_item(r, "sgemm peak probe (3 x 1024 x 1024 fp32)", TITAN_MEM_WORKSPACE,
			 3 * (int64_t)PROBE_N * PROBE_N * 4, EST_AT(m_start));
	x = est_mul(&n, B, H * ((S + bq - 1) / bq));        /* attention forward tasks */
	x = x < threads ? x : threads;
	rc_at = EST_AT(m_fwd) | (m_rec >= 0 ? EST_AT(m_rec) : 0);
	est_item(r, "attention forward tiles (per thread)", TITAN_MEM_WORKSPACE,
		 est_mul(&n, est_mul(&n, x, bq * bq + D * bq + 2 * bq), 4), rc_at);
	chunk = N < TITAN_CE_CHUNK ? N : TITAN_CE_CHUNK;
	est_item(r, "classifier/CE chunk logits + row losses", TITAN_MEM_WORKSPACE,
		 est_add(&n, est_mul(&n, est_mul(&n, chunk, V), 4), est_mul(&n, chunk, 8)),
		 EST_AT(m_loss));
	x = est_mul(&n, B, Hkv);                             /* attention backward tasks */
	x = x < threads ? x : threads;
	est_item(r, "attention backward tiles (per thread)", TITAN_MEM_WORKSPACE,
		 est_mul(&n, est_mul(&n, x, est_add(&n, S, 2 * bq * bq + 2 * D * bq)), 4),
		 EST_AT(m_bwd));
	est_item(r, "gradient norm partial sums", TITAN_MEM_WORKSPACE, sumsq * 8,
		 EST_AT(m_norm));
	/* the metrics row (300-500 characters) in lib/core's JSON writer: its
	 * buffer grows 256 -> 512 bytes with both live while copying */
	if (m_log >= 0)
		est_item(r, "metrics.jsonl row (JSON writer buffers)", TITAN_MEM_OTHER, 256 + 512,
			 EST_AT(m_log));
	est_rank_finish(r, o->dev.alloc_overhead, &n);
	if (n.overflow)
		return titan_error(TITAN_E_INVALID, "the estimate does not fit in 64-bit byte counts "
				   "(batch, sequence or model far too large)");
	return 0;
}
