/*
 * model.c — the weights of a model to sample from: a titan checkpoint
 * (step-N.h5 or the newest of a folder, lib/ckpt's reader) or a
 * HuggingFace LlamaForCausalLM folder (lib/ckpt/hf.c: q/k rows back from
 * rotate-half to torchtitan's interleaved RoPE pairs), into one parameter
 * arena of titan's layout; the context length and tokenizer that go with
 * it.
 */
#include "titan/generate.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "titan/ckpt.h"

void titan_gen_model_free(struct titan_gen_model *m)
{
	if (!m)
		return;
	titan_param_arena_release(&m->params);
	titan_param_table_release(&m->table);
	free(m->tokenizer);
	free(m->path);
	free(m);
}

static bool is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int set_str(char **dst, const char *s)
{
	free(*dst);
	*dst = NULL;
	if (s && !(*dst = strdup(s)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	return 0;
}

/* The dims, seq_len and tokenizer a --config gives. */
static int from_config(struct titan_gen_model *m, const struct titan_config *cfg)
{
	int rc;

	if ((rc = titan_model_dims_from_config(cfg, &m->dims)) < 0)
		return rc;
	m->seq_len = cfg->training.seq_len;
	m->block_causal = cfg->training.attn_mask_type_e == TITAN_ATTN_MASK_BLOCK_CAUSAL;
	if (cfg->model.tokenizer_path[0])
		return set_str(&m->tokenizer, cfg->model.tokenizer_path);
	return 0;
}

static int alloc_weights(struct titan_gen_model *m)
{
	int rc;

	if (!m->table.n && (rc = titan_param_table_init(&m->table, &m->dims, NULL)) < 0)
		return rc;
	return titan_param_arena_init(&m->params, &m->table, NULL, TITAN_MEM_PARAMS);
}

/* ------------------------------------------------------- checkpoint */

/* N of a file named step-N.h5 (a model-only save has no train_state), or -1. */
static int64_t step_of_name(const char *path)
{
	const char *b = strrchr(path, '/');
	char num[24];
	size_t n;
	int64_t v;

	b = b ? b + 1 : path;
	n = strlen(b);
	if (strncmp(b, "step-", 5) != 0 || n < 9 || n - 8 >= sizeof(num) ||
	    strcmp(b + n - 3, ".h5") != 0)
		return -1;
	memcpy(num, b + 5, n - 8);
	num[n - 8] = 0;
	return titan_parse_i64(num, &v) == 0 && v >= 0 ? v : -1;
}

static int load_h5(struct titan_gen_model *m, const char *path, const struct titan_config *cfg)
{
	struct titan_ckpt_file *f = NULL;
	struct titan_ckpt_state st = {0};
	struct titan_config stored;
	bool have_stored = false;
	int rc;

	if ((rc = titan_ckpt_open(path, &f)) < 0)
		return rc;
	/* the header's dims against the file's tensors before a byte is
	 * allocated for them: huge dims over tiny tensors are a damaged file */
	if ((rc = titan_ckpt_check_dims(f)) < 0)
		goto done;
	{
		const struct titan_ckpt_info *in = titan_ckpt_file_info(f);

		m->dims = in->dims;
		m->step = in->has_train_state ? in->train.step : step_of_name(path);
		/* the resolved config titan-train stored: seq_len, tokenizer */
		if (!cfg && in->config_yaml[0]) {
			if ((rc = titan_config_init(&stored)) < 0)
				goto done;
			have_stored = true;
			if (titan_config_load_string(&stored, in->config_yaml, strlen(in->config_yaml),
						     path) < 0) {
				titan_log_warn("'%s': the stored config does not parse (%s): the "
					       "context length is unknown", path, titan_errmsg());
				titan_error_clear();
			} else {
				m->seq_len = stored.training.seq_len;
				m->block_causal = stored.training.attn_mask_type_e ==
						  TITAN_ATTN_MASK_BLOCK_CAUSAL;
				if (stored.model.tokenizer_path[0] &&
				    (rc = set_str(&m->tokenizer, stored.model.tokenizer_path)) < 0)
					goto done;
			}
		}
	}
	if (cfg) {
		char src[4200];

		snprintf(src, sizeof(src), "'%s'", path);
		if ((rc = from_config(m, cfg)) < 0 ||
		    (rc = titan_ckpt_dims_match(src, &titan_ckpt_file_info(f)->dims, &m->dims)) < 0)
			goto done;
	}
	if ((rc = titan_param_table_init(&m->table, &m->dims, NULL)) < 0 ||
	    (rc = titan_ckpt_check_model(f, &m->table)) < 0)
		goto done;
	titan_ckpt_close(f);
	f = NULL;
	if ((rc = alloc_weights(m)) < 0)
		goto done;
	st.table = &m->table;
	st.params = m->params.data;
	rc = titan_ckpt_load(path, &st, TITAN_CKPT_MODEL_ONLY);
done:
	if (have_stored)
		titan_config_release(&stored);
	titan_ckpt_close(f);
	return rc;
}

/* ---------------------------------------------------------- HF folder */

static int64_t hf_max_positions(const char *dir)
{
	char path[4096];
	json_error_t err;
	json_t *root, *v;
	int64_t n = 0;

	snprintf(path, sizeof(path), "%s/config.json", dir);
	if (!(root = json_load_file(path, 0, &err)))
		return 0;
	v = json_object_get(root, "max_position_embeddings");
	if (json_is_integer(v) && json_integer_value(v) > 0)
		n = json_integer_value(v);
	json_decref(root);
	return n;
}

/* tokenizer.json, tokenizer.model, or the first *.tiktoken (by name). */
static int hf_tokenizer(struct titan_gen_model *m, const char *dir)
{
	static const char *const names[] = {"tokenizer.json", "tokenizer.model"};
	char path[4096], best[256] = "";
	struct dirent *e;
	DIR *dp;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (is_file(path))
			return set_str(&m->tokenizer, path);
	}
	if (!(dp = opendir(dir)))
		return 0;
	while ((e = readdir(dp))) {
		size_t n = strlen(e->d_name);

		if (n > 9 && n < sizeof(best) && !strcmp(e->d_name + n - 9, ".tiktoken") &&
		    (!best[0] || strcmp(e->d_name, best) < 0))
			memcpy(best, e->d_name, n + 1);
	}
	closedir(dp);
	if (!best[0])
		return 0;
	snprintf(path, sizeof(path), "%s/%s", dir, best);
	return set_str(&m->tokenizer, path);
}

static int load_hf(struct titan_gen_model *m, const char *dir, const struct titan_config *cfg)
{
	struct titan_hf_model *hf = NULL;
	const struct titan_param_table *ht;
	int rc;

	if ((rc = titan_hf_open(dir, &hf)) < 0)
		return rc;
	ht = titan_hf_table(hf);
	m->dims = ht->dims;
	m->seq_len = hf_max_positions(dir);
	if ((rc = hf_tokenizer(m, dir)) < 0 || (cfg && (rc = from_config(m, cfg)) < 0))
		goto done;
	if (cfg) {
		char src[4200];

		snprintf(src, sizeof(src), "'%s/config.json'", dir);
		if ((rc = titan_ckpt_dims_match(src, &ht->dims, &m->dims)) < 0)
			goto done;
	}
	if ((rc = alloc_weights(m)) < 0)
		goto done;
	if (m->table.n != ht->n) {
		rc = titan_error(TITAN_E_INVALID, "'%s/config.json': %d parameters, the --config "
				 "dims make %d (tied embeddings or n_layers differ)", dir, ht->n,
				 m->table.n);
		goto done;
	}
	for (int i = 0; i < ht->n && rc == 0; i++) {
		const struct titan_param *p = &m->table.params[i], *q = &ht->params[i];

		if (strcmp(p->name, q->name) || p->shape[0] != q->shape[0] ||
		    p->shape[1] != q->shape[1])
			rc = titan_error(TITAN_E_INVALID, "'%s': %s has shape [%lld, %lld], the "
					 "--config dims make [%lld, %lld]", dir, q->name,
					 (long long)q->shape[0], (long long)q->shape[1],
					 (long long)p->shape[0], (long long)p->shape[1]);
		else
			rc = titan_hf_read(hf, q, titan_param_view(&m->params, p));
	}
done:
	titan_hf_close(hf);
	return rc;
}

/* -------------------------------------------------------------- load */

int titan_gen_model_load(const char *path, const struct titan_config *cfg,
			 struct titan_gen_model **out)
{
	struct titan_gen_model *m;
	struct stat st;
	char buf[4096];
	int rc;

	*out = NULL;
	if (stat(path, &st) != 0)
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
	if (!(m = calloc(1, sizeof(*m))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	m->step = -1;
	if (S_ISDIR(st.st_mode)) {
		int64_t step;

		snprintf(buf, sizeof(buf), "%s/config.json", path);
		if (is_file(buf)) {
			m->hf = true;
			if ((rc = set_str(&m->path, path)) == 0)
				rc = load_hf(m, path, cfg);
			goto done;
		}
		if ((rc = titan_ckpt_latest(path, &step)) < 0)
			goto done;
		if (step < 0) {
			rc = titan_error(TITAN_E_IO, "'%s' holds neither a complete checkpoint "
					 "(step-N.h5) nor config.json (an HF folder)", path);
			goto done;
		}
		if ((rc = titan_ckpt_path(buf, sizeof(buf), path, step)) < 0)
			goto done;
		titan_log_info("using %s, the newest complete step", buf);
		path = buf;
	}
	if ((rc = set_str(&m->path, path)) == 0)
		rc = load_h5(m, path, cfg);
done:
	if (rc < 0) {
		titan_gen_model_free(m);
		return rc;
	}
	*out = m;
	return 0;
}
