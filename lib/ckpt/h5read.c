/*
 * h5read.c — reading titan checkpoints (layout in lib/titan/ckpt.h): the
 * format, version, dims and training state are checked, every link and
 * dataset of the file must keep its data inside it, unfiltered (no data
 * from other files, nothing inflated: docs/conventions.md), and every
 * tensor's type, shape, size and place in the file are validated at open,
 * so a load fails before it changes anything the caller holds; tensors are
 * then read as float32, whole or by rows of dim 0 (a dim-0 shard), their
 * stored bytes checked against the crc32c attribute when read whole (a
 * shard's CRC term kept for titan_ckpt_load_dist).
 */
#include "ckpt_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if TITAN_HAVE_HDF5

/* ------------------------------------------------------------ reader */

struct titan_ckpt_file {
	struct titan_ckpt_info info;
	hid_t file;
	hid_t lapl;          /* link access: external links are never followed */
	size_t cap;
	uint32_t *sums;      /* per tensor: the XOR of the CRC terms of its reads */
};

/* Does attribute `a` hold exactly one value?  (H5Aread writes every element
 * of its dataspace: an array attribute would overrun the one we read.) */
static bool one_value(hid_t a)
{
	hid_t s = H5Aget_space(a);
	hssize_t n = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;

	if (s >= 0)
		H5Sclose(s);
	return n == 1;
}

/* Attribute `name` of `loc` into *out with memory type `mt`; 1 when
 * absent (nothing written), 0 on success, negative on a bad attribute
 * (-2 the wrong type, -4 not a single value). */
static int attr_read(hid_t loc, const char *name, hid_t mt, H5T_class_t want, void *out)
{
	hid_t a, t;
	H5T_class_t c;
	int rc = 0;

	if (H5Aexists(loc, name) <= 0)
		return 1;
	if ((a = H5Aopen(loc, name, H5P_DEFAULT)) < 0)
		return -1;
	t = H5Aget_type(a);
	c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
	if (c != want && !(want == H5T_FLOAT && c == H5T_INTEGER))
		rc = -2;
	else if (!one_value(a))
		rc = -4;
	else if (H5Aread(a, mt, out) < 0)
		rc = -1;
	if (t >= 0)
		H5Tclose(t);
	H5Aclose(a);
	return rc;
}

/* A string attribute (variable or fixed length) as a malloc'd copy. */
static int attr_read_str(hid_t loc, const char *name, char **out)
{
	hid_t a, t = -1, mt = -1;
	int rc = 0;

	*out = NULL;
	if (H5Aexists(loc, name) <= 0)
		return 1;
	if ((a = H5Aopen(loc, name, H5P_DEFAULT)) < 0)
		return -1;
	if ((t = H5Aget_type(a)) < 0 || H5Tget_class(t) != H5T_STRING) {
		rc = -2;
	} else if (!one_value(a)) {
		rc = -4;
	} else if (H5Tis_variable_str(t) > 0) {
		char *v = NULL;

		mt = H5Tcopy(H5T_C_S1);
		H5Tset_size(mt, H5T_VARIABLE);
		H5Tset_cset(mt, H5Tget_cset(t));
		if (H5Aread(a, mt, &v) < 0)
			rc = -1;
		else
			*out = strdup(v ? v : "");
		H5free_memory(v);
	} else {
		size_t n = H5Tget_size(t);

		if ((*out = calloc(1, n + 1)) && H5Aread(a, t, *out) < 0)
			rc = -1;
	}
	if (rc == 0 && !*out)
		rc = -3;
	if (mt >= 0)
		H5Tclose(mt);
	if (t >= 0)
		H5Tclose(t);
	H5Aclose(a);
	return rc;
}

static int bad_attr(const struct titan_ckpt_file *f, const char *obj, const char *name, int r)
{
	if (r == -3)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if (r == 1)
		return titan_error(TITAN_E_FORMAT, "'%s': %s has no attribute '%s' (damaged or not "
				   "written by titan)", f->info.path, obj, name);
	if (r == -2)
		return titan_error(TITAN_E_FORMAT, "'%s': %s: attribute '%s' has the wrong type",
				   f->info.path, obj, name);
	if (r == -4)
		return titan_error(TITAN_E_FORMAT, "'%s': %s: attribute '%s' is not a single value",
				   f->info.path, obj, name);
	return h5fail(TITAN_E_FORMAT, "'%s': %s: cannot read attribute '%s'", f->info.path, obj,
		      name);
}

#define NEED_I64(f, loc, obj, name, dst) \
	do { int r_ = attr_read(loc, name, H5T_NATIVE_INT64, H5T_INTEGER, dst); \
	     if (r_ != 0) return bad_attr(f, obj, name, r_); } while (0)
#define NEED_U64(f, loc, obj, name, dst) \
	do { int r_ = attr_read(loc, name, H5T_NATIVE_UINT64, H5T_INTEGER, dst); \
	     if (r_ != 0) return bad_attr(f, obj, name, r_); } while (0)
#define NEED_F64(f, loc, obj, name, dst) \
	do { int r_ = attr_read(loc, name, H5T_NATIVE_DOUBLE, H5T_FLOAT, dst); \
	     if (r_ != 0) return bad_attr(f, obj, name, r_); } while (0)

/* The architecture as stored must be one a model can have: a NaN norm_eps
 * or an infinite rope_theta would otherwise travel silently into exports
 * (config.json drops non-finite numbers) and into training.  The rule is
 * titan_ckpt_dims_check's, the one HF folders and titan-generate obey. */
static int check_dims(const struct titan_ckpt_file *f)
{
	char src[4200];

	snprintf(src, sizeof(src), "'%s'", f->info.path);
	return titan_ckpt_dims_check(src, &f->info.dims, false);
}

/* write_moe's attributes, when the file has moe_num_experts (else a
 * dense model: the files before MoE, or none) */
static int read_moe(struct titan_ckpt_file *f)
{
	struct titan_moe_dims *m = &f->info.dims.moe;
	char *s = NULL;
	int64_t v;
	int r;

	if ((r = attr_read(f->file, "moe_num_experts", H5T_NATIVE_INT64, H5T_INTEGER,
			   &m->num_experts)) < 0)
		return bad_attr(f, "/", "moe_num_experts", r);
	if (r == 1) {
		m->num_experts = 0;
		return 0;
	}
	NEED_I64(f, f->file, "/", "moe_num_shared_experts", &m->num_shared_experts);
	NEED_I64(f, f->file, "/", "moe_top_k", &m->top_k);
	NEED_I64(f, f->file, "/", "moe_inter_dim", &m->inter_dim);
	NEED_I64(f, f->file, "/", "n_dense_layers", &m->n_dense_layers);
	NEED_I64(f, f->file, "/", "interleave_moe_layer_step", &m->interleave_step);
	NEED_I64(f, f->file, "/", "moe_route_norm", &v);
	m->route_norm = v != 0;
	NEED_I64(f, f->file, "/", "moe_score_before_experts", &v);
	m->score_before_experts = v != 0;
	NEED_F64(f, f->file, "/", "moe_route_scale", &m->route_scale);
	NEED_F64(f, f->file, "/", "moe_load_balance_coeff", &m->load_balance_coeff);
	if ((r = attr_read_str(f->file, "moe_score_func", &s)) != 0)
		return bad_attr(f, "/", "moe_score_func", r);
	m->softmax = !strcmp(s, "softmax");
	if (!m->softmax && strcmp(s, "sigmoid"))
		r = titan_error(TITAN_E_FORMAT, "'%s': moe_score_func '%.64s' is neither softmax "
				"nor sigmoid", f->info.path, s);
	free(s);
	return r;
}

/* write_mla's attributes, when the file has kv_lora_rank (else no MLA) */
static int read_mla(struct titan_ckpt_file *f)
{
	struct titan_mla_dims *m = &f->info.dims.mla;
	int r;

	if ((r = attr_read(f->file, "kv_lora_rank", H5T_NATIVE_INT64, H5T_INTEGER,
			   &m->kv_lora_rank)) < 0)
		return bad_attr(f, "/", "kv_lora_rank", r);
	if (r == 1) {
		m->kv_lora_rank = 0;
		return 0;
	}
	NEED_I64(f, f->file, "/", "q_lora_rank", &m->q_lora_rank);
	NEED_I64(f, f->file, "/", "qk_nope_head_dim", &m->qk_nope_head_dim);
	NEED_I64(f, f->file, "/", "qk_rope_head_dim", &m->qk_rope_head_dim);
	NEED_I64(f, f->file, "/", "v_head_dim", &m->v_head_dim);
	NEED_I64(f, f->file, "/", "original_seq_len", &m->original_seq_len);
	NEED_F64(f, f->file, "/", "rope_factor", &m->rope_factor);
	NEED_F64(f, f->file, "/", "beta_fast", &m->beta_fast);
	NEED_F64(f, f->file, "/", "beta_slow", &m->beta_slow);
	NEED_F64(f, f->file, "/", "mscale", &m->mscale);
	return 0;
}

static int read_header(struct titan_ckpt_file *f)
{
	struct titan_ckpt_info *in = &f->info;
	struct titan_model_dims *d = &in->dims;
	char *s = NULL;
	int64_t v;
	int r;

	if ((r = attr_read_str(f->file, "format", &s)) == 1)
		return titan_error(TITAN_E_FORMAT, "'%s' is not a titan checkpoint (no 'format' "
				   "attribute)", in->path);
	if (r != 0)
		return bad_attr(f, "/", "format", r);
	r = strcmp(s, TITAN_CKPT_FORMAT);
	if (r != 0)
		titan_error(TITAN_E_FORMAT, "'%s' is not a titan checkpoint (format '%s', expected '"
			    TITAN_CKPT_FORMAT "')", in->path, s);
	free(s);
	if (r != 0)
		return TITAN_E_FORMAT;
	NEED_I64(f, f->file, "/", "format_version", &in->format_version);
	if (in->format_version > TITAN_CKPT_VERSION)
		return titan_error(TITAN_E_FORMAT, "'%s': format version %lld is newer than this "
				   "titan reads (%d): upgrade titan", in->path,
				   (long long)in->format_version, TITAN_CKPT_VERSION);
	if (in->format_version < 1)
		return titan_error(TITAN_E_FORMAT, "'%s': bad format version %lld", in->path,
				   (long long)in->format_version);
	if ((r = attr_read_str(f->file, "titan_version", &in->titan_version)) < 0 ||
	    (r == 1 && !(in->titan_version = strdup(""))))
		return bad_attr(f, "/", "titan_version", r == 1 ? -3 : r);
	if ((r = attr_read_str(f->file, "config", &in->config_yaml)) < 0 ||
	    (r == 1 && !(in->config_yaml = strdup(""))))
		return bad_attr(f, "/", "config", r == 1 ? -3 : r);
	if ((r = attr_read_str(f->file, "flavor", &s)) != 0)
		return bad_attr(f, "/", "flavor", r);
	snprintf(d->flavor, sizeof(d->flavor), "%s", s);
	free(s);
	if ((r = attr_read_str(f->file, "model_name", &s)) < 0)
		return bad_attr(f, "/", "model_name", r);
	d->family = TITAN_MODEL_NAME_LLAMA3;
	if (r == 0) {
		bool known = !strcmp(s, "qwen3") || !strcmp(s, "llama3") ||
			     !strcmp(s, "deepseek_v3") || !strcmp(s, "llama4");

		d->family = !strcmp(s, "qwen3") ? TITAN_MODEL_NAME_QWEN3 :
			    !strcmp(s, "deepseek_v3") ? TITAN_MODEL_NAME_DEEPSEEK_V3 :
			    !strcmp(s, "llama4") ? TITAN_MODEL_NAME_LLAMA4 :
			    TITAN_MODEL_NAME_LLAMA3;
		if (!known)
			r = titan_error(TITAN_E_FORMAT, "'%s': model_name '%.64s' is no model family "
					"titan knows (llama3, qwen3, deepseek_v3, llama4)", in->path, s);
		free(s);
		if (r < 0)
			return r;
	}
	if ((r = attr_read(f->file, "qk_norm", H5T_NATIVE_INT64, H5T_INTEGER, &v)) < 0)
		return bad_attr(f, "/", "qk_norm", r);
	d->qk_norm = r == 0 && v != 0;
	NEED_I64(f, f->file, "/", "dim", &d->dim);
	NEED_I64(f, f->file, "/", "n_layers", &d->n_layers);
	NEED_I64(f, f->file, "/", "n_heads", &d->n_heads);
	NEED_I64(f, f->file, "/", "n_kv_heads", &d->n_kv_heads);
	NEED_I64(f, f->file, "/", "head_dim", &d->head_dim);
	NEED_I64(f, f->file, "/", "ffn_hidden", &d->ffn_hidden);
	NEED_I64(f, f->file, "/", "vocab_size", &d->vocab_size);
	NEED_I64(f, f->file, "/", "multiple_of", &d->multiple_of);
	NEED_I64(f, f->file, "/", "rope_original_max_position", &d->rope_original_max_position);
	NEED_I64(f, f->file, "/", "tie_word_embeddings", &v);
	d->tied = v != 0;
	NEED_I64(f, f->file, "/", "rope_scaling", &v);
	d->rope_scaling = v != 0;
	NEED_F64(f, f->file, "/", "ffn_dim_multiplier", &d->ffn_dim_multiplier);
	NEED_F64(f, f->file, "/", "norm_eps", &d->norm_eps);
	NEED_F64(f, f->file, "/", "rope_theta", &d->rope_theta);
	NEED_F64(f, f->file, "/", "rope_scaling_factor", &d->rope_scaling_factor);
	NEED_F64(f, f->file, "/", "rope_low_freq_factor", &d->rope_low_freq_factor);
	NEED_F64(f, f->file, "/", "rope_high_freq_factor", &d->rope_high_freq_factor);
	if ((r = read_mla(f)) < 0)
		return r;
	if ((r = read_moe(f)) < 0)
		return r;
	/* Llama 4's NoPE layers (absent: none) */
	if ((r = attr_read(f->file, "every_n_layers_nope", H5T_NATIVE_INT64, H5T_INTEGER,
			   &d->nope_every)) < 0)
		return bad_attr(f, "/", "every_n_layers_nope", r);
	if (r == 1)
		d->nope_every = 0;
	else
		NEED_I64(f, f->file, "/", "fixed_attn_block_size", &d->attn_chunk);
	if (d->nope_every < 0 || d->nope_every == 1 || (d->nope_every > 0 && d->attn_chunk < 1))
		return titan_error(TITAN_E_FORMAT, "'%s': every_n_layers_nope %lld, "
				   "fixed_attn_block_size %lld: need 0 or > 1, and a block of at "
				   "least 1", in->path, (long long)d->nope_every,
				   (long long)d->attn_chunk);
	return check_dims(f);
}

static bool exists(hid_t loc, const char *path)
{
	return H5Lexists(loc, path, H5P_DEFAULT) > 0;
}

/* Open group `path` for attribute reads, or fail naming it. */
static hid_t open_group(struct titan_ckpt_file *f, const char *path)
{
	hid_t g = H5Gopen2(f->file, path, H5P_DEFAULT);

	if (g < 0)
		h5fail(TITAN_E_FORMAT, "'%s': /%s is not a group", f->info.path, path);
	return g;
}

static int read_state_group(struct titan_ckpt_file *f, const char *path)
{
	struct titan_ckpt_train_state *ts = &f->info.train;
	char obj[64];
	hid_t g;
	int rc = 0;

	if ((g = open_group(f, path)) < 0)
		return TITAN_E_FORMAT;
#define ATTR(loc, obj, name, mt, dst) \
	do { int r_ = attr_read(loc, name, mt, H5T_INTEGER, dst); \
	     if (r_) { rc = bad_attr(f, obj, name, r_); goto done; } } while (0)
	if (!strcmp(path, "train_state")) {
		ATTR(g, "/train_state", "step", H5T_NATIVE_INT64, &ts->step);
		ATTR(g, "/train_state", "ntokens_seen", H5T_NATIVE_INT64, &ts->ntokens_seen);
	} else if (!strcmp(path, "lr_scheduler")) {
		ATTR(g, "/lr_scheduler", "last_epoch", H5T_NATIVE_INT64, &ts->lr_last_epoch);
	} else if (!strcmp(path, "optimizer")) {
		ATTR(g, "/optimizer", "step", H5T_NATIVE_INT64, &ts->optim_step);
	} else if (!strcmp(path, "rng")) {
		ATTR(g, "/rng", "seed", H5T_NATIVE_UINT64, &ts->rng.seed);
		ATTR(g, "/rng", "stream", H5T_NATIVE_UINT64, &ts->rng.stream);
		ATTR(g, "/rng", "offset", H5T_NATIVE_UINT64, &ts->rng.offset);
	} else { /* dataloader */
		ATTR(g, "/dataloader", "world_size", H5T_NATIVE_INT64, &ts->dp_world_size);
		if (ts->dp_world_size < 1 || ts->dp_world_size > (1 << 24)) {
			rc = titan_error(TITAN_E_FORMAT, "'%s': /dataloader: bad world_size %lld",
					 f->info.path, (long long)ts->dp_world_size);
			goto done;
		}
		if (!(ts->loader = calloc((size_t)ts->dp_world_size, sizeof(*ts->loader)))) {
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
			goto done;
		}
		for (int64_t r = 0; r < ts->dp_world_size && rc == 0; r++) {
			struct titan_loader_state *l = &ts->loader[r];
			static const char *const names[] = {"epoch", "position", "n_windows",
							    "seq_len", "shuffle", "seed"};
			uint64_t *dst[] = {&l->epoch, &l->position, &l->n_windows, &l->seq_len,
					   &l->shuffle, &l->seed};
			hid_t h;

			snprintf(obj, sizeof(obj), "dataloader/dp_rank_%lld", (long long)r);
			if (!exists(f->file, obj)) {
				rc = titan_error(TITAN_E_FORMAT, "'%s': /dataloader has world_size "
						 "%lld but no /%s", f->info.path,
						 (long long)ts->dp_world_size, obj);
				goto done;
			}
			if ((h = open_group(f, obj)) < 0) {
				rc = TITAN_E_FORMAT;
				goto done;
			}
			for (int i = 0; i < 6 && rc == 0; i++) {
				int r2 = attr_read(h, names[i], H5T_NATIVE_UINT64, H5T_INTEGER, dst[i]);

				if (r2)
					rc = bad_attr(f, obj, names[i], r2);
			}
			H5Gclose(h);
		}
	}
#undef ATTR
	/* counts of steps and tokens: a negative one would resume training
	 * before its start (a step of -5 runs step -4 at a negative rate) */
	{
		const struct { const char *group, *name; int64_t v; } counts[] = {
			{"train_state", "step", ts->step},
			{"train_state", "ntokens_seen", ts->ntokens_seen},
			{"lr_scheduler", "last_epoch", ts->lr_last_epoch},
			{"optimizer", "step", ts->optim_step},
		};

		for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]) && rc == 0; i++)
			if (!strcmp(path, counts[i].group) && counts[i].v < 0)
				rc = titan_error(TITAN_E_FORMAT, "'%s': /%s: attribute '%s' is %lld "
						 "(must not be negative)", f->info.path, path,
						 counts[i].name, (long long)counts[i].v);
	}
done:
	H5Gclose(g);
	return rc;
}

struct names {
	char **v;
	size_t n, cap;
};

static herr_t name_cb(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
	struct names *ns = data;
	char **v;

	(void)g;
	(void)info;
	if (ns->n == ns->cap) {
		ns->cap = ns->cap ? 2 * ns->cap : 64;
		if (!(v = realloc(ns->v, ns->cap * sizeof(*v))))
			return -1;
		ns->v = v;
	}
	if (!(ns->v[ns->n] = strdup(name)))
		return -1;
	ns->n++;
	return 0;
}

static int add_tensor(struct titan_ckpt_file *f, enum titan_ckpt_part part, hid_t g,
		      const char *name)
{
	struct titan_ckpt_info *in = &f->info;
	struct titan_ckpt_tensor_info *t;
	const char *pn = titan_ckpt_part_name(part);
	hsize_t dims[4];
	hid_t d = -1, ty = -1, sp = -1, o;
	int rc = 0, nd, esz;
	haddr_t off;

	if (in->n_tensors == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 256;
		void *p = realloc(in->tensors, cap * sizeof(*in->tensors));
		void *q = p ? realloc(f->sums, cap * sizeof(*f->sums)) : NULL;

		if (p)
			in->tensors = p;
		if (q)
			f->sums = q;
		if (!p || !q)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		f->cap = cap;
	}
	f->sums[in->n_tensors] = 0;
	t = &in->tensors[in->n_tensors];
	memset(t, 0, sizeof(*t));
	t->part = part;
	if (strlen(name) >= sizeof(t->name))
		return titan_error(TITAN_E_FORMAT, "'%s': %s/%.40s...: name too long", in->path, pn, name);
	strcpy(t->name, name);
	if ((o = H5Oopen(g, name, f->lapl)) < 0)
		return h5fail(TITAN_E_FORMAT, "'%s': cannot open %s/%s", in->path, pn, name);
	if (H5Iget_type(o) != H5I_DATASET) {
		H5Oclose(o);
		return titan_error(TITAN_E_FORMAT, "'%s': %s/%s is not a dataset", in->path, pn, name);
	}
	d = o;
	ty = H5Dget_type(d);
	sp = H5Dget_space(d);
	nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
	if (ty < 0 || nd < 0 || nd > 4 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
		rc = h5fail(TITAN_E_FORMAT, "'%s': %s/%s: bad dataspace (%d dims; titan reads 0 to 4)",
			    in->path, pn, name, nd);
		goto done;
	}
	esz = (int)H5Tget_size(ty);
	if (H5Tget_class(ty) == H5T_FLOAT && esz == 4) {
		t->dtype = TITAN_CKPT_FLOAT32;
	} else if (H5Tget_class(ty) == H5T_FLOAT && esz == 2) {
		size_t spos, epos, esize, mpos, msize;

		H5Tget_fields(ty, &spos, &epos, &esize, &mpos, &msize);
		if (esize == 8 && msize == 7) {
			t->dtype = TITAN_CKPT_BFLOAT16;
		} else if (esize == 5 && msize == 10) {
			t->dtype = TITAN_CKPT_FLOAT16;
		} else {
			rc = titan_error(TITAN_E_FORMAT, "'%s': %s/%s: a 16-bit float with %zu exponent "
					 "and %zu mantissa bits is neither bfloat16 nor float16",
					 in->path, pn, name, esize, msize);
			goto done;
		}
	} else {
		rc = titan_error(TITAN_E_FORMAT, "'%s': %s/%s: element type of class %d and %d bytes "
				 "(titan stores float32, bfloat16 or float16)", in->path, pn, name,
				 (int)H5Tget_class(ty), esz);
		goto done;
	}
	t->ndim = nd;
	t->numel = 1;
	for (int i = 0; i < nd; i++) {
		/* HDF5 takes any extent (a chunked dataset stores none up front):
		 * the element count must fit in int64 with its bytes */
		if (dims[i] && (uint64_t)t->numel > (uint64_t)INT64_MAX / (uint64_t)esz / dims[i]) {
			rc = titan_error(TITAN_E_FORMAT, "'%s': %s/%s: dimension %d of %llu makes more "
					 "elements than a file can hold (damaged file?)", in->path, pn,
					 name, i, (unsigned long long)dims[i]);
			goto done;
		}
		t->shape[i] = (int64_t)dims[i];
		t->numel *= t->shape[i];
	}
	t->storage_bytes = H5Dget_storage_size(d);
	/* a contiguous dataset must be all there: written whole, inside the file */
	if (t->numel > 0 && t->storage_bytes != (uint64_t)t->numel * (uint64_t)esz) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': %s/%s holds %llu bytes, expected %llu "
				 "(damaged or incomplete file)", in->path, pn, name,
				 (unsigned long long)t->storage_bytes,
				 (unsigned long long)t->numel * (unsigned long long)esz);
		goto done;
	}
	switch (attr_read(d, TITAN_CKPT_CRC_ATTR, H5T_NATIVE_UINT32, H5T_INTEGER, &t->crc32c)) {
	case 0: t->has_crc32c = true; break;
	case 1: break; /* an older titan's or another writer's file */
	default:
		rc = titan_error(TITAN_E_FORMAT, "'%s': %s/%s: bad attribute '" TITAN_CKPT_CRC_ATTR
				 "' (not one integer)", in->path, pn, name);
		H5Eclear2(H5E_DEFAULT);
		goto done;
	}
	off = H5Dget_offset(d);
	/* a chunked dataset has no one offset: its chunks (unfiltered, so as
	 * large as the data) cannot add up to more than the file */
	if (off == HADDR_UNDEF && t->storage_bytes > in->file_size) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': %s/%s holds %llu bytes, more than the "
				 "file (%llu bytes): damaged", in->path, pn, name,
				 (unsigned long long)t->storage_bytes,
				 (unsigned long long)in->file_size);
		goto done;
	}
	if (t->numel > 0 && off != HADDR_UNDEF && off + t->storage_bytes > in->file_size) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': %s/%s ends at byte %llu, past the end of the "
				 "file (%llu bytes): truncated", in->path, pn, name,
				 (unsigned long long)(off + t->storage_bytes),
				 (unsigned long long)in->file_size);
		goto done;
	}
	in->n_tensors++;
done:
	if (sp >= 0)
		H5Sclose(sp);
	if (ty >= 0)
		H5Tclose(ty);
	H5Dclose(d);
	return rc;
}

static int read_part(struct titan_ckpt_file *f, enum titan_ckpt_part part)
{
	const char *pn = titan_ckpt_part_name(part);
	struct names ns = {0};
	hsize_t idx = 0;
	hid_t g;
	int rc = 0;

	if (!exists(f->file, "optimizer") && part != TITAN_CKPT_MODEL)
		return 0;
	if (!exists(f->file, pn)) {
		if (part == TITAN_CKPT_MODEL)
			return titan_error(TITAN_E_FORMAT, "'%s' has no /model group", f->info.path);
		return titan_error(TITAN_E_FORMAT, "'%s' has /optimizer but no /%s", f->info.path, pn);
	}
	if ((g = open_group(f, pn)) < 0)
		return TITAN_E_FORMAT;
	/* creation order when the file tracks it (titan's do), else by name */
	if (H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, name_cb, &ns) < 0) {
		H5Eclear2(H5E_DEFAULT);
		for (size_t i = 0; i < ns.n; i++)
			free(ns.v[i]);
		ns.n = 0;
		idx = 0;
		if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, name_cb, &ns) < 0)
			rc = h5fail(TITAN_E_FORMAT, "'%s': cannot list /%s", f->info.path, pn);
	}
	for (size_t i = 0; i < ns.n; i++) {
		if (rc == 0)
			rc = add_tensor(f, part, g, ns.v[i]);
		free(ns.v[i]);
	}
	free(ns.v);
	H5Gclose(g);
	return rc;
}

/* ------------------------------------------- nothing from outside the file
 *
 * A checkpoint is a file from someone else (a shared model), and HDF5 can
 * make one read other files: an external link or a soft link names another
 * object (an external one in another file), a dataset with external
 * storage keeps its bytes in any local file ("/etc/passwd", 0, 256), a
 * virtual dataset maps others' data, and a filter (gzip) makes a small
 * chunk decompress to gigabytes.  titan writes none of these: hard links,
 * contiguous datasets without filters.  So every link and dataset of the
 * file is checked at open, before any data is read, and the file refused
 * naming the first that is not plain: contiguous or chunked (h5py's
 * choice for some), no filter, no external storage, each chunk no larger
 * than its dataset (a read buffers one chunk). */

static const char *filter_name(H5Z_filter_t id)
{
	switch (id) {
	case H5Z_FILTER_DEFLATE: return "deflate (gzip)";
	case H5Z_FILTER_SHUFFLE: return "shuffle";
	case H5Z_FILTER_FLETCHER32: return "fletcher32";
	case H5Z_FILTER_SZIP: return "szip";
	case H5Z_FILTER_NBIT: return "nbit";
	case H5Z_FILTER_SCALEOFFSET: return "scaleoffset";
	case 32000: return "lzf";
	case 32001: return "blosc";
	case 32004: return "lz4";
	case 32008: return "bitshuffle";
	case 32015: return "zstd";
	default: return "unknown";
	}
}

static int check_dataset(struct titan_ckpt_file *f, hid_t d, const char *name)
{
	const char *p = f->info.path;
	hid_t dcpl = H5Dget_create_plist(d), sp = -1;
	hsize_t dims[H5S_MAX_RANK], chunk[H5S_MAX_RANK];
	H5D_layout_t layout;
	int rc = 0, nf, nd, nc;

	if (dcpl < 0)
		return h5fail(TITAN_E_FORMAT, "'%s': /%s: cannot read its creation properties", p,
			      name);
	layout = H5Pget_layout(dcpl);
	if (layout == H5D_VIRTUAL) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': /%s is a virtual dataset (its data lies in "
				 "other datasets or files): titan reads only data stored in the "
				 "checkpoint itself", p, name);
	} else if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': /%s has %s layout (titan reads contiguous "
				 "or chunked datasets)", p, name,
				 layout == H5D_COMPACT ? "compact" : "an unknown");
	} else if (H5Pget_external_count(dcpl) != 0) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': /%s has external storage (its data lies in "
				 "another file): titan reads only data stored in the checkpoint "
				 "itself", p, name);
	} else if ((nf = H5Pget_nfilters(dcpl)) != 0) {
		unsigned flags = 0, conf = 0;
		size_t ncd = 0;
		H5Z_filter_t id = nf > 0 ? H5Pget_filter2(dcpl, 0, &flags, &ncd, NULL, 0, NULL,
							   &conf) : -1;

		rc = titan_error(TITAN_E_FORMAT, "'%s': /%s is stored through HDF5 filter %d (%s): "
				 "titan writes no filters and reads none (rewrite the file with "
				 "'h5repack -f NONE')", p, name, (int)id, filter_name(id));
	} else if (layout == H5D_CHUNKED) {
		nc = H5Pget_chunk(dcpl, H5S_MAX_RANK, chunk);
		sp = H5Dget_space(d);
		nd = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, NULL) : -1;
		if (nc < 0 || nd < 0 || nc != nd) {
			rc = h5fail(TITAN_E_FORMAT, "'%s': /%s: bad chunk dimensions", p, name);
		} else {
			for (int i = 0; i < nd && rc == 0; i++)
				if (chunk[i] > dims[i] && !(dims[i] == 0 && chunk[i] == 1))
					rc = titan_error(TITAN_E_FORMAT, "'%s': /%s: chunk dimension "
							 "%d of %llu exceeds the dataset's %llu", p,
							 name, i, (unsigned long long)chunk[i],
							 (unsigned long long)dims[i]);
		}
	}
	if (sp >= 0)
		H5Sclose(sp);
	H5Pclose(dcpl);
	return rc;
}

struct scan {
	struct titan_ckpt_file *f;
	int rc;
};

static herr_t scan_cb(hid_t root, const char *name, const H5L_info_t *info, void *data)
{
	struct scan *sc = data;
	struct titan_ckpt_file *f = sc->f;
	hid_t o;

	if (info->type != H5L_TYPE_HARD) {
		const char *what = info->type == H5L_TYPE_SOFT ? "a soft link" :
				   info->type == H5L_TYPE_EXTERNAL ? "an external link (to another "
				   "file)" : "a user-defined link";

		sc->rc = titan_error(TITAN_E_FORMAT, "'%s': /%s is %s: titan reads only objects "
				     "stored in the checkpoint itself (hard links)", f->info.path,
				     name, what);
		return -1;
	}
	if ((o = H5Oopen(root, name, f->lapl)) < 0) {
		sc->rc = h5fail(TITAN_E_FORMAT, "'%s': cannot open /%s", f->info.path, name);
		return -1;
	}
	if (H5Iget_type(o) == H5I_DATASET)
		sc->rc = check_dataset(f, o, name);
	H5Oclose(o);
	return sc->rc < 0 ? -1 : 0;
}

/* Never follow an external link, whatever slips past the scan. */
static herr_t deny_elink(const char *parent_file, const char *parent_group,
			 const char *child_file, const char *child_object, unsigned *acc_flags,
			 hid_t fapl, void *data)
{
	(void)parent_file, (void)parent_group, (void)child_file, (void)child_object;
	(void)acc_flags, (void)fapl, (void)data;
	return -1;
}

static int scan_file(struct titan_ckpt_file *f)
{
	struct scan sc = {f, 0};
	hid_t root;
	herr_t r;

	if ((root = H5Gopen2(f->file, "/", H5P_DEFAULT)) < 0)
		return h5fail(TITAN_E_FORMAT, "'%s': cannot open the root group", f->info.path);
	r = H5Lvisit(root, H5_INDEX_NAME, H5_ITER_INC, scan_cb, &sc);
	H5Gclose(root);
	if (sc.rc < 0)
		return sc.rc;
	if (r < 0)
		return h5fail(TITAN_E_FORMAT, "'%s': cannot list its objects (damaged file?)",
			      f->info.path);
	return 0;
}

int titan_ckpt_open(const char *path, struct titan_ckpt_file **out)
{
	static const char *const groups[] = {"train_state", "lr_scheduler", "optimizer",
					     "dataloader", "rng"};
	struct titan_ckpt_file *f;
	struct titan_ckpt_info *in;
	struct stat st;
	htri_t is;
	int rc = 0;

	quiet();
	*out = NULL;
	if ((rc = titan_check_regular(path)) < 0) /* a FIFO would block HDF5 (issue 21) */
		return rc;
	if (stat(path, &st) != 0)
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return titan_error(TITAN_E_IO, "cannot open '%s': Is a directory", path);
	if (!(f = calloc(1, sizeof(*f))) || !(f->info.path = strdup(path))) {
		free(f);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	in = &f->info;
	in->file_size = (uint64_t)st.st_size;
	in->dims.ffn_dim_multiplier = NAN;
	f->file = f->lapl = -1;
	if ((is = H5Fis_hdf5(path)) <= 0) {
		if (is < 0)
			rc = h5fail(TITAN_E_IO, "cannot open '%s'", path);
		else
			rc = titan_error(TITAN_E_FORMAT, "'%s' is not an HDF5 file", path);
		goto fail;
	}
	if ((f->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
		rc = h5fail(TITAN_E_FORMAT, "cannot open '%s': damaged or truncated HDF5 file", path);
		goto fail;
	}
	if ((f->lapl = H5Pcreate(H5P_LINK_ACCESS)) < 0 ||
	    H5Pset_elink_cb(f->lapl, deny_elink, NULL) < 0) {
		rc = h5fail(TITAN_E_NOMEM, "cannot open '%s'", path);
		goto fail;
	}
	if ((rc = read_header(f)) < 0 || (rc = scan_file(f)) < 0)
		goto fail;
	for (int i = 0; i < 5; i++) {
		bool *has[] = {&in->has_train_state, &in->has_lr_scheduler, &in->has_optimizer,
			       &in->has_dataloader, &in->has_rng};

		if ((*has[i] = exists(f->file, groups[i])) && (rc = read_state_group(f, groups[i])) < 0)
			goto fail;
	}
	for (int p = 0; p < TITAN_CKPT_NPARTS; p++)
		if ((rc = read_part(f, (enum titan_ckpt_part)p)) < 0)
			goto fail;
	*out = f;
	return 0;
fail:
	titan_ckpt_close(f);
	return rc;
}

const struct titan_ckpt_info *titan_ckpt_file_info(const struct titan_ckpt_file *f)
{
	return &f->info;
}

void titan_ckpt_close(struct titan_ckpt_file *f)
{
	if (!f)
		return;
	if (f->file >= 0)
		H5Fclose(f->file);
	if (f->lapl >= 0)
		H5Pclose(f->lapl);
	free(f->info.path);
	free(f->info.titan_version);
	free(f->info.config_yaml);
	free(f->info.train.loader);
	free(f->info.tensors);
	free(f->sums);
	free(f);
}

uint32_t titan_ckpt_file_sum_(const struct titan_ckpt_file *f,
			      const struct titan_ckpt_tensor_info *t)
{
	return f->sums[t - f->info.tensors];
}

static int mismatch(const struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
		    uint32_t crc)
{
	return titan_error(TITAN_E_FORMAT, "'%s': %s/%s: checksum mismatch (crc32c attribute "
			   "%08x, the data's %08x): the file is damaged", f->info.path,
			   titan_ckpt_part_name(t->part), t->name, t->crc32c, crc);
}

int titan_ckpt_read(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
		    int64_t row0, int64_t rows, float *out)
{
	return titan_ckpt_read_window(f, t, row0, rows, 0, t->ndim == 2 ? t->shape[1] : 0, out);
}

int titan_ckpt_read_window(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
			   int64_t row0, int64_t rows, int64_t col0, int64_t cols, float *out)
{
	return titan_ckpt_read_window_dim(f, t, row0, rows, t->ndim == 2 ? 1 : 0, col0, cols, out);
}

int titan_ckpt_read_window_dim(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
			       int64_t row0, int64_t rows, int wdim, int64_t col0, int64_t cols,
			       float *out)
{
	const char *pn = titan_ckpt_part_name(t->part);
	char path[sizeof(t->name) + 32];
	int64_t n0 = t->ndim ? t->shape[0] : 1, row = n0 ? t->numel / n0 : 0;
	int64_t block = t->dtype == TITAN_CKPT_FLOAT32 ? BLOCK_BYTES / 4 : BLOCK_ELEMS;
	int64_t rows_per = row && block / row > 0 ? block / row : 1;
	hsize_t start[4] = {0}, count[4];
	const int64_t full_row = row;
	hid_t d = -1, fs = -1, ms = -1, mt = -1;
	uint16_t *buf = NULL;
	uint32_t sum = 0;
	int rc = 0;

	if (row0 < 0 || rows < 0 || row0 + rows > n0)
		return titan_error(TITAN_E_INVALID, "'%s': %s/%s: rows [%lld, %lld) outside [0, %lld)",
				   f->info.path, pn, t->name, (long long)row0,
				   (long long)(row0 + rows), (long long)n0);
	/* a window [col0, col0 + cols) of dim wdim (TP), seen as a window of
	 * the 2-d [n0·mid, span] tensor for the checksum */
	int64_t mid = 1, inner = 1, span = row;

	if (wdim > 0 && wdim < t->ndim) {
		if (col0 < 0 || cols < 0 || col0 + cols > t->shape[wdim])
			return titan_error(TITAN_E_INVALID, "'%s': %s/%s: [%lld, %lld) of dim %d "
					   "outside [0, %lld)", f->info.path, pn, t->name,
					   (long long)col0, (long long)(col0 + cols), wdim,
					   (long long)t->shape[wdim]);
		for (int i = 1; i < wdim; i++)
			mid *= t->shape[i];
		for (int i = wdim + 1; i < t->ndim; i++)
			inner *= t->shape[i];
		span = t->shape[wdim] * inner;
		row = mid * cols * inner;
	} else {
		wdim = 0;
		col0 = 0;
	}
	if (rows == 0 || row == 0)
		return 0;
	snprintf(path, sizeof(path), "%s/%s", pn, t->name);
	if ((d = H5Dopen2(f->file, path, H5P_DEFAULT)) < 0 || (fs = H5Dget_space(d)) < 0 ||
	    (mt = t->dtype == TITAN_CKPT_FLOAT32 ? H5Tcopy(H5T_NATIVE_FLOAT) : file_type(t->dtype)) < 0) {
		rc = h5fail(TITAN_E_IO, "'%s': cannot open %s", f->info.path, path);
		goto done;
	}
	if (t->dtype != TITAN_CKPT_FLOAT32 &&
	    !(buf = malloc((size_t)(rows_per * row) * sizeof(uint16_t)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory reading %s", path);
		goto done;
	}
	for (int i = 0; i < t->ndim; i++)
		count[i] = (hsize_t)t->shape[i];
	for (int64_t r = row0; r < row0 + rows && rc == 0; r += rows_per) {
		int64_t nr = row0 + rows - r < rows_per ? row0 + rows - r : rows_per;
		hsize_t n = (hsize_t)(nr * row);
		float *dst = out + (r - row0) * row;

		if (t->ndim) {
			start[0] = (hsize_t)r;
			count[0] = (hsize_t)nr;
			if (wdim) {
				start[wdim] = (hsize_t)col0;
				count[wdim] = (hsize_t)cols;
			}
			if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
				rc = -1;
		}
		if (rc == 0 && ((ms = H5Screate_simple(1, &n, NULL)) < 0 ||
				H5Dread(d, mt, ms, fs, H5P_DEFAULT, buf ? (void *)buf : dst) < 0))
			rc = -1;
		if (ms >= 0)
			H5Sclose(ms);
		ms = -1;
		if (rc < 0) {
			rc = h5fail(TITAN_E_IO, "'%s': cannot read %s", f->info.path, path);
			break;
		}
		/* the bytes as stored (little-endian), before any widening */
		sum ^= titan_ckpt_crc_window_(buf ? (const void *)buf : dst, r * mid, nr * mid,
					      col0 * inner, row / mid, span, n0 * mid,
					      buf ? 2 : 4);
		if (buf)
			titan_ckpt_uncast(t->dtype, buf, dst, (size_t)n);
	}
	if (rc == 0) {
		f->sums[t - f->info.tensors] ^= sum;
		if (t->has_crc32c && row0 == 0 && rows == n0 && row == full_row && sum != t->crc32c)
			rc = mismatch(f, t, sum);
	}
done:
	free(buf);
	if (mt >= 0)
		H5Tclose(mt);
	if (fs >= 0)
		H5Sclose(fs);
	if (d >= 0)
		H5Dclose(d);
	return rc;
}

int titan_ckpt_verify(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
		      uint32_t *crc)
{
	const char *pn = titan_ckpt_part_name(t->part);
	const int esz = t->dtype == TITAN_CKPT_FLOAT32 ? 4 : 2;
	const int64_t n0 = t->ndim ? t->shape[0] : 1, row = n0 ? t->numel / n0 : 0;
	const int64_t rows_per = row && BLOCK_BYTES / esz / row > 0 ? BLOCK_BYTES / esz / row : 1;
	char path[sizeof(t->name) + 32];
	hsize_t start[4] = {0}, count[4];
	hid_t d = -1, fs = -1, ms = -1, mt = -1;
	void *buf = NULL;
	uint32_t c = 0;
	int rc = 0;

	if (crc)
		*crc = 0;
	if (t->numel == 0)
		goto check;
	snprintf(path, sizeof(path), "%s/%s", pn, t->name);
	if ((d = H5Dopen2(f->file, path, H5P_DEFAULT)) < 0 || (fs = H5Dget_space(d)) < 0 ||
	    (mt = t->dtype == TITAN_CKPT_FLOAT32 ? H5Tcopy(H5T_NATIVE_FLOAT) : file_type(t->dtype)) < 0) {
		rc = h5fail(TITAN_E_IO, "'%s': cannot open %s", f->info.path, path);
		goto done;
	}
	if (!(buf = malloc((size_t)(rows_per * row * esz)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory reading %s", path);
		goto done;
	}
	for (int i = 0; i < t->ndim; i++)
		count[i] = (hsize_t)t->shape[i];
	for (int64_t r = 0; r < n0; r += rows_per) {
		int64_t nr = n0 - r < rows_per ? n0 - r : rows_per;
		hsize_t n = (hsize_t)(nr * row);

		start[0] = (hsize_t)r;
		count[0] = (hsize_t)nr;
		if ((t->ndim && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0) ||
		    (ms = H5Screate_simple(1, &n, NULL)) < 0 ||
		    H5Dread(d, mt, ms, fs, H5P_DEFAULT, buf) < 0) {
			rc = h5fail(TITAN_E_IO, "'%s': cannot read %s", f->info.path, path);
			break;
		}
		H5Sclose(ms);
		ms = -1;
		c = titan_crc32c(c, buf, (size_t)n * (size_t)esz);
	}
check:
	if (rc == 0 && crc)
		*crc = c;
	if (rc == 0 && t->has_crc32c && c != t->crc32c)
		rc = mismatch(f, t, c);
done:
	free(buf);
	if (ms >= 0)
		H5Sclose(ms);
	if (mt >= 0)
		H5Tclose(mt);
	if (fs >= 0)
		H5Sclose(fs);
	if (d >= 0)
		H5Dclose(d);
	return rc;
}

const struct titan_ckpt_tensor_info *titan_ckpt_find(const struct titan_ckpt_file *f,
						     enum titan_ckpt_part part, const char *name)
{
	for (size_t i = 0; i < f->info.n_tensors; i++)
		if (f->info.tensors[i].part == part && !strcmp(f->info.tensors[i].name, name))
			return &f->info.tensors[i];
	return NULL;
}

#else /* !TITAN_HAVE_HDF5 */

struct titan_ckpt_file { struct titan_ckpt_info info; };

int titan_ckpt_open(const char *path, struct titan_ckpt_file **out)
{
	(void)path;
	*out = NULL;
	return NO_HDF5;
}
const struct titan_ckpt_info *titan_ckpt_file_info(const struct titan_ckpt_file *f)
{
	return &f->info;
}
void titan_ckpt_close(struct titan_ckpt_file *f)
{
	(void)f;
}
const struct titan_ckpt_tensor_info *titan_ckpt_find(const struct titan_ckpt_file *f,
						     enum titan_ckpt_part part, const char *name)
{
	(void)f, (void)part, (void)name;
	return NULL;
}
int titan_ckpt_read(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
		    int64_t row0, int64_t rows, float *out)
{
	(void)f, (void)t, (void)row0, (void)rows, (void)out;
	return NO_HDF5;
}
int titan_ckpt_read_window(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
			   int64_t row0, int64_t rows, int64_t col0, int64_t cols, float *out)
{
	(void)f, (void)t, (void)row0, (void)rows, (void)col0, (void)cols, (void)out;
	return NO_HDF5;
}
int titan_ckpt_read_window_dim(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
			       int64_t row0, int64_t rows, int wdim, int64_t col0, int64_t cols,
			       float *out)
{
	(void)f, (void)t, (void)row0, (void)rows, (void)wdim, (void)col0, (void)cols, (void)out;
	return NO_HDF5;
}
int titan_ckpt_verify(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
		      uint32_t *crc)
{
	(void)f, (void)t;
	if (crc)
		*crc = 0;
	return NO_HDF5;
}
#endif
