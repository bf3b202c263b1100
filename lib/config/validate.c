/*
 * lib/config/validate.c — cross-key checks of a resolved configuration
 * (titan_config_validate): what no single key's type or range can catch,
 * after torchtitan's own asserts (keep_latest_k != 1, batch divisibility,
 * the profiler schedule, selective AC options, last_save_in_hf, ...).
 * Each message names the keys involved.
 */
#include "config_impl.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* Non-negative decimal integer text. */
static bool is_count(const char *s)
{
	return s && *s && strspn(s, "0123456789") == strlen(s) && strlen(s) <= 18;
}

#define FAIL(...) return titan_error(TITAN_E_INVALID, __VA_ARGS__)

static int check_model(const struct titan_config *c)
{
	if (c->model.flavor && !strcmp(c->model.flavor, "custom")) {
		static const char *const need[] = { "dim", "n_layers", "n_heads", "vocab_size" };
		const int64_t val[] = { c->model.dim, c->model.n_layers, c->model.n_heads, c->model.vocab_size };
		for (size_t i = 0; i < 4; i++)
			if (val[i] == -1)
				FAIL("model.%s: must be set when model.flavor is custom", need[i]);
	}
	if (c->model.dim != -1 && c->model.n_heads != -1 && c->model.dim % c->model.n_heads != 0)
		FAIL("model.n_heads: %" PRId64 " does not divide model.dim %" PRId64,
		     c->model.n_heads, c->model.dim);
	if (c->model.n_heads != -1 && c->model.n_kv_heads != -1 && c->model.n_heads % c->model.n_kv_heads != 0)
		FAIL("model.n_kv_heads: %" PRId64 " does not divide model.n_heads %" PRId64,
		     c->model.n_kv_heads, c->model.n_heads);
	if (c->model.rope_scaling && !(c->model.rope_high_freq_factor > c->model.rope_low_freq_factor))
		FAIL("model.rope_high_freq_factor: must be greater than "
		     "model.rope_low_freq_factor when model.rope_scaling is true");
	if (c->model.tie_word_embeddings && !strcmp(c->model.tie_word_embeddings, "true") &&
	    c->parallelism.pipeline_parallel_degree > 1)
		FAIL("model.tie_word_embeddings: tied weights cannot be used with "
		     "parallelism.pipeline_parallel_degree > 1");
	return 0;
}

static int check_training(const struct titan_config *c)
{

	if (c->optimizer.beta1 >= 1)
		FAIL("optimizer.beta1: must be < 1");
	if (c->optimizer.beta2 >= 1)
		FAIL("optimizer.beta2: must be < 1");
	if (c->optimizer.early_step_in_backward && c->parallelism.pipeline_parallel_degree > 1)
		FAIL("optimizer.early_step_in_backward: not supported with "
		     "parallelism.pipeline_parallel_degree > 1");
	double dr = c->lr_scheduler.decay_ratio;
	if (!isnan(dr) && (dr < 0 || dr > 1))
		FAIL("lr_scheduler.decay_ratio: must be in [0, 1] or null");

	if (c->training.global_batch_size != -1) {
		if (c->training.global_batch_size < 1 || c->training.global_batch_size % c->training.local_batch_size)
			FAIL("training.global_batch_size: %" PRId64
			     " is not a multiple of training.local_batch_size %" PRId64
			     " (or -1)",
			     c->training.global_batch_size, c->training.local_batch_size);
		if (c->parallelism.data_parallel_shard_degree > 0) {
			int64_t dp = c->parallelism.data_parallel_replicate_degree *
				     c->parallelism.data_parallel_shard_degree;
			if (c->training.global_batch_size % (c->training.local_batch_size * dp))
				FAIL("training.global_batch_size: %" PRId64
				     " is not a multiple of training.local_batch_size x "
				     "the data parallel degree (%" PRId64 " x %" PRId64 ")",
				     c->training.global_batch_size, c->training.local_batch_size, dp);
		}
	}
	if (c->parallelism.pipeline_parallel_degree > 1 &&
	    c->training.local_batch_size % c->parallelism.pipeline_parallel_microbatch_size)
		FAIL("parallelism.pipeline_parallel_microbatch_size: %" PRId64
		     " does not divide training.local_batch_size %" PRId64,
		     c->parallelism.pipeline_parallel_microbatch_size, c->training.local_batch_size);
	/* Sequence parallelism shards the sequence by TP, CP by 2 x CP. */
	int64_t div = c->parallelism.tensor_parallel_degree *
		      (c->parallelism.context_parallel_degree > 1 ? 2 * c->parallelism.context_parallel_degree : 1);
	if (c->training.seq_len % div)
		FAIL("training.seq_len: %" PRId64 " is not divisible by %" PRId64
		     " (parallelism.tensor_parallel_degree x 2 x "
		     "parallelism.context_parallel_degree)",
		     c->training.seq_len, div);
	return 0;
}

int titan_config_validate(const struct titan_config *c)
{
	int rc = check_model(c);
	if (rc < 0)
		return rc;
	rc = check_training(c);
	if (rc < 0)
		return rc;

	const char *ac = c->activation_checkpoint.selective_ac_option;
	if (!(ac && (!strcmp(ac, "op") || is_count(ac))))
		FAIL("activation_checkpoint.selective_ac_option: '%.120s' is neither 'op' "
		     "nor a non-negative integer",
		     ac ? ac : "");

	if (c->checkpoint.keep_latest_k == 1)
		FAIL("checkpoint.keep_latest_k: 1 is not allowed (the newest checkpoint "
		     "may still be being written); use 0 to keep all, or 2 or more");
	if (c->checkpoint.last_save_in_hf && !c->checkpoint.last_save_model_only)
		FAIL("checkpoint.last_save_in_hf: needs checkpoint.last_save_model_only "
		     "(safetensors hold only the model)");

	if (c->profiling.enable_profiling &&
	    c->profiling.profile_freq < c->profiling.profiler_warmup + c->profiling.profiler_active)
		FAIL("profiling.profile_freq: %" PRId64 " is less than "
		     "profiling.profiler_warmup + profiling.profiler_active (%" PRId64 ")",
		     c->profiling.profile_freq, c->profiling.profiler_warmup + c->profiling.profiler_active);
	return 0;
}
