/* test_layout_resolve.c — titan_layout_resolve (lib/train/layout.c): one
 * rank's layout from the config, the model's dims and the world, as the
 * trainer, titan_parallelize, the parameter table and titan-estimate take
 * it — mesh coordinates, FSDP shard, TP slice, experts, pipeline stages
 * (loop and V placement), microbatches, AC policy, CE chunk, DP's
 * options — and its errors, each naming the key; titan-estimate's
 * GPU and CPU models read the AC keys through it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "titan/estimate.h"
#include "titan/model.h"
#include "titan/ops.h"
#include "titan/train.h"

/* 6 blocks of Llama 3 8B's shape: 8 pipeline units (embedding, 6 blocks,
 * norm + output). */
static struct titan_model_dims dims6(void)
{
	struct titan_model_dims d;

	assert_int_equal(titan_model_flavor("8B", &d), 0);
	d.n_layers = 6;
	return d;
}

/* A config of local batch 4 x 64 tokens with keys "k=v" set. */
static void config(struct titan_config *c, const char *const *kv)
{
	assert_int_equal(titan_config_init(c), 0);
	assert_int_equal(titan_config_set(c, "training.local_batch_size", "4", "t"), 0);
	assert_int_equal(titan_config_set(c, "training.seq_len", "64", "t"), 0);
	for (; kv && *kv; kv += 2)
		assert_int_equal(titan_config_set(c, kv[0], kv[1], "t"), 0);
}

static int resolve(struct titan_layout *l, const char *const *kv, int64_t world, int64_t rank)
{
	struct titan_model_dims d = dims6();
	struct titan_config c;
	int rc;

	config(&c, kv);
	rc = titan_layout_resolve(l, &c, &d, world, rank);
	titan_config_release(&c);
	return rc;
}

static void assert_stage(const struct titan_pp_stage *s, int l0, int l1, bool first, bool last,
			 int index)
{
	assert_int_equal(s->l0, l0);
	assert_int_equal(s->l1, l1);
	assert_int_equal(s->first, first);
	assert_int_equal(s->last, last);
	assert_int_equal(s->index, index);
}

/* The data-parallel placement: batches read, FSDP's mesh and shard. */
static void assert_dp(const struct titan_layout *l, int64_t dp, int64_t dp_rank, int64_t fsdp,
		      int shard_rank, int shard_degree)
{
	assert_int_equal(l->dp, dp);
	assert_int_equal(l->dp_rank, dp_rank);
	assert_int_equal(l->fsdp, fsdp);
	assert_int_equal(l->shard_rank, shard_rank);
	assert_int_equal(l->shard_degree, shard_degree);
}

static void test_one_rank(void **state)
{
	static const char *const kv[] = {"activation_checkpoint.mode", "selective",
					 "activation_checkpoint.selective_ac_option", "2", NULL};
	struct titan_layout l;
	struct titan_llama_opts mo;
	struct titan_config c;

	(void)state;
	assert_int_equal(resolve(&l, kv, 1, 0), 0);
	for (int d = 0; d < TITAN_DIM_NDIMS; d++) {
		assert_int_equal(l.dims.degree[d], 1);
		assert_int_equal(l.coord[d], 0);
	}
	assert_dp(&l, 1, 0, 1, 0, 0);
	assert_int_equal(l.tp_degree, 1);
	assert_int_equal(l.ep_degree, 1);
	assert_int_equal(l.stages.n, 0);
	assert_int_equal(l.nstages, 0);
	assert_int_equal(l.microbatch, 4);
	assert_int_equal(l.microbatches, 1);
	assert_int_equal(l.ac, TITAN_AC_SELECTIVE);
	assert_int_equal(l.ac_every, 2);
	assert_int_equal(l.ce_chunk, TITAN_CE_CHUNK);
	assert_true(l.loss_parallel);
	assert_false(l.cp_ring);
	assert_int_equal(l.bucket_bytes, 25 << 20); /* DDP's default */
	/* the model options of it */
	config(&c, kv);
	titan_llama_opts_from_layout(&mo, &c, &l);
	titan_config_release(&c);
	assert_int_equal(mo.batch, 4);
	assert_int_equal(mo.seq, 64);
	assert_int_equal(mo.ac, TITAN_AC_SELECTIVE);
	assert_int_equal(mo.ac_every, 2);
	assert_int_equal(mo.ce_chunk, TITAN_CE_CHUNK);
	assert_int_equal(mo.stages.n, 0);
	assert_int_equal(mo.doc_eos, -1);
}

/* FSDP over 4 ranks: rank 2 holds shard 2 of 4, reads batch 2 of 4; "op"
 * checkpointing; reshard_after_forward never; explicit buckets. */
static void test_fsdp(void **state)
{
	static const char *const kv[] = {
		"parallelism.data_parallel_shard_degree", "4",
		"activation_checkpoint.mode", "selective",
		"activation_checkpoint.selective_ac_option", "op",
		"parallelism.fsdp_reshard_after_forward", "never",
		"comm.bucket_size_mb", "2", NULL};
	static const char *const dflt[] = {"parallelism.data_parallel_shard_degree", "4", NULL};
	struct titan_layout l;
	struct titan_param_table_opts to;

	(void)state;
	assert_int_equal(resolve(&l, kv, 4, 2), 0);
	assert_int_equal(l.coord[TITAN_DIM_DP_SHARD], 2);
	assert_dp(&l, 4, 2, 4, 2, 4);
	assert_int_equal(l.ac, TITAN_AC_SELECTIVE_OP);
	assert_false(l.reshard_after_forward);
	assert_int_equal(l.bucket_bytes, 2 << 20);
	titan_layout_table_opts(&l, &to);
	assert_true(to.depth_init);
	assert_int_equal(to.shard_rank, 2);
	assert_int_equal(to.shard_degree, 4);
	assert_int_equal(to.stages.n, 0);
	/* FSDP's default: one unit per block */
	assert_int_equal(resolve(&l, dflt, 4, 3), 0);
	assert_int_equal(l.bucket_bytes, 0);
	assert_true(l.reshard_after_forward);
}

/* PP 2: Interleaved1F1B places stages rank + v·pp (rank 1: 1 and 3),
 * ZBVZeroBubble in a V (rank 0: 0 and 3); 8 units over 4 stages split
 * 0-1 1-3 3-5 5-6. */
static void test_pipeline(void **state)
{
	static const char *const il[] = {
		"parallelism.pipeline_parallel_degree", "2",
		"parallelism.pipeline_parallel_schedule", "Interleaved1F1B",
		"parallelism.pipeline_parallel_microbatch_size", "1", NULL};
	static const char *const zbv[] = {
		"parallelism.pipeline_parallel_degree", "2",
		"parallelism.pipeline_parallel_schedule", "ZBVZeroBubble",
		"parallelism.pipeline_parallel_microbatch_size", "2", NULL};
	struct titan_layout l;
	struct titan_param_table_opts to;
	struct titan_param_table t;
	struct titan_model_dims d = dims6();
	struct titan_pp_stages rs;
	struct titan_config c;

	(void)state;
	assert_int_equal(resolve(&l, il, 2, 1), 0);
	assert_int_equal(l.coord[TITAN_DIM_PP], 1);
	assert_int_equal(l.schedule, TITAN_PP_INTERLEAVED_1F1B);
	assert_int_equal((int)l.schedule, TITAN_SCHEDULE_INTERLEAVED_1F1B); /* one numbering */
	assert_int_equal(l.nstages, 4);
	assert_int_equal(l.stages.n, 2);
	assert_stage(&l.stages.v[0], 1, 3, false, false, 1);
	assert_stage(&l.stages.v[1], 5, 6, false, true, 3);
	assert_false(l.split_backward);
	assert_int_equal(l.microbatch, 1);
	assert_int_equal(l.microbatches, 4);
	/* the table holds the stages' blocks and norm + output only */
	titan_layout_table_opts(&l, &to);
	assert_int_equal(to.stages.n, 2);
	assert_int_equal(titan_param_table_init(&t, &d, &to), 0);
	assert_int_equal(t.params[titan_param_index(&t, TITAN_PARAM_TOK_EMBEDDINGS, -1)].rows, 0);
	assert_int_equal(t.params[titan_param_index(&t, TITAN_PARAM_WQ, 0)].rows, 0);
	assert_true(t.params[titan_param_index(&t, TITAN_PARAM_WQ, 1)].rows > 0);
	assert_int_equal(t.params[titan_param_index(&t, TITAN_PARAM_WQ, 3)].rows, 0);
	assert_true(t.params[titan_param_index(&t, TITAN_PARAM_WQ, 5)].rows > 0);
	assert_true(t.params[titan_param_index(&t, TITAN_PARAM_OUTPUT, -1)].rows > 0);
	titan_param_table_release(&t);

	assert_int_equal(resolve(&l, zbv, 2, 0), 0);
	assert_int_equal(l.schedule, TITAN_PP_ZBV);
	assert_int_equal(l.stages.n, 2);
	assert_stage(&l.stages.v[0], 0, 1, true, false, 0);
	assert_stage(&l.stages.v[1], 5, 6, false, true, 3);
	assert_true(l.split_backward);
	assert_int_equal(l.microbatch, 2);
	assert_int_equal(l.microbatches, 2);
	assert_int_equal(resolve(&l, zbv, 2, 1), 0);
	assert_stage(&l.stages.v[0], 1, 3, false, false, 1);
	assert_stage(&l.stages.v[1], 3, 5, false, false, 2);
	/* every pipeline rank's stages from one rank's layout (titan-estimate's
	 * GPU model): rank 1's from rank 0's layout are rank 1's own */
	config(&c, zbv);
	assert_int_equal(titan_layout_resolve(&l, &c, &d, 2, 0), 0);
	assert_int_equal(titan_layout_stages_of(&l, &c, d.n_layers, 1, &rs), 0);
	assert_int_equal(rs.n, 2);
	assert_stage(&rs.v[0], 1, 3, false, false, 1);
	assert_stage(&rs.v[1], 3, 5, false, false, 2);
	assert_int_equal(titan_layout_stages_of(&l, &c, d.n_layers, 0, &rs), 0);
	assert_int_equal(rs.n, l.stages.n);
	for (int v = 0; v < rs.n; v++)
		assert_stage(&rs.v[v], l.stages.v[v].l0, l.stages.v[v].l1, l.stages.v[v].first,
			     l.stages.v[v].last, l.stages.v[v].index);
	titan_config_release(&c);
}

/* A model of a layout holds the layout's table (opts.table, as
 * titan_parallelize gives it), built without groups: world rank 6 of 8
 * with 1F1B on pp 2 holds an FSDP shard of 4 of the last stage (its
 * blocks, norm + output, no embedding). */
static void test_model_table(void **state)
{
	static const char *const kv[] = {"parallelism.pipeline_parallel_degree", "2",
					 "parallelism.pipeline_parallel_microbatch_size", "2", NULL};
	struct titan_param_table_opts to;
	struct titan_backend be;
	struct titan_llama_opts mo;
	struct titan_model_dims d;
	struct titan_layout l;
	struct titan_config c;
	struct titan_llama *m;

	(void)state;
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	config(&c, kv);
	assert_int_equal(titan_layout_resolve(&l, &c, &d, 8, 6), 0);
	assert_int_equal(l.shard_degree, 4);
	assert_int_equal(l.stages.n, 1);
	titan_layout_table_opts(&l, &to);
	titan_llama_opts_from_layout(&mo, &c, &l);
	mo.stages = l.stages; /* as titan_parallelize's */
	mo.table = &to;
	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	assert_int_equal(titan_llama_new(&d, &mo, &be, NULL, &m), 0);
	const struct titan_param_table *t = titan_llama_table(m);
	assert_int_equal(t->opts.shard_rank, l.shard_rank);
	assert_int_equal(t->opts.shard_degree, 4);
	assert_int_equal(t->opts.stages.n, 1);
	assert_stage(&t->opts.stages.v[0], l.stages.v[0].l0, d.n_layers, false, true, 1);
	assert_int_equal(t->params[titan_param_index(t, TITAN_PARAM_TOK_EMBEDDINGS, -1)].rows, 0);
	assert_true(t->params[titan_param_index(t, TITAN_PARAM_OUTPUT, -1)].rows > 0);
	titan_llama_free(m);
	titan_backend_release(&be);
	titan_config_release(&c);
}

/* TP 2 x CP 2 on 4 ranks (tp innermost): rank 3 is tp 1, cp 1; FSDP's
 * mesh is dp_shard x cp, so the parameters are sharded over cp. */
static void test_tp_cp(void **state)
{
	static const char *const kv[] = {
		"parallelism.tensor_parallel_degree", "2",
		"parallelism.context_parallel_degree", "2",
		"parallelism.context_parallel_rotate_method", "alltoall",
		"parallelism.disable_loss_parallel", "true", NULL};
	struct titan_layout l;
	struct titan_param_table_opts to;

	(void)state;
	assert_int_equal(resolve(&l, kv, 4, 3), 0);
	assert_int_equal(l.coord[TITAN_DIM_TP], 1);
	assert_int_equal(l.coord[TITAN_DIM_CP], 1);
	assert_int_equal(l.tp_rank, 1);
	assert_int_equal(l.tp_degree, 2);
	assert_dp(&l, 1, 0, 2, 1, 2);
	assert_true(l.cp_ring);
	assert_false(l.loss_parallel);
	titan_layout_table_opts(&l, &to);
	assert_int_equal(to.tp_rank, 1);
	assert_int_equal(to.tp_degree, 2);
	assert_int_equal(to.shard_rank, 1);
	assert_int_equal(to.shard_degree, 2);
}

/* EP 2 of dp_shard 4: rank 3 runs the experts of ep rank 1 (group {2, 3})
 * and holds FSDP shard 1 of them over efsdp {1, 3}. */
static void test_ep(void **state)
{
	static const char *const kv[] = {
		"parallelism.data_parallel_shard_degree", "4",
		"parallelism.expert_parallel_degree", "2", NULL};
	struct titan_layout l;
	struct titan_param_table_opts to;
	int64_t rank, size, base, stride;

	(void)state;
	assert_int_equal(resolve(&l, kv, 4, 3), 0);
	assert_int_equal(l.dims.ep, 2);
	assert_int_equal(l.ep_rank, 1);
	assert_int_equal(l.ep_degree, 2);
	assert_int_equal(l.ep_shard_rank, 1);
	assert_int_equal(l.ep_shard_degree, 2);
	assert_int_equal(l.shard_rank, 3);
	titan_parallel_dims_ep_group(&l.dims, 3, true, &base, &stride, &size, &rank);
	assert_int_equal(base, 2);
	assert_int_equal(stride, 1);
	titan_parallel_dims_ep_group(&l.dims, 3, false, &base, &stride, &size, &rank);
	assert_int_equal(base, 1);
	assert_int_equal(stride, 2);
	titan_layout_table_opts(&l, &to);
	assert_int_equal(to.ep_rank, 1);
	assert_int_equal(to.ep_degree, 2);
	assert_int_equal(to.ep_shard_rank, 1);
	assert_int_equal(to.ep_shard_degree, 2);
}

/* activation_checkpoint.selective_ac_option as torchtitan reads it (block
 * k from 1 checkpointed when k % N == 0, every block for 0), the one
 * parser titan-train and both of titan-estimate's models take. */
static void ac_of(struct titan_config *c, const char *option)
{
	config(c, (const char *const[]){"activation_checkpoint.mode", "selective",
					"activation_checkpoint.selective_ac_option", option,
					NULL});
}

static void test_ac(void **state)
{
	static const struct {
		const char *option;
		enum titan_ac_mode ac;
		int every;
	} cases[] = {
		{"op", TITAN_AC_SELECTIVE_OP, 0}, {"0", TITAN_AC_SELECTIVE, 1},
		{"3", TITAN_AC_SELECTIVE, 3},     {"2000000", TITAN_AC_SELECTIVE, 2000000},
		/* beyond int: no block, not a wrapped (here 0) interval */
		{"4294967296", TITAN_AC_SELECTIVE, INT_MAX},
	};
	const char *devs[] = {"cpu", "h100-80g"};
	struct titan_est_device dev;
	struct titan_est_opts o;
	struct titan_config c;
	enum titan_ac_mode ac;
	char msg[512];
	int every;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ac_of(&c, cases[i].option);
		assert_int_equal(titan_layout_ac(&c, &ac, &every), 0);
		assert_int_equal(ac, cases[i].ac);
		assert_int_equal(every, cases[i].every);
		for (size_t k = 0; k < 2; k++) { /* titan-estimate's models read it alike */
			assert_int_equal(titan_est_device_lookup(devs[k], &dev), 0);
			assert_int_equal(titan_est_opts_from_config(&o, &c, &dev, 1), 0);
			assert_int_equal(o.ac, ac == TITAN_AC_SELECTIVE_OP ? TITAN_EST_AC_OP :
					       TITAN_EST_AC_SELECTIVE);
			assert_int_equal(o.ac_every, every);
		}
		titan_config_release(&c);
	}
	/* a value the config's check would refuse: the same error from both */
	ac_of(&c, "often");
	assert_int_equal(titan_layout_ac(&c, &ac, &every), TITAN_E_INVALID);
	snprintf(msg, sizeof(msg), "%s", titan_errmsg());
	for (size_t k = 0; k < 2; k++) {
		assert_int_equal(titan_est_device_lookup(devs[k], &dev), 0);
		assert_int_equal(titan_est_opts_from_config(&o, &c, &dev, 1), TITAN_E_INVALID);
		assert_string_equal(titan_errmsg(), msg);
	}
	titan_config_release(&c);
}

static void expect_error(int rc, const char *needle)
{
	assert_int_equal(rc, TITAN_E_INVALID);
	if (!strstr(titan_errmsg(), needle))
		fail_msg("'%s' does not name '%s'", titan_errmsg(), needle);
}

static void test_errors(void **state)
{
	struct titan_layout l;
	struct titan_model_dims d = dims6();
	struct titan_config c;

	(void)state;
	expect_error(resolve(&l, (const char *const[]){"parallelism.data_parallel_shard_degree",
						       "2", NULL}, 4, 0),
		     "parallelism: ");
	expect_error(resolve(&l, (const char *const[]){"activation_checkpoint.mode", "selective",
						       "activation_checkpoint.selective_ac_option",
						       "often", NULL}, 1, 0),
		     "activation_checkpoint.selective_ac_option: 'often'");
	expect_error(resolve(&l, (const char *const[]){
			     "parallelism.pipeline_parallel_degree", "2",
			     "parallelism.pipeline_parallel_schedule", "LoopedBFS", NULL}, 2, 0),
		     "parallelism.pipeline_parallel_schedule: 'LoopedBFS'");
	expect_error(resolve(&l, (const char *const[]){
			     "parallelism.pipeline_parallel_degree", "2",
			     "parallelism.pipeline_parallel_microbatch_size", "3", NULL}, 2, 0),
		     "parallelism.pipeline_parallel_microbatch_size: 3");
	expect_error(resolve(&l, (const char *const[]){
			     "parallelism.pipeline_parallel_degree", "2",
			     "parallelism.pipeline_parallel_split_points", "layers.9", NULL},
			     2, 0),
		     "parallelism.pipeline_parallel_split_points: 'layers.9'");
	expect_error(resolve(&l, (const char *const[]){
			     "parallelism.pipeline_parallel_degree", "2",
			     "parallelism.pipeline_parallel_schedule", "ZBVZeroBubble",
			     "parallelism.pipeline_parallel_layers_per_stage", "1", NULL}, 2, 0),
		     "pipeline_parallel_layers_per_stage 1");
	expect_error(resolve(&l, (const char *const[]){"parallelism.tensor_parallel_degree", "3",
						       NULL}, 3, 0),
		     "parallelism.tensor_parallel_degree 3");
	expect_error(resolve(&l, (const char *const[]){"parallelism.context_parallel_degree", "2",
						       "training.seq_len", "6", NULL}, 2, 0),
		     "training.seq_len: 6");
	/* tied embeddings cannot be split over stages */
	config(&c, (const char *const[]){"parallelism.pipeline_parallel_degree", "2", NULL});
	d.tied = true;
	expect_error(titan_layout_resolve(&l, &c, &d, 2, 0), "model.tie_word_embeddings");
	titan_config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_rank),  cmocka_unit_test(test_fsdp),
		cmocka_unit_test(test_pipeline),  cmocka_unit_test(test_tp_cp),
		cmocka_unit_test(test_ep),        cmocka_unit_test(test_errors),
		cmocka_unit_test(test_ac),        cmocka_unit_test(test_model_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
