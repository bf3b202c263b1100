/* test_estimate.c — lib/estimate: the CPU model equals what a titan_llama
 * step allocates, byte for byte and tag for tag; known answers of the GPU
 * model and of the FLOP counts; layout checks name the constraint; 405B on
 * 8 GPUs does not fit without overflowing; pipeline stage splits; the
 * search ranks fitting layouts; the JSON carries titan-memprof's fields. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/estimate.h"
#include "titan/model.h"
#include "titan/ops.h"
#include "titan/train.h"
#include "tiny_model.h"

static struct titan_model_dims small(int64_t dim, int64_t layers, int64_t heads, int64_t kv,
				     int64_t vocab)
{
	struct titan_model_dims d = tiny_dims(dim, layers, heads, kv, vocab);

	snprintf(d.flavor, sizeof(d.flavor), "custom");
	return d;
}

#define cpu_opts tiny_cpu_opts

static const struct titan_est_item *item(const struct titan_est_rank *r, const char *prefix)
{
	for (int i = 0; i < r->nitems; i++)
		if (!strncmp(r->items[i].name, prefix, strlen(prefix)))
			return &r->items[i];
	return NULL;
}

/* One training step of titan_llama (forward, loss, backward, gradient
 * norm, AdamW) on a private allocator: its peak and tags must be the CPU
 * model's, minus what titan-train itself adds (inputs and labels). */
static void step_matches(const struct titan_model_dims *d, int64_t B, int64_t S,
			 enum titan_est_ac ac, int every, int threads)
{
	struct titan_est_opts eo = cpu_opts(B, S, ac, every, threads);
	struct titan_llama_opts lo = {.batch = B, .seq = S, .ce_chunk = 0};
	struct titan_allocator *a = titan_allocator_new("test", NULL);
	struct titan_adamw_hparams hp = {1e-3, 0.9, 0.95, 1e-8, 0.1};
	struct titan_estimate e;
	struct titan_backend be;
	struct titan_llama *m;
	struct titan_mem_stats st;
	int32_t *in = malloc((size_t)(B * S) * sizeof(int32_t));
	int32_t *lab = malloc((size_t)(B * S) * sizeof(int32_t));
	const struct titan_est_item *io;
	double loss, norm;
	int64_t valid, data;
	float coef;

	lo.ac = ac == TITAN_EST_AC_NONE ? TITAN_AC_NONE :
		ac == TITAN_EST_AC_FULL ? TITAN_AC_FULL :
		ac == TITAN_EST_AC_OP ? TITAN_AC_SELECTIVE_OP : TITAN_AC_SELECTIVE;
	lo.ac_every = every;
	assert_non_null(a);
	for (int64_t i = 0; i < B * S; i++) {
		in[i] = (int32_t)((i * 7919) % d->vocab_size);
		lab[i] = (int32_t)((i * 104729 + 3) % d->vocab_size);
	}
	assert_int_equal(titan_backend_cpu_init(&be, threads), 0);
	be.alloc = a;
	assert_int_equal(titan_llama_new(d, &lo, &be, a, &m), 0);
	titan_llama_init_weights(m, 1);
	titan_mem_reset_peak(a);
	assert_int_equal(titan_llama_zero_grads(m), 0);
	assert_int_equal(titan_llama_step(m, in, lab, 1e-3f, true, &loss, &valid), 0);
	assert_int_equal(titan_llama_grad_norm(m, 1.0, &norm, &coef), 0);
	assert_int_equal(titan_llama_adamw(m, &hp, 1, coef), 0);
	titan_mem_get_stats(a, &st);

	assert_int_equal(titan_estimate_run(d, &eo, &e), 0);
	io = item(&e.ranks[0], "inputs + labels");
	assert_non_null(io);
	data = io->bytes;
	if (st.total_peak != e.ranks[0].step_peak_bytes - data)
		fail_msg("peak: titan_llama %lld, lib/estimate/cpu.c %lld (update cpu.c to what "
			 "lib/train and lib/cpu allocate)", (long long)st.total_peak,
			 (long long)(e.ranks[0].step_peak_bytes - data));
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		int64_t want = e.ranks[0].at_peak[t] - (t == TITAN_MEM_DATA ? data : 0);
		int64_t own = e.ranks[0].tag_peak[t] - (t == TITAN_MEM_DATA ? data : 0);

		if (st.peak_at_total[t] != want || st.peak[t] != own)
			fail_msg("tag %s: measured %lld at the peak / %lld own peak, estimated %lld / %lld",
				 titan_mem_tag_name((enum titan_mem_tag)t),
				 (long long)st.peak_at_total[t], (long long)st.peak[t],
				 (long long)want, (long long)own);
	}
	titan_estimate_release(&e);
	titan_llama_free(m);
	titan_allocator_free(a);
	free(in);
	free(lab);
}

static void test_cpu_model_is_exact(void **state)
{
	struct titan_model_dims d = small(64, 2, 4, 2, 97), t;

	(void)state;
	step_matches(&d, 2, 64, TITAN_EST_AC_NONE, 0, 1);
	step_matches(&d, 2, 64, TITAN_EST_AC_NONE, 0, 2);
	step_matches(&d, 1, 200, TITAN_EST_AC_FULL, 0, 3);
	step_matches(&d, 3, 33, TITAN_EST_AC_SELECTIVE, 2, 2);
	d = small(48, 5, 6, 3, 2000); /* loss chunk dominates, 5 blocks */
	step_matches(&d, 2, 700, TITAN_EST_AC_SELECTIVE, 2, 2);
	step_matches(&d, 1, 16, TITAN_EST_AC_SELECTIVE, 1, 4);
	step_matches(&d, 2, 96, TITAN_EST_AC_OP, 0, 2);
	t = small(32, 3, 4, 4, 50);
	t.tied = true;
	step_matches(&t, 4, 8, TITAN_EST_AC_FULL, 0, 1);
}

/* titan-train's sgemm probe and its inputs/labels */
static void test_cpu_startup_and_data(void **state)
{
	struct titan_model_dims d = small(64, 2, 4, 2, 768);
	struct titan_est_opts o = cpu_opts(2, 64, TITAN_EST_AC_NONE, 0, 2);
	struct titan_estimate e;
	const struct titan_est_rank *r;

	(void)state;
	o.cpu_peak_probe = true;
	o.accum = 3;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	r = &e.ranks[0];
	/* the probe runs alone, before the model exists */
	assert_int_equal(r->moments[r->peak_moment].phase, TITAN_EST_PHASE_STARTUP);
	assert_int_equal(r->peak_bytes, 3 * 1024 * 1024 * 4);
	assert_true(r->step_peak_bytes < r->peak_bytes);
	assert_int_equal(item(r, "inputs + labels")->bytes, 3 * 2 * 64 * 2 * 4);
	/* the metrics of tests/bats/titan-train.bats' tiny model, measured */
	o.accum = 1;
	d.multiple_of = 32;
	d.ffn_hidden = titan_ffn_hidden_dim(d.dim, d.multiple_of, d.ffn_dim_multiplier);
	titan_estimate_release(&e);
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_int_equal(e.ranks[0].peak_bytes, 12582912);
	assert_int_equal(e.ranks[0].step_peak_bytes, 4966400);
	assert_int_equal(e.ranks[0].at_peak[TITAN_MEM_WORKSPACE], 12582912);
	assert_int_equal(e.ranks[0].at_peak[TITAN_MEM_PARAMS], 0);
	assert_string_equal(titan_est_phase_name(e.ranks[0].moments[e.ranks[0].peak_moment].phase),
			    "startup");
	titan_estimate_release(&e);
}

static struct titan_est_opts gpu_opts(const char *dev, int64_t ngpu)
{
	struct titan_est_opts o;

	memset(&o, 0, sizeof(o));
	assert_int_equal(titan_est_device_lookup(dev, &o.dev), 0);
	o.ngpu = ngpu;
	o.gpus_per_node = 8;
	o.layout = (struct titan_est_layout){1, -1, 1, 1, 1};
	o.local_batch = 2;
	o.seq_len = 128;
	o.accum = 1;
	o.pp_microbatch = 1;
	o.schedule = TITAN_EST_1F1B;
	o.ac = TITAN_EST_AC_NONE;
	o.param_bytes = 2;
	o.master_bytes = o.reduce_bytes = o.optim_bytes = 4;
	o.ce_chunk = 1024;
	o.loss_parallel = true;
	o.mfu = 0.4;
	return o;
}

/* One GPU: titan-train's CUDA path (lib/estimate/gpu_titan.c): the CPU
 * path's buffers, lib/cuda's own rows, the caching allocator's reserved
 * bytes as the peak (no overhead on top); --model-of torchtitan and two
 * GPUs: torchtitan's model.  tests/bats/titan-estimate-cuda.bats holds
 * the GPU measurements. */
static void test_gpu_titan_cuda(void **state)
{
	struct titan_model_dims d = small(64, 2, 4, 2, 97);
	struct titan_est_opts o = gpu_opts("h100-80g", 1), c;
	struct titan_estimate e, ec;
	const struct titan_est_rank *r;
	int64_t sum = 0;

	(void)state;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_true(e.titan_cuda);
	r = &e.ranks[0];
	assert_int_equal(r->peak_bytes, r->reserved_bytes);
	assert_true(e.opts.dev.alloc_overhead == 0);
	assert_int_equal(item(r, "CUDA: cuBLAS workspace")->bytes, 32 << 20);
	assert_non_null(item(r, "CUDA: bf16 GEMM operands"));
	assert_non_null(item(r, "CUDA: bf16 dy / classifier W"));
	assert_non_null(item(r, "CUDA: op scratch"));
	assert_non_null(item(r, "caching allocator: rounding"));
	/* cuDNN's attention (bf16, head_dim 16, GQA 4/2, B 2, T 128): the
	 * backward's staging q k v o dO dq dk dv (bf16), dQ_accum and
	 * softmax_sum (fp32), then its plan's workspace (B·H·128·128·2 +
	 * B·H·T·D·4 + 256), + 12.5% */
	assert_int_equal(item(r, "CUDA: cuDNN attention")->bytes,
			 (5 * 32768 + 3 * 16384 + 65536 + 4096 + 262144 + 65536 + 256) * 9 / 8);
	/* one span table (21 tensors of one chunk each): chunks (16 B), first
	 * (n + 1 int64), part and tot (doubles), no_decay (bytes) */
	assert_int_equal(item(r, "CUDA: multi-tensor")->bytes, 21 * 16 + 22 * 8 + 21 * 8 + 21 * 8 + 21);
	for (int i = 0; i < r->nitems; i++)
		sum += r->items[i].bytes;
	assert_int_equal(sum, r->peak_bytes);
	/* small blocks: whole 2 MiB segments (the small pool), 20 MiB ones */
	assert_int_equal(r->peak_bytes % (2 << 20), 0);
	/* the model's buffers are the CPU path's */
	c = cpu_opts(2, 128, TITAN_EST_AC_NONE, 0, 1);
	assert_int_equal(titan_estimate_run(&d, &c, &ec), 0);
	assert_int_equal(item(r, "weights (fp32 arena)")->bytes,
			 item(&ec.ranks[0], "weights (fp32 arena)")->bytes);
	assert_int_equal(item(r, "saved activations")->bytes,
			 item(&ec.ranks[0], "saved activations")->bytes);
	titan_estimate_release(&ec);
	titan_estimate_release(&e);
	/* fp32 GEMMs: no bf16 operand buffers, titan's attention kernels */
	o.param_bytes = 4;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_null(item(&e.ranks[0], "CUDA: bf16"));
	assert_null(item(&e.ranks[0], "CUDA: cuDNN"));
	assert_non_null(item(&e.ranks[0], "CUDA: multi-tensor"));
	titan_estimate_release(&e);
	/* torchtitan's model: asked for, or two GPUs */
	o.model_of = TITAN_EST_MODEL_TORCHTITAN;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_false(e.titan_cuda);
	assert_string_equal(e.model_note, "");
	assert_true(e.ranks[0].reserved_bytes > e.ranks[0].peak_bytes);
	titan_estimate_release(&e);
	o = gpu_opts("h100-80g", 2);
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_false(e.titan_cuda);
	assert_string_equal(e.model_note, "titan's CUDA path is modelled on one GPU only");
	titan_estimate_release(&e);
}

static void test_gpu_known_answers(void **state)
{
	struct titan_model_dims d;
	struct titan_est_opts o = gpu_opts("h100-80g", 2);
	struct titan_estimate e;
	const struct titan_est_rank *r;

	(void)state;
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_int_equal(e.opts.layout.dp_shard, 2);
	r = &e.ranks[0];
	assert_int_equal(r->params_local, 6163712);
	assert_int_equal(r->params_shard, 3081856);
	assert_int_equal(item(r, "master weights")->bytes, 3081856 * 4);
	assert_int_equal(item(r, "AdamW moments")->bytes, 3081856 * 8);
	/* per token: (6C + 2q + 2kv + 4F) bf16 + 4H lse per block, 3C for the
	 * final norm; 256 tokens */
	assert_int_equal(item(r, "saved activations")->bytes,
			 256 * (6 * ((6 * 256 + 2 * 256 + 2 * 256 + 4 * 768) * 2 + 4 * 16) +
				3 * 256 * 2));
	/* FSDP gathers one block (the output unit is smaller here) + prefetch */
	assert_int_equal(item(r, "FSDP all-gather")->bytes,
			 2 * 2 * (4 * 256 * 256 + 3 * 256 * 768 + 2 * 256));
	assert_int_equal(item(r, "fused classifier")->bytes, 256 * 2048 * 4);
	assert_null(item(r, "recomputed block"));
	/* FLOPs: torchtitan's formula and the executed count */
	assert_true(e.perf.flops_per_token_torchtitan ==
		    6.0 * (6163712 - 524288) + 12.0 * 6 * 16 * 16 * 128);
	assert_true(fabs(e.perf.flops_per_token_exact - 35203584.0) < 1e-3);
	assert_true(e.perf.known && e.perf.tokens_per_s > 0 && e.fits);
	titan_estimate_release(&e);

	o.ac = TITAN_EST_AC_FULL;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_true(fabs(e.perf.flops_recompute - 6 * (1703936.0 + 66048.0)) < 1e-3);
	r = &e.ranks[0];
	assert_int_equal(item(r, "saved activations")->bytes, 256 * (6 * 256 * 2 + 3 * 256 * 2));
	assert_non_null(item(r, "recomputed block"));
	titan_estimate_release(&e);

	/* bf16 master weights halve weights and moments; 8 x TP splits linears */
	o = gpu_opts("h100-80g", 8);
	o.layout.tp = 8;
	o.layout.dp_shard = 1;
	o.master_bytes = o.optim_bytes = 2;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	r = &e.ranks[0];
	assert_int_equal(r->params_local, (6163712 - 12 * 256 - 256) / 8 + 12 * 256 + 256);
	assert_int_equal(item(r, "master weights")->bytes, r->params_local * 2);
	assert_non_null(item(r, "sequence-parallel"));
	assert_null(item(r, "FSDP"));
	titan_estimate_release(&e);
}

static void expect_invalid(const struct titan_model_dims *d, struct titan_est_opts *o,
			   const char *needle)
{
	assert_int_equal(titan_est_check(o, d), TITAN_E_INVALID);
	if (!strstr(titan_errmsg(), needle))
		fail_msg("'%s' does not name '%s'", titan_errmsg(), needle);
}

static void test_layout_errors(void **state)
{
	struct titan_model_dims d;
	struct titan_est_opts o;
	struct titan_estimate e;

	(void)state;
	assert_int_equal(titan_model_flavor("8B", &d), 0);
	o = gpu_opts("h100-80g", 64);
	o.layout = (struct titan_est_layout){1, 4, 2, 2, 1};
	expect_invalid(&d, &o, "but --ngpu is 64");
	o = gpu_opts("h100-80g", 60);
	o.layout.tp = 8;
	expect_invalid(&d, &o, "not divisible by dp_replicate x tp x pp x cp = 8");
	o = gpu_opts("h100-80g", 48);
	o.layout.tp = 3;
	expect_invalid(&d, &o, "tensor_parallel_degree 3 must divide model n_heads 32");
	o = gpu_opts("h100-80g", 64);
	o.layout.tp = 16;
	expect_invalid(&d, &o, "n_kv_heads 8");
	o = gpu_opts("h100-80g", 64);
	o.layout.tp = 2;
	o.layout.cp = 4;
	o.seq_len = 8200;
	expect_invalid(&d, &o, "training.seq_len: 8200 is not divisible by 16");
	o = gpu_opts("h100-80g", 64);
	o.layout.pp = 64;
	o.schedule = TITAN_EST_INTERLEAVED_1F1B;
	expect_invalid(&d, &o, "at most 17 stages");
	o = gpu_opts("h100-80g", 16);
	o.layout.pp = 4;
	o.local_batch = 6;
	o.pp_microbatch = 4;
	expect_invalid(&d, &o, "does not divide training.local_batch_size 6");
	o = cpu_opts(1, 64, TITAN_EST_AC_NONE, 0, 1);
	o.ngpu = 2;
	o.layout.pp = 2;
	assert_int_equal(titan_est_check(&o, &d), 0);
	o = cpu_opts(1, 64, TITAN_EST_AC_NONE, 0, 1);
	o.ngpu = 2;
	o.layout.cp = 2;
	assert_int_equal(titan_est_check(&o, &d), 0);
	o.cp_alltoall = true;
	assert_int_equal(titan_est_check(&o, &d), 0);
	/* the microbatch counts titan-train's schedules refuse (pp.c's check) */
	o = cpu_opts(3, 64, TITAN_EST_AC_NONE, 0, 1);
	o.ngpu = 2;
	o.layout.pp = 2;
	o.schedule = TITAN_EST_INTERLEAVED_1F1B;
	assert_int_equal(titan_estimate_run(&d, &o, &e), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "the 3 microbatches (local_batch_size / "
				"pipeline_parallel_microbatch_size) must be a multiple of "
				"pipeline_parallel_degree 2"));
	o = cpu_opts(6, 64, TITAN_EST_AC_NONE, 0, 1);
	o.ngpu = 2;
	o.layout.pp = 2;
	o.schedule = TITAN_EST_INTERLEAVED_ZB;
	o.pp_microbatch = 1;
	o.local_batch = 5;
	assert_int_equal(titan_estimate_run(&d, &o, &e), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "must be a multiple of the 2 rounds"));
	o.local_batch = 6;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	titan_estimate_release(&e);
	o = cpu_opts(1, 64, TITAN_EST_AC_NONE, 0, 1);
	o.ngpu = 2;
	o.layout.tp = 2;
	assert_int_equal(titan_est_check(&o, &d), 0);
	o = cpu_opts(1, 64, TITAN_EST_AC_NONE, 0, 1);
	o.ngpu = 2;
	o.layout.dp_shard = 2;
	assert_int_equal(titan_est_check(&o, &d), 0);
	o.rank = 2;
	expect_invalid(&d, &o, "--rank: 2 is not a rank of 2");
	o = gpu_opts("h100-80g", 8);
	o.mfu = 1.5;
	expect_invalid(&d, &o, "--mfu");
}

static void test_huge_does_not_overflow(void **state)
{
	struct titan_model_dims d;
	struct titan_est_opts o = gpu_opts("h100-80g", 8);
	struct titan_estimate e;

	(void)state;
	assert_int_equal(titan_model_flavor("405B", &d), 0);
	o.seq_len = 8192;
	o.ac = TITAN_EST_AC_FULL;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_false(e.fits);
	/* weights, grads and 2 moments of 405.85e9 parameters over 8 ranks */
	assert_true(e.required_bytes > (int64_t)(405e9 * 16 / 8));
	assert_true(e.margin_bytes < 0);
	assert_true(e.device_bytes > 0 && e.required_bytes < INT64_MAX / 4);
	titan_estimate_release(&e);
	/* a sequence no allocator could hold is an error, not a wrap-around */
	o.seq_len = (int64_t)1 << 50;
	assert_int_equal(titan_estimate_run(&d, &o, &e), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "64-bit"));
	titan_estimate_release(&e);
	o = cpu_opts(1 << 20, 1 << 20, TITAN_EST_AC_NONE, 0, 1);
	assert_int_equal(titan_estimate_run(&d, &o, &e), TITAN_E_INVALID);
	titan_estimate_release(&e);
}

static void test_pipeline_stages(void **state)
{
	struct titan_model_dims d;
	struct titan_est_opts o = gpu_opts("h100-80g", 512);
	struct titan_estimate e;
	int64_t total = 0;

	(void)state;
	assert_int_equal(titan_model_flavor("405B", &d), 0);
	o.layout = (struct titan_est_layout){1, -1, 8, 8, 1};
	o.local_batch = 32;
	o.seq_len = 8192;
	o.ac = TITAN_EST_AC_FULL;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_int_equal(e.nranks, 8);
	/* 126 layers + embedding + output over 8 stages: 16 units each */
	assert_int_equal(e.ranks[0].layers, 15);
	assert_int_equal(e.ranks[3].layers, 16);
	assert_int_equal(e.ranks[7].layers, 15);
	assert_true(e.ranks[0].first && !e.ranks[0].last && e.ranks[7].last);
	for (int i = 0; i < 8; i++)
		total += e.ranks[i].layers;
	assert_int_equal(total, 126);
	/* 1F1B: the first rank holds pp microbatches, the last one */
	assert_non_null(strstr(item(&e.ranks[0], "saved activations")->name, "(8 microbatch"));
	assert_non_null(strstr(item(&e.ranks[7], "saved activations")->name, "(1 microbatch"));
	assert_true(e.perf.pp_bubble_s > 0);
	titan_estimate_release(&e);

	o.schedule = TITAN_EST_INTERLEAVED_1F1B;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_int_equal(e.stages_per_rank, 2);
	assert_int_equal(e.ranks[0].stages[1], 8);
	assert_int_equal(e.ranks[0].layers, 7 + 8);
	assert_true(e.ranks[7].last);
	titan_estimate_release(&e);
	o.schedule = TITAN_EST_ZBV;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	assert_true(e.ranks[0].first && e.ranks[0].last); /* V: stages 0 and 15 */
	titan_estimate_release(&e);
}

static void test_search(void **state)
{
	struct titan_model_dims d;
	struct titan_est_opts o = gpu_opts("h100-80g", 16);
	struct titan_est_search s;

	(void)state;
	assert_int_equal(titan_model_flavor("8B", &d), 0);
	o.seq_len = 8192;
	o.local_batch = 1;
	assert_int_equal(titan_est_search_run(&d, &o, 32, 4, &s), 0);
	assert_int_equal(s.n, 4);
	assert_true(s.considered >= s.valid && s.valid >= s.fitting && s.fitting >= 4);
	for (int i = 0; i < s.n; i++) {
		const struct titan_est_layout *l = &s.best[i].opts.layout;

		assert_true(s.best[i].fits);
		assert_int_equal(l->dp_replicate * l->dp_shard * l->tp * l->pp * l->cp, 16);
		/* 32 sequences per step in every layout */
		assert_int_equal(s.best[i].opts.local_batch * s.best[i].opts.accum *
				 l->dp_replicate * l->dp_shard, 32);
		assert_true(strlen(s.best[i].reason) > 0);
		if (i)
			assert_true(s.best[i].tokens_per_s <= s.best[i - 1].tokens_per_s);
	}
	assert_non_null(strstr(s.best[0].reason, "fastest"));
	titan_est_search_release(&s);
	/* nothing fits: 405B on 8 GPUs */
	assert_int_equal(titan_model_flavor("405B", &d), 0);
	o = gpu_opts("h100-80g", 8);
	assert_int_equal(titan_est_search_run(&d, &o, -1, 5, &s), 0);
	assert_int_equal(s.n, 0);
	assert_int_equal(s.fitting, 0);
	titan_est_search_release(&s);
}

static void test_json_contract(void **state)
{
	struct titan_model_dims d = small(64, 2, 4, 2, 768);
	struct titan_est_opts o = cpu_opts(2, 64, TITAN_EST_AC_FULL, 0, 2);
	struct titan_estimate e;
	struct titan_json j;
	json_error_t err;
	json_t *root, *r, *tag;
	static const char *const phases[] = {"startup", "forward", "loss", "backward", "optimizer"};
	bool known = false;

	(void)state;
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	titan_json_init(&j);
	titan_estimate_json(&e, &j);
	root = json_loads(titan_json_str(&j), 0, &err);
	assert_non_null(root);
	assert_string_equal(json_string_value(json_object_get(root, "format")), "titan-estimate");
	assert_int_equal(json_integer_value(json_object_get(root, "version")), 1);
	r = json_array_get(json_object_get(root, "ranks"), 0);
	assert_non_null(r);
	assert_int_equal(json_integer_value(json_object_get(r, "stage")), 0);
	assert_int_equal(json_integer_value(json_object_get(r, "peak_bytes")), e.ranks[0].peak_bytes);
	for (size_t i = 0; i < 5; i++)
		known |= !strcmp(json_string_value(json_object_get(r, "peak_phase")), phases[i]);
	assert_true(known);
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		const char *name = titan_mem_tag_name((enum titan_mem_tag)t);

		tag = json_object_get(json_object_get(r, "at_peak"), name);
		assert_true(json_is_integer(tag));
		assert_int_equal(json_integer_value(tag), e.ranks[0].at_peak[t]);
		tag = json_object_get(json_object_get(r, "tag_peak"), name);
		assert_int_equal(json_integer_value(tag), e.ranks[0].tag_peak[t]);
	}
	assert_true(json_is_null(json_object_get(root, "throughput")));
	json_decref(root);
	titan_json_release(&j);
	titan_estimate_release(&e);
}

static void test_opts_from_config(void **state)
{
	struct titan_config c;
	struct titan_est_device dev;
	struct titan_est_opts o;

	(void)state;
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_set(&c, "parallelism.tensor_parallel_degree", "2", "t"), 0);
	assert_int_equal(titan_config_set(&c, "training.global_batch_size", "64", "t"), 0);
	assert_int_equal(titan_config_set(&c, "training.local_batch_size", "2", "t"), 0);
	assert_int_equal(titan_config_set(&c, "activation_checkpoint.selective_ac_option", "op", "t"), 0);
	assert_int_equal(titan_config_set(&c, "model.converters", "float8", "t"), 0);
	assert_int_equal(titan_est_device_lookup("a100-80g", &dev), 0);
	assert_int_equal(titan_est_opts_from_config(&o, &c, &dev, 16), 0);
	assert_int_equal(o.accum, 4); /* 64 / (2 x 8 data-parallel ranks) */
	assert_int_equal(o.ac, TITAN_EST_AC_OP);
	assert_true(o.float8);
	assert_int_equal(o.param_bytes, 2);
	assert_int_equal(o.master_bytes, 4);
	/* titan-train reads the keys the same way on the CPU */
	assert_int_equal(titan_est_device_lookup("cpu", &dev), 0);
	assert_int_equal(titan_config_set(&c, "training.global_batch_size", "-1", "t"), 0);
	assert_int_equal(titan_est_opts_from_config(&o, &c, &dev, 1), 0);
	assert_int_equal(o.ac, TITAN_EST_AC_OP);
	assert_int_equal(titan_est_device_lookup("v100", &dev), TITAN_E_INVALID);
	titan_config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpu_model_is_exact),
		cmocka_unit_test(test_cpu_startup_and_data),
		cmocka_unit_test(test_gpu_known_answers),
		cmocka_unit_test(test_gpu_titan_cuda),
		cmocka_unit_test(test_layout_errors),
		cmocka_unit_test(test_huge_does_not_overflow),
		cmocka_unit_test(test_pipeline_stages),
		cmocka_unit_test(test_search),
		cmocka_unit_test(test_json_contract),
		cmocka_unit_test(test_opts_from_config),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
