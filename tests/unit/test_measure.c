/* test_measure.c — the measure pass (titan/estimate.h) and the instant
 * communicator (titan/dist.h): blocks of address space counted as the
 * tagged allocator counts real ones (and faulting when touched, with the
 * guard), a backend whose ops do nothing but take the CPU ops' workspace,
 * a communicator that plays rank r of any group at once; and the point of
 * them: one training step of the real engine on the measure backend
 * allocates, under every tag, at every peak, exactly what the same step
 * on the CPU backend allocates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "titan/config.h"
#include "titan/core.h"
#include "titan/dist.h"
#include "titan/estimate.h"
#include "titan/model.h"
#include "titan/ops.h"
#include "titan/train.h"

#include "estimate/est_impl.h"
#include "train/cp_attn.h"
#include "train/engine.h"
#include "train/metrics.h"
#include "tiny_model.h"

/* ------------------------------------------------------------ instant comm */

static void test_instant_comm(void **state)
{
	struct titan_comm *c;
	float send[4] = {1, 2, 3, 4}, recv[16];
	struct titan_comm_req *q = NULL;

	(void)state;
	assert_int_equal(titan_comm_instant_new("fsdp", 5, 64, 3, 8, &c), 0);
	assert_int_equal(titan_comm_rank(c), 5);
	assert_int_equal(titan_comm_size(c), 64);
	assert_string_equal(titan_comm_name(c), "fsdp");
	assert_int_equal(titan_comm_world_rank(c, 0), 3);
	assert_int_equal(titan_comm_world_rank(c, 63), 3 + 63 * 8);
	assert_int_equal(titan_comm_world_rank(c, 64), -1);
	assert_null(titan_comm_mpi_handle(c));
	/* done at once, no buffer touched */
	memset(recv, 0x5a, sizeof(recv));
	assert_int_equal(titan_comm_iall_gather(c, send, recv, 4, TITAN_DTYPE_F32, "x", &q), 0);
	assert_non_null(q); /* a request, as any communicator's (dp.c keeps it as state) */
	assert_true(titan_comm_test(q));
	assert_int_equal(titan_comm_wait(q), 0);
	assert_int_equal(titan_comm_all_reduce(c, send, send, 4, TITAN_DTYPE_F32, TITAN_REDOP_SUM, "x"), 0);
	assert_int_equal(titan_comm_reduce_scatter(c, recv, send, 4, TITAN_DTYPE_F32, "x"), 0);
	assert_int_equal(titan_comm_broadcast(c, send, 4, TITAN_DTYPE_F32, 63, "x"), 0);
	assert_int_equal(titan_comm_barrier(c, "x"), 0);
	assert_int_equal(titan_comm_isend(c, send, 4, TITAN_DTYPE_F32, 6, 1, "x", &q), 0);
	assert_int_equal(titan_comm_wait(q), 0);
	assert_int_equal(titan_comm_irecv(c, recv, 4, TITAN_DTYPE_F32, 4, 1, "x", &q), 0);
	assert_int_equal(titan_comm_wait(q), 0);
	assert_true(send[0] == 1 && send[3] == 4);
	for (size_t i = 0; i < sizeof(recv); i++)
		assert_int_equal(((unsigned char *)recv)[i], 0x5a);
	titan_comm_free(c);
	assert_int_equal(titan_comm_instant_new("tp", 2, 2, 0, 1, &c), TITAN_E_INVALID);
	assert_null(c);
	assert_int_equal(titan_comm_instant_new("tp", 0, 1, 0, 0, &c), TITAN_E_INVALID);
}

/* ------------------------------------------------------- counting memory */

/* Terabytes counted, none committed; tags, peaks and the breakdown at the
 * peak as the host allocator keeps them. */
static void test_counting_allocator(void **state)
{
	struct titan_mem_backend mb;
	struct titan_allocator *a;
	struct titan_mem_stats st;
	const size_t big = (size_t)3 << 40; /* 3 TiB */
	void *p, *g, *w;

	(void)state;
	titan_measure_mem_backend(&mb, true);
	assert_non_null(a = titan_allocator_new("measure", &mb));
	assert_non_null(p = titan_mem_calloc(a, big, TITAN_MEM_PARAMS)); /* zeroing is free */
	assert_non_null(g = titan_mem_alloc(a, 1000, TITAN_MEM_GRADS));
	assert_int_equal((uintptr_t)g % 64, 0);
	assert_non_null(w = titan_mem_alloc(a, 0, TITAN_MEM_WORKSPACE));
	assert_int_equal(titan_mem_size(a, w, NULL), 0);
	titan_mem_free(a, g);
	titan_mem_free(a, w);
	assert_non_null(g = titan_mem_alloc(a, 10, TITAN_MEM_COMM));
	titan_mem_get_stats(a, &st);
	assert_true(st.total_cur == (int64_t)big + 10);
	assert_true(st.total_peak == (int64_t)big + 1000);
	assert_true(st.peak_at_total[TITAN_MEM_GRADS] == 1000);
	assert_true(st.peak_at_total[TITAN_MEM_COMM] == 0);
	assert_true(st.peak[TITAN_MEM_COMM] == 10);
	assert_true(st.cur[TITAN_MEM_PARAMS] == (int64_t)big);
	assert_true(st.n_alloc == 4 && st.n_free == 2);
	titan_mem_free(a, p);
	titan_mem_free(a, g);
	titan_allocator_free(a);
}

/* With the guard, host code that touches a block faults (in a child). */
static void test_guard_faults(void **state)
{
	struct titan_mem_backend mb;
	int status;
	pid_t pid;

	(void)state;
	for (int guard = 0; guard < 2; guard++) {
		titan_measure_mem_backend(&mb, guard);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			struct titan_allocator *a = titan_allocator_new("m", &mb);
			volatile char *p = titan_mem_alloc(a, 4096, TITAN_MEM_DATA);

			signal(SIGSEGV, SIG_DFL); /* not cmocka's handler */
			p[7] = 1;
			_exit(p[7] == 1 ? 0 : 3);
		}
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (guard)
			assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
		else
			assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
}

/* The ops' workspace: taken and given back, the peak the CPU ops reach. */
static void test_backend_workspace(void **state)
{
	struct titan_mem_backend mb;
	struct titan_allocator *a;
	struct titan_backend be;
	struct titan_mem_stats st;
	struct titan_attn_dims d = {.batch = 2, .seq = 130, .n_heads = 4, .n_kv_heads = 2,
				    .head_dim = 8};
	double s;
	int64_t nv;
	float *buf;

	(void)state;
	titan_measure_mem_backend(&mb, true);
	assert_non_null(a = titan_allocator_new("measure", &mb));
	titan_backend_measure_init(&be, a, 3);
	assert_non_null(buf = be.ops->buf_alloc(&be, 1 << 20, TITAN_MEM_COMM));
	assert_int_equal(be.ops->buf_memset(&be, buf, 1, 1 << 20), 0);
	assert_int_equal(be.ops->buf_copy_rows(&be, buf, 0, 4, buf, 8, 4, 3, 4), 0);
	assert_int_equal(be.ops->buf_copy_rows(&be, buf, 0, 2, buf, 8, 4, 3, 4), TITAN_E_INVALID);
	/* attention forward: 2 x 4 x 3 query blocks, 3 threads of 64·64 + 8·64 + 128 */
	assert_int_equal(be.ops->attention_fwd(&be, buf, buf, buf, buf, buf, &d), 0);
	titan_mem_get_stats(a, &st);
	assert_true(st.peak[TITAN_MEM_WORKSPACE] == 3 * (64 * 64 + 8 * 64 + 128) * 4);
	assert_true(st.cur[TITAN_MEM_WORKSPACE] == 0);
	titan_mem_reset_peak(a);
	/* backward: 2 x 2 tasks, 3 threads of 130 + 2·64·64 + 2·8·64 */
	assert_int_equal(be.ops->attention_bwd(&be, buf, buf, buf, buf, buf, buf, buf, buf, buf,
					       &d), 0);
	titan_mem_get_stats(a, &st);
	assert_true(st.peak[TITAN_MEM_WORKSPACE] == 3 * (130 + 2 * 64 * 64 + 2 * 8 * 64) * 4);
	titan_mem_reset_peak(a);
	/* the loss: 7 x 100 logits and 7 row losses at once; nothing valid */
	assert_int_equal(be.ops->classifier_ce(&be, &s, &nv, buf, buf, buf, buf, (int32_t *)buf,
					       20, 8, 100, 1.0f, 7), 0);
	titan_mem_get_stats(a, &st);
	assert_true(st.peak[TITAN_MEM_WORKSPACE] == 7 * 100 * 4 + 7 * 8);
	assert_true(s == 0 && nv == 0);
	titan_mem_reset_peak(a);
	assert_int_equal(be.ops->sumsq(&be, &s, buf, 3 * TITAN_SUMSQ_CHUNK + 1), 0);
	titan_mem_get_stats(a, &st);
	assert_true(st.peak[TITAN_MEM_WORKSPACE] == 4 * 8 && s == 0);
	be.ops->buf_free(&be, buf);
	titan_mem_get_stats(a, &st);
	assert_true(st.total_cur == 0);
	titan_backend_release(&be);
	titan_allocator_free(a);
}

/* The one statement of the CPU ops' workspace (titan_cpu_*_ws, lib/cpu):
 * the CPU ops take exactly those bytes, and so do the measure backend's
 * ops, which titan-estimate counts. */
static int64_t ws_peak(struct titan_allocator *a)
{
	struct titan_mem_stats st;

	titan_mem_get_stats(a, &st);
	assert_true(st.cur[TITAN_MEM_WORKSPACE] == 0);
	titan_mem_reset_peak(a);
	return st.peak[TITAN_MEM_WORKSPACE];
}

static float *zeros(int64_t n)
{
	float *p = calloc((size_t)n, sizeof(float));

	assert_non_null(p);
	return p;
}

static void test_cpu_workspace_stated_once(void **state)
{
	static const struct titan_attn_dims d = {.batch = 2, .seq = 130, .n_heads = 4,
						 .n_kv_heads = 2, .head_dim = 8};
	const int64_t nq = d.batch * d.seq * d.n_heads * d.head_dim;
	const int64_t nkv = d.batch * d.seq * d.n_kv_heads * d.head_dim;
	const int64_t N = 20, C = 8, V = 100, nsq = 3 * TITAN_SUMSQ_CHUNK + 1;
	const int64_t bq = TITAN_ATTN_BLOCK, big = (int64_t)1 << 40;
	int64_t zb, rb;

	(void)state;
	titan_cpu_classifier_ce_ws(N, V, 7, &zb, &rb);
	for (int measure = 0; measure < 2; measure++) {
		struct titan_mem_backend mb;
		struct titan_allocator *a;
		struct titan_backend be;
		float *q = zeros(nq), *k = zeros(nkv), *v = zeros(nkv), *o = zeros(nq);
		float *lse = zeros(d.batch * d.seq * d.n_heads), *dout = zeros(nq);
		float *dq = zeros(nq), *dk = zeros(nkv), *dv = zeros(nkv);
		float *h = zeros(N * C), *w = zeros(V * C), *dh = zeros(N * C), *dw = zeros(V * C);
		float *x = zeros(nsq);
		int32_t *labels = calloc((size_t)N, sizeof(int32_t));
		double s;
		int64_t nv;

		assert_non_null(labels);
		if (measure) {
			titan_measure_mem_backend(&mb, false);
			assert_non_null(a = titan_allocator_new("measure", &mb));
			titan_backend_measure_init(&be, a, 3);
		} else {
			assert_non_null(a = titan_allocator_new("real", NULL));
			assert_int_equal(titan_backend_cpu_init(&be, 3), 0);
			be.alloc = a;
		}
		assert_int_equal(be.ops->attention_fwd(&be, o, lse, q, k, v, &d), 0);
		assert_true(ws_peak(a) == titan_cpu_attn_fwd_ws(3, bq, bq, d.batch, d.seq,
								 d.n_heads, d.head_dim));
		assert_int_equal(be.ops->attention_bwd(&be, dq, dk, dv, dout, q, k, v, o, lse, &d),
				 0);
		assert_true(ws_peak(a) == titan_cpu_attn_bwd_ws(3, bq, bq, d.batch, d.seq, d.seq,
								 d.n_kv_heads, d.head_dim));
		assert_int_equal(be.ops->classifier_ce(&be, &s, &nv, dh, dw, h, w, labels, N, C, V,
						       1.0f, 7), 0);
		assert_true(ws_peak(a) == zb + rb);
		assert_int_equal(be.ops->sumsq(&be, &s, x, nsq), 0);
		assert_true(ws_peak(a) == titan_cpu_sumsq_ws(nsq));
		titan_backend_release(&be);
		titan_allocator_free(a);
		free(q), free(k), free(v), free(o), free(lse), free(dq), free(dk), free(dv);
		free(dout), free(h), free(w), free(dh), free(dw), free(x), free(labels);
	}
	/* the sizes themselves: 3 threads of 64·64 + 8·64 + 128 floats forward,
	 * 130 + 2·64·64 + 2·8·64 backward; a size past 64 bits is -1 */
	assert_true(titan_cpu_attn_fwd_ws(3, 64, 64, 2, 130, 4, 8) ==
		    3 * (64 * 64 + 8 * 64 + 128) * 4);
	assert_true(titan_cpu_attn_bwd_ws(3, 64, 64, 2, 130, 130, 2, 8) ==
		    3 * (130 + 2 * 64 * 64 + 2 * 8 * 64) * 4);
	assert_true(zb == 7 * 100 * 4 && rb == 7 * 8);
	assert_true(titan_cpu_sumsq_ws(nsq) == 4 * 8 && titan_cpu_sumsq_ws(0) == 0);
	assert_true(titan_cpu_attn_fwd_ws(1, 64, 64, big, 64, big, 8) == -1);
	assert_true(titan_cpu_attn_bwd_ws(1, 64, 64, 1, (int64_t)1 << 62, 1, 1, 8) == -1);
}

/* ------------------------------------------------- the engine's dry run */

enum { B = 2, T = 70, V = 61 };

static struct titan_model_dims tiny(void)
{
	return tiny_dims(32, 3, 4, 2, V);
}

/* One step (two microbatches, norm, AdamW) of the engine on `be`, every
 * block from `a`; the allocator's stats after it. */
static void step(struct titan_config *cfg, struct titan_dist *dist, struct titan_backend *be,
		 struct titan_allocator *a, enum titan_ac_mode ac, struct titan_mem_stats *st)
{
	const struct titan_model_dims d = tiny();
	struct titan_llama_opts mo = {.batch = B, .seq = T, .ac = ac, .ce_chunk = 16};
	struct titan_adamw_hparams hp = {1e-2, 0.9, 0.95, 1e-8, 0.1};
	struct titan_engine *e = NULL;
	int32_t *in = calloc(B * T, sizeof(*in)), *lab = calloc(B * T, sizeof(*lab));
	double loss, norm;
	int64_t nv;
	float coef;

	assert_non_null(in);
	assert_non_null(lab);
	assert_int_equal(titan_parallelize(&(struct titan_parallelize_opts){
		.cfg = cfg, .dist = dist, .dims = &d, .mo = &mo, .be = be, .alloc = a,
		.tokens = B * T}, &e), 0);
	assert_int_equal(titan_engine_zero_grads(e), 0);
	titan_engine_begin_step(e, 2, 2 * B * T);
	for (int k = 0; k < 2; k++)
		assert_int_equal(titan_engine_train_microbatch(e, in, lab, &loss, &nv), 0);
	assert_int_equal(titan_engine_finish_grads(e), 0);
	assert_int_equal(titan_engine_grad_norm(e, 1.0, &norm, &coef), 0);
	assert_int_equal(titan_engine_optimizer_step(e, &hp, 1, coef), 0);
	titan_mem_get_stats(a, st);
	titan_engine_free(e);
	free(in);
	free(lab);
}

/* Every op the CPU backend has, the measure backend has: a dry run calls
 * whatever the model calls, and a missing entry is a NULL call. */
static void test_measure_ops_complete(void **state)
{
	struct titan_backend cpu, meas;
	const size_t n = (sizeof(struct titan_backend_ops) - offsetof(struct titan_backend_ops,
								       release)) / sizeof(void (*)(void));

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&cpu, 1), 0);
	titan_backend_measure_init(&meas, NULL, 1);
	for (size_t i = 0; i < n; i++) {
		void (*c)(void), (*m)(void);

		memcpy(&c, (const char *)cpu.ops + offsetof(struct titan_backend_ops, release) +
				   i * sizeof c, sizeof c);
		memcpy(&m, (const char *)meas.ops + offsetof(struct titan_backend_ops, release) +
				   i * sizeof m, sizeof m);
		if (c && !m)
			fail_msg("the measure backend lacks op %zu of struct titan_backend_ops "
				 "(counted from release)", i);
	}
	titan_backend_release(&cpu);
	titan_backend_release(&meas);
}

static void test_engine_dry_run_counts_as_real(void **state)
{
	struct titan_config cfg;
	struct titan_dist *dist;
	struct titan_parallel_dims pd;
	int argc = 1;
	char *args[] = {"test_measure", NULL}, **argv = args;
	const enum titan_ac_mode acs[] = {TITAN_AC_NONE, TITAN_AC_FULL};

	(void)state;
	setenv("TITAN_MPI", "0", 1);
	assert_int_equal(titan_config_init(&cfg), 0);
	assert_int_equal(titan_dist_init(&argc, &argv, &dist), 0);
	assert_int_equal(titan_parallel_dims_from_config(&pd, &cfg, 1), 0);
	assert_int_equal(titan_dist_mesh(dist, &pd), 0);
	for (size_t i = 0; i < sizeof(acs) / sizeof(*acs); i++) {
		struct titan_mem_backend mb;
		struct titan_allocator *real, *dry;
		struct titan_backend cpu, meas;
		struct titan_mem_stats sr, sd;

		/* the CPU backend on real memory, its workspace counted too */
		assert_non_null(real = titan_allocator_new("real", NULL));
		assert_int_equal(titan_backend_cpu_init(&cpu, 2), 0);
		cpu.alloc = real;
		step(&cfg, dist, &cpu, real, acs[i], &sr);
		/* the dry run: weight init and the ids are still written from
		 * the host (llama.c), so the open variant */
		titan_measure_mem_backend(&mb, false);
		assert_non_null(dry = titan_allocator_new("dry", &mb));
		titan_backend_measure_init(&meas, dry, 2);
		step(&cfg, dist, &meas, dry, acs[i], &sd);
		assert_true(sr.total_peak > 0);
		assert_true(sd.total_peak == sr.total_peak);
		assert_true(sd.total_cur == sr.total_cur);
		assert_true(sd.n_alloc == sr.n_alloc);
		for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
			assert_true(sd.peak[t] == sr.peak[t]);
			assert_true(sd.peak_at_total[t] == sr.peak_at_total[t]);
		}
		titan_backend_release(&cpu);
		titan_backend_release(&meas);
		titan_allocator_free(real);
		titan_allocator_free(dry);
	}
	titan_dist_finalize(dist, true, 0);
	titan_config_release(&cfg);
	unsetenv("TITAN_MPI");
}

/* titan-estimate --device cpu plays rank 1000 of a 1024-rank 405B layout
 * (FSDP 128 x TP 8) with the real FSDP engine, in well under a second and
 * without committing model-size memory: the backward moment holds block
 * l's gathered weights and unsharded gradients, and at most a few more
 * blocks' worth (prefetch, reductions in flight). */
static void test_estimate_dry_run_405b(void **state)
{
	struct titan_model_dims d;
	struct titan_est_opts o;
	struct titan_estimate e;
	/* one block of 405B on one TP rank of 8, fp32 bytes */
	const int64_t C = 16384, kv = 1024, F = 53248;
	const int64_t block = ((2 * C * C + 2 * C * kv + 3 * F * C) / 8 + 2 * C) * 4;
	const uint64_t t0 = titan_time_ns();
	int64_t bwd = -1;

	(void)state;
	assert_int_equal(titan_model_flavor("405B", &d), 0);
	o = tiny_cpu_opts(1, 8192, TITAN_EST_AC_FULL, 0, 4);
	o.ngpu = 1024;
	o.layout = (struct titan_est_layout){1, -1, 8, 1, 1};
	o.loss_parallel = true;
	o.rank = 1000;
	if (titan_est_check(&o, &d) < 0)
		fail_msg("%s", titan_errmsg());
	assert_int_equal(o.layout.dp_shard, 128);
	assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
	for (int i = 0; i < e.ranks[0].nitems; i++)
		if (!strcmp(e.ranks[0].items[i].name, "FSDP: gathered + grads + prefetch (backward)"))
			bwd = e.ranks[0].items[i].bytes;
	assert_true(bwd >= 2 * block && bwd < 6 * block);
	assert_true(titan_time_ns() - t0 < 2000000000ull);
	titan_estimate_release(&e);
}

/* The CPU model's buffers that stay for the run (items present at every
 * moment of a step, but the trainer's inputs and labels) are, tag by tag,
 * what the engine itself holds after a step of the dry run at full length
 * — on every layout, without mpiexec: the model's buffer plan and the
 * pipeline's buffers, read from the engine only built (est_dry_plan, on
 * addresses that are never mapped), are what it holds once it has run a
 * step; and each of the report's rows of the plan is its role's bytes. */
static void test_static_buffers_are_the_engines(void **state)
{
	static const struct {
		int64_t ngpu, rank, rep, shard, tp, pp, cp;
		enum titan_est_schedule sched;
		enum titan_est_ac ac;
		bool alltoall, no_loss_parallel;
	} L[] = {
		{1, 0, 1, 1, 1, 1, 1, TITAN_EST_1F1B, TITAN_EST_AC_NONE, false, false},
		{1, 0, 1, 1, 1, 1, 1, TITAN_EST_1F1B, TITAN_EST_AC_FULL, false, false},
		{1, 0, 1, 1, 1, 1, 1, TITAN_EST_1F1B, TITAN_EST_AC_SELECTIVE, false, false},
		{2, 1, 1, 2, 1, 1, 1, TITAN_EST_1F1B, TITAN_EST_AC_FULL, false, false},
		{4, 3, 2, 2, 1, 1, 1, TITAN_EST_1F1B, TITAN_EST_AC_NONE, false, false},
		{2, 1, 1, 1, 2, 1, 1, TITAN_EST_1F1B, TITAN_EST_AC_NONE, false, false},
		{4, 2, 1, 2, 2, 1, 1, TITAN_EST_1F1B, TITAN_EST_AC_FULL, false, true},
		{2, 1, 1, 1, 1, 1, 2, TITAN_EST_1F1B, TITAN_EST_AC_NONE, false, false},
		{2, 0, 1, 1, 1, 1, 2, TITAN_EST_1F1B, TITAN_EST_AC_FULL, true, false},
		{4, 3, 1, 1, 2, 1, 2, TITAN_EST_1F1B, TITAN_EST_AC_NONE, true, false},
		{2, 0, 1, 1, 1, 2, 1, TITAN_EST_GPIPE, TITAN_EST_AC_NONE, false, false},
		{2, 1, 1, 1, 1, 2, 1, TITAN_EST_1F1B, TITAN_EST_AC_FULL, false, false},
		{2, 1, 1, 1, 1, 2, 1, TITAN_EST_INTERLEAVED_1F1B, TITAN_EST_AC_NONE, false, false},
		{2, 0, 1, 1, 1, 2, 1, TITAN_EST_INTERLEAVED_ZB, TITAN_EST_AC_SELECTIVE, false, false},
		{4, 3, 1, 2, 1, 2, 1, TITAN_EST_ZBV, TITAN_EST_AC_NONE, false, false},
	};
	struct titan_model_dims d = tiny();

	(void)state;
	d.n_layers = 8;
	d.tied = false;
	for (size_t i = 0; i < sizeof(L) / sizeof(*L); i++) {
		struct titan_est_opts o;
		struct titan_estimate e;
		struct est_dry dry;
		int64_t sum[TITAN_MEM_NTAGS] = {0}, role[TITAN_BUF_NROLES] = {0};
		const struct titan_est_rank *r;
		uint32_t every = 0;

		o = tiny_cpu_opts(4, 24, L[i].ac, 2, 2);
		o.ngpu = L[i].ngpu;
		o.layout = (struct titan_est_layout){L[i].rep, L[i].shard, L[i].tp, L[i].pp, L[i].cp};
		o.schedule = L[i].sched;
		o.loss_parallel = !L[i].no_loss_parallel;
		o.cp_alltoall = L[i].alltoall;
		o.rank = L[i].rank;
		if (titan_est_check(&o, &d) < 0)
			fail_msg("layout %zu: %s", i, titan_errmsg());
		if (titan_estimate_run(&d, &o, &e) < 0)
			fail_msg("layout %zu: %s", i, titan_errmsg());
		if (est_dry_run(&d, &e.opts, o.seq_len, &dry) < 0)
			fail_msg("layout %zu: %s", i, titan_errmsg());
		r = &e.ranks[0];
		for (int m = 0; m < r->nmoments; m++)
			every |= 1u << m;
		for (int k = 0; k < r->nitems; k++)
			if ((r->items[k].moments & every) == every &&
			    strcmp(r->items[k].name, "inputs + labels (all microbatches)"))
				sum[r->items[k].tag] += r->items[k].bytes;
		for (int t = 0; t < TITAN_MEM_NTAGS; t++)
			if (sum[t] != dry.after.cur[t])
				fail_msg("layout %zu: %s: estimate %lld, the engine %lld", i,
					 titan_mem_tag_name((enum titan_mem_tag)t), (long long)sum[t],
					 (long long)dry.after.cur[t]);
		for (int k = 0; k < dry.nplan; k++)
			role[dry.plan[k].role] += dry.plan[k].bytes;
		for (int k = 0; k < TITAN_BUF_NROLES; k++) {
			const char *name = titan_buf_role_name((enum titan_buf_role)k);
			int64_t got = 0;

			for (int j = 0; j < r->nitems; j++)
				if (!strncmp(r->items[j].name, name, strlen(name)))
					got += r->items[j].bytes;
			if (got != role[k])
				fail_msg("layout %zu: %s: estimate %lld, the plan %lld", i, name,
					 (long long)got, (long long)role[k]);
		}
		est_dry_release(&dry);
		titan_estimate_release(&e);
	}
}

/* The trainer's inputs and labels, stated once (titan_trainer_token_bytes,
 * lib/train): the estimate's row is the two of them for the step's
 * tokens. */
static void test_token_buffers_stated_once(void **state)
{
	struct titan_model_dims d = tiny();
	struct titan_est_opts o = tiny_cpu_opts(4, 24, TITAN_EST_AC_NONE, 1, 1);
	struct titan_estimate e;
	const struct titan_est_rank *r;
	int found = 0;

	(void)state;
	assert_true(titan_trainer_token_bytes(10) == 40 && titan_trainer_token_bytes(0) == 0);
	assert_true(titan_trainer_token_bytes(INT64_MAX / 2) == -1);
	assert_true(titan_trainer_token_bytes(-1) == -1);
	if (titan_estimate_run(&d, &o, &e) < 0)
		fail_msg("%s", titan_errmsg());
	assert_true(e.tokens_per_step == 4 * 24);
	r = &e.ranks[0];
	for (int k = 0; k < r->nitems; k++) {
		if (strcmp(r->items[k].name, "inputs + labels (all microbatches)"))
			continue;
		assert_int_equal(r->items[k].tag, TITAN_MEM_DATA);
		assert_true(r->items[k].bytes == 2 * titan_trainer_token_bytes(4 * 24));
		found++;
	}
	assert_int_equal(found, 1);
	titan_estimate_release(&e);
}

/* An estimate's items named `name` on rank 0: their bytes (one such). */
static int64_t item_bytes(const struct titan_estimate *e, const char *name,
			  enum titan_mem_tag tag)
{
	const struct titan_est_rank *r = &e->ranks[0];
	int64_t bytes = -1;
	int found = 0;

	for (int k = 0; k < r->nitems; k++) {
		if (strcmp(r->items[k].name, name))
			continue;
		assert_int_equal(r->items[k].tag, tag);
		bytes = r->items[k].bytes;
		found++;
	}
	assert_int_equal(found, 1);
	return bytes;
}

/* The CP ring's buffers (rotate_method alltoall) are titan_cp_ring_mem's:
 * what the ring allocates, forward and backward (on the measure backend,
 * an instant communicator of 3 ranks: two receive buffers), and what the
 * estimate counts on CP 2 (one receive buffer). */
static void test_cp_ring_stated_once(void **state)
{
	const int64_t rows = 2, Tl = 8, H = 4, Hkv = 2, D = 8;
	const int64_t nq = rows * Tl * H * D, nkv = rows * Tl * Hkv * D;
	struct titan_model_dims d = tiny();
	struct titan_est_opts o = tiny_cpu_opts(4, 24, TITAN_EST_AC_NONE, 1, 1);
	struct titan_mem_backend mb;
	struct titan_allocator *a;
	struct titan_backend be;
	struct titan_comm *c;
	struct titan_mem_stats st;
	struct titan_cp_ring_mem m;
	struct titan_estimate e;
	float *q = zeros(nq), *k = zeros(nkv), *v = zeros(nkv), *out = zeros(nq);
	float *lse = zeros(rows * H * Tl), *dout = zeros(nq), *dq = zeros(nq);
	float *dk = zeros(nkv), *dv = zeros(nkv);

	(void)state;
	assert_int_equal(titan_cp_ring_mem(nkv, 3, &m), 0);
	assert_true(m.nrecv == 2 && m.buf == 2 * nkv * 4 && m.recv == 2 * m.buf &&
		    m.sums == 2 * m.buf && m.own == m.buf);
	assert_int_equal(titan_cp_ring_mem(nkv, 2, &m), 0);
	assert_true(m.nrecv == 1 && m.recv == m.buf);
	assert_int_equal(titan_cp_ring_mem(INT64_MAX / 4, 4, &m), TITAN_E_NOMEM);
	assert_true(m.buf == -1 && m.recv == -1 && m.sums == -1 && m.own == -1);

	titan_measure_mem_backend(&mb, false);
	assert_non_null(a = titan_allocator_new("measure", &mb));
	titan_backend_measure_init(&be, a, 1);
	assert_int_equal(titan_comm_instant_new("cp", 1, 3, 0, 1, &c), 0);
	const struct titan_cp_ring r = {&be, a, c, 1, 3, rows, Tl, H, Hkv, D, NULL};

	assert_int_equal(titan_cp_ring_mem(nkv, 3, &m), 0);
	assert_int_equal(titan_cp_ring_fwd(&r, out, lse, q, k, v), 0);
	titan_mem_get_stats(a, &st);
	assert_true(st.peak[TITAN_MEM_COMM] == m.recv && st.cur[TITAN_MEM_COMM] == 0);
	titan_mem_reset_peak(a);
	assert_int_equal(titan_cp_ring_bwd(&r, dq, dk, dv, dout, q, k, v, out, lse), 0);
	titan_mem_get_stats(a, &st);
	assert_true(st.peak[TITAN_MEM_COMM] == m.recv + m.sums && st.cur[TITAN_MEM_COMM] == 0);
	assert_true(ws_peak(a) >= m.own);
	titan_comm_free(c);
	titan_backend_release(&be);
	titan_allocator_free(a);
	free(q), free(k), free(v), free(out), free(lse), free(dout), free(dq), free(dk), free(dv);

	o.ngpu = 2;
	o.layout = (struct titan_est_layout){1, 1, 1, 1, 2};
	o.cp_alltoall = true;
	if (titan_estimate_run(&d, &o, &e) < 0)
		fail_msg("%s", titan_errmsg());
	assert_int_equal(titan_cp_ring_mem(4 * 12 * d.n_kv_heads * d.head_dim, 2, &m), 0);
	assert_true(item_bytes(&e, "CP ring: key/value receive buffers", TITAN_MEM_COMM) == m.recv);
	assert_true(item_bytes(&e, "CP ring: travelling dK/dV sums", TITAN_MEM_COMM) == m.sums);
	assert_true(item_bytes(&e, "CP ring: the block's own dK/dV", TITAN_MEM_WORKSPACE) ==
		    m.own);
	titan_estimate_release(&e);
}

/* The JSON writer's peak (host allocator, tag other) while `row` is
 * rendered as titan-train writes a metrics.jsonl row; its length in *len. */
static int64_t json_peak(const struct titan_metrics_row *row, size_t *len)
{
	struct titan_allocator *h = titan_host_allocator();
	struct titan_mem_stats st;
	struct titan_json j;
	int64_t before;

	titan_mem_get_stats(h, &st);
	before = st.cur[TITAN_MEM_OTHER];
	titan_mem_reset_peak(h);
	assert_true(titan_metrics_row_begin(&j, row->moe_load ? row->moe_layers : 0));
	titan_metrics_json(&j, row);
	*len = strlen(titan_json_str(&j));
	titan_json_release(&j);
	titan_mem_get_stats(h, &st);
	assert_true(st.cur[TITAN_MEM_OTHER] == before);
	return st.peak[TITAN_MEM_OTHER] - before;
}

/* The metrics row's JSON writer buffer is titan_metrics_row_bytes
 * whatever the row's values: a row of zeros and one of full-precision
 * doubles on 64 ranks (whose lengths would have grown the buffer to
 * different sizes) take the same bytes, and the estimate's item is that
 * figure.  (titan-memprof's compare of a real run against titan-estimate
 * failed when a loaded machine's timings lengthened the row.) */
static void test_metrics_row_stated_once(void **state)
{
	struct titan_model_dims d = tiny();
	struct titan_est_opts o = tiny_cpu_opts(4, 24, TITAN_EST_AC_NONE, 1, 1);
	struct titan_metrics_row row;
	struct titan_estimate e;
	size_t short_len, long_len;

	(void)state;
	memset(&row, 0, sizeof(row));
	row.step = 1;
	assert_true(json_peak(&row, &short_len) == titan_metrics_row_bytes(0));
	row = (struct titan_metrics_row){
		.step = 123456789, .loss = 10.123456789012345, .grad_norm = 1.2345678901234567e-5,
		.lr = 2.9999999999999997e-4, .max_loss = 11.987654321098765,
		.tokens_seen = INT64_MAX / 3, .tps = 123456.78901234567,
		.tflops = 0.012345678901234567, .mfu_pct = 0.0098765432109876543,
		.step_time_s = 0.012345678901234567, .data_time_s = 1.2345678901234567e-7,
		.checkpoint_blocked_s = 9.8765432109876543e-3,
		.memory_peak_bytes = INT64_MAX / 5, .max_active = INT64_MAX / 7,
		.max_reserved = INT64_MAX / 7, .total_mem = 2.5769803776e10,
		.cuda = true, .num_alloc_retries = 12345, .num_ooms = 678,
		.world_size = 64, .max_rank_reserved = 1.2345678901234567e10,
		.max_rank_step_time_s = 0.098765432109876543,
	};
	for (int k = 0; k < TITAN_MEM_NTAGS; k++)
		row.memory_peak_by_tag[k] = INT64_MAX / 11 - k;
	assert_true(json_peak(&row, &long_len) == titan_metrics_row_bytes(0));
	print_message("# metrics rows of %zu and %zu characters\n", short_len, long_len);
	assert_true(short_len < 512 && long_len > 700 && long_len < (size_t)titan_metrics_row_bytes(0));

	o.cpu_metrics_jsonl = true;
	if (titan_estimate_run(&d, &o, &e) < 0)
		fail_msg("%s", titan_errmsg());
	assert_true(item_bytes(&e, "metrics.jsonl row (JSON writer buffer)", TITAN_MEM_OTHER) ==
		    titan_metrics_row_bytes(0));
	titan_estimate_release(&e);

	/* a MoE row: each block's load entry at its longest (64 blocks of
	 * 20-digit counts and 22-character entropies) still fits the row's
	 * stated bytes, and a short one takes the same */
	{
		enum { L = 64, E = 4 };
		static int64_t load[L * E];
		static bool layer[L];
		size_t moe_len;

		for (int l = 0; l < L; l++) {
			layer[l] = true;
			for (int k = 0; k < E; k++)
				load[l * E + k] = k == 0 ? INT64_MAX / 2 : 1 + l * 7 + k;
		}
		row.moe_load = load;
		row.moe_layer = layer;
		row.moe_layers = L;
		row.moe_experts = E;
		int64_t pk = json_peak(&row, &moe_len);

		print_message("# a MoE row of %d blocks: %zu characters, %lld bytes\n", L, moe_len,
			      (long long)pk);
		assert_true(pk == titan_metrics_row_bytes(L));
		assert_true(moe_len > (size_t)titan_metrics_row_bytes(0) &&
			    moe_len < (size_t)titan_metrics_row_bytes(L));
		memset(load, 0, sizeof(load));
		assert_true(json_peak(&row, &moe_len) == titan_metrics_row_bytes(L));
		/* a few MoE blocks fit in the dense row's buffer */
		assert_true(titan_metrics_row_bytes(12) == titan_metrics_row_bytes(0));
	}
}

/* The sgemm peak probe's matrices are titan_trainer_peak_probe_bytes:
 * three 1024 x 1024 fp32 matrices, what the estimate counts at setup with
 * metrics.measure_peak_flops. */
static void test_peak_probe_stated_once(void **state)
{
	struct titan_model_dims d = tiny();
	struct titan_est_opts o = tiny_cpu_opts(4, 24, TITAN_EST_AC_NONE, 1, 1);
	struct titan_estimate e;

	(void)state;
	assert_true(titan_trainer_peak_probe_bytes() == 3 * 1024 * 1024 * 4);
	o.cpu_peak_probe = true;
	if (titan_estimate_run(&d, &o, &e) < 0)
		fail_msg("%s", titan_errmsg());
	assert_true(item_bytes(&e, "sgemm peak probe (3 x 1024 x 1024 fp32)",
			       TITAN_MEM_WORKSPACE) == titan_trainer_peak_probe_bytes());
	titan_estimate_release(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_instant_comm),
		cmocka_unit_test(test_counting_allocator),
		cmocka_unit_test(test_guard_faults),
		cmocka_unit_test(test_backend_workspace),
		cmocka_unit_test(test_cpu_workspace_stated_once),
		cmocka_unit_test(test_token_buffers_stated_once),
		cmocka_unit_test(test_cp_ring_stated_once),
		cmocka_unit_test(test_metrics_row_stated_once),
		cmocka_unit_test(test_peak_probe_stated_once),
		cmocka_unit_test(test_measure_ops_complete),
		cmocka_unit_test(test_engine_dry_run_counts_as_real),
		cmocka_unit_test(test_estimate_dry_run_405b),
		cmocka_unit_test(test_static_buffers_are_the_engines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
