/*
 * output.c — the estimate as JSON (titan-estimate --json, the input of
 * titan-memprof compare; schema in docs/estimate.md) and as the text
 * report.
 */
#include "est_impl.h"

#include <string.h>

static const char *dtype(int bytes)
{
	return bytes == 4 ? "float32" : bytes == 2 ? "bfloat16" : "float8";
}

static const char *ac_mode(enum titan_est_ac ac)
{
	static const char *const names[] = { "none", "selective", "op", "full" };

	return names[ac];
}

static void tags(struct titan_json *j, const char *key, const int64_t *v)
{
	titan_json_key(j, key);
	titan_json_object_begin(j);
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		titan_json_key(j, titan_mem_tag_name((enum titan_mem_tag)t));
		titan_json_int(j, v[t]);
	}
	titan_json_object_end(j);
}

static void kint(struct titan_json *j, const char *k, int64_t v)
{
	titan_json_key(j, k);
	titan_json_int(j, v);
}

static void kdbl(struct titan_json *j, const char *k, double v)
{
	titan_json_key(j, k);
	titan_json_double(j, v);
}

static void kstr(struct titan_json *j, const char *k, const char *v)
{
	titan_json_key(j, k);
	titan_json_string(j, v);
}

static void kbool(struct titan_json *j, const char *k, bool v)
{
	titan_json_key(j, k);
	titan_json_bool(j, v);
}

static void model_json(struct titan_json *j, const struct titan_model_dims *d)
{
	struct titan_model_params p;

	titan_model_count_params(d, &p);
	titan_json_key(j, "model");
	titan_json_object_begin(j);
	kstr(j, "name", titan_model_family_name(d->family));
	kstr(j, "flavor", d->flavor);
	kint(j, "dim", d->dim);
	kint(j, "n_layers", d->n_layers);
	kint(j, "n_heads", d->n_heads);
	kint(j, "n_kv_heads", d->n_kv_heads);
	kint(j, "head_dim", d->head_dim);
	kint(j, "ffn_hidden", d->ffn_hidden);
	kint(j, "vocab_size", d->vocab_size);
	kbool(j, "tied", d->tied);
	kint(j, "params", p.total);
	kint(j, "params_embedding", p.embedding);
	kint(j, "params_active", p.active);
	if (p.n_moe_layers > 0) {
		titan_json_key(j, "moe");
		titan_json_object_begin(j);
		kint(j, "num_experts", d->moe.num_experts);
		kint(j, "top_k", d->moe.top_k);
		kint(j, "num_shared_experts", d->moe.num_shared_experts);
		kint(j, "inter_dim", d->moe.inter_dim);
		kint(j, "moe_layers", p.n_moe_layers);
		kint(j, "params_per_moe_layer", p.moe);
		titan_json_object_end(j);
	}
	titan_json_object_end(j);
}

static void device_json(struct titan_json *j, const struct titan_est_opts *o)
{
	titan_json_key(j, "device");
	titan_json_object_begin(j);
	kstr(j, "name", o->dev.name);
	kstr(j, "description", o->dev.description);
	kint(j, "memory_bytes", (int64_t)llround(o->dev.memory));
	kdbl(j, "peak_flops", o->dev.peak_flops);
	kdbl(j, "peak_flops_fp8", o->dev.peak_flops_fp8);
	kdbl(j, "bandwidth_intra_node", o->dev.bw_intra);
	kdbl(j, "bandwidth_inter_node", o->dev.bw_inter);
	kint(j, "reserve_bytes", (int64_t)llround(o->dev.reserve));
	kdbl(j, "alloc_overhead", o->dev.alloc_overhead);
	titan_json_object_end(j);
	kint(j, "ngpu", o->ngpu);
	if (o->dev.cpu)
		kint(j, "rank", o->rank);
	kint(j, "gpus_per_node", o->gpus_per_node);
}

/* cpu: the GEMM kernel titan-train will run and the rates taken from it */
static void kernel_json(struct titan_json *j, const struct titan_estimate *e)
{
	const struct titan_est_kernel *k = &e->kernel;

	titan_json_key(j, "cpu_kernel");
	if (!e->opts.dev.cpu) {
		titan_json_null(j);
		return;
	}
	titan_json_object_begin(j);
	kbool(j, "known", k->known);
	kstr(j, "name", k->core);
	kstr(j, "chosen_by", k->how);
	kstr(j, "description", k->describe);
	kstr(j, "isa", k->isa);
	kint(j, "flops_per_cycle", k->flops_per_cycle);
	kint(j, "threads", k->threads);
	kdbl(j, "clock_hz", k->clock_hz);
	kstr(j, "clock_from", k->clock_from);
	kdbl(j, "peak_flops", k->peak_flops);
	kdbl(j, "gemm_efficiency", k->gemm_eff);
	kdbl(j, "attention_efficiency", k->attn_eff);
	kdbl(j, "softmax_cycles_per_element", k->score_cycles);
	kdbl(j, "elementwise_cycles_per_element", k->elem_cycles);
	kbool(j, "step_time_from_kernel", e->opts.cpu_kernel_rates && k->known);
	titan_json_object_end(j);
}

static void layout_json(struct titan_json *j, const struct titan_est_opts *o)
{
	titan_json_key(j, "layout");
	titan_json_object_begin(j);
	kint(j, "dp_replicate", o->layout.dp_replicate);
	kint(j, "dp_shard", o->layout.dp_shard);
	kint(j, "tp", o->layout.tp);
	kint(j, "pp", o->layout.pp);
	kint(j, "cp", o->layout.cp);
	kstr(j, "schedule", titan_est_schedule_name(o->schedule));
	titan_json_object_end(j);
	titan_json_key(j, "activation_checkpoint");
	titan_json_object_begin(j);
	kstr(j, "mode", ac_mode(o->ac));
	kint(j, "every", o->ac == TITAN_EST_AC_SELECTIVE ? o->ac_every : 0);
	titan_json_object_end(j);
}

static void perf_json(struct titan_json *j, const struct titan_est_perf *p)
{
	titan_json_key(j, "flops");
	titan_json_object_begin(j);
	kdbl(j, "per_token_torchtitan", p->flops_per_token_torchtitan);
	kdbl(j, "per_token_exact", p->flops_per_token_exact);
	kdbl(j, "attention", p->flops_attention);
	kdbl(j, "recompute", p->flops_recompute);
	titan_json_object_end(j);
	titan_json_key(j, "throughput");
	if (!p->known) {
		titan_json_null(j);
		return;
	}
	titan_json_object_begin(j);
	kdbl(j, "peak_flops", p->peak_flops);
	kdbl(j, "mfu_assumed", p->mfu);
	kdbl(j, "step_s", p->step_s);
	kdbl(j, "compute_s", p->compute_s);
	kdbl(j, "recompute_s", p->recompute_s);
	kdbl(j, "tp_exposed_s", p->tp_s);
	kdbl(j, "cp_exposed_s", p->cp_s);
	kdbl(j, "fsdp_comm_s", p->fsdp_s);
	kdbl(j, "fsdp_exposed_s", p->fsdp_exposed_s);
	kdbl(j, "pp_bubble_s", p->pp_bubble_s);
	kdbl(j, "pp_p2p_s", p->pp_p2p_s);
	kdbl(j, "tokens_per_s_per_device", p->tokens_per_s);
	kdbl(j, "mfu_torchtitan", p->mfu_torchtitan);
	kdbl(j, "gemm_s", p->gemm_s);
	kdbl(j, "attention_s", p->attn_s);
	kdbl(j, "softmax_s", p->score_s);
	kdbl(j, "elementwise_s", p->elem_s);
	kbool(j, "tp_intra_node", p->tp_intra);
	kbool(j, "cp_intra_node", p->cp_intra);
	kbool(j, "fsdp_intra_node", p->fsdp_intra);
	kbool(j, "pp_intra_node", p->pp_intra);
	titan_json_object_end(j);
}

void titan_estimate_json(const struct titan_estimate *e, struct titan_json *j)
{
	const struct titan_est_opts *o = &e->opts;

	titan_json_object_begin(j);
	kstr(j, "format", "titan-estimate");
	kint(j, "version", 1);
	kstr(j, "titan_version", titan_version());
	model_json(j, &e->dims);
	device_json(j, o);
	/* the memory model: "cpu" (titan-train's CPU path), "titan-cuda"
	 * (its CUDA path) or "torchtitan" */
	kstr(j, "memory_model", o->dev.cpu ? "cpu" : e->titan_cuda ? "titan-cuda" : "torchtitan");
	if (e->model_note[0])
		kstr(j, "memory_model_note", e->model_note);
	kernel_json(j, e);
	layout_json(j, o);
	titan_json_key(j, "batch");
	titan_json_object_begin(j);
	kint(j, "local_batch_size", o->local_batch);
	kint(j, "seq_len", o->seq_len);
	kint(j, "grad_accum_steps", o->accum);
	kint(j, "pp_microbatch_size", o->layout.pp > 1 ? o->pp_microbatch : o->local_batch);
	kint(j, "pp_microbatches", e->pp_microbatches);
	kint(j, "stages_per_rank", e->stages_per_rank);
	kint(j, "tokens_per_step_per_dp_rank", e->tokens_per_step);
	titan_json_object_end(j);
	titan_json_key(j, "precision");
	titan_json_object_begin(j);
	kstr(j, "param", dtype(o->param_bytes));
	kstr(j, "master", dtype(o->master_bytes));
	kstr(j, "reduce", dtype(o->reduce_bytes));
	kstr(j, "optim", dtype(o->optim_bytes));
	kbool(j, "float8", o->float8);
	kstr(j, "loss", o->loss == TITAN_EST_LOSS_EAGER ? "eager" : "chunked");
	titan_json_object_end(j);
	titan_json_key(j, "ranks");
	titan_json_array_begin(j);
	for (int i = 0; i < e->nranks; i++) {
		const struct titan_est_rank *r = &e->ranks[i];

		titan_json_object_begin(j);
		kint(j, "stage", r->pp_rank);
		titan_json_key(j, "stages");
		titan_json_array_begin(j);
		for (int s = 0; s < r->nstages && s < TITAN_PP_MAX_STAGES_PER_RANK; s++)
			titan_json_int(j, r->stages[s]);
		titan_json_array_end(j);
		/* each stage's blocks [l0, l1), as titan_pp_split gives them */
		titan_json_key(j, "stage_layers");
		titan_json_array_begin(j);
		for (int s = 0; s < r->nstages && s < TITAN_PP_MAX_STAGES_PER_RANK; s++) {
			titan_json_array_begin(j);
			titan_json_int(j, r->stage_l0[s]);
			titan_json_int(j, r->stage_l1[s]);
			titan_json_array_end(j);
		}
		titan_json_array_end(j);
		kint(j, "layers", r->layers);
		kbool(j, "embedding", r->first);
		kbool(j, "output", r->last);
		kint(j, "params_local", r->params_local);
		kint(j, "params_shard", r->params_shard);
		kint(j, "peak_bytes", r->peak_bytes);
		kstr(j, "peak_phase", titan_est_phase_name(r->moments[r->peak_moment].phase));
		kstr(j, "peak_moment", r->moments[r->peak_moment].what);
		kint(j, "step_peak_bytes", r->step_peak_bytes);
		kint(j, "reserved_bytes", r->reserved_bytes);
		tags(j, "at_peak", r->at_peak);
		tags(j, "tag_peak", r->tag_peak);
		titan_json_key(j, "items");
		titan_json_array_begin(j);
		for (int k = 0; k < r->nitems; k++) {
			const struct titan_est_item *it = &r->items[k];

			titan_json_object_begin(j);
			kstr(j, "name", it->name);
			kstr(j, "tag", titan_mem_tag_name(it->tag));
			kint(j, "bytes", it->bytes);
			titan_json_key(j, "moments");
			titan_json_array_begin(j);
			for (int m = 0; m < r->nmoments; m++)
				if (it->moments & EST_AT(m))
					titan_json_int(j, m);
			titan_json_array_end(j);
			titan_json_object_end(j);
		}
		titan_json_array_end(j);
		titan_json_key(j, "moments");
		titan_json_array_begin(j);
		for (int m = 0; m < r->nmoments; m++) {
			const struct titan_est_moment *mo = &r->moments[m];

			titan_json_object_begin(j);
			kstr(j, "phase", titan_est_phase_name(mo->phase));
			kstr(j, "what", mo->what);
			kint(j, "total_bytes", mo->total);
			tags(j, "by_tag", mo->by_tag);
			titan_json_object_end(j);
		}
		titan_json_array_end(j);
		titan_json_object_end(j);
	}
	titan_json_array_end(j);
	kint(j, "worst_rank", e->worst);
	kbool(j, "fits", e->fits);
	kint(j, "required_bytes", e->required_bytes);
	kint(j, "device_bytes", e->device_bytes);
	kint(j, "margin_bytes", e->margin_bytes);
	perf_json(j, &e->perf);
	titan_json_object_end(j);
}

/* ---------------------------------------------------------------- text */

static double gib(double b)
{
	return b / GiB;
}

/* A unit for the report's columns: GiB from 1 GiB up, else MiB or KiB. */
struct unit {
	const char *name;
	double div;
};

static struct unit unit_for(double peak)
{
	if (peak >= GiB)
		return (struct unit){"GiB", GiB};
	if (peak >= 1048576.0)
		return (struct unit){"MiB", 1048576.0};
	return (struct unit){"KiB", 1024.0};
}

/* 6,160,000 -> "6.16 M" */
static const char *count_str(char *buf, size_t n, double v)
{
	if (v >= 1e9)
		snprintf(buf, n, "%.3g B", v / 1e9);
	else if (v >= 1e6)
		snprintf(buf, n, "%.3g M", v / 1e6);
	else if (v >= 1e3)
		snprintf(buf, n, "%.3g K", v / 1e3);
	else
		snprintf(buf, n, "%.0f", v);
	return buf;
}

static void header(FILE *fp, const struct titan_model_dims *d, const struct titan_est_opts *o)
{
	struct titan_model_params p;
	char buf[32];

	titan_model_count_params(d, &p);
	fprintf(fp, "model     %s %s: %s parameters (dim %lld, %lld layers, %lld/%lld "
		"heads, ffn %lld, vocab %lld)\n", d->family == TITAN_MODEL_NAME_QWEN3 ? "Qwen3" :
		d->family == TITAN_MODEL_NAME_LLAMA4 ? "Llama 4" : "Llama 3",
		d->flavor, count_str(buf, sizeof(buf), (double)p.total),
		(long long)d->dim, (long long)d->n_layers, (long long)d->n_heads,
		(long long)d->n_kv_heads, (long long)d->ffn_hidden, (long long)d->vocab_size);
	if (p.n_moe_layers > 0) {
		char act[32];

		fprintf(fp, "moe       %lld experts (top %lld, %lld shared, hidden %lld) in %lld of %lld "
			"blocks: %s of the parameters active per token (FLOPs and MFU count those)\n",
			(long long)d->moe.num_experts, (long long)d->moe.top_k,
			(long long)d->moe.num_shared_experts, (long long)d->moe.inter_dim,
			(long long)p.n_moe_layers, (long long)d->n_layers,
			count_str(act, sizeof(act), (double)p.active));
	}
	if (o->dev.cpu)
		fprintf(fp, "device    cpu: titan-train's CPU path, %.2f GiB of memory%s\n",
			gib(o->dev.memory), o->ngpu > 1 ? " per node" : "");
	else
		fprintf(fp, "device    %lld x %s (%s, %.2f GiB), %d per node\n", (long long)o->ngpu,
			o->dev.name, o->dev.description, gib(o->dev.memory), o->gpus_per_node);
}

int titan_estimate_print(const struct titan_estimate *e, FILE *fp)
{
	const struct titan_est_opts *o = &e->opts;
	const struct titan_est_perf *p = &e->perf;
	const struct titan_est_rank *w = &e->ranks[e->worst];
	char buf[160], ac[32], g[48];
	const struct unit u = unit_for((double)w->peak_bytes);

	header(fp, &e->dims, o);
	if (o->dev.cpu && e->kernel.known)
		fprintf(fp, "kernel    %s: %s, %d thread(s) x %.3f GHz (%s) x %d FLOP/cycle = "
			"%.4g FLOP/s\n", e->kernel.describe, e->kernel.isa, e->kernel.threads,
			e->kernel.clock_hz / 1e9, e->kernel.clock_from, e->kernel.flops_per_cycle,
			e->kernel.peak_flops);
	else if (o->dev.cpu)
		fprintf(fp, "kernel    %s: no CPU clock known\n", e->kernel.describe);
	fprintf(fp, "layout    %s", titan_est_layout_str(o, buf, sizeof(buf)));
	if (o->layout.pp > 1)
		fprintf(fp, ", %s, %lld stage(s) per rank", titan_est_schedule_name(o->schedule),
			(long long)e->stages_per_rank);
	fprintf(fp, "\nbatch     %lld x %lld tokens per microbatch, %lld gradient-accumulation "
		"step(s)", (long long)o->local_batch, (long long)o->seq_len, (long long)o->accum);
	if (o->layout.pp > 1)
		fprintf(fp, ", %lld pipeline microbatch(es) of %lld", (long long)e->pp_microbatches,
			(long long)o->pp_microbatch);
	fprintf(fp, "\nAC        %s", titan_est_ac_str(o, ac, sizeof(ac)));
	if (o->dev.cpu)
		fprintf(fp, "; fp32 everything (titan-train CPU), %d thread(s) assumed\n",
			o->threads);
	else if (e->titan_cuda)
		fprintf(fp, "; fp32 weights and activations, GEMMs in %s (titan-train CUDA)\n",
			o->param_bytes == 2 ? "bf16 (fp32 accumulate)" : "fp32");
	else
		fprintf(fp, "; compute %s, master %s, reduce %s, AdamW moments %s%s; %s loss\n",
			dtype(o->param_bytes), dtype(o->master_bytes), dtype(o->reduce_bytes),
			dtype(o->optim_bytes), o->float8 ? ", float8 linears" : "",
			o->loss == TITAN_EST_LOSS_EAGER ? "eager" : "chunked");
	if (!o->dev.cpu && e->titan_cuda)
		fprintf(fp, "memory    model of titan-train's CUDA path: its buffers through the "
			"caching allocator, whose reserved bytes `memory:` prints\n");
	else if (!o->dev.cpu)
		fprintf(fp, "memory    model of torchtitan (bf16 compute, FSDP2)%s%s%s\n",
			e->model_note[0] ? "; not titan-train's CUDA path: " : "", e->model_note,
			e->model_note[0] ? "" : " (--model-of torchtitan)");
	if (e->nranks > 1) {
		fprintf(fp, "\npipeline rank  stages  layers  peak GiB  reserved GiB  at\n");
		for (int i = 0; i < e->nranks; i++) {
			const struct titan_est_rank *r = &e->ranks[i];

			fprintf(fp, "  %12d  %6d  %6lld  %8.2f  %12.2f  %s%s%s\n", r->pp_rank,
				r->nstages, (long long)r->layers, gib((double)r->peak_bytes),
				gib((double)r->reserved_bytes), r->moments[r->peak_moment].what,
				r->first ? ", embedding" : "", r->last ? ", output" : "");
		}
	}
	if (o->dev.cpu && o->ngpu > 1)
		fprintf(fp, "\nmemory of rank %lld of %lld (%lld of %lld parameter elements%s), %s at "
			"each moment:\n", (long long)o->rank, (long long)o->ngpu,
			(long long)w->params_shard, (long long)w->params_local,
			o->layout.dp_shard > 1 ? ", its FSDP shard" : "", u.name);
	else
		fprintf(fp, "\nmemory of pipeline rank %d (%lld layers%s%s), %s at each moment:\n",
			w->pp_rank, (long long)w->layers, w->first ? ", embedding" : "",
			w->last ? ", output" : "", u.name);
	fprintf(fp, "  %-52s %-11s", "", "tag");
	for (int m = 0; m < w->nmoments; m++)
		fprintf(fp, " %9.9s", w->moments[m].label);
	fputc('\n', fp);
	for (int i = 0; i < w->nitems; i++) {
		const struct titan_est_item *it = &w->items[i];

		fprintf(fp, "  %-52.52s %-11s", it->name, titan_mem_tag_name(it->tag));
		for (int m = 0; m < w->nmoments; m++) {
			if (it->moments & EST_AT(m))
				fprintf(fp, " %9.3f", (double)it->bytes / u.div);
			else
				fprintf(fp, " %9s", "-");
		}
		fputc('\n', fp);
	}
	fprintf(fp, "  %-52s %-11s", "total", "");
	for (int m = 0; m < w->nmoments; m++)
		fprintf(fp, " %9.3f", (double)w->moments[m].total / u.div);
	fprintf(fp, "\n  peak %.3f %s (%lld bytes) at %s (%s)", (double)w->peak_bytes / u.div,
		u.name, (long long)w->peak_bytes, titan_est_phase_name(w->moments[w->peak_moment].phase),
		w->moments[w->peak_moment].what);
	if (o->dev.alloc_overhead > 0)
		fprintf(fp, "; %.3f %s with the allocator's %.0f%% overhead",
			(double)w->reserved_bytes / u.div, u.name, 100 * o->dev.alloc_overhead);
	fprintf(fp, "\n  by tag at the peak:");
	for (int t = 0; t < TITAN_MEM_NTAGS; t++)
		if (w->at_peak[t])
			fprintf(fp, " %s %.3f", titan_mem_tag_name((enum titan_mem_tag)t),
				(double)w->at_peak[t] / u.div);
	fprintf(fp, "\n\n%s on %s: needs %.3f GiB", e->fits ? "FITS" : "DOES NOT FIT",
		o->dev.name, gib((double)e->required_bytes));
	if (o->dev.reserve > 0)
		fprintf(fp, " (incl. %.2f GiB for the CUDA context and NCCL)", gib(o->dev.reserve));
	fprintf(fp, " of %.2f GiB: %s %.2f GiB\n", gib((double)e->device_bytes),
		e->fits ? "margin" : "short by", gib(fabs((double)e->margin_bytes)));

	fprintf(fp, "\nFLOPs/token  torchtitan %.4g (6N + 12·L·H·hd·S), executed %.4g "
		"(causal attention %.3g, recompute %.3g)\n", p->flops_per_token_torchtitan,
		p->flops_per_token_exact, p->flops_attention, p->flops_recompute);
	if (!p->known) {
		fprintf(fp, "throughput   unknown: no peak FLOP/s for %s (give --peak-flops)\n",
			o->dev.name);
		return ferror(fp) ? titan_error(TITAN_E_IO, "cannot write the report") : 0;
	}
	fprintf(fp, "step time    %.4g s = compute %.4g (recompute %.3g) + TP %.3g + CP %.3g + "
		"pipeline bubble %.3g + p2p %.3g + FSDP/DP exposed %.3g (of %.3g overlapped)\n",
		p->step_s, p->compute_s, p->recompute_s, p->tp_s, p->cp_s, p->pp_bubble_s,
		p->pp_p2p_s, p->fsdp_exposed_s, p->fsdp_s);
	if (o->dev.cpu && o->cpu_kernel_rates && e->kernel.known)
		fprintf(fp, "compute      %.4g s = GEMMs %.4g (at %.0f%% of the kernel's peak) + "
			"attention %.3g (%.0f%%) + softmax %.3g + elementwise and AdamW %.3g\n",
			p->compute_s, p->gemm_s, 100 * e->kernel.gemm_eff, p->attn_s,
			100 * e->kernel.attn_eff, p->score_s, p->elem_s);
	fprintf(fp, "throughput   %s tokens/s per device at %.0f%% of %.4g FLOP/s on the executed "
		"FLOPs; MFU as torchtitan logs it %.1f%%\n", titan_format_grouped(g, sizeof(g), p->tokens_per_s),
		100 * p->mfu, p->peak_flops, 100 * p->mfu_torchtitan);
	return ferror(fp) ? titan_error(TITAN_E_IO, "cannot write the report") : 0;
}

/* --------------------------------------------------------------- search */

void titan_est_search_json(const struct titan_est_search *s, const struct titan_model_dims *d,
			   const struct titan_est_opts *base, struct titan_json *j)
{
	titan_json_object_begin(j);
	kstr(j, "format", "titan-estimate-search");
	kint(j, "version", 1);
	kstr(j, "titan_version", titan_version());
	model_json(j, d);
	device_json(j, base);
	kint(j, "considered", s->considered);
	kint(j, "valid", s->valid);
	kint(j, "fitting", s->fitting);
	titan_json_key(j, "candidates");
	titan_json_array_begin(j);
	for (int i = 0; i < s->n; i++) {
		const struct titan_est_candidate *c = &s->best[i];

		titan_json_object_begin(j);
		kint(j, "rank", i + 1);
		layout_json(j, &c->opts);
		kint(j, "local_batch_size", c->opts.local_batch);
		kint(j, "grad_accum_steps", c->opts.accum);
		kint(j, "pp_microbatch_size", c->opts.layout.pp > 1 ? c->opts.pp_microbatch :
			c->opts.local_batch);
		kbool(j, "fits", c->fits);
		kint(j, "required_bytes", c->required_bytes);
		kint(j, "margin_bytes", c->margin_bytes);
		kdbl(j, "tokens_per_s_per_device", c->tokens_per_s);
		kdbl(j, "step_s", c->step_s);
		kdbl(j, "mfu_torchtitan", c->mfu_torchtitan);
		kstr(j, "reason", c->reason);
		titan_json_object_end(j);
	}
	titan_json_array_end(j);
	titan_json_object_end(j);
}

int titan_est_search_print(const struct titan_est_search *s, const struct titan_model_dims *d,
			   const struct titan_est_opts *base, FILE *fp)
{
	char g[48], ac[32];

	header(fp, d, base);
	fprintf(fp, "search    %lld layouts considered, %lld valid, %lld fit; best %d by "
		"tokens/s per device:\n\n", (long long)s->considered, (long long)s->valid,
		(long long)s->fitting, s->n);
	fprintf(fp, "  #  rep shard  tp  pp  cp  AC            mb x acc   needs GiB  tokens/s/dev  "
		"step s  MFU%%  why\n");
	for (int i = 0; i < s->n; i++) {
		const struct titan_est_candidate *c = &s->best[i];
		const struct titan_est_layout *l = &c->opts.layout;
		char mbs[24];

		if (l->pp > 1)
			snprintf(mbs, sizeof(mbs), "%lld/%lld", (long long)c->opts.pp_microbatch,
				 (long long)c->opts.local_batch);
		else
			snprintf(mbs, sizeof(mbs), "%lld x %lld", (long long)c->opts.local_batch,
				 (long long)c->opts.accum);
		fprintf(fp, "%3d  %3lld %5lld %3lld %3lld %3lld  %-13s %-9s %10.2f  %12s  %6.3f  %4.1f  %s\n",
			i + 1, (long long)l->dp_replicate, (long long)l->dp_shard, (long long)l->tp,
			(long long)l->pp, (long long)l->cp, titan_est_ac_str(&c->opts, ac, sizeof(ac)),
			mbs, gib((double)c->required_bytes), titan_format_grouped(g, sizeof(g), c->tokens_per_s),
			c->step_s, 100 * c->mfu_torchtitan, c->reason);
	}
	if (s->n == 0)
		fprintf(fp, "  (no layout fits: more GPUs, a shorter sequence or a smaller batch)\n");
	return ferror(fp) ? titan_error(TITAN_E_IO, "cannot write the report") : 0;
}
