/*
 * titan/model.h — the Llama 3 model description shared by titan-train and
 * titan-estimate: flavor table, derived dims, parameter counts and the
 * FLOP arithmetic behind MFU (torchtitan's models/llama3/__init__.py and
 * get_dense_model_nparams_and_flops; see shared/torchtitan-notes.md §1, §3).
 */
#ifndef TITAN_MODEL_H
#define TITAN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "titan/config.h"

#ifdef __cplusplus
extern "C" {
#endif

struct titan_model_dims {
	char flavor[32];
	int64_t dim, n_layers, n_heads, n_kv_heads, head_dim;
	int64_t ffn_hidden, multiple_of, vocab_size;
	double ffn_dim_multiplier;   /* NAN: none */
	double norm_eps, rope_theta;
	bool rope_scaling;           /* Llama 3.1 frequency scaling */
	double rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor;
	int64_t rope_original_max_position;
	bool tied;                   /* output shares tok_embeddings (1B, 3B) */
};

struct titan_model_params {
	int64_t total;       /* unique parameters (a tied matrix counts once) */
	int64_t embedding;   /* tok_embeddings */
	int64_t output;      /* output (0 when tied) */
	int64_t per_layer;   /* one TransformerBlock */
	int64_t attention;   /* wq + wk + wv + wo of one block */
	int64_t feed_forward;/* w1 + w2 + w3 of one block */
	int64_t norms;       /* all RMSNorm weights */
};

/* SwiGLU hidden size: int(2·4·dim/3), times the multiplier when given (not
 * NAN), rounded up to a multiple of `multiple_of`. */
int64_t titan_ffn_hidden_dim(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier);

/* Dims of a named flavor (debugmodel, 1B, 3B, 8B, 70B, 405B).
 * TITAN_E_INVALID naming the flavor when unknown. */
int titan_model_flavor(const char *flavor, struct titan_model_dims *out);
/* Number of flavors and their names, for listings. */
int titan_model_nflavors(void);
const char *titan_model_flavor_name(int i);

/* Dims from the config: the flavor's, with model.* dims that are set (not
 * -1 / NAN) overriding them; flavor "custom" needs dim, n_layers, n_heads
 * and vocab_size.  Checks divisibility (heads | dim, kv_heads | heads,
 * even head_dim) and returns TITAN_E_INVALID naming the key otherwise. */
int titan_model_dims_from_config(const struct titan_config *cfg, struct titan_model_dims *out);

void titan_model_count_params(const struct titan_model_dims *d, struct titan_model_params *out);

/* torchtitan's FLOPs per token for MFU: 6·(N − N_embedding) + 12·L·H·hd·S.
 * With tied weights the shared matrix is not subtracted (torchtitan HEAD). */
double titan_model_flops_per_token(const struct titan_model_dims *d, int64_t seq_len);

#ifdef __cplusplus
}
#endif
#endif
