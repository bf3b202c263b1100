/*
 * h5.c — the HDF5 writer of the checkpoint (layout in lib/titan/ckpt.h): a
 * streaming writer that commits by rename, whose pieces (open with a
 * given driver, write a tensor's rows with every rank making the same
 * calls, close, commit) also serve the multi-rank writer in dist.c.  The
 * reader is h5read.c; the policy (what a save holds, names against the
 * parameter table, folders) is in checkpoint.c.
 *
 * torchtitan counterpart: the DCP save/load of components/checkpoint.py,
 * with one HDF5 file in place of a .distcp directory.
 */
#include "ckpt_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *titan_ckpt_part_name(enum titan_ckpt_part part)
{
	static const char *const names[] = {"model", "optimizer/exp_avg", "optimizer/exp_avg_sq"};

	return (unsigned)part < TITAN_CKPT_NPARTS ? names[part] : NULL;
}

#if TITAN_HAVE_HDF5
#include <pthread.h>

/* ------------------------------------------------------------ errors */

int64_t titan_ckpt_block_elems_ = (int64_t)1 << 20;
int64_t titan_ckpt_block_bytes_ = (int64_t)64 << 20;

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static void quiet_init(void)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors are reported through titan_error */
}

void quiet(void)
{
	pthread_once(&quiet_once, quiet_init);
}

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
	char *buf = data;

	const char *m;

	if (n != 0 || !e->desc) /* upward: the innermost, most specific entry */
		return 0;
	/* the file drivers' messages carry a time stamp, the file name and
	 * the buffer: keep the system's reason ("... error message = 'No
	 * space left on device', ...") */
	if ((m = strstr(e->desc, "error message = '"))) {
		const char *end = strchr(m + 17, '\'');

		snprintf(buf, 256, "%.*s", end ? (int)(end - m - 17) : 200, m + 17);
	} else {
		snprintf(buf, 256, "%s", e->desc);
		for (char *c = buf; *c; c++) /* one line */
			if (*c == '\n')
				*c = ' ';
	}
	return 0;
}

/* Record an error with the HDF5 library's innermost message appended. */
int h5fail(int code, const char *fmt, ...)
{
	char msg[700], detail[256] = "";
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, detail);
	H5Eclear2(H5E_DEFAULT);
	if (detail[0])
		return titan_error(code, "%s (HDF5: %s)", msg, detail);
	return titan_error(code, "%s", msg);
}

/* A 16-bit float type: bfloat16 (8-bit exponent, 7-bit mantissa, bias
 * 127) or IEEE half (5, 10, 15), derived from float32 in the order
 * docs/platform.md gives (HDF5 1.10 has no predefined half type; h5py
 * builds its float16 the same way, so h5py maps half to numpy float16). */
static hid_t half_type(size_t ebits, size_t mbits, size_t bias)
{
	hid_t t = H5Tcopy(H5T_IEEE_F32LE);

	if (t < 0 || H5Tset_fields(t, 15, mbits, ebits, 0, mbits) < 0 ||
	    H5Tset_precision(t, 16) < 0 || H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, bias) < 0) {
		if (t >= 0)
			H5Tclose(t);
		return -1;
	}
	return t;
}

hid_t file_type(enum titan_ckpt_dtype dt)
{
	switch (dt) {
	case TITAN_CKPT_FLOAT32: return H5Tcopy(H5T_IEEE_F32LE);
	case TITAN_CKPT_FLOAT16: return half_type(5, 10, 15);
	case TITAN_CKPT_BFLOAT16: return half_type(8, 7, 127);
	}
	return -1;
}

/* ------------------------------------------------------------ checksums */

uint32_t titan_ckpt_crc_window_(const void *data, int64_t row0, int64_t rows, int64_t col0,
				int64_t cols, int64_t ncols, int64_t nrows, int esz)
{
	const uint64_t rb = (uint64_t)ncols * (uint64_t)esz, wb = (uint64_t)cols * (uint64_t)esz;
	const uint64_t total = (uint64_t)nrows * rb;
	const unsigned char *p = data;
	uint32_t acc = 0;

	if (rows <= 0 || cols <= 0)
		return 0;
	if (cols == ncols) /* whole rows: one contiguous piece */
		return titan_crc32c_shift(titan_crc32c(0, p, (size_t)((uint64_t)rows * rb)),
					  total - (uint64_t)(row0 + rows) * rb);
	/* a column window: a piece per row, each a row's length after the last */
	for (int64_t r = 0; r < rows; r++)
		acc = titan_crc32c_shift(acc, rb) ^ titan_crc32c(0, p + (uint64_t)r * wb, (size_t)wb);
	return titan_crc32c_shift(acc, total - ((uint64_t)(row0 + rows - 1) * rb +
						(uint64_t)(col0 + cols) * (uint64_t)esz));
}

/* ------------------------------------------------------------ writer */

struct titan_ckpt_writer {
	char *path, *tmp;
	hid_t file, gcpl, dcpl, lcpl;
	hid_t dxpl;          /* tensor writes: H5P_DEFAULT, or collective MPI-IO */
	bool owner;          /* close commits or removes tmp (dist.c: rank 0 does it) */
	/* the datasets made so far ("model/NAME"), each with the CRC32C term of
	 * the elements this process wrote (titan_ckpt_crc_window_); their
	 * crc32c attributes are written when the file is finished */
	char **sum_names;
	uint32_t *sums;
	size_t n_sums, cap_sums;
};

static int attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *v)
{
	hid_t s = H5Screate(H5S_SCALAR), a = -1;
	int ok = s >= 0 && (a = H5Acreate2(loc, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
		 H5Awrite(a, mtype, v) >= 0;

	if (a >= 0)
		H5Aclose(a);
	if (s >= 0)
		H5Sclose(s);
	return ok ? 0 : -1;
}

static int attr_i64(hid_t loc, const char *name, int64_t v)
{
	return attr_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

static int attr_u64(hid_t loc, const char *name, uint64_t v)
{
	return attr_write(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}

static int attr_f64(hid_t loc, const char *name, double v)
{
	return attr_write(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

/* A variable-length UTF-8 string: h5py reads it as str. */
static int attr_str(hid_t loc, const char *name, const char *v)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	int rc = -1;

	if (t >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 && H5Tset_cset(t, H5T_CSET_UTF8) >= 0)
		rc = attr_write(loc, name, t, t, &v);
	if (t >= 0)
		H5Tclose(t);
	return rc;
}

/* Open group `path` ("optimizer/exp_avg"), creating missing levels one by
 * one with our gcpl: an intermediate group that the link creation property
 * makes gets the default gcpl, which stores the creation time (the same
 * state saved twice then differed when a second passed in between). */
static hid_t group(struct titan_ckpt_writer *w, const char *path)
{
	char level[256];

	for (const char *slash = strchr(path, '/'); slash; slash = strchr(slash + 1, '/')) {
		hid_t g;

		snprintf(level, sizeof(level), "%.*s", (int)(slash - path), path);
		if (H5Lexists(w->file, level, H5P_DEFAULT) > 0)
			continue;
		if ((g = H5Gcreate2(w->file, level, w->lcpl, w->gcpl, H5P_DEFAULT)) < 0)
			return g;
		H5Gclose(g);
	}
	if (H5Lexists(w->file, path, H5P_DEFAULT) > 0)
		return H5Gopen2(w->file, path, H5P_DEFAULT);
	return H5Gcreate2(w->file, path, w->lcpl, w->gcpl, H5P_DEFAULT);
}

/* Named int64 and float64 attributes, in order: 0, or -1 at the first
 * that fails. */
struct named_i64 { const char *n; int64_t v; };
struct named_f64 { const char *n; double v; };

static int attrs_i64(hid_t f, const struct named_i64 *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (attr_i64(f, a[i].n, a[i].v) < 0)
			return -1;
	return 0;
}

static int attrs_f64(hid_t f, const struct named_f64 *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (attr_f64(f, a[i].n, a[i].v) < 0)
			return -1;
	return 0;
}

#define NATTR(a) (sizeof(a) / sizeof((a)[0]))

/* A mixture of experts (absent: dense, as the files before it), under
 * the names of its model.* keys: what readers without a config
 * (titan-generate, titan-ckpt-convert) need to build the model. */
static int write_moe(hid_t f, const struct titan_moe_dims *m)
{
	const struct named_i64 ints[] = {
		{"moe_num_experts", m->num_experts},
		{"moe_num_shared_experts", m->num_shared_experts}, {"moe_top_k", m->top_k},
		{"moe_inter_dim", m->inter_dim}, {"n_dense_layers", m->n_dense_layers},
		{"interleave_moe_layer_step", m->interleave_step},
		{"moe_route_norm", m->route_norm},
		{"moe_score_before_experts", m->score_before_experts},
	};

	if (attrs_i64(f, ints, NATTR(ints)) < 0)
		return -1;
	if (attr_str(f, "moe_score_func", m->softmax ? "softmax" : "sigmoid") < 0 ||
	    attr_f64(f, "moe_route_scale", m->route_scale) < 0 ||
	    attr_f64(f, "moe_load_balance_coeff", m->load_balance_coeff) < 0)
		return -1;
	return 0;
}

/* Multi-head latent attention (deepseek_v3; absent: none), under the
 * names of its model.* keys. */
static int write_mla(hid_t f, const struct titan_mla_dims *m)
{
	const struct named_i64 ints[] = {
		{"q_lora_rank", m->q_lora_rank}, {"kv_lora_rank", m->kv_lora_rank},
		{"qk_nope_head_dim", m->qk_nope_head_dim},
		{"qk_rope_head_dim", m->qk_rope_head_dim}, {"v_head_dim", m->v_head_dim},
		{"original_seq_len", m->original_seq_len},
	};
	const struct named_f64 dbls[] = {
		{"rope_factor", m->rope_factor}, {"beta_fast", m->beta_fast},
		{"beta_slow", m->beta_slow}, {"mscale", m->mscale},
	};

	return attrs_i64(f, ints, NATTR(ints)) < 0 ? -1 : attrs_f64(f, dbls, NATTR(dbls));
}

static int write_dims(hid_t f, const struct titan_model_dims *d)
{
	const struct named_i64 ints[] = {
		{"dim", d->dim}, {"n_layers", d->n_layers}, {"n_heads", d->n_heads},
		{"n_kv_heads", d->n_kv_heads}, {"head_dim", d->head_dim},
		{"ffn_hidden", d->ffn_hidden}, {"vocab_size", d->vocab_size},
		{"multiple_of", d->multiple_of},
		{"rope_original_max_position", d->rope_original_max_position},
		{"tie_word_embeddings", d->tied}, {"rope_scaling", d->rope_scaling},
	};
	const struct named_f64 dbls[] = {
		{"ffn_dim_multiplier", d->ffn_dim_multiplier}, {"norm_eps", d->norm_eps},
		{"rope_theta", d->rope_theta}, {"rope_scaling_factor", d->rope_scaling_factor},
		{"rope_low_freq_factor", d->rope_low_freq_factor},
		{"rope_high_freq_factor", d->rope_high_freq_factor},
	};

	if (attr_str(f, "flavor", d->flavor) < 0)
		return -1;
	/* other families than Llama 3 name themselves (absent: llama3, as the
	 * files before them) */
	if (d->family != TITAN_MODEL_NAME_LLAMA3 &&
	    attr_str(f, "model_name", titan_model_family_name(d->family)) < 0)
		return -1;
	if (d->qk_norm && attr_i64(f, "qk_norm", 1) < 0)
		return -1;
	if (d->moe.num_experts > 0 && write_moe(f, &d->moe) < 0)
		return -1;
	if (titan_model_mla(d) && write_mla(f, &d->mla) < 0)
		return -1;
	/* Llama 4's NoPE layers (absent: RoPE in every block) */
	if (d->nope_every > 0 && (attr_i64(f, "every_n_layers_nope", d->nope_every) < 0 ||
				  attr_i64(f, "fixed_attn_block_size", d->attn_chunk) < 0))
		return -1;
	return attrs_i64(f, ints, NATTR(ints)) < 0 ? -1 : attrs_f64(f, dbls, NATTR(dbls));
}

int titan_ckpt_mktemp_(const char *path, char **tmp)
{
	size_t n = strlen(path) + 16;
	int fd;

	if (!(*tmp = malloc(n)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	snprintf(*tmp, n, "%s.tmp.XXXXXX", path);
	if ((fd = titan_tmp_mkstemp(*tmp, 0, NULL)) < 0) { /* titan_ckpt_commit_ forgets it */
		free(*tmp);
		*tmp = NULL;
		return titan_error(TITAN_E_IO, "cannot create checkpoint '%s': %s", path,
				   strerror(errno));
	}
	close(fd);
	return 0;
}

int64_t titan_ckpt_size_bound_(const struct titan_param_table *t, bool full,
			       enum titan_ckpt_dtype dtype, const char *config_yaml,
			       int64_t dp_world_size)
{
	/* HDF5's own bytes: the superblock and root attributes, and per
	 * dataset an object header with its crc32c attribute and the links of
	 * the creation-ordered groups: about 600 bytes each in practice, 4 KiB
	 * here (a bound, not an estimate) */
	const int64_t esz = dtype == TITAN_CKPT_FLOAT32 ? 4 : 2, per = 4096;
	int64_t b = 65536 + 2 * (int64_t)(config_yaml ? strlen(config_yaml) : 0);

	for (int i = 0; i < t->n; i++) {
		const int64_t numel = t->params[i].gshape[0] * t->params[i].gshape[1];

		b += numel * esz + per;
		if (full)
			b += 2 * (numel * 4 + per);
	}
	return b + (full ? (dp_world_size + 8) * per : 0);
}

int titan_ckpt_reserve_(const char *tmp, const char *path, int64_t bytes)
{
#ifdef FALLOC_FL_KEEP_SIZE
	int fd = open(tmp, O_WRONLY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return titan_error(TITAN_E_IO, "cannot write checkpoint '%s': %s", tmp,
				   strerror(errno));
	/* KEEP_SIZE: HDF5 sees the file it made; the blocks past its end
	 * are given back by titan_ckpt_commit_ */
	if (bytes > 0 && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) != 0)
		err = errno;
	close(fd);
	if (err == ENOSPC || err == EDQUOT || err == EFBIG)
		return titan_error(TITAN_E_IO, "cannot write checkpoint '%s': %s (it needs up to "
				   "%.1f MB; the previous checkpoints are untouched)", path,
				   strerror(err), (double)bytes / 1e6);
	/* EOPNOTSUPP (a file system without fallocate) and the like: the
	 * write goes on unreserved */
	if (err)
		titan_log_debug("cannot reserve %lld bytes for '%s': %s", (long long)bytes, tmp,
				strerror(err));
#else
	(void)tmp, (void)path, (void)bytes;
#endif
	return 0;
}

int titan_ckpt_writer_open_(const char *path, const struct titan_ckpt_writer_opts_ *o,
			    const struct titan_model_dims *dims, const char *config_yaml,
			    struct titan_ckpt_writer **out)
{
	struct titan_ckpt_writer *w;
	hid_t fcpl = -1, fapl = -1;
	int rc = 0;

	quiet();
	*out = NULL;
	if (!(w = calloc(1, sizeof(*w))) || !(w->path = strdup(path)) ||
	    (o->tmp && !(w->tmp = strdup(o->tmp)))) {
		if (w)
			free(w->path);
		free(w);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	w->file = w->gcpl = w->dcpl = w->lcpl = -1;
	w->dxpl = o->dxpl;
	w->owner = o->owner;
	*out = w;
	if (!w->tmp && (rc = titan_ckpt_mktemp_(path, &w->tmp)) < 0)
		return rc;
	/* creation order kept in every group (h5py track_order, torchtitan's
	 * order on iteration); no timestamps, so equal states give equal bytes */
	if ((fcpl = H5Pcreate(H5P_FILE_CREATE)) < 0 ||
	    H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
	    H5Pset_obj_track_times(fcpl, 0) < 0 ||
	    (fapl = o->fapl >= 0 ? H5Pcopy(o->fapl) : H5Pcreate(H5P_FILE_ACCESS)) < 0 ||
	    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0 ||
	    (w->gcpl = H5Pcreate(H5P_GROUP_CREATE)) < 0 ||
	    H5Pset_link_creation_order(w->gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
	    H5Pset_obj_track_times(w->gcpl, 0) < 0 || (w->dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0 ||
	    H5Pset_obj_track_times(w->dcpl, 0) < 0 ||
	    H5Pset_fill_time(w->dcpl, H5D_FILL_TIME_NEVER) < 0 ||
	    (w->lcpl = H5Pcreate(H5P_LINK_CREATE)) < 0 ||
	    H5Pset_create_intermediate_group(w->lcpl, 1) < 0 ||
	    H5Pset_char_encoding(w->lcpl, H5T_CSET_UTF8) < 0) {
		rc = h5fail(TITAN_E_INTERNAL, "cannot set up HDF5 properties for '%s'", path);
		goto done;
	}
	if ((w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, fcpl, fapl)) < 0) {
		rc = h5fail(TITAN_E_IO, "cannot create checkpoint '%s'", w->tmp);
		goto done;
	}
	if (attr_str(w->file, "format", TITAN_CKPT_FORMAT) < 0 ||
	    attr_i64(w->file, "format_version", TITAN_CKPT_VERSION) < 0 ||
	    attr_str(w->file, "titan_version", titan_version()) < 0 ||
	    attr_str(w->file, "config", config_yaml ? config_yaml : "") < 0 ||
	    write_dims(w->file, dims) < 0)
		rc = h5fail(TITAN_E_IO, "cannot write the attributes of checkpoint '%s'", path);
done:
	if (fcpl >= 0)
		H5Pclose(fcpl);
	if (fapl >= 0)
		H5Pclose(fapl);
	return rc;
}

int titan_ckpt_writer_open(const char *path, const struct titan_model_dims *dims,
			   const char *config_yaml, struct titan_ckpt_writer **out)
{
	const struct titan_ckpt_writer_opts_ o = {.fapl = -1, .dxpl = H5P_DEFAULT, .owner = true};
	int rc = titan_ckpt_writer_open_(path, &o, dims, config_yaml, out);

	if (rc < 0) {
		titan_ckpt_writer_close(*out, rc);
		*out = NULL;
	}
	return rc;
}

/* Register dataset PART/NAME; *sum: its CRC term, 0 so far. */
static int add_sum(struct titan_ckpt_writer *w, enum titan_ckpt_part part, const char *name,
		   uint32_t **sum)
{
	size_t n = strlen(titan_ckpt_part_name(part)) + strlen(name) + 2;

	if (w->n_sums == w->cap_sums) {
		size_t cap = w->cap_sums ? 2 * w->cap_sums : 64;
		char **names = realloc(w->sum_names, cap * sizeof(*names));
		uint32_t *sums = names ? realloc(w->sums, cap * sizeof(*sums)) : NULL;

		if (names)
			w->sum_names = names;
		if (sums)
			w->sums = sums;
		if (!names || !sums)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		w->cap_sums = cap;
	}
	if (!(w->sum_names[w->n_sums] = malloc(n)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	snprintf(w->sum_names[w->n_sums], n, "%s/%s", titan_ckpt_part_name(part), name);
	w->sums[w->n_sums] = 0;
	*sum = &w->sums[w->n_sums++];
	return 0;
}

uint32_t *titan_ckpt_writer_sums_(struct titan_ckpt_writer *w, size_t *n)
{
	*n = w ? w->n_sums : 0;
	return w ? w->sums : NULL;
}

/* Every dataset's crc32c attribute (collective with MPI-IO: the same values
 * on every rank). */
static int write_sums(struct titan_ckpt_writer *w)
{
	for (size_t i = 0; i < w->n_sums; i++) {
		hid_t d = H5Dopen2(w->file, w->sum_names[i], H5P_DEFAULT);
		int ok = d >= 0 && attr_write(d, TITAN_CKPT_CRC_ATTR, H5T_STD_U32LE, H5T_NATIVE_UINT32,
					      &w->sums[i]) == 0;

		if (d >= 0)
			H5Dclose(d);
		if (!ok)
			return h5fail(TITAN_E_IO, "'%s': cannot write the checksum of %s", w->tmp,
				      w->sum_names[i]);
	}
	return 0;
}

int64_t titan_ckpt_rows_per_block_(int64_t row, enum titan_ckpt_dtype dtype)
{
	const int64_t block = dtype == TITAN_CKPT_FLOAT32 ? BLOCK_BYTES / 4 : BLOCK_ELEMS;

	return row && block / row > 0 ? block / row : 1;
}

int titan_ckpt_writer_rows_(struct titan_ckpt_writer *w, enum titan_ckpt_part part,
			    const char *name, int ndim, const int64_t *shape, int64_t row0,
			    int64_t rows, const float *data, enum titan_ckpt_dtype dtype,
			    int64_t calls)
{
	return titan_ckpt_writer_window_(w, part, name, ndim, shape, row0, rows, 0, 0, 0, data,
					 dtype, calls);
}

int titan_ckpt_writer_window_(struct titan_ckpt_writer *w, enum titan_ckpt_part part,
			      const char *name, int ndim, const int64_t *shape, int64_t row0,
			      int64_t rows, int wdim, int64_t col0, int64_t cols,
			      const float *data, enum titan_ckpt_dtype dtype, int64_t calls)
{
	hsize_t dims[4];
	hid_t g = -1, s = -1, t = -1, d = -1, ms = -1, fs = -1;
	int64_t numel = 1, row = 1;
	uint32_t *sum = NULL;
	uint16_t *buf = NULL;
	int rc = 0;

	if (ndim < 1 || ndim > 4 || (unsigned)part >= TITAN_CKPT_NPARTS || !name[0] ||
	    strchr(name, '/'))
		return titan_error(TITAN_E_INVALID, "'%s': %s/%s: bad tensor (%d dims)", w->path,
				   titan_ckpt_part_name(part), name, ndim);
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 0)
			return titan_error(TITAN_E_INVALID, "'%s': %s/%s: negative dim", w->path,
					   titan_ckpt_part_name(part), name);
		dims[i] = (hsize_t)shape[i];
		numel *= shape[i];
		row *= i ? shape[i] : 1;
	}
	TITAN_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= shape[0]);
	/* a window of dim wdim (tensor parallelism), seen as a window of the
	 * 2-d [shape[0]·mid, span] tensor for the checksum */
	int64_t mid = 1, inner = 1, span = row;

	if (wdim > 0 && wdim < ndim) {
		TITAN_ASSERT(col0 >= 0 && cols >= 0 && col0 + cols <= shape[wdim]);
		for (int i = 1; i < wdim; i++)
			mid *= shape[i];
		for (int i = wdim + 1; i < ndim; i++)
			inner *= shape[i];
		span = shape[wdim] * inner;
		row = mid * cols * inner;
	} else {
		wdim = 0;
		col0 = 0;
	}
	if ((g = group(w, titan_ckpt_part_name(part))) < 0 ||
	    (s = H5Screate_simple(ndim, dims, NULL)) < 0 || (t = file_type(dtype)) < 0 ||
	    (d = H5Dcreate2(g, name, t, s, w->lcpl, w->dcpl, H5P_DEFAULT)) < 0) {
		rc = h5fail(TITAN_E_IO, "'%s': cannot create %s/%s", w->tmp,
			    titan_ckpt_part_name(part), name);
		goto done;
	}
	if ((rc = add_sum(w, part, name, &sum)) < 0 || numel == 0)
		goto done;
	/* in blocks of whole rows (one pwrite each: a single write of a
	 * gigabyte tensor runs at half the disk speed under the kernel's
	 * dirty-page throttling); 16-bit types are rounded here (HDF5's own
	 * conversion does not round to nearest even) and written as raw bits.
	 * A collective write (calls > 0) makes exactly `calls` H5Dwrite calls
	 * on every rank, selecting nothing once this rank's rows are done (or
	 * after an error here: the other ranks still wait for the call). */
	{
		const bool f32 = dtype == TITAN_CKPT_FLOAT32;
		const int64_t rows_per = titan_ckpt_rows_per_block_(row, dtype);
		const int64_t own = (rows + rows_per - 1) / rows_per;
		const int64_t n_calls = calls > 0 ? calls : own;
		hsize_t start[4] = {0}, count[4], one = 1;

		TITAN_ASSERT(n_calls >= own);
		if (!f32 && rows && !(buf = malloc((size_t)(rows_per * row) * 2)))
			rc = titan_error(TITAN_E_NOMEM, "out of memory converting %s", name);
		if ((fs = H5Dget_space(d)) < 0 && rc == 0)
			rc = h5fail(TITAN_E_IO, "'%s': %s/%s: no dataspace", w->tmp,
				    titan_ckpt_part_name(part), name);
		for (int64_t b = 0; b < n_calls && (rc == 0 || calls > 0); b++) {
			int64_t r0 = b * rows_per;
			int64_t nr = rc < 0 || r0 >= rows ? 0 : rows - r0 < rows_per ? rows - r0 : rows_per;
			hsize_t n = nr ? (hsize_t)(nr * row) : 1;
			const void *src = &one; /* nothing is read from it when nr == 0 */
			herr_t e = fs >= 0 && (ms = H5Screate_simple(1, &n, NULL)) >= 0 ? 0 : -1;

			memcpy(count, dims, sizeof(count));
			start[0] = (hsize_t)(row0 + r0);
			count[0] = (hsize_t)nr;
			if (wdim) {
				start[wdim] = (hsize_t)col0;
				count[wdim] = (hsize_t)cols;
			}
			if (nr && !f32)
				titan_ckpt_cast(dtype, data + r0 * row, buf, (size_t)n);
			if (nr)
				src = f32 ? (const void *)(data + r0 * row) : buf;
			if (nr && rc == 0) /* the bytes as stored */
				*sum ^= titan_ckpt_crc_window_(src, (row0 + r0) * mid, nr * mid,
							       col0 * inner, row / mid, span,
							       shape[0] * mid, f32 ? 4 : 2);
			if (e >= 0 && nr)
				e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
			else if (e >= 0 && (e = H5Sselect_none(fs)) >= 0)
				e = H5Sselect_none(ms);
			if (e >= 0)
				e = H5Dwrite(d, f32 ? H5T_NATIVE_FLOAT : t, ms, fs, w->dxpl, src);
			if (e < 0 && rc == 0)
				rc = h5fail(TITAN_E_IO, "'%s': cannot write %s/%s", w->tmp,
					    titan_ckpt_part_name(part), name);
			if (ms >= 0)
				H5Sclose(ms);
			ms = -1;
		}
	}
done:
	free(buf);
	if (fs >= 0)
		H5Sclose(fs);
	if (d >= 0)
		H5Dclose(d);
	if (t >= 0)
		H5Tclose(t);
	if (s >= 0)
		H5Sclose(s);
	if (g >= 0)
		H5Gclose(g);
	return rc;
}

int titan_ckpt_writer_tensor(struct titan_ckpt_writer *w, enum titan_ckpt_part part,
			     const char *name, int ndim, const int64_t *shape,
			     const float *data, enum titan_ckpt_dtype dtype)
{
	return titan_ckpt_writer_rows_(w, part, name, ndim, shape, 0, ndim >= 1 && shape[0] > 0 ?
				       shape[0] : 0, data, dtype, 0);
}

int titan_ckpt_writer_train_state(struct titan_ckpt_writer *w,
				  const struct titan_ckpt_train_state *ts)
{
	hid_t g;
	char name[64];
	int ok;

	if (ts->dp_world_size < 1 || !ts->loader)
		return titan_error(TITAN_E_INVALID, "'%s': dataloader state of %lld ranks", w->path,
				   (long long)ts->dp_world_size);
#define GROUP(path, body) \
	do { \
		if ((g = group(w, path)) < 0) \
			goto fail; \
		ok = (body); \
		H5Gclose(g); \
		if (!ok) \
			goto fail; \
	} while (0)
	GROUP("train_state", attr_i64(g, "step", ts->step) == 0 &&
			     attr_i64(g, "ntokens_seen", ts->ntokens_seen) == 0);
	GROUP("lr_scheduler", attr_i64(g, "last_epoch", ts->lr_last_epoch) == 0);
	GROUP("optimizer", attr_i64(g, "step", ts->optim_step) == 0);
	GROUP("dataloader", attr_i64(g, "world_size", ts->dp_world_size) == 0);
	for (int64_t r = 0; r < ts->dp_world_size; r++) {
		const struct titan_loader_state *l = &ts->loader[r];

		snprintf(name, sizeof(name), "dataloader/dp_rank_%lld", (long long)r);
		GROUP(name, attr_u64(g, "epoch", l->epoch) == 0 &&
			    attr_u64(g, "position", l->position) == 0 &&
			    attr_u64(g, "n_windows", l->n_windows) == 0 &&
			    attr_u64(g, "seq_len", l->seq_len) == 0 &&
			    attr_u64(g, "shuffle", l->shuffle) == 0 &&
			    attr_u64(g, "seed", l->seed) == 0);
	}
	GROUP("rng", attr_u64(g, "seed", ts->rng.seed) == 0 &&
		     attr_u64(g, "stream", ts->rng.stream) == 0 &&
		     attr_u64(g, "offset", ts->rng.offset) == 0);
#undef GROUP
	return 0;
fail:
	return h5fail(TITAN_E_IO, "'%s': cannot write the training state", w->tmp);
}

static int fsync_path(const char *path, int flags)
{
	int fd = open(path, flags), rc;

	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

int titan_ckpt_commit_(const char *tmp, const char *path, int rc)
{
	if (rc == 0) {
		mode_t mask = umask(0);
		const char *slash = strrchr(path, '/');
		struct stat sb;

		umask(mask);
		/* give back what titan_ckpt_reserve_ reserved past the end
		 * (truncating to the same size frees the blocks past it) */
		if (stat(tmp, &sb) == 0 && truncate(tmp, sb.st_size) != 0)
			titan_log_debug("cannot truncate '%s': %s", tmp, strerror(errno));
		if (chmod(tmp, 0666 & ~mask) != 0 || fsync_path(tmp, O_RDONLY) != 0)
			rc = titan_error(TITAN_E_IO, "cannot write checkpoint '%s': %s", tmp,
					 strerror(errno));
		else if (rename(tmp, path) != 0)
			rc = titan_error(TITAN_E_IO, "cannot rename '%s' to '%s': %s", tmp, path,
					 strerror(errno));
		if (rc == 0) { /* the rename is on disk once the folder is */
			char *dir = slash ? strndup(path, (size_t)(slash - path)) : NULL;

			if (fsync_path(!slash ? "." : slash == path ? "/" : dir ? dir : ".",
				       O_RDONLY | O_DIRECTORY) != 0)
				titan_log_warn("cannot fsync the folder of '%s': %s", tmp,
					       strerror(errno));
			free(dir);
		}
	}
	if (rc != 0)
		unlink(tmp);
	titan_tmp_forget(tmp);
	return rc;
}

int titan_ckpt_writer_finish_(struct titan_ckpt_writer *w, int rc)
{
	if (!w)
		return rc;
	/* A failed checkpoint is most often a full disk.  HDF5 still flushes
	 * its metadata when the file closes, and a close that fails leaves
	 * the library in a state that crashes at exit (1.10's H5F__close_cb
	 * from its atexit handler: exit status 139 instead of our error).  The
	 * partial file is removed anyway: give its space back first, so that
	 * the close can write what it has to. */
	if (w->file >= 0 && rc == 0)
		rc = write_sums(w);
	if (w->file >= 0 && rc != 0 && w->owner && w->tmp && truncate(w->tmp, 0) != 0)
		titan_log_debug("cannot truncate '%s': %s", w->tmp, strerror(errno));
	if (w->file >= 0 && H5Fclose(w->file) < 0 && rc == 0)
		rc = h5fail(TITAN_E_IO, "cannot write checkpoint '%s'", w->tmp);
	if (w->gcpl >= 0)
		H5Pclose(w->gcpl);
	if (w->dcpl >= 0)
		H5Pclose(w->dcpl);
	if (w->lcpl >= 0)
		H5Pclose(w->lcpl);
	w->file = w->gcpl = w->dcpl = w->lcpl = -1;
	return rc;
}

int titan_ckpt_writer_close(struct titan_ckpt_writer *w, int rc)
{
	if (!w)
		return rc;
	rc = titan_ckpt_writer_finish_(w, rc);
	if (w->owner && w->tmp)
		rc = titan_ckpt_commit_(w->tmp, w->path, rc);
	for (size_t i = 0; i < w->n_sums; i++)
		free(w->sum_names[i]);
	free(w->sum_names);
	free(w->sums);
	free(w->tmp);
	free(w->path);
	free(w);
	return rc;
}

#else /* !TITAN_HAVE_HDF5 */

struct titan_ckpt_writer { int unused; };

int titan_ckpt_writer_open(const char *path, const struct titan_model_dims *dims,
			   const char *config_yaml, struct titan_ckpt_writer **out)
{
	(void)path, (void)dims, (void)config_yaml;
	*out = NULL;
	return NO_HDF5;
}
int titan_ckpt_writer_tensor(struct titan_ckpt_writer *w, enum titan_ckpt_part part,
			     const char *name, int ndim, const int64_t *shape,
			     const float *data, enum titan_ckpt_dtype dtype)
{
	(void)w, (void)part, (void)name, (void)ndim, (void)shape, (void)data, (void)dtype;
	return NO_HDF5;
}
int titan_ckpt_writer_train_state(struct titan_ckpt_writer *w,
				  const struct titan_ckpt_train_state *ts)
{
	(void)w, (void)ts;
	return NO_HDF5;
}
int titan_ckpt_writer_close(struct titan_ckpt_writer *w, int rc)
{
	(void)w;
	return rc;
}
#endif
