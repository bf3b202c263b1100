/*
 * perf.c — FLOPs per token and a roofline of a training step: compute at
 * peak x mfu, TP/CP collectives on the critical path (unless async TP
 * hides them behind the matmuls), FSDP/HSDP all-gathers and
 * reduce-scatters overlapped with compute as FSDP2's prefetching does
 * (only the first gather and the last reduction exposed, plus what does
 * not fit under the compute), and the pipeline's fill and drain.
 *
 * Counts per token and transformer block (t = tp), forward:
 *   matmuls   2·(C·q + 2·C·kv + q·C + 3·C·F)/t
 *   attention 4·(q/t)·(S+1)/2  (causal: key s is read by queries >= s)
 * backward = 2 x the matmuls + 2.5 x attention (flash backward recomputes
 * Q·Kᵀ: five products against two), recompute = the forward of
 * checkpointed blocks, or under per-op SAC the matmuls it does not save
 * (wk, wo, w3).  The output layer adds 6·C·V/t.  A MoE block's
 * feed-forward counts its active parameters (titan_model_ffn_params: the
 * gate, top_k experts, the shared experts) in place of 3·C·F, as
 * torchtitan's MFU and titan-train's (titan_model_flops_per_token) do.
 */
#include "est_impl.h"

#include <stdlib.h>
#include <string.h>

struct flops {
	double lin, att, rec_lin, rec_att; /* per token of one microbatch on a rank */
	double sc, rec_sc; /* elements of the score matrix the softmax passes touch */
	double el;         /* elements of the elementwise ops (norms, SwiGLU, ...) */
};

static void block_flops(const struct titan_model_dims *d, const struct titan_est_opts *o,
			double t, int64_t layer, struct flops *f)
{
	const double C = (double)d->dim, q = (double)(d->n_heads * d->head_dim);
	const double kv = (double)(d->n_kv_heads * d->head_dim), F = (double)d->ffn_hidden;
	const bool moe = titan_model_layer_is_moe(d, layer);
	/* the feed-forward's active parameters: a MoE's gate, top_k experts
	 * and shared experts (torchtitan's count, titan_model_ffn_params) */
	const double ffn = (double)titan_model_ffn_params(d, layer, true);
	const double lin = 2 * (C * q + 2 * C * kv + q * C + ffn) / t;
	const double att = 4 * q / t * ((double)o->seq_len + 1) / 2;
	/* the hidden rows a token's feed-forward runs: F, or the top_k
	 * experts' and the shared experts'; a MoE also moves top_k rows of C
	 * to the experts and back (forward and backward) and scores E */
	const double K = (double)d->moe.top_k;
	const double Fa = moe ? (K + (double)d->moe.num_shared_experts) *
				(double)d->moe.inter_dim : F;
	const double route = moe ? 4 * K * C + 2 * (double)d->moe.num_experts : 0;

	f->lin += 3 * lin;
	f->att += 3.5 * att;
	/* exp in the forward; P recomputed and dS = P·(dP - D) in the backward */
	f->sc += 3 * att / (4 * (double)d->head_dim);
	/* two norms, two residual adds, RoPE, SwiGLU: forward and backward */
	f->el += (4 * C + 2 * Fa) / t + route;
	if (est_block_ckpt(o, layer)) {
		f->rec_lin += lin;
		f->rec_att += att;
		f->rec_sc += att / (4 * (double)d->head_dim);
	} else if (o->ac == TITAN_EST_AC_OP) {
		/* a MoE block keeps its MoE's tensors (lib/train/llama.c) */
		f->rec_lin += 2 * (C * kv + q * C + (moe ? 0 : C * F)) / t;
	}
}

static double bw(const struct titan_est_opts *o, int64_t span, bool *intra)
{
	*intra = span <= o->gpus_per_node;
	return *intra ? o->dev.bw_intra : o->dev.bw_inter;
}

void est_perf(const struct titan_model_dims *d, struct titan_estimate *e)
{
	const struct titan_est_opts *o = &e->opts;
	const struct titan_est_layout *l = &o->layout;
	struct titan_est_perf *p = &e->perf;
	const double T = (double)l->tp, Cp = (double)l->cp, S = (double)o->seq_len;
	const double C = (double)d->dim, V = (double)d->vocab_size;
	const double kv = (double)(d->n_kv_heads * d->head_dim);
	const double ab = o->param_bytes, rb = o->reduce_bytes, pb = o->param_bytes;
	const double fsdp = (double)(l->dp_shard * l->cp), R = (double)l->dp_replicate;
	const int64_t v = e->stages_per_rank, m = e->pp_microbatches, M = o->accum * m;
	const double Nmb = (double)(l->pp > 1 ? o->pp_microbatch : o->local_batch) * S / Cp;
	double peak, peak_lin, score_rate = 0, elem_rate = 0, bw_tp, bw_cp, bw_fsdp, bw_dp, bw_pp;
	const struct titan_est_kernel *k = &e->kernel;
	const bool krates = o->dev.cpu && o->cpu_kernel_rates && k->known;
	double t_max = 0, t_sum = 0, window = 0, worst_elems = 0, worst_unit = 0;
	struct titan_pp_stage *st = NULL;
	int64_t vv;
	struct flops all = {0};

	memset(p, 0, sizeof(*p));
	/* model-level counts (t = 1) */
	for (int64_t i = 0; i < d->n_layers; i++)
		block_flops(d, o, 1, i, &all);
	p->flops_per_token_torchtitan = titan_model_flops_per_token(d, o->seq_len);
	p->flops_attention = all.att + all.rec_att;
	p->flops_recompute = all.rec_lin + all.rec_att;
	p->flops_per_token_exact = all.lin + all.att + all.rec_lin + all.rec_att + 6 * C * V;
	p->mfu = o->mfu;
	p->peak_flops = o->dev.peak_flops;
	if (isnan(o->dev.peak_flops) || !(o->dev.peak_flops > 0))
		return;
	if (est_pipeline(o, d, &vv, &st) < 0)
		return;
	p->known = true;
	peak = o->dev.peak_flops * o->mfu;
	peak_lin = (o->float8 && !isnan(o->dev.peak_flops_fp8) ? o->dev.peak_flops_fp8 :
		    o->dev.peak_flops) * o->mfu;
	if (krates) { /* the kernel's rates (kernel.c), not peak x mfu */
		peak_lin = k->peak_flops * k->gemm_eff;
		peak = k->peak_flops * k->attn_eff;
		score_rate = k->clock_hz * k->threads / k->score_cycles;
		elem_rate = k->clock_hz * k->threads / k->elem_cycles;
	}
	bw_tp = bw(o, l->tp, &p->tp_intra);
	bw_cp = bw(o, l->tp * l->cp, &p->cp_intra);
	bw_fsdp = bw(o, l->tp * l->dp_shard * l->cp, &p->fsdp_intra);
	bw_dp = bw(o, l->tp * l->dp_shard * l->cp * l->dp_replicate, &(bool){false});
	bw_pp = bw(o, o->ngpu, &p->pp_intra);

	for (int i = 0; i < e->nranks; i++) {
		struct titan_est_rank *r = &e->ranks[i];
		struct flops f = {0};
		double lin_s, tp_bytes = 0, cp_bytes = 0, tp_s, cp_s, elems, unit;

		for (int64_t s = 0; s < v; s++) {
			const struct titan_pp_stage *sg = &st[est_stage_of(o, i, s, v)];

			for (int64_t b = sg->l0; b < sg->l1; b++) {
				double colls = 8, kvb = 2 * Nmb * Cp * kv / T * ab * (Cp - 1) / Cp;

				block_flops(d, o, T, b, &f);
				if (est_block_ckpt(o, b))
					colls += 4;
				else if (o->ac == TITAN_EST_AC_OP)
					colls += 2;
				tp_bytes += colls * Nmb * C * ab * (T - 1) / T;
				cp_bytes += kvb * (est_block_ckpt(o, b) ? 4 : 3);
			}
			if (sg->first || sg->last)
				tp_bytes += 2 * Nmb * C * ab * (T - 1) / T;
			if (sg->last) {
				f.lin += 6 * C * V / T;
				f.el += V / T; /* the loss rows */
			}
		}
		lin_s = Nmb * (f.lin + f.rec_lin) / peak_lin;
		double att_s = Nmb * (f.att + f.rec_att) / peak;
		double sc_s = krates ? Nmb * (f.sc + f.rec_sc) / score_rate : 0;
		/* the elementwise ops per microbatch, AdamW and the gradient
		 * norm once per step over the rank's shard (four streams) */
		double el_s = krates ? (Nmb * f.el + 4.0 * (double)r->params_shard / (double)M) /
				       elem_rate : 0;
		r->mb_compute_s = lin_s + att_s + sc_s + el_s;
		tp_s = l->tp > 1 ? tp_bytes / bw_tp : 0;
		if (o->async_tp)
			tp_s = fmax(0, tp_s - lin_s);
		cp_s = l->cp > 1 ? cp_bytes / bw_cp : 0;
		r->mb_tp_s = tp_s;
		r->mb_cp_s = cp_s;
		double t = r->mb_compute_s + tp_s + cp_s;
		if (t > t_max) {
			t_max = t;
			p->compute_s = (double)M * r->mb_compute_s;
			p->recompute_s = (double)M * Nmb * (f.rec_lin / peak_lin + f.rec_att / peak +
							     (krates ? f.rec_sc / score_rate : 0));
			p->gemm_s = (double)M * lin_s;
			p->attn_s = (double)M * att_s;
			p->score_s = (double)M * sc_s;
			p->elem_s = (double)M * el_s;
			/* the fraction of the peak the kernel's rates come to */
			if (krates)
				p->mfu = Nmb * (f.lin + f.rec_lin + f.att + f.rec_att) /
					 (r->mb_compute_s * k->peak_flops);
			p->tp_s = (double)M * tp_s;
			p->cp_s = (double)M * cp_s;
			window = (double)M * r->mb_compute_s;
		}
		t_sum += t;
		elems = (double)r->params_local;
		unit = elems / (r->layers > 0 ? (double)r->layers : 1); /* about one block */
		if (elems > worst_elems) {
			worst_elems = elems;
			worst_unit = unit;
		}
	}
	free(st);

	/* pipeline: m microbatches through the slowest rank, plus fill/drain
	 * of the others (chunks of 1/v of a rank's work when interleaved;
	 * zero-bubble schedules fill a third of that) */
	double fill = (t_sum - t_max) / (double)v;
	if (o->schedule == TITAN_EST_INTERLEAVED_ZB || o->schedule == TITAN_EST_ZBV)
		fill /= 3;
	double pipe = l->pp > 1 ? (double)o->accum * ((double)m * t_max + fill) : (double)M * t_max;
	p->pp_bubble_s = pipe - (double)M * t_max;
	p->pp_p2p_s = l->pp > 1 ? (double)M * 2 * Nmb * C / T * ab / bw_pp : 0;

	/* FSDP / HSDP / DDP collectives, overlapped with the step's compute */
	double comm = 0, first = 0;
	if (fsdp > 1) {
		bool raf = o->reshard == TITAN_EST_RESHARD_ALWAYS ||
			   (o->reshard == TITAN_EST_RESHARD_DEFAULT && l->pp == 1);
		double n_ag = raf ? 2.0 * (double)M : (l->pp > 1 ? (double)o->accum : (double)M);
		double n_rs = l->pp > 1 ? (double)o->accum : (double)M;
		double f = (fsdp - 1) / fsdp;

		comm += (n_ag * worst_elems * pb + n_rs * worst_elems * rb) * f / bw_fsdp;
		first += worst_unit * (pb + rb) * f / bw_fsdp;
	}
	if (R > 1) {
		double n_ar = fsdp > 1 && l->pp > 1 ? (double)o->accum : (double)M;

		comm += n_ar * 2 * (R - 1) / R * ceil(worst_elems / fsdp) * rb / bw_dp;
		first += 2 * (R - 1) / R * ceil(worst_unit / fsdp) * rb / bw_dp;
	}
	p->fsdp_s = comm;
	p->fsdp_exposed_s = comm > 0 ? fmax(0, comm - window) + fmin(first, comm) : 0;
	p->step_s = pipe + p->pp_p2p_s + p->fsdp_exposed_s;
	p->tokens_per_s = (double)e->tokens_per_step / (p->step_s * T * (double)l->pp * Cp);
	p->mfu_torchtitan = p->flops_per_token_torchtitan * p->tokens_per_s / o->dev.peak_flops;
}
