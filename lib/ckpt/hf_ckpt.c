/*
 * hf_ckpt.c — a checkpoint file's model to an HF folder and back, the
 * conversions titan-ckpt-convert (--to hf, --to gguf, --from hf) and
 * titan-train (checkpoint.last_save_in_hf, checkpoint.initial_load_in_hf)
 * share, so that the trainer's HF files are the tool's byte for byte.
 */
#include "ckpt_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int titan_ckpt_model_open(const char *path, struct titan_ckpt_model_src *s)
{
	struct titan_model_dims d;
	int rc;

	memset(&s->table, 0, sizeof(s->table));
	s->f = NULL;
	if ((rc = titan_ckpt_open(path, &s->f)) < 0)
		return rc;
	/* the dims (values, and the tensor count they make) before a table
	 * is built from them, every tensor's shape before anything is read */
	if ((rc = titan_ckpt_check_dims(s->f)) < 0)
		return rc;
	d = titan_ckpt_file_info(s->f)->dims;
	if ((rc = titan_param_table_init(&s->table, &d, NULL)) < 0)
		return rc;
	return titan_ckpt_check_model(s->f, &s->table);
}

void titan_ckpt_model_close(struct titan_ckpt_model_src *s)
{
	titan_param_table_release(&s->table);
	titan_ckpt_close(s->f);
	s->f = NULL;
}

int titan_ckpt_model_get(void *ctx, const struct titan_param *p, float *out)
{
	struct titan_ckpt_model_src *s = ctx;
	const struct titan_ckpt_info *in = titan_ckpt_file_info(s->f);
	const struct titan_ckpt_tensor_info *t = titan_ckpt_find(s->f, TITAN_CKPT_MODEL, p->name);

	if (!t)
		return titan_error(TITAN_E_INVALID, "'%s': model/%s is missing", in->path, p->name);
	if (t->ndim != p->fndim || memcmp(t->shape, p->fshape, (size_t)p->fndim * sizeof(*p->fshape)))
		return titan_error(TITAN_E_INVALID, "'%s': model/%s: the shape disagrees with the "
				   "dims in the file's attributes", in->path, p->name);
	if (s->on_tensor)
		s->on_tensor(s->ctx, (uint64_t)t->numel * (uint64_t)titan_ckpt_dtype_size(t->dtype));
	return titan_ckpt_read(s->f, t, 0, p->shape[0], out);
}

int titan_hf_export_ckpt(const char *path, const char *outdir, const struct titan_hf_export_opts *o)
{
	struct titan_ckpt_model_src s = {0};
	int rc = titan_ckpt_model_open(path, &s);

	if (rc == 0)
		rc = titan_hf_export(outdir, &s.table, titan_ckpt_model_get, &s, o);
	titan_ckpt_model_close(&s);
	return rc;
}

int titan_hf_write_ckpt(const struct titan_hf_model *m, const char *out, enum titan_ckpt_dtype dtype,
			bool expert_bias, titan_ckpt_tensor_fn on_tensor, void *ctx)
{
	const struct titan_param_table *t = titan_hf_table(m);
	struct titan_model_dims d = t->dims;
	struct titan_ckpt_writer *w = NULL;
	char *config = NULL;
	float *buf = NULL;
	int64_t biggest = 1;
	int rc;

	if (!expert_bias) /* a MoE without load balancing */
		d.moe.load_balance_coeff = NAN;

	for (int i = 0; i < t->n; i++)
		if (t->params[i].numel > biggest)
			biggest = t->params[i].numel;
	if (!(config = titan_ckpt_config_for_dims(&d)))
		return titan_error_last()->code;
	if (!(buf = malloc((size_t)biggest * sizeof(float)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	if ((rc = titan_ckpt_writer_open(out, &d, config, &w)) < 0)
		goto done;
	for (int i = 0; i < t->n && rc == 0; i++) {
		const struct titan_param *p = &t->params[i];

		if (!expert_bias && p->role == TITAN_PARAM_MOE_EXPERT_BIAS)
			continue;
		if (on_tensor)
			on_tensor(ctx, (uint64_t)p->numel * (uint64_t)titan_ckpt_dtype_size(dtype));
		if ((rc = titan_hf_read(m, p, buf)) == 0)
			rc = titan_ckpt_writer_tensor(w, TITAN_CKPT_MODEL, p->name, p->fndim, p->fshape,
						      buf, dtype); /* the experts 3-d */
	}
	rc = titan_ckpt_writer_close(w, rc);
done:
	free(buf);
	free(config);
	return rc;
}
