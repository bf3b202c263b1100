/*
 * lib/config/schema.c — the schema of the job configuration: one table of
 * every key (section, name, type, default, range, choices, flags, doc) that
 * drives parsing, defaults, printing and --help-config; key lookup,
 * "did you mean" suggestions and the --help-config text.
 *
 * Sections, keys and defaults mirror torchtitan's JobConfig of the TOML era
 * (torchtitan/config/job_config.py at 238fa9953), with torchtitan's renames
 * (checkpoint.enable, lr_scheduler.min_lr_factor, validation.enable), the
 * seed/determinism keys under training, and titan's own keys (model dims of
 * a custom flavor, RoPE scaling, metrics.peak_flops, ...).
 */
#include "config_impl.h"

#include <limits.h>
#include <math.h>
#include <string.h>

/* Compile-time check that a schema entry's type matches its field. */
#define CFG_CODE_BOOL 1
#define CFG_CODE_INT 2
#define CFG_CODE_FLOAT 3
#define CFG_CODE_STRING 4
#define CFG_CODE_ENUM 4
#define CFG_CODE_STRLIST 6
#define CFG_TYPECHECK(member, TYPE)                                               \
	(0 * sizeof(char[_Generic(((struct titan_config *)0)->member,             \
				  bool: 1, int64_t: 2, double: 3, char *: 4,      \
				  struct titan_strlist: 6, default: 0) ==         \
					 CFG_CODE_##TYPE                          \
				 ? 1                                              \
				 : -1]))

struct cfg_entry {
	struct titan_config_key k; /* first: a key pointer is an entry pointer */
	const char *name;          /* "section.key" */
	size_t nchoices;           /* ENUM: entries of k.choices */
};

#define K(...) K_(__VA_ARGS__)
#define K_(sec, key, TYPE, def, lo, hi, choices, flags, doc)                     \
	{ { #sec, #key, TITAN_CFG_##TYPE,                                         \
	    offsetof(struct titan_config, sec.key) + CFG_TYPECHECK(sec.key, TYPE), \
	    def, lo, hi, choices, flags, doc, 0 },                                \
	  #sec "." #key, 0 }

/*
 * An ENUM key: its choices are the X-macro list LIST of titan/config.h, and
 * `key`_e must be a field of `enum etype` (checked at compile time), so the
 * schema, the string and the enum cannot disagree.
 */
#define CFG_CHOICE(id, name) name,
#define CFG_COUNT(id, name) +1
#define CFG_ENUMCHECK(member, etype)                                              \
	(0 * sizeof(char[_Generic(((struct titan_config *)0)->member,             \
				  enum etype: 1, default: -1)]))
#define KE(sec, key, LIST, etype, def, doc)                                      \
	{ { #sec, #key, TITAN_CFG_ENUM,                                           \
	    offsetof(struct titan_config, sec.key) + CFG_TYPECHECK(sec.key, ENUM), \
	    def, NR, (const char *const[]){ LIST(CFG_CHOICE) NULL }, 0, doc,      \
	    offsetof(struct titan_config, sec.key##_e) +                          \
		    CFG_ENUMCHECK(sec.key##_e, etype) },                          \
	  #sec "." #key, 0 LIST(CFG_COUNT) }

_Static_assert(sizeof(enum titan_schedule) == sizeof(int) &&
		       sizeof(enum titan_model_name) == sizeof(int),
	       "ENUM fields are stored as int");

/* Ranges: NR = none; GE(x) = minimum x; IN(a, b) = [a, b]. */
#define NR 1, 0
#define GE(x) x, HUGE_VAL
#define IN(a, b) a, b
#define NUL TITAN_CFG_NULLABLE
#define NZ TITAN_CFG_NONZERO

static const struct cfg_entry schema[] = {
	/* job */
	K(job, dump_folder, STRING, "./outputs", NR, NULL, 0,
	  "folder for all outputs of the job (checkpoints, metrics, traces)"),
	K(job, description, STRING, "default job", NR, NULL, 0,
	  "free-text description of the job"),
	K(job, print_config, BOOL, "false", NR, NULL, 0,
	  "log the resolved configuration at start-up"),

	/* model */
	KE(model, name, TITAN_MODEL_NAMES, titan_model_name, "llama3", "model family"),
	KE(model, flavor, TITAN_FLAVORS, titan_flavor, "debugmodel",
	   "model size; custom takes the dims below; a MoE flavor (qwen3: debugmodel_moe, "
	   "30B-A3B, 235B-A22B; every deepseek_v3 and llama4 one) sets the model.moe_* keys"),
	K(model, tokenizer_path, STRING, "", NR, NULL, 0,
	  "tokenizer file (tiktoken .model or HF tokenizer.json); '' = none"),
	K(model, hf_assets_path, STRING, "", NR, NULL, 0,
	  "folder of HF assets (tokenizer.json, config.json); '' = none"),
	K(model, dim, INT, "-1", GE(-1), NULL, NZ,
	  "model width; -1 = from the flavor"),
	K(model, n_layers, INT, "-1", GE(-1), NULL, NZ,
	  "number of transformer blocks; -1 = from the flavor"),
	K(model, n_heads, INT, "-1", GE(-1), NULL, NZ,
	  "attention heads; -1 = from the flavor"),
	K(model, n_kv_heads, INT, "-1", GE(-1), NULL, NZ,
	  "key/value heads (GQA); -1 = from the flavor"),
	K(model, vocab_size, INT, "-1", GE(-1), NULL, NZ,
	  "vocabulary size; -1 = from the flavor"),
	K(model, multiple_of, INT, "-1", GE(-1), NULL, NZ,
	  "FFN hidden size is rounded up to a multiple of this; -1 = from the flavor"),
	K(model, ffn_dim_multiplier, FLOAT, "", GE(0), NULL, NUL | NZ,
	  "FFN hidden size multiplier; null = from the flavor"),
	K(model, norm_eps, FLOAT, "1e-5", GE(0), NULL, NZ, "RMSNorm epsilon"),
	K(model, rope_theta, FLOAT, "500000", GE(0), NULL, NZ, "RoPE base"),
	K(model, rope_scaling, BOOL, "true", NR, NULL, 0,
	  "apply Llama 3.1 RoPE frequency scaling"),
	K(model, rope_scaling_factor, FLOAT, "8", GE(0), NULL, NZ,
	  "RoPE scaling: factor for low frequencies"),
	K(model, rope_low_freq_factor, FLOAT, "1", GE(0), NULL, NZ,
	  "RoPE scaling: low-frequency factor"),
	K(model, rope_high_freq_factor, FLOAT, "4", GE(0), NULL, NZ,
	  "RoPE scaling: high-frequency factor"),
	K(model, rope_original_max_position, INT, "8192", GE(1), NULL, 0,
	  "RoPE scaling: original maximum position"),
	KE(model, tie_word_embeddings, TITAN_TIES, titan_tie, "auto",
	  "share the embedding and output weights; auto = per flavor"),
	K(model, head_dim, INT, "-1", GE(-1), NULL, NZ,
	  "attention head size; -1 = from the flavor (llama3: dim / n_heads)"),
	K(model, hidden_dim, INT, "-1", GE(-1), NULL, NZ,
	  "FFN hidden size; -1 = from the flavor (llama3: from dim, multiple_of, "
	  "ffn_dim_multiplier)"),
	KE(model, qk_norm, TITAN_TIES, titan_tie, "auto",
	   "RMSNorm of q and k over head_dim before RoPE; auto = per model family "
	   "(qwen3: true)"),
	K(model, q_lora_rank, INT, "-1", GE(-1), NULL, 0,
	  "deepseek_v3 MLA: rank of the query compression (0 = a plain wq); -1 = from the "
	  "flavor"),
	K(model, kv_lora_rank, INT, "-1", GE(-1), NULL, NZ,
	  "deepseek_v3 MLA: rank of the compressed key/value latent; -1 = from the flavor"),
	K(model, qk_nope_head_dim, INT, "-1", GE(-1), NULL, NZ,
	  "deepseek_v3 MLA: per-head q/k dims without RoPE; -1 = from the flavor"),
	K(model, qk_rope_head_dim, INT, "-1", GE(-1), NULL, NZ,
	  "deepseek_v3 MLA: per-head q/k dims with (decoupled) RoPE, k's shared by the heads; "
	  "-1 = from the flavor"),
	K(model, v_head_dim, INT, "-1", GE(-1), NULL, NZ,
	  "deepseek_v3 MLA: per-head value dims; -1 = from the flavor"),
	K(model, rope_factor, FLOAT, "", GE(0), NULL, NUL | NZ,
	  "deepseek_v3 YaRN RoPE scaling factor (> 1: scaled); null = from the flavor"),
	K(model, beta_fast, FLOAT, "", GE(0), NULL, NUL | NZ,
	  "deepseek_v3 YaRN: extrapolation boundary (rotations); null = from the flavor"),
	K(model, beta_slow, FLOAT, "", GE(0), NULL, NUL | NZ,
	  "deepseek_v3 YaRN: interpolation boundary (rotations); null = from the flavor"),
	K(model, original_seq_len, INT, "-1", GE(-1), NULL, NZ,
	  "deepseek_v3 YaRN: the pre-training context length; -1 = from the flavor"),
	K(model, mscale, FLOAT, "", GE(0), NULL, NUL,
	  "deepseek_v3 YaRN: softmax scale x (0.1 mscale ln(rope_factor) + 1)^2 when "
	  "rope_factor > 1; null = from the flavor"),
	K(model, converters, STRLIST, "", NR, NULL, 0,
	  "model converters to apply, e.g. float8"),
	K(model, moe_num_experts, INT, "0", GE(0), NULL, 0,
	  "mixture of experts: routed experts per MoE layer; 0 = dense feed-forward"),
	K(model, moe_num_shared_experts, INT, "1", GE(0), NULL, 0,
	  "MoE: shared experts (one SwiGLU of moe_inter_dim x this) added to the routed output"),
	K(model, moe_top_k, INT, "1", GE(1), NULL, 0,
	  "MoE: experts each token is routed to (token-choice top-k)"),
	K(model, moe_inter_dim, INT, "-1", GE(-1), NULL, NZ,
	  "MoE: hidden size of one expert; -1 = the dense FFN hidden size"),
	KE(model, moe_score_func, TITAN_MOE_SCORE_FUNCS, titan_moe_score_func, "sigmoid",
	   "MoE router scores: sigmoid or softmax of the gate, in fp32"),
	K(model, moe_route_norm, BOOL, "false", NR, NULL, 0,
	  "MoE: normalize the top-k scores of a token to sum to 1"),
	K(model, moe_route_scale, FLOAT, "1.0", NR, NULL, 0,
	  "MoE: factor on the routing scores"),
	K(model, moe_score_before_experts, BOOL, "true", NR, NULL, 0,
	  "MoE: scale an expert's input by its score (else its output)"),
	K(model, moe_load_balance_coeff, FLOAT, "1e-3", GE(0), NULL, NUL | NZ,
	  "MoE auxiliary-loss-free load balancing: expert_bias step per optimizer step; "
	  "null = off"),
	K(model, moe_use_grouped_mm, BOOL, "true", NR, NULL, 0,
	  "MoE: experts as grouped GEMMs over tokens sorted by expert (titan has only this)"),
	K(model, n_dense_layers, INT, "0", GE(0), NULL, 0,
	  "MoE: the first n blocks keep the dense feed-forward (DeepSeek-V3's first-k dense)"),
	K(model, interleave_moe_layer_step, INT, "1", GE(1), NULL, 0,
	  "MoE: block i (from 0) is MoE when (i + 1) % step == 0 (Llama 4's interleaving)"),
	K(model, every_n_layers_nope, INT, "0", GE(0), NULL, 0,
	  "llama4 iRoPE: block i (from 0) has no RoPE when i % n == 0; 0 = RoPE everywhere"),
	K(model, fixed_attn_block_size, INT, "8192", GE(1), NULL, 0,
	  "llama4 iRoPE: the RoPE blocks attend within fixed chunks of this many positions "
	  "(with NoPE blocks, every_n_layers_nope)"),

	/* optimizer */
	KE(optimizer, name, TITAN_OPTIMIZERS, titan_optimizer, "AdamW", "optimizer"),
	K(optimizer, lr, FLOAT, "8e-4", GE(0), NULL, NZ, "peak learning rate"),
	K(optimizer, beta1, FLOAT, "0.9", IN(0, 1), NULL, 0,
	  "first moment decay (must be < 1)"),
	K(optimizer, beta2, FLOAT, "0.95", IN(0, 1), NULL, 0,
	  "second moment decay (must be < 1)"),
	K(optimizer, eps, FLOAT, "1e-8", GE(0), NULL, 0, "denominator epsilon"),
	K(optimizer, weight_decay, FLOAT, "0.1", GE(0), NULL, 0,
	  "decoupled weight decay"),
	K(optimizer, weight_decay_exclude_norms_embeddings, BOOL, "false", NR, NULL, 0,
	  "no weight decay on norm weights and embeddings"),
	KE(optimizer, implementation, TITAN_OPTIM_IMPLS, titan_optim_impl, "fused",
	  "optimizer kernel implementation"),
	K(optimizer, early_step_in_backward, BOOL, "false", NR, NULL, 0,
	  "step each parameter as soon as its gradient is ready"),

	/* lr_scheduler */
	K(lr_scheduler, warmup_steps, INT, "200", GE(0), NULL, 0,
	  "linear warmup steps"),
	K(lr_scheduler, total_steps, INT, "-1", GE(-1), NULL, NZ,
	  "schedule length; -1 = training.steps"),
	K(lr_scheduler, decay_ratio, FLOAT, "", IN(0, 1), NULL, NUL,
	  "fraction of steps spent decaying (WSD); null = decay right after warmup"),
	KE(lr_scheduler, decay_type, TITAN_DECAY_TYPES, titan_decay_type, "linear",
	   "decay shape"),
	K(lr_scheduler, min_lr_factor, FLOAT, "0", IN(0, 1), NULL, 0,
	  "final learning rate as a fraction of optimizer.lr"),

	/* training */
	K(training, dataset, STRING, "c4_test", NR, NULL, 0, "dataset name"),
	K(training, dataset_path, STRING, "", NR, NULL, 0,
	  "folder of titan-shard shards; '' = by dataset name"),
	K(training, local_batch_size, INT, "8", GE(1), NULL, 0,
	  "sequences per rank per microbatch"),
	K(training, global_batch_size, INT, "-1", GE(-1), NULL, NZ,
	  "sequences per step over all ranks; -1 = local_batch_size x DP degree"),
	K(training, seq_len, INT, "2048", GE(1), NULL, 0, "sequence length in tokens"),
	K(training, max_norm, FLOAT, "1.0", GE(0), NULL, NZ,
	  "gradient clipping: maximum total L2 norm"),
	K(training, steps, INT, "10000", GE(1), NULL, 0, "training steps"),
	K(training, shuffle, BOOL, "false", NR, NULL, 0,
	  "shuffle the order of the sequences"),
	K(training, skip_nonfinite, BOOL, "false", NR, NULL, 0,
	  "skip the optimizer step when the loss or gradient norm is not finite"),
	K(training, max_consecutive_nonfinite, INT, "10", GE(1), NULL, 0,
	  "with skip_nonfinite: stop (exit 1) after this many non-finite steps in a row"),
	K(training, enable_cpu_offload, BOOL, "false", NR, NULL, 0,
	  "keep sharded parameters, gradients and optimizer state in host memory"),
	KE(training, device, TITAN_DEVICES, titan_device, "auto",
	  "where one rank trains: cuda (GPU 0 of the rank), cpu, or auto (cuda on a "
	  "single rank when a GPU is present)"),
	KE(training, dtype, TITAN_MASTER_DTYPES, titan_master_dtype, "float32",
	  "dtype of master weights, gradients and optimizer state"),
	KE(training, mixed_precision_param, TITAN_MP_PARAMS, titan_mp_param, "bfloat16",
	  "compute dtype of parameters under mixed precision"),
	KE(training, mixed_precision_reduce, TITAN_MP_REDUCES, titan_mp_reduce, "float32",
	  "dtype of gradient reductions under mixed precision"),
	K(training, gc_freq, INT, "50", GE(1), NULL, 0,
	  "housekeeping interval in steps"),
	K(training, seed, INT, "0", GE(0), NULL, 0, "base random seed"),
	K(training, deterministic, BOOL, "false", NR, NULL, 0,
	  "use deterministic algorithms only (may be slower)"),
	KE(training, attn_mask_type, TITAN_ATTN_MASKS, titan_attn_mask, "causal",
	   "attention mask: causal, or block_causal (a token sees only its own document, "
	   "documents ending at the shards' EOS id)"),

	/* parallelism */
	K(parallelism, data_parallel_replicate_degree, INT, "1", GE(1), NULL, 0,
	  "DDP/HSDP replicas"),
	K(parallelism, data_parallel_shard_degree, INT, "-1", GE(-1), NULL, NZ,
	  "FSDP shards; -1 = the ranks left over"),
	KE(parallelism, fsdp_reshard_after_forward, TITAN_RESHARDS, titan_reshard, "default",
	  "free gathered parameters after forward"),
	K(parallelism, tensor_parallel_degree, INT, "1", GE(1), NULL, 0,
	  "tensor parallel degree"),
	K(parallelism, disable_loss_parallel, BOOL, "false", NR, NULL, 0,
	  "gather logits before the loss under TP"),
	K(parallelism, enable_async_tensor_parallel, BOOL, "false", NR, NULL, 0,
	  "overlap TP collectives with matmuls"),
	K(parallelism, pipeline_parallel_degree, INT, "1", GE(1), NULL, 0,
	  "pipeline parallel degree (ranks)"),
	K(parallelism, pipeline_parallel_split_points, STRLIST, "", NR, NULL, 0,
	  "module names that start a stage, e.g. layers.4,layers.8"),
	KE(parallelism, pipeline_parallel_schedule, TITAN_SCHEDULES, titan_schedule, "1F1B",
	  "pipeline schedule; LoopedBFS is not implemented (exit 2)"),
	K(parallelism, pipeline_parallel_microbatch_size, INT, "1", GE(1), NULL, 0,
	  "sequences per pipeline microbatch"),
	K(parallelism, pipeline_parallel_layers_per_stage, INT, "", GE(1), NULL, NUL,
	  "layers per pipeline stage; null = automatic"),
	K(parallelism, context_parallel_degree, INT, "1", GE(1), NULL, 0,
	  "context parallel degree"),
	KE(parallelism, context_parallel_rotate_method, TITAN_CP_ROTATES, titan_cp_rotate,
	   "allgather", "how CP moves keys/values: allgather (whole sequence) or alltoall (ring)"),
	K(parallelism, expert_parallel_degree, INT, "1", GE(1), NULL, 0,
	  "expert parallel degree: ranks of dp_shard x cp x tp that split the experts"),
	K(parallelism, expert_tensor_parallel_degree, INT, "1", GE(1), NULL, 0,
	  "tensor parallel degree inside the experts; only 1, torchtitan removed ETP "
	  "(exit 2 otherwise)"),

	/* activation_checkpoint */
	KE(activation_checkpoint, mode, TITAN_ACT_CKPTS, titan_act_ckpt, "selective",
	  "activation checkpointing"),
	K(activation_checkpoint, selective_ac_option, STRING, "2", NR, NULL, 0,
	  "selective mode: N = every N-th block, op = per-op policy"),
	K(activation_checkpoint, preserve_rng_state, BOOL, "false", NR, NULL, 0,
	  "replay the RNG state when recomputing"),

	/* checkpoint */
	K(checkpoint, enable, BOOL, "false", NR, NULL, 0, "save and load checkpoints"),
	K(checkpoint, folder, STRING, "checkpoint", NR, NULL, 0,
	  "checkpoint folder under job.dump_folder; an absolute path is used as is"),
	K(checkpoint, interval, INT, "500", GE(1), NULL, 0, "save every N steps"),
	K(checkpoint, initial_load_path, STRING, "", NR, NULL, 0,
	  "checkpoint to start from when the folder has none; '' = none"),
	K(checkpoint, initial_load_model_only, BOOL, "true", NR, NULL, 0,
	  "load only the model from initial_load_path"),
	K(checkpoint, initial_load_in_hf, BOOL, "false", NR, NULL, 0,
	  "initial_load_path (else model.hf_assets_path) is a HF safetensors folder"),
	K(checkpoint, last_save_model_only, BOOL, "true", NR, NULL, 0,
	  "the final save holds only the model"),
	K(checkpoint, last_save_in_hf, BOOL, "false", NR, NULL, 0,
	  "the final save also as HF safetensors, FOLDER/step-N/ (needs last_save_model_only)"),
	K(checkpoint, model_weights_only, BOOL, "false", NR, NULL, 0,
	  "every save holds only the model"),
	KE(checkpoint, export_dtype, TITAN_EXPORT_DTYPES, titan_export_dtype, "float32",
	  "dtype of a model-only final save"),
	KE(checkpoint, async_mode, TITAN_ASYNC_MODES, titan_async_mode, "disabled",
	  "async: copy the state to host buffers (weights and moments: 3x the model "
	  "in float32) and write from a background thread; training waits only for "
	  "the copy, and a save waits for the previous one"),
	K(checkpoint, keep_latest_k, INT, "10", GE(0), NULL, 0,
	  "keep the newest K checkpoints; 0 = all (1 is not allowed); only this run's "
	  "lineage counts (see load_step)"),
	K(checkpoint, load_step, INT, "-1", GE(-1), NULL, 0,
	  "step to load; -1 = the latest.  Steps newer than the loaded one are of a "
	  "lineage this run replaces: a run that saves moves them into "
	  "superseded-<time>/ of the folder (a warning names them; nothing is deleted)"),
	K(checkpoint, exclude_from_loading, STRLIST, "", NR, NULL, 0,
	  "state not to load, e.g. optimizer,lr_scheduler,dataloader"),
	K(checkpoint, enable_first_step_checkpoint, BOOL, "false", NR, NULL, 0,
	  "also save after step 1"),
	K(checkpoint, create_seed_checkpoint, BOOL, "false", NR, NULL, 0,
	  "save the initial model as step 0 and exit"),
	K(checkpoint, load_only, BOOL, "false", NR, NULL, 0, "load but never save"),

	/* metrics */
	K(metrics, log_freq, INT, "10", GE(1), NULL, 0, "log metrics every N steps"),
	K(metrics, disable_color_printing, BOOL, "false", NR, NULL, 0,
	  "no ANSI colours in the log"),
	K(metrics, save_for_all_ranks, BOOL, "false", NR, NULL, 0,
	  "every rank writes metrics, not just the logging rank"),
	K(metrics, save_jsonl_file, STRING, "metrics.jsonl", NR, NULL, 0,
	  "JSONL metrics file under job.dump_folder (an absolute path as is); '' = none"),
	K(metrics, peak_flops, FLOAT, "", GE(0), NULL, NUL | NZ,
	  "peak FLOP/s per device for MFU; null = device table (GPU) or nominal peak (CPU)"),
	K(metrics, measure_peak_flops, BOOL, "false", NR, NULL, 0,
	  "CPU, peak_flops null: measure the peak with an sgemm at start-up (12 MiB; varies)"),
	K(metrics, enable_tensorboard, BOOL, "false", NR, NULL, 0,
	  "write TensorBoard event files (rank 0; all ranks with save_for_all_ranks)"),
	K(metrics, save_tb_folder, STRING, "tb", NR, NULL, 0,
	  "TensorBoard folder under job.dump_folder; an absolute path is used as is"),

	/* profiling */
	K(profiling, enable_profiling, BOOL, "false", NR, NULL, 0,
	  "write timing traces"),
	K(profiling, save_traces_folder, STRING, "profile_traces", NR, NULL, 0,
	  "trace folder under job.dump_folder; an absolute path is used as is"),
	K(profiling, profile_freq, INT, "10", GE(1), NULL, 0,
	  "profile every N steps"),
	K(profiling, profiler_warmup, INT, "3", GE(0), NULL, 0,
	  "warmup steps before each profiled window"),
	K(profiling, profiler_active, INT, "1", GE(1), NULL, 0,
	  "profiled steps per window"),
	K(profiling, enable_memory_snapshot, BOOL, "false", NR, NULL, 0,
	  "write memory event traces"),
	K(profiling, save_memory_snapshot_folder, STRING, "memory_snapshot", NR, NULL, 0,
	  "memory trace folder under job.dump_folder; an absolute path is used as is"),

	/* comm */
	K(comm, init_timeout_seconds, INT, "300", GE(1), NULL, 0,
	  "collective timeout during start-up and the first step"),
	K(comm, train_timeout_seconds, INT, "100", GE(1), NULL, 0,
	  "collective timeout after the first step"),
	K(comm, trace_buf_size, INT, "20000", GE(0), NULL, 0,
	  "flight recorder entries; 0 = off"),
	K(comm, save_traces_folder, STRING, "comm_traces", NR, NULL, 0,
	  "flight recorder folder under job.dump_folder; an absolute path is used as is"),
	K(comm, bucket_size_mb, FLOAT, "-1", GE(-1), NULL, 0,
	  "MiB per gradient/parameter bucket: consecutive blocks share one collective "
	  "up to this size; 0 = one per block; -1 = 25 for DDP (torch's bucket_cap_mb), "
	  "one per block for FSDP/HSDP (torchtitan's fully_shard units)"),

	/* validation */
	K(validation, enable, BOOL, "false", NR, NULL, 0, "run validation"),
	K(validation, dataset, STRING, "c4_validation", NR, NULL, 0,
	  "validation dataset name"),
	K(validation, dataset_path, STRING, "", NR, NULL, 0,
	  "folder of validation shards; '' = by dataset name"),
	K(validation, local_batch_size, INT, "-1", GE(-1), NULL, NZ,
	  "sequences per rank per validation step; -1 = training.local_batch_size"),
	K(validation, seq_len, INT, "-1", GE(-1), NULL, NZ,
	  "validation sequence length, at most training.seq_len; -1 = training.seq_len"),
	K(validation, freq, INT, "10", GE(1), NULL, 0, "validate every N steps"),
	K(validation, steps, INT, "-1", GE(-1), NULL, NZ,
	  "validation steps; -1 = the whole set"),
};

#define NKEYS (sizeof(schema) / sizeof(schema[0]))

size_t titan_config_nkeys(void)
{
	return NKEYS;
}

const struct titan_config_key *titan_config_key_at(size_t i)
{
	return i < NKEYS ? &schema[i].k : NULL;
}

const char *cfg_full_name(const struct titan_config_key *k)
{
	return ((const struct cfg_entry *)k)->name;
}

const char *titan_config_choice(const char *name, int v)
{
	const struct titan_config_key *k = titan_config_find(name);

	if (!k || k->type != TITAN_CFG_ENUM || v < 0 ||
	    (size_t)v >= ((const struct cfg_entry *)k)->nchoices)
		return NULL;
	return k->choices[v];
}

size_t cfg_nsections(void)
{
	size_t n = 0;
	for (size_t i = 0; i < NKEYS; i++)
		if (i == 0 || strcmp(schema[i].k.section, schema[i - 1].k.section))
			n++;
	return n;
}

const char *cfg_section_at(size_t j)
{
	size_t n = 0;
	for (size_t i = 0; i < NKEYS; i++)
		if (i == 0 || strcmp(schema[i].k.section, schema[i - 1].k.section))
			if (n++ == j)
				return schema[i].k.section;
	return NULL;
}

bool cfg_is_section(const char *name, size_t len)
{
	for (size_t i = 0; i < NKEYS; i++) {
		const char *s = schema[i].k.section;
		if (strlen(s) == len && !memcmp(s, name, len))
			return true;
	}
	return false;
}

const struct titan_config_key *titan_config_find(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < NKEYS; i++)
		if (!strcmp(schema[i].name, name))
			return &schema[i].k;
	return NULL;
}

const char *cfg_suggest_section(const char *name)
{
	const char *best = NULL;
	int bestd = INT_MAX;
	for (size_t j = 0, n = cfg_nsections(); j < n; j++) {
		const char *s = cfg_section_at(j);
		int d = titan_edit_distance(name, s);
		int limit = (int)strlen(s) / 4 > 2 ? (int)strlen(s) / 4 : 2;
		if (d <= limit && d < bestd) {
			bestd = d;
			best = s;
		}
	}
	return best;
}

/*
 * A misspelt key: a close "section.key" (distance 1 wins outright), else the
 * same key name in exactly one other section ("training.lr" ->
 * "optimizer.lr"), else the closest within distance 3.  A name without a
 * dot is matched as a key name alone (an exact name in several sections
 * gives no suggestion).
 */
const char *titan_config_suggest(const char *name, char *buf, size_t n)
{
	if (!name || !buf || !n)
		return NULL;
	const char *dot = strchr(name, '.');
	const char *keyname = dot ? dot + 1 : name;
	const char *best = NULL, *same = NULL;
	int bestd = 4, nsame = 0;

	for (size_t i = 0; i < NKEYS; i++) {
		int d = dot ? titan_edit_distance(name, schema[i].name)
			    : titan_edit_distance(name, schema[i].k.key);
		if (d < bestd) {
			bestd = d;
			best = schema[i].name;
		}
		if (!strcmp(schema[i].k.key, keyname) &&
		    (!dot || strncmp(schema[i].k.section, name, (size_t)(dot - name)) ||
		     schema[i].k.section[dot - name] != '\0')) {
			nsame++;
			same = schema[i].name;
		}
	}
	const char *pick = NULL;
	if (!dot && nsame) /* a bare key name: only when it is unambiguous */
		pick = nsame == 1 ? same : NULL;
	else if (best && bestd <= 1)
		pick = best;
	else if (nsame == 1)
		pick = same;
	else if (best && bestd < (int)strlen(keyname))
		pick = best;
	if (!pick)
		return NULL;
	size_t len = strlen(pick);
	if (len >= n)
		return NULL;
	memcpy(buf, pick, len + 1);
	return buf;
}

const char *cfg_type_name(enum titan_config_type t)
{
	switch (t) {
	case TITAN_CFG_BOOL: return "bool";
	case TITAN_CFG_INT: return "int";
	case TITAN_CFG_FLOAT: return "float";
	case TITAN_CFG_STRING: return "string";
	case TITAN_CFG_ENUM: return "choice";
	case TITAN_CFG_STRLIST: return "list";
	}
	return "?";
}

/* "a, b, c" of an enum's choices. */
static void join_choices(const struct titan_config_key *k, char *buf, size_t n)
{
	size_t len = 0;
	buf[0] = '\0';
	for (const char *const *c = k->choices; c && *c; c++) {
		int w = snprintf(buf + len, n - len, "%s%s", c == k->choices ? "" : ", ", *c);
		if (w < 0 || (size_t)w >= n - len)
			break;
		len += (size_t)w;
	}
}

const char *cfg_expected(const struct titan_config_key *k, char *buf, size_t n)
{
	char ch[256];
	switch (k->type) {
	case TITAN_CFG_BOOL: snprintf(buf, n, "a boolean (true/false)"); break;
	case TITAN_CFG_INT: snprintf(buf, n, "an integer"); break;
	case TITAN_CFG_FLOAT: snprintf(buf, n, "a number"); break;
	case TITAN_CFG_STRING: snprintf(buf, n, "a string"); break;
	case TITAN_CFG_ENUM:
		join_choices(k, ch, sizeof ch);
		snprintf(buf, n, "one of %s", ch);
		break;
	case TITAN_CFG_STRLIST:
		snprintf(buf, n, "a list (a sequence or a comma-separated string)");
		break;
	}
	return buf;
}

/* Number for help text: integers without a fraction. */
static void fmt_bound(char *buf, size_t n, const struct titan_config_key *k, double v)
{
	if (k->type == TITAN_CFG_INT || (v == floor(v) && fabs(v) < 1e15))
		snprintf(buf, n, "%.0f", v);
	else
		titan_format_double(buf, n, v);
}

/* The parts of a key's help: its default ("8", "'./outputs'", "null", "[]")
 * and what it takes beyond its type ("one of none, selective, full",
 * ">= 1", "0..1", "> 0", ">= -1, not 0"; "" when nothing). */
static void help_parts(const struct titan_config_key *k, char *def, size_t ndef,
		       char *extra, size_t nextra)
{
	if (k->type == TITAN_CFG_STRING)
		snprintf(def, ndef, "'%s'", k->def);
	else if (k->def[0])
		snprintf(def, ndef, "%s", k->def);
	else if (k->flags & TITAN_CFG_NULLABLE)
		snprintf(def, ndef, "null");
	else
		snprintf(def, ndef, "[]");

	extra[0] = '\0';
	if (k->type == TITAN_CFG_ENUM) {
		char ch[256];
		join_choices(k, ch, sizeof ch);
		snprintf(extra, nextra, "one of %s", ch);
	} else if ((k->type == TITAN_CFG_INT || k->type == TITAN_CFG_FLOAT) &&
		   k->min <= k->max) {
		char lo[48], hi[48];
		fmt_bound(lo, sizeof lo, k, k->min);
		fmt_bound(hi, sizeof hi, k, k->max);
		bool nz = k->flags & TITAN_CFG_NONZERO;
		if (isinf(k->max) && nz && k->min == 0)
			snprintf(extra, nextra, "> 0");
		else if (isinf(k->max) && nz)
			snprintf(extra, nextra, ">= %s, not 0", lo);
		else if (isinf(k->max))
			snprintf(extra, nextra, ">= %s", lo);
		else
			snprintf(extra, nextra, "%s..%s", lo, hi);
	}
}

/* "default 8; >= 1" / "default selective; one of none, selective, full". */
static void help_detail(const struct titan_config_key *k, char *buf, size_t n)
{
	char def[128], extra[320];

	help_parts(k, def, sizeof def, extra, sizeof extra);
	snprintf(buf, n, "default %s%s%s%s", def, extra[0] ? "; " : "", extra,
		 k->flags & TITAN_CFG_NULLABLE ? "; or null" : "");
}

void titan_config_help(FILE *fp)
{
	fprintf(fp, "Configuration keys, in YAML as 'section:' then '  key: value', "
		    "on the command line as --section.key=VALUE:\n");
	for (size_t i = 0; i < NKEYS;) {
		/* One section: names aligned within it. */
		size_t end = i, w = 0;
		while (end < NKEYS && !strcmp(schema[end].k.section, schema[i].k.section)) {
			if (strlen(schema[end].name) > w)
				w = strlen(schema[end].name);
			end++;
		}
		fprintf(fp, "\n%s:\n", schema[i].k.section);
		for (; i < end; i++) {
			const struct titan_config_key *k = &schema[i].k;
			char detail[512];
			help_detail(k, detail, sizeof detail);
			fprintf(fp, "  %-*s  %-6s  %s\n      %s\n", (int)w, schema[i].name,
				cfg_type_name(k->type), detail, k->doc);
		}
	}
}

/* Text for a Markdown table cell: the characters Markdown or HTML would
 * read as markup there are escaped. */
static void md_text(FILE *fp, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '|': fputs("\\|", fp); break;
		case '*': fputs("\\*", fp); break;
		case '\\': fputs("\\\\", fp); break;
		case '<': fputs("&lt;", fp); break; /* "superseded-<time>/" is no tag */
		default: fputc(*s, fp);
		}
	}
}

/* Text for a man page line that does not start a line: backslashes
 * escaped, so roff reads no escapes in it. */
static void man_text(FILE *fp, const char *s)
{
	for (; *s; s++)
		if (*s == '\\')
			fputs("\\e", fp);
		else
			fputc(*s, fp);
}

int titan_config_doc(FILE *fp, enum titan_config_doc_format format)
{
	if (format != TITAN_CONFIG_DOC_MARKDOWN && format != TITAN_CONFIG_DOC_MAN)
		return titan_error(TITAN_E_INVALID, "config documentation: unknown format %d",
				   (int)format);
	for (size_t i = 0; i < NKEYS; i++) {
		const struct titan_config_key *k = &schema[i].k;
		bool first = i == 0 || strcmp(k->section, schema[i - 1].k.section);
		char def[128], extra[320];

		help_parts(k, def, sizeof def, extra, sizeof extra);
		if (k->flags & TITAN_CFG_NULLABLE)
			snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "%s",
				 extra[0] ? "; or null" : "or null");
		if (format == TITAN_CONFIG_DOC_MARKDOWN) {
			if (first)
				fprintf(fp, "%s### %s\n\n| key | type | default | values | meaning |\n"
					    "|---|---|---|---|---|\n", i ? "\n" : "", k->section);
			fprintf(fp, "| `%s` | %s | `%s` | ", schema[i].name,
				cfg_type_name(k->type), def);
			md_text(fp, extra);
			fputs(" | ", fp);
			md_text(fp, k->doc);
			fputs(" |\n", fp);
		} else {
			/* a line never starts with text, so '.' and '\'' need no
			 * escape; section and key names are plain */
			if (first)
				fprintf(fp, ".SS %s\n", k->section);
			fprintf(fp, ".TP\n.B %s\n\\fI%s\\fR, default ", schema[i].name,
				cfg_type_name(k->type));
			man_text(fp, def);
			if (extra[0]) {
				fputs("; ", fp);
				man_text(fp, extra);
			}
			fputs(".\n.br\n\\&", fp);
			man_text(fp, k->doc);
			fputs("\n", fp);
		}
	}
	return ferror(fp) ? titan_error(TITAN_E_IO, "config documentation: write error") : 0;
}
