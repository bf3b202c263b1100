/*
 * titan/generate.h — sampling text from a trained Llama 3: the weights of a
 * titan checkpoint (step-N.h5) or of a HuggingFace export, an inference
 * forward with a KV cache, and the samplers (greedy, temperature, top-k,
 * top-p) of transformers' generate() (and torchtitan's
 * scripts/generate/test_generate.py).  titan-generate is the thin main.
 *
 * The forward is the training forward (lib/train/llama.c) on the same
 * backend ops (titan/ops.h) and the same parameter table (titan/model.h):
 * embedding, per block RMSNorm, wq/wk/wv, complex RoPE, causal GQA
 * attention, wo, RMSNorm, SwiGLU, w2, then the final norm and the output
 * layer.  What differs is only the schedule:
 *   - the keys and values of every position go to a per-layer cache
 *     [capacity, Hkv·D] (after RoPE) and are never recomputed;
 *   - a forward pass takes the next n tokens at positions pos .. pos+n−1
 *     (prefill: the prompt, in chunks of `batch` tokens; decode: n = 1),
 *     so a token costs O(pos) attention work, not O(pos²);
 *   - the first chunk (pos = 0) runs the backend's attention_fwd (the
 *     training kernel); later chunks and decode steps attend with a small
 *     kernel of this module (queries against the cache, scale 1/sqrt(D),
 *     max-shifted softmax summed in double).
 * Logits equal titan_llama_logits on the same tokens to float rounding
 * (tests/unit/test_generate.c states the tolerance).
 *
 * Errors follow titan/core.h: 0 or a pointer on success, a negative enum
 * titan_err (NULL) with a message otherwise.
 */
#ifndef TITAN_GENERATE_H
#define TITAN_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "titan/config.h"
#include "titan/core.h"
#include "titan/model.h"
#include "titan/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- weights */

/* A model loaded for inference.  Owns its table and its weights (one
 * TITAN_MEM_PARAMS arena in the table's layout, host memory). */
struct titan_gen_model {
	char *path;                    /* the file or folder that was read */
	bool hf;                       /* an HF folder (else a titan checkpoint) */
	int64_t step;                  /* train_state.step of the checkpoint; -1 unknown */
	struct titan_model_dims dims;
	/* The context the model was trained for: training.seq_len of the
	 * checkpoint's config (torchtitan sizes its RoPE cache with it), or
	 * of --config; an HF folder's max_position_embeddings.  0: unknown. */
	int64_t seq_len;
	/* A tokenizer that goes with the model, or NULL: for a checkpoint the
	 * config's model.tokenizer_path, for an HF folder its tokenizer.json,
	 * tokenizer.model or *.tiktoken (the file titan-ckpt-convert --to hf
	 * --tokenizer copied there).  Owned. */
	char *tokenizer;
	/* training.attn_mask_type block_causal in that config (--config, else
	 * the checkpoint's stored one): generate keeps attention within a
	 * document as training did (titan_generator_opts.block_causal) */
	bool block_causal;
	struct titan_param_table table;
	struct titan_param_arena params;
};

/* Load `path`:
 *   - a regular file: a titan checkpoint (step-N.h5; only /model is read,
 *     float32/float16/bfloat16 widen exactly);
 *   - a folder with config.json: an HF LlamaForCausalLM folder as
 *     titan-ckpt-convert --to hf writes it (model.safetensors or shards +
 *     index; q/k rows un-permuted from rotate-half to interleaved RoPE);
 *   - another folder: a checkpoint folder, its newest complete step.
 * `cfg` (may be NULL) replaces the dims stored with the model (a
 * checkpoint's attributes, config.json) by titan_model_dims_from_config's
 * and sets seq_len from training.seq_len; the tensors must have its shapes
 * (TITAN_E_INVALID naming the tensor otherwise).  Errors name the file:
 * TITAN_E_IO (missing, unreadable, a folder without checkpoints),
 * TITAN_E_FORMAT (not a checkpoint), TITAN_E_INVALID, TITAN_E_NOMEM,
 * TITAN_E_UNSUPPORTED (a checkpoint in a build without HDF5). */
int titan_gen_model_load(const char *path, const struct titan_config *cfg,
			 struct titan_gen_model **out);
void titan_gen_model_free(struct titan_gen_model *m); /* NULL-safe */

/* ----------------------------------------------------------- generator */

struct titan_generator_opts {
	int64_t capacity;  /* positions the KV cache holds (prompt + generated), >= 1 */
	int64_t batch;     /* tokens per forward pass (prefill chunk); 0: 256 */
	/* training.attn_mask_type block_causal: a token attends only to the
	 * earlier tokens of its own document, documents ending at id doc_eos
	 * (as titan-train's; doc_eos -1: one document, causal); false: causal */
	bool block_causal;
	int64_t doc_eos;
};

/* A KV cache and the activation buffers of one sequence over borrowed
 * weights: `t` (unsharded, without TP) and `params` (an arena of its
 * layout, host memory for the CPU backend) must outlive the generator and
 * are only read.  Memory (through `alloc`, NULL = the host allocator):
 * the cache, 2·L·capacity·Hkv·D floats (TITAN_MEM_ACTIVATIONS), the RoPE
 * table for `capacity` positions, and batch·(2C + 2·H·D + 2F) floats of
 * activations plus nthreads·capacity floats of attention scores
 * (TITAN_MEM_WORKSPACE).  TITAN_E_INVALID for a sharded table or bad
 * sizes, TITAN_E_NOMEM. */
struct titan_generator;
int titan_generator_new(const struct titan_param_table *t, const float *params,
			const struct titan_generator_opts *o, struct titan_backend *be,
			struct titan_allocator *alloc, struct titan_generator **out);
void titan_generator_free(struct titan_generator *g); /* NULL-safe */
/* Forget the sequence: the next token goes to position 0. */
void titan_generator_reset(struct titan_generator *g);
/* Positions filled (the next token's position) and the capacity. */
int64_t titan_generator_pos(const struct titan_generator *g);
int64_t titan_generator_capacity(const struct titan_generator *g);
int64_t titan_generator_vocab(const struct titan_generator *g);

/* Append tokens[0..n) at positions pos .. pos+n−1 (in chunks of `batch`)
 * and compute logits: with `all`, logits[n, V] for every one of them;
 * otherwise logits[V] of the last only (the next token's distribution);
 * logits NULL: none (the cache is filled all the same).  TITAN_E_INVALID
 * when pos + n exceeds the capacity (naming both) or an id is outside the
 * vocabulary (the cache then holds the positions before the bad chunk). */
int titan_generator_forward(struct titan_generator *g, const int32_t *tokens, int64_t n,
			    float *logits, bool all);

/* ------------------------------------------------------------- sampling */

/* transformers' order: logits / temperature, then top-k, then top-p, then a
 * draw from the renormalised distribution.  temperature 0: greedy (the
 * first id of the largest logit, torch.argmax), top_k and top_p unused. */
struct titan_sampler_opts {
	double temperature;  /* >= 0; 0: greedy */
	int64_t top_k;       /* keep the k most likely ids; 0: all */
	double top_p;        /* keep the smallest set of most likely ids whose
				probability reaches p (at least one); 1: all */
	uint64_t seed;       /* Philox key (titan/core.h) */
};
/* temperature 0, top_k 0, top_p 1, seed 0. */
void titan_sampler_opts_default(struct titan_sampler_opts *o);
/* TITAN_E_INVALID naming the option: temperature < 0 or not finite,
 * top_k < 0, top_p outside (0, 1]. */
int titan_sampler_opts_check(const struct titan_sampler_opts *o);

/* A sampler over a vocabulary of `vocab` ids.  Draw i (counted from 0
 * since init) takes value i of the Philox stream
 * titan_rng_stream_id("generate", 0) under `seed`: the same seed, model
 * and prompt give the same text on any machine and thread count (up to
 * the float rounding of the logits themselves). */
struct titan_sampler {
	struct titan_sampler_opts o;
	int64_t vocab;
	struct titan_rng rng;
	double *p;           /* [vocab] scratch */
	int32_t *idx;        /* [vocab] scratch */
};
int titan_sampler_init(struct titan_sampler *s, const struct titan_sampler_opts *o,
		       int64_t vocab);
void titan_sampler_release(struct titan_sampler *s); /* NULL-safe, idempotent */
/* The next id from logits[vocab].  Non-finite logits are TITAN_E_NUMERIC
 * naming the first one (a NaN model gives no text). */
int titan_sampler_sample(struct titan_sampler *s, const float *logits, int32_t *id);

/* -------------------------------------------------------- the whole loop */

enum titan_gen_stop {
	TITAN_GEN_STOP_EOS = 0,     /* the model produced eos_id (not emitted) */
	TITAN_GEN_STOP_LENGTH,      /* max_new_tokens emitted */
	TITAN_GEN_STOP_CONTEXT,     /* the generator's capacity is full */
	TITAN_GEN_STOP_CALLBACK,    /* the callback returned 1 */
};
/* "eos", "max_new_tokens", "context", "callback". */
const char *titan_gen_stop_name(enum titan_gen_stop s);

/* Called with each new token in order; 0 goes on, 1 stops, a negative
 * titan_err aborts (returned by titan_generate). */
typedef int (*titan_gen_token_fn)(void *ctx, int32_t id);

struct titan_gen_opts {
	int64_t max_new_tokens;     /* >= 0 */
	int64_t eos_id;             /* stops generation (not emitted); -1: none */
	struct titan_sampler_opts sampling;
};

struct titan_gen_result {
	int64_t n_prompt, n_new;    /* tokens prefilled and emitted */
	enum titan_gen_stop stop;
	/* Σ log p(token) of the emitted tokens under the model's distribution
	 * (softmax of the logits, no temperature or filtering): −logprob/n_new
	 * is the continuation's cross-entropy, the loss titan-train logs */
	double logprob;
	double prefill_s, decode_s; /* wall time of the prompt and of the rest */
};

/* From an empty cache: prefill prompt[0..n) (n >= 1), then sample, emit
 * and feed one token at a time until eos_id, max_new_tokens, or until the
 * sequence (prompt and new tokens) is `capacity` tokens long, as
 * transformers' max_length counts it (the last token is emitted, never fed:
 * the cache is full then).  TITAN_E_INVALID when the prompt is longer than
 * the capacity; the sampler's, the forward's and the callback's errors.
 * `res` (may be NULL) is filled on success and on error. */
int titan_generate(struct titan_generator *g, const int32_t *prompt, int64_t n,
		   const struct titan_gen_opts *o, titan_gen_token_fn fn, void *ctx,
		   struct titan_gen_result *res);

#ifdef __cplusplus
}
#endif
#endif
