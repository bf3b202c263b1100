/*
 * checkpoint.c — what a training checkpoint holds and how folders of them
 * are managed (torchtitan's components/checkpoint.py: step-N discovery,
 * load_step / latest, keep_latest_k purging, model-only and seed
 * checkpoints, exclude_from_loading).  The HDF5 calls are in h5.c and
 * h5read.c; this file checks a checkpoint against the parameter table
 * before a single value is copied into the caller's arenas.
 */
#include "ckpt_impl.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int titan_ckpt_exclude_parse(const struct titan_strlist *names, unsigned *flags)
{
	static const struct {
		const char *name;
		unsigned flag;
	} parts[] = {
		{"optimizer", TITAN_CKPT_EXCLUDE_OPTIMIZER},
		{"lr_scheduler", TITAN_CKPT_EXCLUDE_LR_SCHEDULER},
		{"dataloader", TITAN_CKPT_EXCLUDE_DATALOADER},
		{"train_state", TITAN_CKPT_EXCLUDE_TRAIN_STATE},
		{"rng", TITAN_CKPT_EXCLUDE_RNG},
	};

	for (size_t i = 0; names && i < names->n; i++) {
		size_t k;

		for (k = 0; k < sizeof(parts) / sizeof(parts[0]); k++)
			if (!strcmp(names->items[i], parts[k].name))
				break;
		if (k == sizeof(parts) / sizeof(parts[0]))
			return titan_error(TITAN_E_INVALID, "checkpoint.exclude_from_loading: unknown "
					   "part '%s' (optimizer, lr_scheduler, dataloader, "
					   "train_state, rng)", names->items[i]);
		*flags |= parts[k].flag;
	}
	return 0;
}

/* ------------------------------------------------------------------ save */

static int write_part(struct titan_ckpt_writer *w, const struct titan_param_table *t,
		      enum titan_ckpt_part part, const float *arena, enum titan_ckpt_dtype dt)
{
	for (int i = 0; i < t->n; i++) {
		const struct titan_param *p = &t->params[i];
		int rc = titan_ckpt_writer_tensor(w, part, p->name, p->fndim, p->fshape,
						  arena + p->offset, dt);

		if (rc < 0)
			return rc;
	}
	return 0;
}

int titan_ckpt_check_state_(const char *path, const struct titan_ckpt_state *st, unsigned flags,
			    enum titan_ckpt_dtype dtype)
{
	const bool full = !(flags & TITAN_CKPT_MODEL_ONLY);

	if (!st->table || !st->params)
		return titan_error(TITAN_E_INVALID, "checkpoint '%s': no model to save", path);
	if (full && dtype != TITAN_CKPT_FLOAT32)
		return titan_error(TITAN_E_INVALID, "checkpoint '%s': %s weights only in a model-only "
				   "checkpoint (a full checkpoint keeps float32 for exact resume)",
				   path, titan_ckpt_dtype_name(dtype));
	if (full && (!st->exp_avg || !st->exp_avg_sq || !st->train.loader ||
		     st->train.dp_world_size < 1))
		return titan_error(TITAN_E_INVALID, "checkpoint '%s': a full checkpoint needs the "
				   "AdamW moments and the data loader state", path);
	return 0;
}

int titan_ckpt_write(const char *path, const struct titan_ckpt_state *st, unsigned flags,
		     enum titan_ckpt_dtype dtype)
{
	const struct titan_param_table *t = st->table;
	const bool full = !(flags & TITAN_CKPT_MODEL_ONLY);
	struct titan_ckpt_writer *w;
	int rc;

	if ((rc = titan_ckpt_check_state_(path, st, flags, dtype)) < 0)
		return rc;
	if (t->opts.shard_degree > 1)
		return titan_error(TITAN_E_UNSUPPORTED, "checkpoint '%s': saving a sharded parameter "
				   "table (shard %d of %d) takes every rank: titan_ckpt_save_dist",
				   path, t->opts.shard_rank, t->opts.shard_degree);
	if ((rc = titan_ckpt_writer_open(path, &t->dims, st->config_yaml, &w)) < 0)
		return rc;
	rc = write_part(w, t, TITAN_CKPT_MODEL, st->params, dtype);
	if (rc == 0 && full)
		rc = write_part(w, t, TITAN_CKPT_EXP_AVG, st->exp_avg, TITAN_CKPT_FLOAT32);
	if (rc == 0 && full)
		rc = write_part(w, t, TITAN_CKPT_EXP_AVG_SQ, st->exp_avg_sq, TITAN_CKPT_FLOAT32);
	if (rc == 0 && full)
		rc = titan_ckpt_writer_train_state(w, &st->train);
	return titan_ckpt_writer_close(w, rc);
}

int titan_ckpt_mkdirs_(const char *folder)
{
	char *p = strdup(folder), *s;
	int rc = 0;

	if (!p)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (s = p + 1;; s++) {
		if (*s == '/' || *s == 0) {
			char c = *s;

			*s = 0;
			if (mkdir(p, 0777) != 0 && errno != EEXIST) {
				rc = titan_error(TITAN_E_IO, "cannot create folder '%s': %s", p,
						 strerror(errno));
				break;
			}
			*s = c;
			if (!c)
				break;
		}
	}
	free(p);
	return rc;
}

int titan_ckpt_path(char *buf, size_t n, const char *folder, int64_t step)
{
	int k = snprintf(buf, n, "%s/step-%lld.h5", folder, (long long)step);

	if (k < 0 || (size_t)k >= n)
		return titan_error(TITAN_E_INVALID, "checkpoint folder name too long: '%s'", folder);
	return 0;
}

int titan_ckpt_save(const char *folder, int64_t step, const struct titan_ckpt_state *st,
		    unsigned flags, enum titan_ckpt_dtype dtype, char **path_out)
{
	char path[4096];
	struct stat sb;
	int rc;

	if (path_out)
		*path_out = NULL;
	if (step < 0)
		return titan_error(TITAN_E_INVALID, "checkpoint step %lld < 0", (long long)step);
	if ((rc = titan_ckpt_path(path, sizeof(path), folder, step)) < 0)
		return rc;
	if (stat(folder, &sb) != 0 && (rc = titan_ckpt_mkdirs_(folder)) < 0)
		return rc;
	if ((rc = titan_ckpt_write(path, st, flags, dtype)) < 0)
		return rc;
	if (path_out && !(*path_out = titan_strdup(path)))
		return TITAN_E_NOMEM;
	return 0;
}

/* ------------------------------------------------------------------ load */

static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t k = (size_t)snprintf(buf, n, "[");

	for (int i = 0; i < ndim && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

/* Names of a dims field in titan's files and config, and in an HF
 * config.json. */
static const char *field(bool hf, const char *titan, const char *hfname)
{
	return hf ? hfname : titan;
}

/* A checkpoint's MoE attributes (moe_*, titan's model.moe_* keys): what
 * the parameter table and moe.c take for granted. */
static int moe_check(const char *src, const struct titan_moe_dims *m)
{
	char v[64];

	if (m->num_experts > INT32_MAX || m->top_k < 1 || m->top_k > m->num_experts ||
	    m->inter_dim < 1 || m->inter_dim > INT32_MAX || m->num_shared_experts < 0 ||
	    m->num_shared_experts > INT32_MAX / m->inter_dim || m->n_dense_layers < 0 ||
	    m->interleave_step < 0)
		return titan_error(TITAN_E_FORMAT, "%s: moe_num_experts %lld, moe_top_k %lld, "
				   "moe_inter_dim %lld, moe_num_shared_experts %lld, "
				   "n_dense_layers %lld, interleave_moe_layer_step %lld: top_k must "
				   "be in [1, num_experts], the sizes positive and below 2^31", src,
				   (long long)m->num_experts, (long long)m->top_k,
				   (long long)m->inter_dim, (long long)m->num_shared_experts,
				   (long long)m->n_dense_layers, (long long)m->interleave_step);
	if (!isfinite(m->route_scale))
		return titan_error(TITAN_E_FORMAT, "%s: moe_route_scale %s: must be finite", src,
				   titan_format_double(v, sizeof(v), m->route_scale));
	if (isinf(m->load_balance_coeff))
		return titan_error(TITAN_E_FORMAT, "%s: moe_load_balance_coeff %s: must be finite "
				   "(NaN: no expert_bias)", src,
				   titan_format_double(v, sizeof(v), m->load_balance_coeff));
	return 0;
}

int titan_ckpt_dims_check(const char *src, const struct titan_model_dims *d, bool hf)
{
	const struct {
		const char *name, *hf;
		int64_t v;
	} sizes[] = {
		{"dim", "hidden_size", d->dim},
		{"n_layers", "num_hidden_layers", d->n_layers},
		{"n_heads", "num_attention_heads", d->n_heads},
		{"n_kv_heads", "num_key_value_heads", d->n_kv_heads},
		{"ffn_hidden", "intermediate_size", d->ffn_hidden},
		{"vocab_size", "vocab_size", d->vocab_size},
	};
	const struct {
		const char *name, *hf;
		double v;
		bool on;
	} reals[] = {
		{"norm_eps", "rms_norm_eps", d->norm_eps, true},
		{"rope_theta", "rope_theta", d->rope_theta, true},
		{"rope_scaling_factor", "rope_scaling.factor", d->rope_scaling_factor, d->rope_scaling},
		{"rope_low_freq_factor", "rope_scaling.low_freq_factor", d->rope_low_freq_factor,
		 d->rope_scaling},
		{"rope_high_freq_factor", "rope_scaling.high_freq_factor", d->rope_high_freq_factor,
		 d->rope_scaling},
	};
	char v[64];
	double total;
	int rc;

	/* each size below 2^31: the products the parameter table forms
	 * (vocab_size · dim, 3 · dim · ffn_hidden) then fit in int64 */
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (sizes[i].v <= 0 || sizes[i].v > INT32_MAX)
			return titan_error(TITAN_E_FORMAT, "%s: %s %lld: must be in [1, %d]", src,
					   field(hf, sizes[i].name, sizes[i].hf),
					   (long long)sizes[i].v, INT32_MAX);
	for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++)
		if (reals[i].on && !(isfinite(reals[i].v) && reals[i].v > 0))
			return titan_error(TITAN_E_FORMAT, "%s: %s %s: must be a finite number above 0",
					   src, field(hf, reals[i].name, reals[i].hf),
					   titan_format_double(v, sizeof(v), reals[i].v));
	/* Qwen3 (QK-norm) has a head_dim of its own: any positive even one */
	if (d->qk_norm && (d->head_dim <= 0 || d->head_dim % 2 || d->head_dim > INT32_MAX ||
			   d->n_heads % d->n_kv_heads))
		return titan_error(TITAN_E_FORMAT, "%s: head_dim %lld, %s %lld, %s %lld: head_dim "
				   "must be even and positive and the kv heads divide the heads",
				   src, (long long)d->head_dim,
				   field(hf, "n_heads", "num_attention_heads"), (long long)d->n_heads,
				   field(hf, "n_kv_heads", "num_key_value_heads"),
				   (long long)d->n_kv_heads);
	if (titan_model_mla(d) &&
	    (d->mla.q_lora_rank < 0 || d->mla.q_lora_rank > INT32_MAX ||
	     d->mla.kv_lora_rank > INT32_MAX || d->mla.qk_nope_head_dim < 0 ||
	     d->mla.qk_rope_head_dim <= 0 || d->mla.qk_rope_head_dim % 2 ||
	     d->mla.v_head_dim <= 0 || d->n_kv_heads != d->n_heads ||
	     d->head_dim != d->mla.qk_nope_head_dim + d->mla.qk_rope_head_dim ||
	     d->mla.v_head_dim > d->head_dim || d->mla.original_seq_len <= 0 ||
	     !(d->mla.rope_factor > 0) || !(d->mla.beta_fast > 0) || !(d->mla.beta_slow > 0) ||
	     !isfinite(d->mla.mscale)))
		return titan_error(TITAN_E_FORMAT, "%s: q_lora_rank %lld, kv_lora_rank %lld, "
				   "qk_nope_head_dim %lld, qk_rope_head_dim %lld, v_head_dim %lld, "
				   "head_dim %lld: not a multi-head latent attention titan runs",
				   src, (long long)d->mla.q_lora_rank,
				   (long long)d->mla.kv_lora_rank,
				   (long long)d->mla.qk_nope_head_dim,
				   (long long)d->mla.qk_rope_head_dim, (long long)d->mla.v_head_dim,
				   (long long)d->head_dim);
	if (!d->qk_norm && !titan_model_mla(d) &&
	    (d->dim % d->n_heads || d->n_heads % d->n_kv_heads || (d->dim / d->n_heads) % 2))
		return titan_error(TITAN_E_FORMAT, "%s: %s %lld, %s %lld, %s %lld: the heads must "
				   "divide %s into even head dims and the kv heads divide the heads",
				   src, field(hf, "dim", "hidden_size"), (long long)d->dim,
				   field(hf, "n_heads", "num_attention_heads"), (long long)d->n_heads,
				   field(hf, "n_kv_heads", "num_key_value_heads"),
				   (long long)d->n_kv_heads, field(hf, "dim", "hidden_size"));
	if (d->head_dim != d->dim / d->n_heads && !d->qk_norm && !titan_model_mla(d))
		return titan_error(TITAN_E_FORMAT, "%s: head_dim %lld is not %s / %s (%lld)", src,
				   (long long)d->head_dim, field(hf, "dim", "hidden_size"),
				   field(hf, "n_heads", "num_attention_heads"),
				   (long long)(d->dim / d->n_heads));
	if (d->rope_scaling && !(d->rope_high_freq_factor > d->rope_low_freq_factor) &&
	    !(d->family == TITAN_MODEL_NAME_LLAMA4 &&
	      d->rope_high_freq_factor == d->rope_low_freq_factor))
		return titan_error(TITAN_E_FORMAT, "%s: %s must be above %s", src,
				   field(hf, "rope_high_freq_factor", "rope_scaling.high_freq_factor"),
				   field(hf, "rope_low_freq_factor", "rope_scaling.low_freq_factor"));
	if (d->rope_scaling && d->rope_original_max_position <= 0)
		return titan_error(TITAN_E_FORMAT, "%s: %s %lld: must be at least 1", src,
				   field(hf, "rope_original_max_position",
					 "rope_scaling.original_max_position_embeddings"),
				   (long long)d->rope_original_max_position);
	if (d->moe.num_experts > 0 && (rc = moe_check(src, &d->moe)) < 0)
		return rc;
	/* the whole model's bytes must be addressable (in double: no overflow);
	 * a MoE counted as if every block had both feed-forwards */
	total = (double)d->vocab_size * (double)d->dim * (d->tied ? 1.0 : 2.0) +
		(double)d->n_layers * ((d->qk_norm ? 2.0 * (double)(d->n_heads + d->n_kv_heads) *
							     (double)d->head_dim
						   : 4.0 * (double)d->dim) * (double)d->dim +
				       3.0 * (double)d->dim * (double)d->ffn_hidden);
	if (d->moe.num_experts > 0)
		total += (double)d->n_layers * (double)d->dim *
			 ((double)d->moe.num_experts *
			  (1.0 + 3.0 * (double)d->moe.inter_dim) +
			  3.0 * (double)d->moe.inter_dim * (double)d->moe.num_shared_experts);
	if (total * 4.0 > 0x1p62)
		return titan_error(TITAN_E_FORMAT, "%s: the dims make %.3g parameters, more than a "
				   "model titan can hold", src, total);
	return 0;
}

int titan_ckpt_dims_match(const char *src, const struct titan_model_dims *have,
			  const struct titan_model_dims *want)
{
	const struct titan_moe_dims *hm = &have->moe, *wm = &want->moe;
	/* the architecture: what the weights mean, not only their shapes (4
	 * heads of 16 and 8 heads of 8 make the same wq).  multiple_of and
	 * ffn_dim_multiplier only lead to ffn_hidden, head_dim follows from
	 * dim and n_heads (or is Qwen3's own), and the flavor is a name. */
	const struct {
		const char *name, *key;
		int64_t a, b;
		bool on, boolean;
	} ints[] = {
		{"dim", "model.dim", have->dim, want->dim, true, false},
		{"n_layers", "model.n_layers", have->n_layers, want->n_layers, true, false},
		{"n_heads", "model.n_heads", have->n_heads, want->n_heads, true, false},
		{"n_kv_heads", "model.n_kv_heads", have->n_kv_heads, want->n_kv_heads, true, false},
		{"head_dim", "model.head_dim", have->head_dim, want->head_dim, true, false},
		{"qk_norm", "model.qk_norm", have->qk_norm, want->qk_norm, true, true},
		{"ffn_hidden", "model.multiple_of, model.ffn_dim_multiplier", have->ffn_hidden,
		 want->ffn_hidden, true, false},
		{"vocab_size", "model.vocab_size", have->vocab_size, want->vocab_size, true, false},
		{"tie_word_embeddings", "model.tie_word_embeddings", have->tied, want->tied, true,
		 true},
		{"rope_scaling", "model.rope_scaling", have->rope_scaling, want->rope_scaling, true,
		 true},
		{"rope_original_max_position", "model.rope_original_max_position",
		 have->rope_original_max_position, want->rope_original_max_position,
		 have->rope_scaling && want->rope_scaling, false},
		/* a MoE the file describes (one without the attributes was written
		 * before them: its tensors' names and shapes say the rest) */
		{"moe_num_experts", "model.moe_num_experts", hm->num_experts, wm->num_experts,
		 hm->num_experts > 0, false},
		{"moe_num_shared_experts", "model.moe_num_shared_experts", hm->num_shared_experts,
		 wm->num_shared_experts, hm->num_experts > 0, false},
		{"moe_top_k", "model.moe_top_k", hm->top_k, wm->top_k, hm->num_experts > 0, false},
		{"moe_inter_dim", "model.moe_inter_dim", hm->inter_dim, wm->inter_dim,
		 hm->num_experts > 0, false},
		{"n_dense_layers", "model.n_dense_layers", hm->n_dense_layers, wm->n_dense_layers,
		 hm->num_experts > 0, false},
		{"interleave_moe_layer_step", "model.interleave_moe_layer_step",
		 hm->interleave_step > 1 ? hm->interleave_step : 1,
		 wm->interleave_step > 1 ? wm->interleave_step : 1, hm->num_experts > 0, false},
		{"moe_score_func softmax", "model.moe_score_func", hm->softmax, wm->softmax,
		 hm->num_experts > 0, true},
		{"moe_route_norm", "model.moe_route_norm", hm->route_norm, wm->route_norm,
		 hm->num_experts > 0, true},
		{"moe_score_before_experts", "model.moe_score_before_experts",
		 hm->score_before_experts, wm->score_before_experts, hm->num_experts > 0, true},
		/* multi-head latent attention (deepseek_v3) */
		{"kv_lora_rank", "model.kv_lora_rank", have->mla.kv_lora_rank,
		 want->mla.kv_lora_rank, true, false},
		{"q_lora_rank", "model.q_lora_rank", have->mla.q_lora_rank, want->mla.q_lora_rank,
		 titan_model_mla(have), false},
		{"qk_nope_head_dim", "model.qk_nope_head_dim", have->mla.qk_nope_head_dim,
		 want->mla.qk_nope_head_dim, titan_model_mla(have), false},
		{"qk_rope_head_dim", "model.qk_rope_head_dim", have->mla.qk_rope_head_dim,
		 want->mla.qk_rope_head_dim, titan_model_mla(have), false},
		{"v_head_dim", "model.v_head_dim", have->mla.v_head_dim, want->mla.v_head_dim,
		 titan_model_mla(have), false},
		{"original_seq_len", "model.original_seq_len", have->mla.original_seq_len,
		 want->mla.original_seq_len, titan_model_mla(have), false},
		{"every_n_layers_nope", "model.every_n_layers_nope", have->nope_every,
		 want->nope_every, true, false},
	};
	const struct {
		const char *name, *key;
		double a, b;
		bool on;
	} reals[] = {
		{"norm_eps", "model.norm_eps", have->norm_eps, want->norm_eps, true},
		{"rope_theta", "model.rope_theta", have->rope_theta, want->rope_theta, true},
		{"rope_scaling_factor", "model.rope_scaling_factor", have->rope_scaling_factor,
		 want->rope_scaling_factor, have->rope_scaling && want->rope_scaling},
		{"rope_low_freq_factor", "model.rope_low_freq_factor", have->rope_low_freq_factor,
		 want->rope_low_freq_factor, have->rope_scaling && want->rope_scaling},
		{"rope_high_freq_factor", "model.rope_high_freq_factor",
		 have->rope_high_freq_factor, want->rope_high_freq_factor,
		 have->rope_scaling && want->rope_scaling},
		{"moe_route_scale", "model.moe_route_scale", hm->route_scale, wm->route_scale,
		 hm->num_experts > 0},
		{"rope_factor", "model.rope_factor", have->mla.rope_factor, want->mla.rope_factor,
		 titan_model_mla(have)},
		{"beta_fast", "model.beta_fast", have->mla.beta_fast, want->mla.beta_fast,
		 titan_model_mla(have)},
		{"beta_slow", "model.beta_slow", have->mla.beta_slow, want->mla.beta_slow,
		 titan_model_mla(have)},
		{"mscale", "model.mscale", have->mla.mscale, want->mla.mscale, titan_model_mla(have)},
	};
	char msg[1024], a[64], b[64];
	size_t k = 0;
	int n = 0;

	msg[0] = 0;
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		if (!ints[i].on || ints[i].a == ints[i].b)
			continue;
		if (ints[i].boolean) {
			snprintf(a, sizeof(a), "%s", ints[i].a ? "true" : "false");
			snprintf(b, sizeof(b), "%s", ints[i].b ? "true" : "false");
		} else {
			snprintf(a, sizeof(a), "%lld", (long long)ints[i].a);
			snprintf(b, sizeof(b), "%lld", (long long)ints[i].b);
		}
		if (k < sizeof(msg))
			k += (size_t)snprintf(msg + k, sizeof(msg) - k, "%s%s %s there, %s in the "
					      "config (%s)", n++ ? "; " : "", ints[i].name, a, b,
					      ints[i].key);
	}
	for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++) {
		/* bit for bit: both come from the same decimal text or file */
		if (!reals[i].on || reals[i].a == reals[i].b ||
		    (isnan(reals[i].a) && isnan(reals[i].b)))
			continue;
		if (k < sizeof(msg))
			k += (size_t)snprintf(msg + k, sizeof(msg) - k, "%s%s %s there, %s in the "
					      "config (%s)", n++ ? "; " : "", reals[i].name,
					      titan_format_double(a, sizeof(a), reals[i].a),
					      titan_format_double(b, sizeof(b), reals[i].b),
					      reals[i].key);
	}
	if (!n)
		return 0;
	return titan_error(TITAN_E_INVALID, "%s holds another model than the config's: %s", src,
			   msg);
}

/* Every parameter of the table present in `part` with its shape, and
 * nothing else there. */
static int check_part(struct titan_ckpt_file *f, const struct titan_param_table *t,
		      enum titan_ckpt_part part)
{
	const struct titan_ckpt_info *in = titan_ckpt_file_info(f);
	const char *pn = titan_ckpt_part_name(part);
	char a[96], b[96];

	for (int i = 0; i < t->n; i++) {
		const struct titan_param *p = &t->params[i];
		const struct titan_ckpt_tensor_info *ti = titan_ckpt_find(f, part, p->name);

		if (!ti)
			return titan_error(TITAN_E_INVALID, "'%s': %s/%s is missing (a checkpoint of "
					   "another model?)", in->path, pn, p->name);
		if (ti->ndim != p->fndim ||
		    memcmp(ti->shape, p->fshape, (size_t)p->fndim * sizeof(*p->fshape)))
			return titan_error(TITAN_E_INVALID, "'%s': %s/%s: shape %s, the model has %s",
					   in->path, pn, p->name,
					   shape_str(a, sizeof(a), ti->ndim, ti->shape),
					   shape_str(b, sizeof(b), p->fndim, p->fshape));
	}
	for (size_t i = 0; i < in->n_tensors; i++) {
		const struct titan_ckpt_tensor_info *ti = &in->tensors[i];

		if (ti->part == part && !titan_param_find(t, ti->name))
			return titan_error(TITAN_E_INVALID, "'%s': %s/%s is not a parameter of the "
					   "model%s", in->path, pn, ti->name,
					   !strcmp(ti->name, "output.weight") ?
					   " (tie_word_embeddings differs)" : "");
	}
	return 0;
}

int titan_ckpt_check_dims(struct titan_ckpt_file *f)
{
	const struct titan_ckpt_info *in = titan_ckpt_file_info(f);
	const struct titan_model_dims *d = &in->dims;
	char src[4200];
	size_t n = 0;
	int rc;

	snprintf(src, sizeof(src), "'%s'", in->path);
	if ((rc = titan_ckpt_dims_check(src, d, false)) < 0)
		return rc;
	for (size_t i = 0; i < in->n_tensors; i++) {
		n += in->tensors[i].part == TITAN_CKPT_MODEL;
		/* a MoE written before the moe_* attributes: nothing tells its
		 * readers without a config (conversion, generation) its routing */
		if (!d->moe.num_experts && in->tensors[i].part == TITAN_CKPT_MODEL &&
		    strstr(in->tensors[i].name, ".moe."))
			return titan_error(TITAN_E_INVALID, "%s: model/%s: a mixture-of-experts "
					   "checkpoint without the moe_* attributes (written by an "
					   "older titan), which this tool cannot read", src,
					   in->tensors[i].name);
	}
	/* 9 per block (11 with QK-norm; a MoE block's feed-forward 4 for 3,
	 * and 3 shared experts, expert_bias when there), tok_embeddings, norm,
	 * output when not tied: a table built from the dims is then no larger
	 * than the file's list */
	double want = titan_params_per_layer(d) * (double)d->n_layers + (d->tied ? 2 : 3);

	if (titan_model_mla(d)) /* wq (or wq_a, q_norm, wq_b), wkv_a, kv_norm, wkv_b for wk, wv */
		want += (double)d->n_layers * (d->mla.q_lora_rank > 0 ? 3 : 1);
	if (d->moe.num_experts > 0 && d->moe.n_dense_layers < d->n_layers) {
		/* titan_model_layer_is_moe's blocks: l + 1 a multiple of the step
		 * from n_dense_layers on */
		const int64_t st = d->moe.interleave_step > 0 ? d->moe.interleave_step : 1;

		want += (double)(d->n_layers / st - d->moe.n_dense_layers / st) *
			(1 + 3 * (d->moe.num_shared_experts > 0) + titan_model_moe_balanced(d));
	}

	if ((double)n != want)
		return titan_error(TITAN_E_FORMAT, "%s: %zu model tensors, the dims (n_layers %lld, "
				   "tie_word_embeddings %s%s) make %.0f", src, n,
				   (long long)d->n_layers, d->tied ? "true" : "false",
				   d->qk_norm ? ", qk_norm true" : "", want);
	return 0;
}

int titan_ckpt_check_model(struct titan_ckpt_file *f, const struct titan_param_table *t)
{
	return check_part(f, t, TITAN_CKPT_MODEL);
}

static int read_part(struct titan_ckpt_file *f, const struct titan_param_table *t,
		     enum titan_ckpt_part part, float *arena)
{
	for (int i = 0; i < t->n; i++) {
		const struct titan_param *p = &t->params[i];
		const struct titan_ckpt_tensor_info *ti = titan_ckpt_find(f, part, p->name);
		/* a TP slice: rows of the vocabulary / column-parallel weights, a
		 * window of the columns of wo and w2, of the experts' hidden dim */
		int64_t w0, wn;
		const int wdim = titan_param_tp_window(p, &w0, &wn);
		int rc = p->tp_dim < 0 ? titan_ckpt_read(f, ti, p->row0, p->rows, arena + p->offset) :
			 titan_ckpt_read_window_dim(f, ti, p->row0 + (p->tp_dim == 0 ? p->tp_off : 0),
						    p->rows, wdim, w0, wn, arena + p->offset);

		if (rc < 0)
			return rc;
	}
	return 0;
}

static int need(const struct titan_ckpt_info *in, bool has, const char *group, const char *what)
{
	if (has)
		return 0;
	return titan_error(TITAN_E_INVALID, "'%s' has no /%s (a model-only checkpoint?): load it "
			   "model-only or exclude %s from loading", in->path, group, what);
}

/* The data-loader state is global (positions count global rows, every
 * data-parallel rank holds the same), so a checkpoint of any DP degree
 * resumes on any other; the per-rank entries must agree. */
static int loader_global(const struct titan_ckpt_info *in)
{
	for (int64_t r = 1; r < in->train.dp_world_size; r++)
		if (memcmp(&in->train.loader[r], &in->train.loader[0], sizeof(in->train.loader[0])))
			return titan_error(TITAN_E_FORMAT, "'%s': /dataloader/dp_rank_%lld differs from "
					   "dp_rank_0 (the data loader state is global: every "
					   "rank's entry is the same); exclude dataloader from "
					   "loading to start the data over", in->path, (long long)r);
	return 0;
}

int titan_ckpt_load_(const char *path, struct titan_ckpt_state *st, unsigned flags,
		     struct titan_ckpt_comm *c, bool verify_rows)
{
	const struct titan_param_table *t = st->table;
	const bool mo = flags & TITAN_CKPT_MODEL_ONLY;
	const bool opt = !mo && !(flags & TITAN_CKPT_EXCLUDE_OPTIMIZER);
	const bool dl = !mo && !(flags & TITAN_CKPT_EXCLUDE_DATALOADER);
	const bool lr = !mo && !(flags & TITAN_CKPT_EXCLUDE_LR_SCHEDULER);
	const bool ts = !mo && !(flags & TITAN_CKPT_EXCLUDE_TRAIN_STATE);
	const bool rng = !mo && !(flags & TITAN_CKPT_EXCLUDE_RNG);
	const bool parts[TITAN_CKPT_NPARTS] = {true, opt, opt};
	const struct titan_ckpt_info *in = NULL;
	struct titan_ckpt_file *f = NULL;
	char src[4200];
	int rc;

	/* with a communicator every rank goes on to the checksum agreement,
	 * whatever failed here */
	if (!t || !st->params || (opt && (!st->exp_avg || !st->exp_avg_sq)) ||
	    (dl && (!st->train.loader || st->train.dp_world_size < 1))) {
		rc = titan_error(TITAN_E_INVALID, "loading '%s': no place for the %s", path,
				 !t || !st->params ? "model" : opt && (!st->exp_avg ||
				 !st->exp_avg_sq) ? "AdamW moments" : "data loader state");
		goto sums;
	}
	if ((rc = titan_ckpt_open(path, &f)) < 0)
		goto sums;
	in = titan_ckpt_file_info(f);
	/* check everything first: a failed load leaves the caller's state alone.
	 * The model the file holds, field by field: tensors of the same shapes
	 * can be another model (4 heads of 16 or 8 heads of 8 make one wq) */
	snprintf(src, sizeof(src), "'%s'", path);
	if ((rc = titan_ckpt_dims_check(src, &in->dims, false)) < 0 ||
	    (rc = titan_ckpt_dims_match(src, &in->dims, &t->dims)) < 0 ||
	    (rc = check_part(f, t, TITAN_CKPT_MODEL)) < 0 ||
	    (opt && ((rc = need(in, in->has_optimizer, "optimizer", "optimizer")) < 0 ||
		     (rc = check_part(f, t, TITAN_CKPT_EXP_AVG)) < 0 ||
		     (rc = check_part(f, t, TITAN_CKPT_EXP_AVG_SQ)) < 0)) ||
	    (dl && (rc = need(in, in->has_dataloader, "dataloader", "dataloader")) < 0) ||
	    (lr && (rc = need(in, in->has_lr_scheduler, "lr_scheduler", "lr_scheduler")) < 0) ||
	    (ts && (rc = need(in, in->has_train_state, "train_state", "train_state")) < 0) ||
	    (rng && (rc = need(in, in->has_rng, "rng", "rng")) < 0))
		goto sums;
	if (dl && (rc = loader_global(in)) < 0)
		goto sums;
	/* the tensors read whole are checked against their crc32c as they are
	 * read; the shards of a multi-rank load together below.  A mismatch
	 * leaves the arenas holding part of the data. */
	if ((rc = read_part(f, t, TITAN_CKPT_MODEL, st->params)) == 0 && opt &&
	    (rc = read_part(f, t, TITAN_CKPT_EXP_AVG, st->exp_avg)) == 0)
		rc = read_part(f, t, TITAN_CKPT_EXP_AVG_SQ, st->exp_avg_sq);
sums:
	if (c)
		rc = titan_ckpt_load_sums_(c, f, t, parts, verify_rows, rc);
	if (rc < 0)
		goto done;
	if (opt)
		st->train.optim_step = in->train.optim_step;
	if (ts) {
		st->train.step = in->train.step;
		st->train.ntokens_seen = in->train.ntokens_seen;
	}
	if (lr)
		st->train.lr_last_epoch = in->train.lr_last_epoch;
	for (int64_t r = 0; dl && r < st->train.dp_world_size; r++)
		st->train.loader[r] = in->train.loader[0];
	if (rng)
		st->train.rng = in->train.rng;
done:
	titan_ckpt_close(f);
	return rc;
}

int titan_ckpt_load(const char *path, struct titan_ckpt_state *st, unsigned flags)
{
	return titan_ckpt_load_(path, st, flags, NULL, false);
}

/* ------------------------------------------------------------ folders */

/* "step-N.h5" -> N (1), "step-N.h5.tmp.XXXXXX" -> N (2), else 0.  N is
 * decimal without sign or leading zeros ("0" itself is fine). */
static int parse_name(const char *s, int64_t *step)
{
	const char *d = s + 5, *e;
	char num[24];

	if (strncmp(s, "step-", 5) != 0)
		return 0;
	for (e = d; *e >= '0' && *e <= '9'; e++)
		;
	if (e == d || e - d >= (ptrdiff_t)sizeof(num) || (*d == '0' && e - d > 1) ||
	    strncmp(e, ".h5", 3) != 0)
		return 0;
	memcpy(num, d, (size_t)(e - d));
	num[e - d] = 0;
	if (titan_parse_i64(num, step) < 0)
		return 0;
	if (e[3] == 0)
		return 1;
	return strncmp(e + 3, ".tmp.", 5) == 0 && e[8] ? 2 : 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Steps of kind `kind` (1 complete, 2 temporary); with names when `names`. */
static int scan(const char *folder, int kind, int64_t **steps, char ***names, size_t *n)
{
	DIR *d = opendir(folder);
	struct dirent *e;
	size_t cap = 0;
	int rc = 0;

	*steps = NULL;
	*n = 0;
	if (names)
		*names = NULL;
	if (!d)
		return errno == ENOENT ? 0 : titan_error(TITAN_E_IO, "cannot read folder '%s': %s",
							 folder, strerror(errno));
	while ((e = readdir(d))) {
		int64_t s;

		if (parse_name(e->d_name, &s) != kind || (e->d_type != DT_REG && e->d_type != DT_UNKNOWN))
			continue;
		if (*n == cap) {
			void *p = realloc(*steps, (cap = cap ? 2 * cap : 16) * sizeof(**steps));
			void *q = names ? realloc(*names, cap * sizeof(**names)) : NULL;

			if (p)
				*steps = p;
			if (q)
				*names = q;
			if (!p || (names && !q)) {
				rc = titan_error(TITAN_E_NOMEM, "out of memory");
				break;
			}
		}
		if (names && !((*names)[*n] = strdup(e->d_name))) {
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
			break;
		}
		(*steps)[(*n)++] = s;
	}
	closedir(d);
	if (rc == 0 && !names && *n)
		qsort(*steps, *n, sizeof(**steps), cmp_i64);
	return rc;
}

int titan_ckpt_list(const char *folder, int64_t **steps, size_t *n)
{
	int rc = scan(folder, 1, steps, NULL, n);

	if (rc < 0) {
		free(*steps);
		*steps = NULL;
		*n = 0;
	}
	return rc;
}

int titan_ckpt_latest(const char *folder, int64_t *step)
{
	int64_t *steps;
	size_t n;
	int rc = titan_ckpt_list(folder, &steps, &n);

	*step = rc == 0 && n ? steps[n - 1] : -1;
	free(steps);
	return rc;
}

int titan_ckpt_prune(const char *folder, int64_t keep_latest_k, int *removed)
{
	int64_t *steps = NULL, *tmp = NULL;
	char **names = NULL, path[4096];
	size_t n = 0, ntmp = 0;
	int rc, count = 0;

	if (removed)
		*removed = 0;
	if (keep_latest_k < 0)
		return titan_error(TITAN_E_INVALID, "checkpoint.keep_latest_k %lld < 0",
				   (long long)keep_latest_k);
	if ((rc = titan_ckpt_list(folder, &steps, &n)) < 0)
		return rc;
	for (size_t i = 0; keep_latest_k > 0 && i + (size_t)keep_latest_k < n && rc == 0; i++) {
		if ((rc = titan_ckpt_path(path, sizeof(path), folder, steps[i])) == 0 &&
		    unlink(path) != 0 && errno != ENOENT)
			rc = titan_error(TITAN_E_IO, "cannot delete old checkpoint '%s': %s", path,
					 strerror(errno));
		count += rc == 0;
	}
	/* leftovers of crashed writes: only steps not newer than the newest
	 * complete one (a save in progress writes a newer step) */
	if (rc == 0 && n && (rc = scan(folder, 2, &tmp, &names, &ntmp)) == 0) {
		for (size_t i = 0; i < ntmp && rc == 0; i++) {
			if (tmp[i] > steps[n - 1])
				continue;
			snprintf(path, sizeof(path), "%s/%s", folder, names[i]);
			if (unlink(path) != 0 && errno != ENOENT)
				rc = titan_error(TITAN_E_IO, "cannot delete '%s': %s", path,
						 strerror(errno));
			count += rc == 0;
		}
	}
	for (size_t i = 0; names && i < ntmp; i++)
		free(names[i]);
	free(names);
	free(tmp);
	free(steps);
	if (removed)
		*removed = count;
	return rc;
}

int titan_ckpt_clean_tmp(const char *folder, int64_t before_ns, int *removed)
{
	int64_t *steps = NULL;
	char **names = NULL, path[4200];
	size_t n = 0;
	int rc = 0, count = 0;

	if (removed)
		*removed = 0;
	if ((rc = scan(folder, 2, &steps, &names, &n)) < 0)
		goto done;
	for (size_t i = 0; i < n; i++) {
		struct stat sb;

		snprintf(path, sizeof(path), "%s/%s", folder, names[i]);
		if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode) ||
		    (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec >= before_ns)
			continue;
		if (unlink(path) != 0 && errno != ENOENT) {
			rc = titan_error(TITAN_E_IO, "cannot delete '%s': %s", path, strerror(errno));
			break;
		}
		count++;
	}
done:
	for (size_t i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
	free(steps);
	if (removed)
		*removed = count;
	return rc;
}

int titan_ckpt_supersede(const char *folder, int64_t step, char **subfolder, int64_t **moved,
			 size_t *nmoved)
{
	int64_t *steps = NULL;
	size_t n = 0, first = 0;
	char sub[4200], from[4200], to[4400], stamp[32];
	struct tm tm;
	time_t now = time(NULL);
	int rc;

	*subfolder = NULL;
	*moved = NULL;
	*nmoved = 0;
	if ((rc = titan_ckpt_list(folder, &steps, &n)) < 0)
		return rc;
	while (first < n && steps[first] <= step)
		first++;
	if (first == n) {
		free(steps);
		return 0;
	}
	/* superseded-YYYYmmdd-HHMMSS[-K]: a new subfolder each time */
	strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
	for (int k = 1;; k++) {
		if (k == 1)
			snprintf(sub, sizeof(sub), "%s/superseded-%s", folder, stamp);
		else
			snprintf(sub, sizeof(sub), "%s/superseded-%s-%d", folder, stamp, k);
		if (mkdir(sub, 0777) == 0)
			break;
		if (errno != EEXIST || k == 100) {
			rc = titan_error(TITAN_E_IO, "cannot create folder '%s': %s", sub,
					 strerror(errno));
			free(steps);
			return rc;
		}
	}
	for (size_t i = first; i < n; i++) {
		snprintf(from, sizeof(from), "%s/step-%lld.h5", folder, (long long)steps[i]);
		snprintf(to, sizeof(to), "%s/step-%lld.h5", sub, (long long)steps[i]);
		if (rename(from, to) != 0) {
			rc = titan_error(TITAN_E_IO, "cannot move '%s' to '%s': %s", from, to,
					 strerror(errno));
			break;
		}
		steps[(*nmoved)++] = steps[i];
	}
	if (*nmoved && !(*subfolder = titan_strdup(sub)) && rc == 0)
		rc = TITAN_E_NOMEM;
	if (!*nmoved)
		rmdir(sub);
	*moved = steps;
	return rc;
}

/* ------------------------------------------------------- config from dims */

void titan_ckpt_match_flavor_(const struct titan_model_dims *d, char name[32])
{
	static const char *const names[] = {"debugmodel", "0.6B", "1B", "1.7B", "3B", "4B", "8B",
					    "14B", "32B", "70B", "405B", "debugmodel_moe",
					    "30B-A3B", "235B-A22B"};

	/* deepseek_v3's flavors carry MoE routing in the config keys: its
	 * dims are always written out (custom) */
	for (size_t i = 0; d->family != TITAN_MODEL_NAME_DEEPSEEK_V3 &&
			   i < sizeof(names) / sizeof(names[0]); i++) {
		struct titan_model_dims f;

		if (titan_model_family_has_flavor(d->family, names[i]) &&
		    titan_model_family_flavor(d->family, names[i], &f) == 0 && f.dim == d->dim &&
		    f.n_layers == d->n_layers && f.n_heads == d->n_heads &&
		    f.n_kv_heads == d->n_kv_heads && f.vocab_size == d->vocab_size &&
		    f.ffn_hidden == d->ffn_hidden && f.tied == d->tied &&
		    f.head_dim == d->head_dim && f.qk_norm == d->qk_norm &&
		    f.moe.num_experts == d->moe.num_experts && f.moe.top_k == d->moe.top_k &&
		    f.moe.inter_dim == d->moe.inter_dim) {
			snprintf(name, 32, "%s", f.flavor);
			return;
		}
	}
	snprintf(name, 32, "custom");
}

char *titan_ckpt_config_for_dims(const struct titan_model_dims *d)
{
	struct titan_config c;
	struct titan_model_dims back;
	char flavor[32], v[64], *buf = NULL;
	size_t len = 0;
	FILE *fp = NULL;
	int rc;

	if (titan_config_init(&c) < 0)
		return NULL;
	titan_ckpt_match_flavor_(d, flavor);
#define SET(key, ...) \
	do { snprintf(v, sizeof(v), __VA_ARGS__); \
	     if ((rc = titan_config_set(&c, key, v, "checkpoint dims")) < 0) goto done; } while (0)
#define SETD(key, x) \
	do { titan_format_double(v, sizeof(v), x); \
	     if ((rc = titan_config_set(&c, key, v, "checkpoint dims")) < 0) goto done; } while (0)
	SET("model.name", "%s", titan_model_family_name(d->family));
	SET("model.flavor", "%s", flavor);
	if (!strcmp(flavor, "custom")) {
		/* ffn hidden F back from multiple_of = F: int(8·dim/3) rounded up to
		 * a multiple of F is F when it is at most F; otherwise a
		 * multiplier brings it down first */
		int64_t h = (int64_t)(2.0 * (double)(4 * d->dim) / 3.0);

		SET("model.dim", "%lld", (long long)d->dim);
		SET("model.n_layers", "%lld", (long long)d->n_layers);
		SET("model.n_heads", "%lld", (long long)d->n_heads);
		SET("model.n_kv_heads", "%lld", (long long)d->n_kv_heads);
		SET("model.vocab_size", "%lld", (long long)d->vocab_size);
		SET("model.multiple_of", "%lld", (long long)d->ffn_hidden);
		if (h > d->ffn_hidden)
			SETD("model.ffn_dim_multiplier", (double)d->ffn_hidden / (double)h);
		SET("model.tie_word_embeddings", "%s", d->tied ? "true" : "false");
		if (d->head_dim != d->dim / d->n_heads)
			SET("model.head_dim", "%lld", (long long)d->head_dim);
		if (d->family != TITAN_MODEL_NAME_LLAMA3)
			SET("model.hidden_dim", "%lld", (long long)d->ffn_hidden);
		if (d->qk_norm != (d->family == TITAN_MODEL_NAME_QWEN3))
			SET("model.qk_norm", "%s", d->qk_norm ? "true" : "false");
	}
	if (d->moe.num_experts > 0) { /* after the flavor: these win */
		const struct titan_moe_dims *m = &d->moe;

		SET("model.moe_num_experts", "%lld", (long long)m->num_experts);
		SET("model.moe_num_shared_experts", "%lld", (long long)m->num_shared_experts);
		SET("model.moe_top_k", "%lld", (long long)m->top_k);
		SET("model.moe_inter_dim", "%lld", (long long)m->inter_dim);
		SET("model.n_dense_layers", "%lld", (long long)m->n_dense_layers);
		SET("model.interleave_moe_layer_step", "%lld",
		    (long long)(m->interleave_step > 0 ? m->interleave_step : 1));
		SET("model.moe_score_func", "%s", m->softmax ? "softmax" : "sigmoid");
		SET("model.moe_route_norm", "%s", m->route_norm ? "true" : "false");
		SET("model.moe_score_before_experts", "%s", m->score_before_experts ? "true" : "false");
		SETD("model.moe_route_scale", m->route_scale);
		if (isnan(m->load_balance_coeff))
			SET("model.moe_load_balance_coeff", "null");
		else
			SETD("model.moe_load_balance_coeff", m->load_balance_coeff);
	}
	if (d->nope_every > 0) {
		SET("model.every_n_layers_nope", "%lld", (long long)d->nope_every);
		SET("model.fixed_attn_block_size", "%lld", (long long)d->attn_chunk);
	}
	if (titan_model_mla(d)) {
		const struct titan_mla_dims *a = &d->mla;

		SET("model.q_lora_rank", "%lld", (long long)a->q_lora_rank);
		SET("model.kv_lora_rank", "%lld", (long long)a->kv_lora_rank);
		SET("model.qk_nope_head_dim", "%lld", (long long)a->qk_nope_head_dim);
		SET("model.qk_rope_head_dim", "%lld", (long long)a->qk_rope_head_dim);
		SET("model.v_head_dim", "%lld", (long long)a->v_head_dim);
		SET("model.original_seq_len", "%lld", (long long)a->original_seq_len);
		SETD("model.rope_factor", a->rope_factor);
		SETD("model.beta_fast", a->beta_fast);
		SETD("model.beta_slow", a->beta_slow);
		SETD("model.mscale", a->mscale);
	}
	SETD("model.norm_eps", d->norm_eps);
	SETD("model.rope_theta", d->rope_theta);
	SET("model.rope_scaling", "%s", d->rope_scaling ? "true" : "false");
	if (d->rope_scaling) {
		SETD("model.rope_scaling_factor", d->rope_scaling_factor);
		SETD("model.rope_low_freq_factor", d->rope_low_freq_factor);
		SETD("model.rope_high_freq_factor", d->rope_high_freq_factor);
		SET("model.rope_original_max_position", "%lld",
		    (long long)d->rope_original_max_position);
	}
#undef SET
#undef SETD
	if ((rc = titan_model_dims_from_config(&c, &back)) == 0 && back.ffn_hidden != d->ffn_hidden)
		titan_log_warn("config for the checkpoint: ffn hidden %lld is not reachable from "
			       "model.multiple_of / ffn_dim_multiplier (got %lld)",
			       (long long)d->ffn_hidden, (long long)back.ffn_hidden);
	if (!(fp = open_memstream(&buf, &len))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	rc = titan_config_write_yaml(&c, fp);
	if (fclose(fp) != 0 && rc == 0)
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
done:
	titan_config_release(&c);
	if (rc < 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
