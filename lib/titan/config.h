/*
 * titan/config.h — the job configuration: YAML (libyaml) into a typed struct.
 *
 * One schema table (lib/config/schema.c) drives parsing, defaults, types,
 * ranges, enumerations, the YAML printer and the --help-config text.  The
 * sections and keys are torchtitan's (job_config.py of the TOML era, see
 * docs/torchtitan-notes.md), plus titan's own keys where it does more
 * (model dims of a custom flavor, metrics.peak_flops, ...).
 *
 * File format: a YAML mapping of sections, each a mapping of keys to scalars
 * (or, for list keys, a sequence of scalars or a comma-separated string):
 *
 *   training:
 *     steps: 10
 *     seq_len: 2048
 *
 * Precedence: schema defaults < the YAML file < command-line overrides
 * (`--section.key=value` or `--section.key value`, applied left to right;
 * `--section.key` alone sets a boolean to true).
 *
 * Errors (TITAN_E_INVALID, message via titan_errmsg()) name the origin —
 * "FILE:LINE:COL" for the file, "command line" for overrides — and the key:
 *   cfg.yaml:12:3: training.stepz: unknown key (did you mean 'training.steps'?)
 *   cfg.yaml:4:10: optimizer.lr: expected a number, got 'fast'
 *   cfg.yaml:7:14: training.seq_len: 0 is out of range (minimum 1)
 *   cfg.yaml:9:11: checkpoint.async_mode: 'sync' is not one of disabled, async
 */
#ifndef TITAN_CONFIG_H
#define TITAN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum titan_config_type {
	TITAN_CFG_BOOL,
	TITAN_CFG_INT,     /* int64_t */
	TITAN_CFG_FLOAT,   /* double */
	TITAN_CFG_STRING,  /* char * (owned; "" when empty) */
	TITAN_CFG_ENUM,    /* char * holding one of `choices`, and its enum in `key`_e */
	TITAN_CFG_STRLIST, /* struct titan_strlist */
};

/*
 * The choices of every ENUM key as X-macro lists, X(ENUMERATOR, "spelling"):
 * the schema's choice lists (lib/config/schema.c) and the C enums below both
 * come from them, so the two cannot drift.  An enumerator's value is the
 * index of its choice.  struct titan_config holds each ENUM key twice, set
 * together by the functions of this header: `key` (the choice as the schema
 * spells it, for messages and the YAML printer) and `key_e` (the enum, for
 * code).  Compare the enum; never strcmp the string.
 */
#define TITAN_CFG_ENUMERATOR(id, name) id,
#define TITAN_MODEL_NAMES(X)                                                       \
	X(TITAN_MODEL_NAME_LLAMA3, "llama3") X(TITAN_MODEL_NAME_QWEN3, "qwen3")    \
	X(TITAN_MODEL_NAME_DEEPSEEK_V3, "deepseek_v3") X(TITAN_MODEL_NAME_LLAMA4, "llama4")
#define TITAN_FLAVORS(X)                                                           \
	X(TITAN_FLAVOR_DEBUGMODEL, "debugmodel") X(TITAN_FLAVOR_1B, "1B")          \
	X(TITAN_FLAVOR_3B, "3B") X(TITAN_FLAVOR_8B, "8B") X(TITAN_FLAVOR_70B, "70B") \
	X(TITAN_FLAVOR_405B, "405B") X(TITAN_FLAVOR_0_6B, "0.6B")                  \
	X(TITAN_FLAVOR_1_7B, "1.7B") X(TITAN_FLAVOR_4B, "4B")                      \
	X(TITAN_FLAVOR_14B, "14B") X(TITAN_FLAVOR_32B, "32B")                      \
	X(TITAN_FLAVOR_DEBUGMODEL_MOE, "debugmodel_moe")                            \
	X(TITAN_FLAVOR_30B_A3B, "30B-A3B") X(TITAN_FLAVOR_235B_A22B, "235B-A22B")   \
	X(TITAN_FLAVOR_DEBUGMODEL_MLA, "debugmodel_mla") X(TITAN_FLAVOR_16B, "16B") \
	X(TITAN_FLAVOR_236B, "236B") X(TITAN_FLAVOR_671B, "671B")                   \
	X(TITAN_FLAVOR_17BX16E, "17bx16e") X(TITAN_FLAVOR_17BX128E, "17bx128e")     \
	X(TITAN_FLAVOR_CUSTOM, "custom")
#define TITAN_TIES(X) X(TITAN_TIE_AUTO, "auto") X(TITAN_TIE_TRUE, "true") X(TITAN_TIE_FALSE, "false")
#define TITAN_MOE_SCORE_FUNCS(X) X(TITAN_MOE_SIGMOID, "sigmoid") X(TITAN_MOE_SOFTMAX, "softmax")
#define TITAN_OPTIMIZERS(X) X(TITAN_OPTIMIZER_ADAMW, "AdamW") X(TITAN_OPTIMIZER_ADAM, "Adam")
#define TITAN_OPTIM_IMPLS(X)                                                       \
	X(TITAN_OPTIM_IMPL_FUSED, "fused") X(TITAN_OPTIM_IMPL_FOREACH, "foreach")  \
	X(TITAN_OPTIM_IMPL_FOR_LOOP, "for-loop")
#define TITAN_DECAY_TYPES(X) /* also the lr schedule's (titan/train.h) */    \
	X(TITAN_DECAY_LINEAR, "linear") X(TITAN_DECAY_SQRT, "sqrt")                \
	X(TITAN_DECAY_COSINE, "cosine")
#define TITAN_DEVICES(X) X(TITAN_DEVICE_AUTO, "auto") X(TITAN_DEVICE_CPU, "cpu") X(TITAN_DEVICE_CUDA, "cuda")
#define TITAN_MASTER_DTYPES(X) X(TITAN_MASTER_FLOAT32, "float32") X(TITAN_MASTER_BFLOAT16, "bfloat16")
#define TITAN_MP_PARAMS(X) X(TITAN_MP_PARAM_BFLOAT16, "bfloat16") X(TITAN_MP_PARAM_FLOAT32, "float32")
#define TITAN_MP_REDUCES(X) X(TITAN_MP_REDUCE_FLOAT32, "float32")
#define TITAN_RESHARDS(X)                                                          \
	X(TITAN_RESHARD_DEFAULT, "default") X(TITAN_RESHARD_ALWAYS, "always")      \
	X(TITAN_RESHARD_NEVER, "never")
/* Pipeline schedules by torch's names: the one name <-> enum table of the
 * tree (titan-train maps it to enum titan_pp_schedule, titan-estimate to
 * enum titan_est_schedule). */
#define TITAN_SCHEDULES(X)                                                         \
	X(TITAN_SCHEDULE_GPIPE, "GPipe") X(TITAN_SCHEDULE_1F1B, "1F1B")            \
	X(TITAN_SCHEDULE_INTERLEAVED_1F1B, "Interleaved1F1B")                      \
	X(TITAN_SCHEDULE_LOOPED_BFS, "LoopedBFS")                                  \
	X(TITAN_SCHEDULE_INTERLEAVED_ZB, "InterleavedZeroBubble")                  \
	X(TITAN_SCHEDULE_ZBV, "ZBVZeroBubble")
#define TITAN_CP_ROTATES(X) X(TITAN_CP_ROTATE_ALLGATHER, "allgather") X(TITAN_CP_ROTATE_ALLTOALL, "alltoall")
#define TITAN_ATTN_MASKS(X) X(TITAN_ATTN_MASK_CAUSAL, "causal") X(TITAN_ATTN_MASK_BLOCK_CAUSAL, "block_causal")
#define TITAN_ACT_CKPTS(X) /* resolved into enum titan_ac_mode (titan/train.h) */ \
	X(TITAN_ACT_CKPT_NONE, "none") X(TITAN_ACT_CKPT_SELECTIVE, "selective")    \
	X(TITAN_ACT_CKPT_FULL, "full")
#define TITAN_EXPORT_DTYPES(X)                                                     \
	X(TITAN_EXPORT_FLOAT32, "float32") X(TITAN_EXPORT_BFLOAT16, "bfloat16")    \
	X(TITAN_EXPORT_FLOAT16, "float16")
#define TITAN_ASYNC_MODES(X) X(TITAN_ASYNC_DISABLED, "disabled") X(TITAN_ASYNC_ASYNC, "async")

enum titan_model_name { TITAN_MODEL_NAMES(TITAN_CFG_ENUMERATOR) };
enum titan_flavor { TITAN_FLAVORS(TITAN_CFG_ENUMERATOR) };
enum titan_tie { TITAN_TIES(TITAN_CFG_ENUMERATOR) };
enum titan_moe_score_func { TITAN_MOE_SCORE_FUNCS(TITAN_CFG_ENUMERATOR) };
enum titan_optimizer { TITAN_OPTIMIZERS(TITAN_CFG_ENUMERATOR) };
enum titan_optim_impl { TITAN_OPTIM_IMPLS(TITAN_CFG_ENUMERATOR) };
enum titan_decay_type { TITAN_DECAY_TYPES(TITAN_CFG_ENUMERATOR) };
enum titan_device { TITAN_DEVICES(TITAN_CFG_ENUMERATOR) };
enum titan_master_dtype { TITAN_MASTER_DTYPES(TITAN_CFG_ENUMERATOR) };
enum titan_mp_param { TITAN_MP_PARAMS(TITAN_CFG_ENUMERATOR) };
enum titan_mp_reduce { TITAN_MP_REDUCES(TITAN_CFG_ENUMERATOR) };
enum titan_reshard { TITAN_RESHARDS(TITAN_CFG_ENUMERATOR) };
enum titan_schedule { TITAN_SCHEDULES(TITAN_CFG_ENUMERATOR) };
enum titan_cp_rotate { TITAN_CP_ROTATES(TITAN_CFG_ENUMERATOR) };
enum titan_attn_mask { TITAN_ATTN_MASKS(TITAN_CFG_ENUMERATOR) };
enum titan_act_ckpt { TITAN_ACT_CKPTS(TITAN_CFG_ENUMERATOR) };
enum titan_export_dtype { TITAN_EXPORT_DTYPES(TITAN_CFG_ENUMERATOR) };
enum titan_async_mode { TITAN_ASYNC_MODES(TITAN_CFG_ENUMERATOR) };

/* Flags of a schema entry. */
#define TITAN_CFG_NULLABLE 0x1 /* YAML null / "none" allowed: FLOAT -> NAN, INT -> INT64_MIN */
#define TITAN_CFG_NONZERO  0x2 /* INT/FLOAT: 0 is not allowed (-1 = infer, n >= 1; x > 0) */

struct titan_strlist {
	size_t n;
	char **items; /* owned */
};

/* One key of the schema. */
struct titan_config_key {
	const char *section;      /* "training" */
	const char *key;          /* "steps" */
	enum titan_config_type type;
	size_t offset;            /* of the value in struct titan_config */
	const char *def;          /* default, as text ("" for empty / none) */
	double min, max;          /* inclusive range for INT/FLOAT (when min <= max) */
	const char *const *choices; /* ENUM: NULL-terminated */
	unsigned flags;
	const char *doc;          /* one line for --help-config */
	size_t enum_offset;       /* ENUM: of `key`_e, the enum beside the string */
};

#define TITAN_CFG_NONE_INT INT64_MIN

/* The resolved configuration.  Field names are the schema's keys (and
 * `key`_e, the enum of an ENUM key, see above). */
struct titan_config {
	struct {
		char *dump_folder;       /* "./outputs" */
		char *description;
		bool print_config;
	} job;
	struct {
		char *name;              /* "llama3", "qwen3" */
		enum titan_model_name name_e;
		char *flavor;            /* llama3: debugmodel, 1B, 3B, 8B, 70B, 405B;
					    qwen3: debugmodel, 0.6B, 1.7B, 4B, 8B, 14B,
					    32B, the MoE debugmodel_moe, 30B-A3B,
					    235B-A22B; custom */
		enum titan_flavor flavor_e;
		char *tokenizer_path;
		char *hf_assets_path;
		/* custom flavor dims (used when flavor == "custom"; overrides
		 * otherwise when not the sentinel -1 / NAN) */
		int64_t dim, n_layers, n_heads, n_kv_heads, vocab_size, multiple_of;
		double ffn_dim_multiplier;
		double norm_eps;
		double rope_theta;
		bool rope_scaling;       /* Llama 3.1 frequency scaling */
		double rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor;
		int64_t rope_original_max_position;
		char *tie_word_embeddings; /* auto|true|false (auto: per flavor) */
		enum titan_tie tie_word_embeddings_e;
		int64_t head_dim;        /* -1: the flavor's (llama3: dim / n_heads) */
		int64_t hidden_dim;      /* FFN hidden size; -1: the flavor's */
		char *qk_norm;           /* auto|true|false (auto: per model family) */
		enum titan_tie qk_norm_e;
		/* deepseek_v3's multi-head latent attention and YaRN RoPE
		 * (-1 / NAN: the flavor's) */
		int64_t q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim;
		int64_t v_head_dim, original_seq_len;
		double rope_factor, beta_fast, beta_slow, mscale;
		struct titan_strlist converters;
		/* mixture of experts (torchtitan's MoEArgs, the DeepSeek-V3 /
		 * Llama 4 layer choice); moe_num_experts 0 = dense */
		int64_t moe_num_experts, moe_num_shared_experts, moe_top_k, moe_inter_dim;
		char *moe_score_func;    /* sigmoid|softmax */
		enum titan_moe_score_func moe_score_func_e;
		bool moe_route_norm, moe_score_before_experts, moe_use_grouped_mm;
		double moe_route_scale, moe_load_balance_coeff;
		int64_t n_dense_layers, interleave_moe_layer_step;
		/* Llama 4's iRoPE: block i without RoPE when i % n == 0 (0:
		 * none), the RoPE blocks' attention chunk */
		int64_t every_n_layers_nope, fixed_attn_block_size;
	} model;
	struct {
		char *name;              /* AdamW, Adam */
		enum titan_optimizer name_e;
		double lr, beta1, beta2, eps, weight_decay;
		bool weight_decay_exclude_norms_embeddings;
		char *implementation;    /* fused, foreach, for-loop */
		enum titan_optim_impl implementation_e;
		bool early_step_in_backward;
	} optimizer;
	struct {
		int64_t warmup_steps;
		int64_t total_steps;     /* -1: training.steps */
		double decay_ratio;      /* NAN: decay right after warmup */
		char *decay_type;        /* linear, sqrt, cosine */
		enum titan_decay_type decay_type_e;
		double min_lr_factor;
	} lr_scheduler;
	struct {
		char *dataset;
		char *dataset_path;      /* folder of titan-shard shards */
		int64_t local_batch_size, global_batch_size, seq_len;
		double max_norm;
		int64_t steps;
		bool shuffle;
		bool skip_nonfinite;
		int64_t max_consecutive_nonfinite;
		bool enable_cpu_offload;
		char *device;            /* auto, cpu, cuda */
		enum titan_device device_e;
		char *dtype;             /* float32, bfloat16 */
		enum titan_master_dtype dtype_e;
		char *mixed_precision_param, *mixed_precision_reduce;
		enum titan_mp_param mixed_precision_param_e;
		enum titan_mp_reduce mixed_precision_reduce_e;
		int64_t gc_freq;
		int64_t seed;
		bool deterministic;
		char *attn_mask_type;    /* causal, block_causal (documents from EOS) */
		enum titan_attn_mask attn_mask_type_e;
	} training;
	struct {
		int64_t data_parallel_replicate_degree, data_parallel_shard_degree;
		char *fsdp_reshard_after_forward; /* default, always, never */
		enum titan_reshard fsdp_reshard_after_forward_e;
		int64_t tensor_parallel_degree;
		bool disable_loss_parallel, enable_async_tensor_parallel;
		int64_t pipeline_parallel_degree;
		struct titan_strlist pipeline_parallel_split_points;
		char *pipeline_parallel_schedule;
		enum titan_schedule pipeline_parallel_schedule_e;
		int64_t pipeline_parallel_microbatch_size;
		int64_t pipeline_parallel_layers_per_stage; /* NONE_INT: auto */
		int64_t context_parallel_degree;
		char *context_parallel_rotate_method; /* allgather, alltoall */
		enum titan_cp_rotate context_parallel_rotate_method_e;
		int64_t expert_parallel_degree;        /* ranks borrowed from dp_shard x cp x tp */
		int64_t expert_tensor_parallel_degree; /* only 1 (torchtitan removed ETP) */
	} parallelism;
	struct {
		char *mode;              /* none, selective, full */
		enum titan_act_ckpt mode_e;
		char *selective_ac_option; /* "<int N>" or "op" */
		bool preserve_rng_state;
	} activation_checkpoint;
	struct {
		bool enable;
		char *folder;
		int64_t interval;
		char *initial_load_path;
		bool initial_load_model_only, initial_load_in_hf;
		bool last_save_model_only, last_save_in_hf;
		bool model_weights_only;
		char *export_dtype;      /* float32, bfloat16, float16 */
		enum titan_export_dtype export_dtype_e;
		char *async_mode;        /* disabled, async */
		enum titan_async_mode async_mode_e;
		int64_t keep_latest_k;
		int64_t load_step;
		struct titan_strlist exclude_from_loading;
		bool enable_first_step_checkpoint, create_seed_checkpoint, load_only;
	} checkpoint;
	struct {
		int64_t log_freq;
		bool disable_color_printing;
		bool save_for_all_ranks;
		char *save_jsonl_file;   /* under dump_folder; "" disables */
		double peak_flops;       /* NAN: the device's nominal peak (GPU table, CPU formula) */
		bool measure_peak_flops; /* CPU: an sgemm at start-up gives the peak instead */
		bool enable_tensorboard;
		char *save_tb_folder;    /* under dump_folder */
	} metrics;
	struct {
		bool enable_profiling;
		char *save_traces_folder;
		int64_t profile_freq, profiler_warmup, profiler_active;
		bool enable_memory_snapshot;
		char *save_memory_snapshot_folder;
	} profiling;
	struct {
		int64_t init_timeout_seconds, train_timeout_seconds, trace_buf_size;
		char *save_traces_folder;
		double bucket_size_mb;   /* -1: 25 for DDP, per block for FSDP */
	} comm;
	struct {
		bool enable;
		char *dataset, *dataset_path;
		int64_t local_batch_size, seq_len, freq, steps;
	} validation;
};

/* ---- schema */
size_t titan_config_nkeys(void);
const struct titan_config_key *titan_config_key_at(size_t i);
/* "section.key" -> entry, or NULL. */
const struct titan_config_key *titan_config_find(const char *name);
/* The spelling of choice `v` (an enumerator of the key's enum) of the ENUM
 * key `name`: ("training.device", TITAN_DEVICE_CUDA) -> "cuda"; NULL when
 * there is no such key or choice. */
const char *titan_config_choice(const char *name, int v);
/* Closest "section.key" to a misspelt one (edit distance <= 3 or a unique
 * key with the same name in another section), or NULL. */
const char *titan_config_suggest(const char *name, char *buf, size_t n);

/* ---- lifecycle */
/* Fill every key with its schema default.  Returns TITAN_E_NOMEM on failure. */
int titan_config_init(struct titan_config *c);
void titan_config_release(struct titan_config *c); /* NULL-safe, idempotent */
int titan_config_copy(struct titan_config *dst, const struct titan_config *src);

/* ---- input */
/* Apply a YAML file over the current values.  Unknown sections/keys, wrong
 * types, out-of-range and bad enum values, duplicate keys and YAML syntax
 * errors fail with "PATH:LINE:COL: section.key: why".  A path ending in
 * ".toml" is read as torchtitan's TOML (titan_config_load_toml_string). */
int titan_config_load_file(struct titan_config *c, const char *path);
/* Same from memory; `name` is used in messages in place of a path. */
int titan_config_load_string(struct titan_config *c, const char *yaml, size_t len,
			     const char *name);
/* torchtitan's TOML job files (lib/config/toml.c): the TOML they use, with
 * torchtitan's names of titan's keys mapped (debug.seed -> training.seed)
 * and its keys without a titan counterpart accepted only with the value
 * that asks for nothing (compile.enable = false), else refused naming what
 * titan has instead.  Errors as for YAML, "NAME:LINE:COL: key: why". */
int titan_config_load_toml_string(struct titan_config *c, const char *toml, size_t len,
				  const char *name);
enum titan_config_format {
	TITAN_CONFIG_AUTO, /* TOML for a name ending in ".toml", else YAML */
	TITAN_CONFIG_YAML,
	TITAN_CONFIG_TOML,
};
/* titan_config_load_file in a given format ("-": standard input). */
int titan_config_load_file_format(struct titan_config *c, const char *path,
				  enum titan_config_format format);
/* Set one key from text ("section.key", "value"); `origin` prefixes errors
 * ("command line", "cfg.yaml:3:5").  A NULL value sets a BOOL to true. */
int titan_config_set(struct titan_config *c, const char *name, const char *value,
		     const char *origin);
/* Cross-key checks that no single key can make (e.g. a degree product,
 * warmup vs steps): TITAN_E_INVALID naming the keys. */
int titan_config_validate(const struct titan_config *c);
/* The layouts a mixture of experts does not run with yet, stated once for
 * titan-train's validation and titan-estimate's layouts (--search meets
 * layouts no config file held): EP without a MoE or not dividing its
 * experts, a TP degree not dividing moe_inter_dim (<= 0:
 * not known yet, not checked).  TITAN_E_INVALID naming the key, or 0. */
int titan_config_check_moe_layout(int64_t experts, int64_t inter_dim, int64_t tp, int64_t ep);

/* Command-line overrides.  Removes every `--section.key[=value]` (and the
 * value of `--section.key value`) from argv, compacting it, so getopt_long
 * sees only the tool's own options; argv[0] stays.  Returns the number of
 * overrides stored, or TITAN_E_NOMEM.  Tokens after "--" are left alone. */
struct titan_config_overrides {
	size_t n;
	char **names;  /* "section.key" (owned) */
	char **values; /* text or NULL for a bare flag (owned) */
};
int titan_config_extract_overrides(int *argc, char **argv,
				   struct titan_config_overrides *ov);
void titan_config_overrides_release(struct titan_config_overrides *ov);

/* Defaults, then `path` (NULL: none), then overrides, then validate. */
int titan_config_resolve(struct titan_config *c, const char *path,
			 const struct titan_config_overrides *ov);
/* Same with the file in a given format. */
int titan_config_resolve_format(struct titan_config *c, const char *path,
				enum titan_config_format format,
				const struct titan_config_overrides *ov);

/* ---- output */
/* The whole config as YAML (every section and key, in schema order), which
 * titan_config_load_file() reads back to equal values. */
int titan_config_write_yaml(const struct titan_config *c, FILE *fp);
/* One value as the text the YAML printer would use (no quotes). */
int titan_config_format_value(const struct titan_config *c, const char *name,
			      char *buf, size_t n);
/* Keys whose values differ; returns the first differing "section.key" or
 * NULL when equal (NaN equals NaN here). */
const char *titan_config_diff(const struct titan_config *a, const struct titan_config *b);
/* --help-config: every section and key with type, default, range or
 * choices and the doc line. */
void titan_config_help(FILE *fp);

/* The key reference generated from the schema, for docs/config.md (Markdown:
 * a table per section) and the man pages (man(7): .SS per section, .TP per
 * key); `make docs` splices it into them between marker comments
 * (mk/gen-docs.sh).  TITAN_E_INVALID for an unknown format, TITAN_E_IO on
 * a write error. */
enum titan_config_doc_format { TITAN_CONFIG_DOC_MARKDOWN, TITAN_CONFIG_DOC_MAN };
int titan_config_doc(FILE *fp, enum titan_config_doc_format format);

#ifdef __cplusplus
}
#endif
#endif
