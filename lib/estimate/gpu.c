/*
 * gpu.c — torchtitan's GPU memory model (--model-of torchtitan, and every
 * layout of several GPUs; one GPU is titan-train's CUDA path by default,
 * gpu_titan.c): titan's CUDA design (DESIGN.md) as torchtitan practises it (parallelize_llama: TP -> CP -> AC -> FSDP2 with
 * MixedPrecisionPolicy(bf16, fp32); pipelining schedules).  Per pipeline
 * rank, items present at the moments of a step:
 *
 *   end of forward   all in-flight microbatches' saved activations
 *   loss             logits / loss buffers (last stage)
 *   loss backward    log-softmax gradients (eager loss only)
 *   first block bwd  saved activations + one block recomputed + its
 *                    activation gradients + FSDP gather/reduce buffers
 *   end of backward  gradients complete, activations freed
 *   optimizer step   weights, gradients, moments
 *
 * Saved tensors of a Llama 3 block (per token, bf16 elements; t = tp, SP
 * shards the norms' tensors by t, the all-gathered norm outputs that the
 * linears save are whole):
 *   no AC          2·(2C/t + C) + (2q + 2kv + 4F)/t  + lse (fp32, H/t)
 *                  (x, x̂, norm output twice; q k v after RoPE; attention
 *                  output; w1 out, silu, w3 out, product)
 *   per-op SAC     C/t + (2q + kv + F)/t + C + [t>1] 2C/t + lse
 *                  (block input; outputs of the saved mm's wq wv w1 w2 —
 *                  every second mm is recomputed —, SDPA outputs, reduce-
 *                  scatter outputs)
 *   checkpointed   C/t (the block input)
 * docs/estimate.md explains each number and what is left out.
 */
#include "est_impl.h"

#include <stdlib.h>
#include <string.h>

#define CUBLAS_WORKSPACE (32.0 * 1048576.0) /* Hopper default, one stream */

struct blk {
	double full, op, ckpt, lse, grad; /* per token: elements (lse: bytes) */
};

static void block_sizes(const struct titan_model_dims *d, double t, int64_t layer,
			struct blk *b)
{
	const double C = (double)d->dim, q = (double)(d->n_heads * d->head_dim);
	const double kv = (double)(d->n_kv_heads * d->head_dim), F = (double)d->ffn_hidden;

	b->full = 2 * (2 * C / t + C) + (2 * q + 2 * kv + 4 * F) / t;
	b->op = C / t + (2 * q + kv + F) / t + C + (t > 1 ? 2 * C / t : 0);
	b->ckpt = C / t;
	b->lse = 4.0 * (double)d->n_heads / t;
	b->grad = 2 * C + (2 * F + q + 2 * kv) / t;
	if (d->qk_norm) { /* QK-norm's inputs (q's kept under selective op) and 1/rms */
		b->full += (q + kv + (double)(d->n_heads + d->n_kv_heads)) / t;
		b->op += (q + (double)d->n_heads) / t;
	}
	if (titan_model_layer_is_moe(d, layer)) {
		/* a MoE in place of the SwiGLU (no TP with a MoE): the routed
		 * rows in and out (top_k of C), each routed row's w1, w3
		 * outputs, SiLU and product, the shared experts' four; the
		 * router's fp32 scores, gate values and int64 choices and slot
		 * order; per-op SAC keeps all of it, as titan-train's CPU
		 * engine (the routing is not recomputed) */
		const double K = (double)d->moe.top_k, Fm = (double)d->moe.inter_dim;
		const double Fs = Fm * (double)d->moe.num_shared_experts;
		const double moe = 2 * K * C + 4 * K * Fm + 4 * Fs;

		b->full += moe - 4 * F / t;
		b->op += moe - F / t;
		b->lse += 4 * (double)d->moe.num_experts + 20 * K;
		b->grad += 2 * (K * Fm + Fs + K * C) - 2 * F / t;
	}
}

/* In-flight microbatches (as a multiple of one microbatch through all of
 * the rank's stages) at the end of the forward warm-up of pipeline rank r. */
static double inflight(const struct titan_est_opts *o, int64_t r, int64_t m, int64_t v)
{
	const int64_t P = o->layout.pp;
	int64_t k;

	if (P == 1)
		return 1;
	switch (o->schedule) {
	case TITAN_EST_GPIPE:
		return (double)m;
	case TITAN_EST_1F1B:
		return (double)(m < P - r ? m : P - r);
	case TITAN_EST_LOOPED_BFS:
		return (double)m;
	default:
		/* Megatron's interleaved warm-up: 2(P - r - 1) + (v - 1)P chunk
		 * forwards before the first backward, plus the one in progress */
		k = 2 * (P - r - 1) + (v - 1) * P + 1;
		if (k > m * v)
			k = m * v;
		return (double)k / (double)v;
	}
}

int est_gpu_model(const struct titan_model_dims *d, const struct titan_est_opts *o,
		  struct titan_estimate *e)
{
	const struct titan_est_layout *l = &o->layout;
	const double T = (double)l->tp, Cp = (double)l->cp;
	const double fsdp = (double)(l->dp_shard * l->cp);
	const double C = (double)d->dim, V = (double)d->vocab_size, S = (double)o->seq_len;
	const double q = (double)(d->n_heads * d->head_dim);
	const double kv = (double)(d->n_kv_heads * d->head_dim);
	const double pb = o->param_bytes, ab = o->param_bytes, mb = o->master_bytes;
	const double rb = o->reduce_bytes, ob = o->optim_bytes, lb = o->float8 ? 1 : pb;
	const double Vt = o->loss_parallel || l->tp == 1 ? V / T : V;
	struct est_num n = {false};
	struct titan_pp_stage *st = NULL;
	struct blk b;
	int64_t v, m, M, rows;
	double Nmb;
	int rc;

	if ((rc = est_pipeline(o, d, &v, &st)) < 0)
		return rc;
	if (!(e->ranks = calloc((size_t)l->pp, sizeof(*e->ranks)))) {
		free(st);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	e->nranks = (int)l->pp;
	e->stages_per_rank = v;
	e->nstages = l->pp * v;
	rows = l->pp > 1 ? o->pp_microbatch : o->local_batch;
	m = l->pp > 1 ? o->local_batch / o->pp_microbatch : 1;
	M = o->accum * m;
	e->pp_microbatches = m;
	e->tokens_per_step = est_mul(&n, est_mul(&n, o->local_batch, o->seq_len), o->accum);
	Nmb = (double)rows * S / Cp;

	for (int64_t pr = 0; pr < l->pp; pr++) {
		struct titan_est_rank *r = &e->ranks[pr];
		double elems = 0, unit = 0, saved = 0, rec = 0, shard, k, wbytes = 0, grad = 0;
		bool raf, any_rec = false;
		int mf, ml = -1, mlb = -1, mb0, mb1, mo;
		uint32_t all = EST_ALL, step;
		char what[72];

		r->pp_rank = (int)pr;
		r->nstages = (int)v;
		for (int64_t s = 0; s < v; s++) {
			const struct titan_pp_stage *sg = &st[est_stage_of(o, pr, s, v)];

			if (s < TITAN_PP_MAX_STAGES_PER_RANK) {
				r->stages[s] = (int)est_stage_of(o, pr, s, v);
				r->stage_l0[s] = sg->l0;
				r->stage_l1[s] = sg->l1;
			}
			r->layers += sg->l1 - sg->l0;
			r->first |= sg->first;
			r->last |= sg->last;
			for (int64_t i = sg->l0; i < sg->l1; i++) {
				/* the block's linear weights (a MoE's: every
				 * expert, titan_model_ffn_params) and norms */
				const double lin = (C * q + 2 * C * kv + q * C +
						    (double)titan_model_ffn_params(d, i, false)) / T;

				elems += lin + 2 * C;
				wbytes += lin * lb + 2 * C * pb;
				unit = fmax(unit, lin * lb + 2 * C * pb);
				block_sizes(d, T, i, &b);
				grad = fmax(grad, b.grad);
				if (est_block_ckpt(o, i)) {
					saved += b.ckpt * ab;
					rec = fmax(rec, (b.full - b.ckpt) * ab + b.lse);
					any_rec = true;
				} else if (o->ac == TITAN_EST_AC_OP) {
					saved += b.op * ab + b.lse;
					rec = fmax(rec, (b.full - b.op) * ab);
					any_rec = true;
				} else {
					saved += b.full * ab + b.lse;
				}
			}
		}
		if (r->first) {
			elems += V * C / T;
			wbytes += V * C / T * pb;
			unit = fmax(unit, V * C / T * pb);
		}
		if (r->last) {
			double out = d->tied ? 0 : V * C / T;

			elems += out + C;
			wbytes += out * lb + C * pb;
			unit = fmax(unit, out * lb + C * pb);
			saved += (2 * C / T + C) * ab; /* final norm */
		}
		shard = ceil(elems / fsdp);
		r->params_local = est_bytes(&n, elems);
		r->params_shard = est_bytes(&n, shard);

		mf = est_moment(r, TITAN_EST_PHASE_FORWARD, "forward", "end of forward");
		if (r->last) {
			ml = est_moment(r, TITAN_EST_PHASE_LOSS, "loss", "loss");
			if (o->loss == TITAN_EST_LOSS_EAGER)
				mlb = est_moment(r, TITAN_EST_PHASE_BACKWARD, "loss-bwd", "loss backward");
		}
		mb0 = est_moment(r, TITAN_EST_PHASE_BACKWARD, "backward",
				 "first block backward");
		mb1 = est_moment(r, TITAN_EST_PHASE_BACKWARD, "bwd-end", "end of backward");
		mo = est_moment(r, TITAN_EST_PHASE_OPTIMIZER, "optim", "optimizer step");
#define AT(x) ((x) >= 0 ? EST_AT(x) : 0u)
		step = all & ~AT(mo);

		snprintf(what, sizeof(what), "master weights (%s, 1/%g shard)",
			 mb == 4 ? "fp32" : "bf16", fsdp);
		est_item(r, what, TITAN_MEM_PARAMS, est_bytes(&n, shard * mb), all);
		est_item(r, ob == 4 ? "AdamW moments (fp32 x 2)" : "AdamW moments (bf16 x 2)",
			 TITAN_MEM_OPTIM, est_bytes(&n, 2 * shard * ob), all);
		est_item(r, "gradients (sharded)", TITAN_MEM_GRADS, est_bytes(&n, shard * mb),
			 M > 1 ? all : AT(mb1) | AT(mo));
		if (fsdp > 1) {
			raf = o->reshard == TITAN_EST_RESHARD_ALWAYS ||
			      (o->reshard == TITAN_EST_RESHARD_DEFAULT && l->pp == 1);
			if (raf) {
				est_item(r, "FSDP all-gather buffers (unit + prefetch)", TITAN_MEM_COMM,
					 est_bytes(&n, 2 * unit), AT(mf) | AT(mb0) | AT(mb1));
				if (r->last && o->reshard != TITAN_EST_RESHARD_ALWAYS)
					est_item(r, "unsharded norm + output (kept for backward)",
						 TITAN_MEM_PARAMS,
						 est_bytes(&n, V * C / T * lb + C * pb),
						 AT(mf) | AT(ml) | AT(mlb));
			} else {
				est_item(r, "unsharded stage weights (no reshard after forward)",
					 TITAN_MEM_PARAMS, est_bytes(&n, wbytes), step);
			}
			est_item(r, "reduce-scatter buffers (unit grads + fp32 copy)", TITAN_MEM_COMM,
				 est_bytes(&n, unit / pb * (pb + rb)), AT(mlb) | AT(mb0) | AT(mb1));
			if (l->pp > 1 && m > 1)
				est_item(r, "unsharded gradient accumulation (fp32)", TITAN_MEM_GRADS,
					 est_bytes(&n, elems * rb), step);
		} else if (pb < mb) {
			est_item(r, "bf16 compute copy of the weights", TITAN_MEM_PARAMS,
				 est_bytes(&n, wbytes), all);
		}
		k = inflight(o, pr, m, v);
		snprintf(what, sizeof(what), "saved activations (%.3g microbatch(es) in flight)", k);
		est_item(r, what, TITAN_MEM_ACTIVATIONS, est_bytes(&n, k * Nmb * saved),
			 AT(mf) | AT(ml) | AT(mlb) | AT(mb0));
		if (any_rec)
			est_item(r, "recomputed block (backward)", TITAN_MEM_ACTIVATIONS,
				 est_bytes(&n, Nmb * rec), AT(mb0) | AT(mb1));
		if (r->layers > 0)
			est_item(r, "activation gradients of one block", TITAN_MEM_ACTIVATIONS,
				 est_bytes(&n, Nmb * grad * ab), AT(mb0) | AT(mb1));
		if (r->last && o->loss == TITAN_EST_LOSS_EAGER) {
			est_item(r, "logits (bf16) + fp32 copy + log-softmax", TITAN_MEM_ACTIVATIONS,
				 est_bytes(&n, Nmb * Vt * (pb + 8)), AT(ml));
			est_item(r, "loss backward: log-softmax + 2 fp32 gradients",
				 TITAN_MEM_ACTIVATIONS, est_bytes(&n, Nmb * Vt * 12), AT(mlb));
		} else if (r->last) {
			est_item(r, "fused classifier + CE chunk (fp32)", TITAN_MEM_WORKSPACE,
				 est_bytes(&n, fmin((double)o->ce_chunk, Nmb) * Vt * 4), AT(ml));
		}
		est_item(r, "cuBLAS workspace", TITAN_MEM_WORKSPACE, est_bytes(&n, CUBLAS_WORKSPACE),
			 all);
		if (l->tp > 1)
			/* the gathered norm outputs are the saved activations; what
			 * is extra is the partial sums before each reduce-scatter */
			est_item(r, "sequence-parallel reduce-scatter input", TITAN_MEM_COMM,
				 est_bytes(&n, Nmb * C * ab), AT(mf) | AT(mb0) | AT(mb1));
		if (l->cp > 1) {
			double kvfull = 2 * Nmb * Cp * kv / T * ab;

			est_item(r, "context-parallel K/V all-gather", TITAN_MEM_COMM,
				 est_bytes(&n, kvfull), AT(mf));
			est_item(r, "context-parallel K/V + dK/dV (backward)", TITAN_MEM_COMM,
				 est_bytes(&n, 2 * kvfull), AT(mb0) | AT(mb1));
		}
		if (l->pp > 1)
			est_item(r, "pipeline send/recv buffers", TITAN_MEM_COMM,
				 est_bytes(&n, 2 * Nmb * C / T * ab), step);
		est_item(r, "input ids + labels (int64)", TITAN_MEM_DATA,
			 est_bytes(&n, (double)o->local_batch * S / Cp * 16), all);
		est_item(r, "RoPE table (complex64)", TITAN_MEM_OTHER,
			 est_bytes(&n, S * (double)d->head_dim / 2 * 8), all);
#undef AT
		est_rank_finish(r, o->dev.alloc_overhead, &n);
	}
	free(st);
	if (n.overflow)
		return titan_error(TITAN_E_INVALID, "the estimate does not fit in 64-bit byte counts "
				   "(batch, sequence or model far too large)");
	return 0;
}
