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

/* a * b for positive a, b; INT64_MAX when it would overflow. */
static int64_t mul_sat(int64_t a, int64_t b)
{
	return a > INT64_MAX / b ? INT64_MAX : a * b;
}

#define FAIL(...) return titan_error(TITAN_E_INVALID, __VA_ARGS__)

/* Mixture of experts: what titan does not run with it yet.  CP routes each
 * rank's own tokens (the loads summed over dp x cp), PP gives each stage
 * its MoE layers, TP without EP splits every expert's hidden dim (the
 * router runs on the gathered tokens, replicated), EP x TP (torchtitan's
 * ETP 1) routes each TP rank's sequence shard to whole experts and splits
 * the shared experts' hidden dim; the zero-bubble schedules split the
 * MoE backward too (every schedule runs).  Also titan-estimate's
 * (titan/config.h). */
int titan_config_check_moe_layout(int64_t experts, int64_t inter_dim, int64_t tp, int64_t ep)
{
	if (experts <= 0) {
		if (ep > 1)
			FAIL("parallelism.expert_parallel_degree: %" PRId64 " needs a mixture of "
			     "experts (model.moe_num_experts is 0); use 1", ep);
		return 0;
	}
	if (tp > 1 && inter_dim > 0 && inter_dim % tp)
		FAIL("parallelism.tensor_parallel_degree: %" PRId64 " does not divide "
		     "model.moe_inter_dim %" PRId64 " (each TP rank holds a slice of every "
		     "%s hidden dim)", tp, inter_dim, ep > 1 ? "shared expert's" : "expert's");
	if (ep > 1 && experts % ep)
		FAIL("parallelism.expert_parallel_degree: %" PRId64 " does not divide "
		     "model.moe_num_experts %" PRId64 " (each EP rank holds whole experts)",
		     ep, experts);
	return 0;
}

/* A MoE's keys and layout: the checks above, and the keys it does not
 * run with yet. */
static int check_moe(const struct titan_config *c)
{
	const struct {
		bool on;
		const char *key;
	} no[] = {
		{ c->training.device_e == TITAN_DEVICE_CUDA, "training.device" },
	};

	if (c->model.moe_num_experts <= 0)
		return titan_config_check_moe_layout(0, 0, 1, c->parallelism.expert_parallel_degree);
	if (c->model.moe_top_k > c->model.moe_num_experts)
		FAIL("model.moe_top_k: %" PRId64 " exceeds model.moe_num_experts %" PRId64,
		     c->model.moe_top_k, c->model.moe_num_experts);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (no[i].on)
			FAIL("%s: not supported with a mixture of experts yet "
			     "(model.moe_num_experts %" PRId64 ")", no[i].key,
			     c->model.moe_num_experts);
	/* HF has the MoE of Qwen3 MoE, DeepSeek-V3 and Llama 4 (lib/ckpt/hf.c),
	 * not one of a llama3 */
	if (c->model.name_e == TITAN_MODEL_NAME_LLAMA3 &&
	    (c->checkpoint.initial_load_in_hf || c->checkpoint.last_save_in_hf))
		FAIL("%s: a mixture of experts with model.name llama3 has no HF architecture "
		     "(titan converts Qwen3 MoE, DeepSeek-V3 and Llama 4: model.name qwen3, "
		     "deepseek_v3 or llama4)", c->checkpoint.initial_load_in_hf ?
		     "checkpoint.initial_load_in_hf" : "checkpoint.last_save_in_hf");
	return titan_config_check_moe_layout(
		c->model.moe_num_experts, c->model.moe_inter_dim,
		c->parallelism.tensor_parallel_degree, c->parallelism.expert_parallel_degree);
}

/* Expert parallelism (torchtitan's expert_parallel_degree): EP borrows its
 * ranks from dp_shard x cp x tp (dims.c checks that it divides them once
 * dp_shard -1 is resolved).  Expert tensor parallelism (ETP = TP: every
 * expert's hidden dim split over the TP ranks of an EP rank) is refused:
 * torchtitan removed it (skinny expert GEMMs, the all-to-alls repeated on
 * every TP rank); under EP x TP the experts are whole, its ETP 1.  EP's
 * other rules (a MoE, whole experts per rank) are
 * titan_config_check_moe_layout's.  EP x CP dispatches over the CP ranks'
 * own tokens, EP x TP over the TP ranks' sequence shards, EP x PP within
 * each stage (the EP group lies inside one stage). */
static int check_ep(const struct titan_config *c)
{
	if (c->parallelism.expert_tensor_parallel_degree != 1)
		FAIL("parallelism.expert_tensor_parallel_degree: %" PRId64 " is not supported "
		     "(expert tensor parallelism, which torchtitan removed: under EP x TP "
		     "every expert is whole on its EP rank, ETP 1; use 1)",
		     c->parallelism.expert_tensor_parallel_degree);
	return 0;
}

static int check_model(const struct titan_config *c)
{
	int64_t dim = c->model.dim, n_heads = c->model.n_heads, n_kv = c->model.n_kv_heads;

	if (c->model.flavor_e == TITAN_FLAVOR_CUSTOM) {
		static const char *const need[] = { "dim", "n_layers", "n_heads", "vocab_size" };
		const int64_t val[] = { dim, c->model.n_layers, n_heads, c->model.vocab_size };
		for (size_t i = 0; i < 4; i++)
			if (val[i] == -1)
				FAIL("model.%s: must be set when model.flavor is custom", need[i]);
	}
	if (dim != -1 && n_heads != -1 && dim % n_heads != 0)
		FAIL("model.n_heads: %" PRId64 " does not divide model.dim %" PRId64, n_heads,
		     dim);
	if (n_heads != -1 && n_kv != -1 && n_heads % n_kv != 0)
		FAIL("model.n_kv_heads: %" PRId64 " does not divide model.n_heads %" PRId64,
		     n_kv, n_heads);
	/* Llama 4's scaling has low = high (1, 1): no band to smooth */
	if (c->model.rope_scaling && c->model.name_e == TITAN_MODEL_NAME_LLAMA4 &&
	    !(c->model.rope_high_freq_factor >= c->model.rope_low_freq_factor))
		FAIL("model.rope_high_freq_factor: must be at least "
		     "model.rope_low_freq_factor when model.rope_scaling is true");
	if (c->model.rope_scaling && c->model.name_e != TITAN_MODEL_NAME_LLAMA4 &&
	    !(c->model.rope_high_freq_factor > c->model.rope_low_freq_factor))
		FAIL("model.rope_high_freq_factor: must be greater than "
		     "model.rope_low_freq_factor when model.rope_scaling is true");
	if (c->model.tie_word_embeddings_e == TITAN_TIE_TRUE &&
	    c->parallelism.pipeline_parallel_degree > 1)
		FAIL("model.tie_word_embeddings: tied weights cannot be used with "
		     "parallelism.pipeline_parallel_degree > 1");
	int rc = check_moe(c);
	return rc < 0 ? rc : check_ep(c);
}

static int check_optimizer(const struct titan_config *c)
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
	return 0;
}

static int check_batch(const struct titan_config *c)
{
	int64_t local = c->training.local_batch_size, global = c->training.global_batch_size;
	int64_t shard = c->parallelism.data_parallel_shard_degree;
	int64_t tp = c->parallelism.tensor_parallel_degree;
	int64_t cp = c->parallelism.context_parallel_degree;
	int64_t pp = c->parallelism.pipeline_parallel_degree;
	int64_t mbs = c->parallelism.pipeline_parallel_microbatch_size;

	if (global != -1) {
		if (global < 1 || global % local)
			FAIL("training.global_batch_size: %" PRId64
			     " is not a multiple of training.local_batch_size %" PRId64 " (or -1)",
			     global, local);
		if (shard > 0) {
			int64_t dp = mul_sat(c->parallelism.data_parallel_replicate_degree, shard);
			if (global % mul_sat(local, dp))
				FAIL("training.global_batch_size: %" PRId64
				     " is not a multiple of training.local_batch_size x "
				     "the data parallel degree (%" PRId64 " x %" PRId64 ")",
				     global, local, dp);
		}
	}
	if (pp > 1 && local % mbs)
		FAIL("parallelism.pipeline_parallel_microbatch_size: %" PRId64
		     " does not divide training.local_batch_size %" PRId64,
		     mbs, local);
	/* Validation batches run through the model's training-shaped buffers,
	 * rows padded to training.seq_len (labels ignored, so the loss is that
	 * of the shorter rows) and regrouped by training.local_batch_size.  A
	 * longer row does not fit the RoPE table and buffers sized by
	 * training.seq_len: torchtitan fails there too (the model's
	 * max_seq_len is training.seq_len). */
	if (c->validation.enable && c->validation.seq_len > c->training.seq_len)
		FAIL("validation.seq_len: %" PRId64 " is longer than training.seq_len %" PRId64
		     " (the model's RoPE table and buffers are sized by training.seq_len; "
		     "use at most %" PRId64 " or -1)",
		     c->validation.seq_len, c->training.seq_len, c->training.seq_len);
	/* Sequence parallelism shards the sequence by TP, CP by 2 x CP. */
	int64_t div = mul_sat(tp, cp > 1 ? mul_sat(2, cp) : 1);
	if (c->training.seq_len % div)
		FAIL("training.seq_len: %" PRId64 " is not divisible by %" PRId64
		     " (parallelism.tensor_parallel_degree x 2 x "
		     "parallelism.context_parallel_degree)",
		     c->training.seq_len, div);
	return 0;
}

int titan_config_validate(const struct titan_config *c)
{
	int rc;
	if ((rc = check_model(c)) < 0 || (rc = check_optimizer(c)) < 0 ||
	    (rc = check_batch(c)) < 0)
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
	if (c->checkpoint.initial_load_in_hf && !c->checkpoint.initial_load_model_only)
		FAIL("checkpoint.initial_load_in_hf: needs checkpoint.initial_load_model_only "
		     "(safetensors hold only the model)");
	if (c->checkpoint.initial_load_in_hf && !*c->checkpoint.initial_load_path &&
	    !*c->model.hf_assets_path)
		FAIL("checkpoint.initial_load_in_hf: needs checkpoint.initial_load_path or "
		     "model.hf_assets_path (the HF folder to load)");

	int64_t warm = c->profiling.profiler_warmup, active = c->profiling.profiler_active;
	int64_t need = warm > INT64_MAX - active ? INT64_MAX : warm + active;
	if (c->profiling.enable_profiling && c->profiling.profile_freq < need)
		FAIL("profiling.profile_freq: %" PRId64 " is less than "
		     "profiling.profiler_warmup + profiling.profiler_active (%" PRId64 ")",
		     c->profiling.profile_freq, need);
	return 0;
}
