/*
 * fuzz_ckpt.c — HDF5 training checkpoints (lib/ckpt/h5read.c,
 * checkpoint.c): titan's checks of the layout (lib/titan/ckpt.h), not
 * libhdf5's decoder.  The input is a program in the language of
 * ckpt_ops.h that builds the file with the HDF5 API; the harness then
 * opens it (titan_ckpt_open, as titan-ckpt-convert info), reads every
 * tensor whole, by rows and by columns, checks its crc32c
 * (titan_ckpt_verify), and loads the file into the parameter table its
 * dims describe (titan_ckpt_load, as titan-train resumes), whole or as a
 * shard.  Its oracle for what would make titan read outside the file or
 * inflate data (external storage, soft and external links, virtual
 * datasets, filters, a gzip bomb; ckpt_ops.h): a file holding any of them
 * is never opened.
 */
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_ops.h"
#include "config.h"       /* TITAN_HAVE_ZLIB (build/fuzz/config.h) */
#include "fuzz.h"
#include "titan/ckpt.h"
#include "titan/core.h"
#include "titan/model.h"

#if TITAN_HAVE_ZLIB
#include <zlib.h>
#endif

#define MAX_ELEMS (1 << 16)   /* per dataset written or read */
/* lib/ckpt's block sizes (ckpt_impl.h; the unit tests shrink them too):
 * small, so that tensors are read and verified in several blocks */
extern int64_t titan_ckpt_block_elems_, titan_ckpt_block_bytes_;
#define MAX_ARENA (1 << 20)   /* floats of a table loaded into */

struct build {
	struct fuzz_in in;
	hid_t file, gcpl, lcpl;
	uint32_t trunc;
	unsigned load_flags, world, shards;
	size_t elems;             /* written so far */
	unsigned hostile;         /* objects made that titan must refuse */
};

/* The secret beside the checkpoint: raw bytes, and an HDF5 file holding
 * them as /x (what external storage, external links and VDS point at). */
static const char *secret_file(unsigned which)
{
	static char raw[512], h5[512];
	static bool made;

	if (!made) {
		char bytes[4096];
		hsize_t n = sizeof(bytes) / 4;
		hid_t f, s, d;

		for (size_t i = 0; i < sizeof(bytes); i++)
			bytes[i] = "TITAN-SECRET-"[i % 13];
		snprintf(raw, sizeof(raw), "%s", fuzz_path("secret.bin"));
		snprintf(h5, sizeof(h5), "%s", fuzz_path("secret.h5"));
		fuzz_write(raw, bytes, sizeof(bytes));
		f = H5Fcreate(h5, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
		s = H5Screate_simple(1, &n, NULL);
		d = H5Dcreate2(f, "x", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
		if (f < 0 || s < 0 || d < 0 ||
		    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes) < 0)
			abort();
		H5Dclose(d);
		H5Sclose(s);
		H5Fclose(f);
		made = true;
	}
	return which == ELINK_SECRET ? raw : h5;
}

/* The hostile layouts on dcpl (chunk: the dataset's chunk dims); false
 * when this one cannot have it (rank 0, too big, no zlib). */
static bool hostile_layout(struct build *b, hid_t dcpl, unsigned layout, hid_t s, unsigned ndim,
			   const hsize_t *dims, hsize_t *chunk, uint64_t bytes, bool big)
{
	if (layout == L_EXTERNAL)
		return !big && H5Pset_external(dcpl, secret_file(ELINK_SECRET), 0,
					       (hsize_t)bytes) >= 0;
	if (layout == L_VIRTUAL)
		return ndim > 0 && !big && H5Pset_virtual(dcpl, s, secret_file(ELINK_SECRET_H5),
							  "/x", s) >= 0;
	if (ndim == 0 || big)
		return false;
	if (layout == L_BOMB)
		memcpy(chunk, dims, ndim * sizeof(*chunk));
	for (unsigned i = 0; i < ndim; i++)
		chunk[i] = chunk[i] ? chunk[i] : 1;
	if (H5Pset_chunk(dcpl, (int)ndim, chunk) < 0)
		return false;
	switch (layout) {
	case L_GZIP: return H5Pset_deflate(dcpl, 1 + fuzz_u8(&b->in) % 9) >= 0;
	case L_SHUFFLE: return H5Pset_shuffle(dcpl) >= 0;
	case L_FLETCHER32: return H5Pset_fletcher32(dcpl) >= 0;
	case L_SCALEOFFSET: return H5Pset_scaleoffset(dcpl, H5Z_SO_FLOAT_DSCALE, 2) >= 0;
	case L_UNKNOWN_FILTER: /* not registered here: optional, so HDF5 writes without it */
		return H5Pset_filter(dcpl, 32000 + fuzz_u8(&b->in) % 16, H5Z_FLAG_OPTIONAL, 0,
				     NULL) >= 0;
#if TITAN_HAVE_ZLIB
	case L_BOMB: return H5Pset_deflate(dcpl, 9) >= 0;
#endif
	default: return false;
	}
}

/* A gzip bomb as the dataset's one chunk: zeros far beyond its size, the
 * stream padded to the raw size so that the storage size is right. */
static void write_bomb(hid_t d, unsigned ndim, uint64_t bytes)
{
#if TITAN_HAVE_ZLIB
	uLong n = (uLong)(bytes * 64 + (1 << 16)), zn;
	hsize_t off[8] = {0};
	Bytef *zeros, *z;

	if (n > (4u << 20))
		n = 4u << 20;
	zn = compressBound(n);
	zeros = calloc(n, 1);
	z = calloc(zn > bytes ? zn : bytes, 1);
	if (!zeros || !z || compress2(z, &zn, zeros, n, 9) != Z_OK)
		abort();
	(void)ndim;
	H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, zn > bytes ? zn : (size_t)bytes, z);
	free(zeros);
	free(z);
#else
	(void)d, (void)ndim, (void)bytes;
#endif
}

static void name_of(struct build *b, bool param, char *buf, size_t n)
{
	unsigned k = fuzz_u8(&b->in);

	if (k >= NAME_LITERAL) {
		size_t len = fuzz_u8(&b->in);

		len = len < b->in.n ? len : b->in.n;
		len = len < n - 1 ? len : n - 1;
		memcpy(buf, b->in.p, len);
		buf[len] = '\0';
		b->in.p += len;
		b->in.n -= len;
	} else if (param) {
		ckpt_param_name(k, buf, n);
	} else {
		snprintf(buf, n, "%s", NAMES[k % N_NAMES]);
	}
}

/* The group PATHS[path], or -1 when it does not exist (yet). */
static hid_t open_loc(struct build *b, unsigned path)
{
	const char *p = PATHS[path % N_PATHS], *slash = strchr(p, '/');
	char parent[64];

	if (!strcmp(p, "/"))
		return H5Gopen2(b->file, "/", H5P_DEFAULT);
	if (slash) {
		snprintf(parent, sizeof(parent), "%.*s", (int)(slash - p), p);
		if (H5Lexists(b->file, parent, H5P_DEFAULT) <= 0)
			return -1;
	}
	if (H5Lexists(b->file, p, H5P_DEFAULT) <= 0)
		return -1;
	return H5Gopen2(b->file, p, H5P_DEFAULT);
}

/* A 16-bit float type with the fields given (bfloat16, half, or odd). */
static hid_t half(size_t ebits, size_t mbits, size_t bias)
{
	hid_t t = H5Tcopy(H5T_IEEE_F32LE);

	if (H5Tset_fields(t, 15, mbits, ebits, 0, mbits) < 0 || H5Tset_precision(t, 16) < 0 ||
	    H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, bias) < 0) {
		H5Tclose(t);
		return -1;
	}
	return t;
}

static hid_t file_type(unsigned t, struct build *b)
{
	switch (t % T_N) {
	case T_I64: case T_I64_PAIR: return H5Tcopy(H5T_STD_I64LE);
	case T_U64: return H5Tcopy(H5T_STD_U64LE);
	case T_F64: return H5Tcopy(H5T_IEEE_F64LE);
	case T_I32: return H5Tcopy(H5T_STD_I32LE);
	case T_F32: return H5Tcopy(H5T_IEEE_F32LE);
	case T_U8: return H5Tcopy(H5T_STD_U8LE);
	case T_I16: return H5Tcopy(H5T_STD_I16LE);
	case T_BF16: return half(8, 7, 127);
	case T_F16: return half(5, 10, 15);
	case T_HALF_ODD: {
		unsigned e = 1 + fuzz_u8(&b->in) % 13;

		return half(e, 15 - e, (1u << (e - 1)) - 1);
	}
	case T_STR: {
		hid_t s = H5Tcopy(H5T_C_S1);

		H5Tset_size(s, H5T_VARIABLE);
		H5Tset_cset(s, H5T_CSET_UTF8);
		return s;
	}
	default: { /* T_STR_FIXED */
		hid_t s = H5Tcopy(H5T_C_S1);

		H5Tset_size(s, 1 + fuzz_u8(&b->in) % 64);
		return s;
	}
	}
}

static void op_attr(struct build *b)
{
	char name[64], str[256];
	hid_t loc = open_loc(b, fuzz_u8(&b->in)), t, s, a;
	unsigned type;
	hsize_t two = 2;
	uint64_t v[2];

	name_of(b, false, name, sizeof(name));
	type = fuzz_u8(&b->in) % T_N;
	if (type == T_STR || type == T_STR_FIXED) {
		size_t len = fuzz_u8(&b->in);

		len = len < b->in.n ? len : b->in.n;
		memcpy(str, b->in.p, len);
		str[len] = '\0';
		b->in.p += len;
		b->in.n -= len;
	} else {
		v[0] = v[1] = fuzz_u64(&b->in);
	}
	if (loc < 0)
		return;
	t = file_type(type, b);
	s = type == T_I64_PAIR ? H5Screate_simple(1, &two, NULL) : H5Screate(H5S_SCALAR);
	if (t >= 0 && s >= 0 && (a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT)) >= 0) {
		if (type == T_STR) {
			const char *p = str;

			H5Awrite(a, t, &p);
		} else if (type == T_STR_FIXED) {
			char fixed[64] = {0};

			memcpy(fixed, str, strlen(str) < sizeof(fixed) ? strlen(str) : sizeof(fixed));
			H5Awrite(a, t, fixed);
		} else {
			H5Awrite(a, t, v); /* as raw bytes of the file type */
		}
		H5Aclose(a);
	}
	if (s >= 0)
		H5Sclose(s);
	if (t >= 0)
		H5Tclose(t);
	H5Gclose(loc);
}

/* CRC32C of a dataset's elements as stored (read back in the file type). */
static uint32_t stored_crc(hid_t d, hid_t t, uint64_t numel)
{
	size_t esz = H5Tget_size(t);
	uint8_t *raw = malloc(numel * esz + 1);
	uint32_t c = 0;

	if (!raw)
		abort();
	if (numel && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) >= 0)
		c = titan_crc32c(0, raw, numel * esz);
	free(raw);
	return c;
}

static void crc_attr(hid_t d, unsigned how, uint64_t v)
{
	hid_t s = H5Screate(H5S_SCALAR), t = -1, a;
	uint32_t v32 = (uint32_t)v;
	const char *str = "ffff";

	if (how == CRC_STRING) {
		t = H5Tcopy(H5T_C_S1);
		H5Tset_size(t, H5T_VARIABLE);
	} else {
		t = H5Tcopy(how == CRC_RIGHT ? H5T_STD_U32LE : H5T_STD_I64LE);
	}
	if ((a = H5Acreate2(d, TITAN_CKPT_CRC_ATTR, t, s, H5P_DEFAULT, H5P_DEFAULT)) >= 0) {
		if (how == CRC_STRING)
			H5Awrite(a, t, &str);
		else
			H5Awrite(a, how == CRC_RIGHT ? H5T_NATIVE_UINT32 : H5T_NATIVE_INT64,
				 how == CRC_RIGHT ? (void *)&v32 : (void *)&v);
		H5Aclose(a);
	}
	H5Tclose(t);
	H5Sclose(s);
}

static void op_dataset(struct build *b)
{
	char name[128];
	hid_t loc = open_loc(b, fuzz_u8(&b->in)), t = -1, s = -1, dcpl = -1, d = -1;
	unsigned type, layout, ndim, fill, crc;
	uint64_t crc_value = 0;
	hsize_t dims[8], chunk[8];
	uint64_t numel = 1;
	bool big = false, hostile = false;

	name_of(b, true, name, sizeof(name));
	type = fuzz_u8(&b->in) % T_N;
	layout = fuzz_u8(&b->in) % L_N;
	ndim = fuzz_u8(&b->in) % 6;
	for (unsigned i = 0; i < ndim; i++) {
		unsigned k = fuzz_u8(&b->in);

		dims[i] = k == 0xff ? fuzz_u64(&b->in) >> (fuzz_u8(&b->in) % 64) : k;
		chunk[i] = dims[i] ? (dims[i] < 16 ? dims[i] : 16) : 1;
		if (dims[i] && numel > UINT64_MAX / dims[i])
			big = true;
		numel *= dims[i];
	}
	fill = fuzz_u8(&b->in) % FILL_N;
	crc = fuzz_u8(&b->in) % CRC_N;
	if (crc == CRC_VALUE)
		crc_value = fuzz_u64(&b->in);
	if (loc < 0 || (type == T_STR || type == T_STR_FIXED || type == T_I64_PAIR))
		goto done;
	big |= numel > MAX_ELEMS || b->elems + numel > 16 * MAX_ELEMS;
	if ((t = file_type(type, b)) < 0 || (s = H5Screate_simple((int)ndim, dims, NULL)) < 0 ||
	    (dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0)
		goto done;
	if (ndim == 0) {
		H5Sclose(s);
		s = H5Screate(H5S_SCALAR);
	}
	H5Pset_obj_track_times(dcpl, 0);
	if (layout >= L_EXTERNAL)
		hostile = hostile_layout(b, dcpl, layout, s, ndim, dims, chunk,
					 big ? 0 : numel * H5Tget_size(t), big);
	else if (layout == L_CHUNKED && ndim > 0)
		H5Pset_chunk(dcpl, (int)ndim, chunk);
	else if (layout == L_COMPACT && !big && numel * H5Tget_size(t) < 60000)
		H5Pset_layout(dcpl, H5D_COMPACT);
	else
		H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
	if ((d = H5Dcreate2(loc, name, t, s, b->lcpl, dcpl, H5P_DEFAULT)) < 0)
		goto done;
	b->hostile += hostile;
	if (hostile && layout == L_BOMB) {
		if (numel > 0)
			write_bomb(d, ndim, numel * H5Tget_size(t));
	} else if (hostile && (layout == L_EXTERNAL || layout == L_VIRTUAL)) {
		/* nothing written: HDF5 would write into the secret */
	} else if (fill != FILL_NONE && !big && numel > 0) {
		float *x = malloc(numel * sizeof(*x));
		hid_t ms = -1, fs = H5Dget_space(d);
		hsize_t one = numel;

		for (uint64_t i = 0; x && i < numel; i++)
			x[i] = (float)(i % 13) - 6.0f;
		if (fill == FILL_HALF && ndim > 0 && dims[0] > 1) { /* the first rows only */
			hsize_t start[8] = {0}, count[8];

			memcpy(count, dims, sizeof(count));
			count[0] = dims[0] / 2;
			one = numel / dims[0] * count[0];
			H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
		}
		if (x && (ms = H5Screate_simple(1, &one, NULL)) >= 0)
			H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, x);
		if (ms >= 0)
			H5Sclose(ms);
		H5Sclose(fs);
		free(x);
		b->elems += numel;
	}
	if (crc == CRC_RIGHT && !big && !hostile)
		crc_value = stored_crc(d, t, numel);
	if (crc != CRC_NONE)
		crc_attr(d, crc, crc_value);
done:
	if (d >= 0)
		H5Dclose(d);
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (s >= 0)
		H5Sclose(s);
	if (t >= 0)
		H5Tclose(t);
	if (loc >= 0)
		H5Gclose(loc);
}

static void op_link(struct build *b)
{
	char name[128], target[256], tname[128];
	hid_t loc = open_loc(b, fuzz_u8(&b->in));
	unsigned tp;

	name_of(b, true, name, sizeof(name));
	tp = fuzz_u8(&b->in);
	name_of(b, true, tname, sizeof(tname));
	snprintf(target, sizeof(target), "/%s/%s", PATHS[tp % N_PATHS], tname);
	if (loc >= 0) {
		b->hostile += H5Lcreate_soft(target, loc, name, H5P_DEFAULT, H5P_DEFAULT) >= 0;
		H5Gclose(loc);
	}
}

static void op_elink(struct build *b, const char *self)
{
	char name[128], tname[128], target[160];
	hid_t loc = open_loc(b, fuzz_u8(&b->in));
	unsigned file;

	name_of(b, true, name, sizeof(name));
	file = fuzz_u8(&b->in) % ELINK_N;
	name_of(b, true, tname, sizeof(tname));
	snprintf(target, sizeof(target), "/%s", file == ELINK_SECRET_H5 && !tname[0] ? "x" : tname);
	if (loc >= 0) {
		b->hostile += H5Lcreate_external(file == ELINK_SELF ? self : secret_file(file),
						 target, loc, name, H5P_DEFAULT, H5P_DEFAULT) >= 0;
		H5Gclose(loc);
	}
}

static void build_file(struct build *b, const char *path)
{
	unsigned flags = fuzz_u8(&b->in);
	hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = H5Pcreate(H5P_FILE_ACCESS);

	b->gcpl = H5Pcreate(H5P_GROUP_CREATE);
	b->lcpl = H5Pcreate(H5P_LINK_CREATE);
	H5Pset_create_intermediate_group(b->lcpl, 1);
	H5Pset_obj_track_times(b->gcpl, 0);
	if (!(flags & FLAG_NO_ORDER)) {
		H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
		H5Pset_link_creation_order(b->gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
	}
	if (!(flags & FLAG_EARLIEST))
		H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
	H5Pset_fapl_core(fapl, 1 << 16, 1); /* built in memory, written at the close */
	b->file = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
	H5Pclose(fcpl);
	H5Pclose(fapl);
	if (b->file < 0)
		abort();
	while (b->in.n) {
		switch (fuzz_u8(&b->in) % OP_N) {
		case OP_GROUP: {
			const char *p = PATHS[fuzz_u8(&b->in) % N_PATHS];
			hid_t g = strcmp(p, "/") ? H5Gcreate2(b->file, p, b->lcpl, b->gcpl,
							      H5P_DEFAULT) : -1;

			if (g >= 0)
				H5Gclose(g);
			break;
		}
		case OP_ATTR: op_attr(b); break;
		case OP_DATASET: op_dataset(b); break;
		case OP_LINK: op_link(b); break;
		case OP_ELINK: op_elink(b, path); break;
		case OP_TRUNC: b->trunc = fuzz_u32(&b->in); break;
		case OP_LOAD:
			b->load_flags = fuzz_u8(&b->in);
			b->world = 1 + fuzz_u8(&b->in) % 4;
			b->shards = 1 + fuzz_u8(&b->in) % 4;
			break;
		}
	}
	H5Pclose(b->gcpl);
	H5Pclose(b->lcpl);
	if (H5Fclose(b->file) < 0)
		abort();
	H5Eclear2(H5E_DEFAULT);
}

static void read_all(struct titan_ckpt_file *f)
{
	const struct titan_ckpt_info *in = titan_ckpt_file_info(f);
	float *x;

	for (size_t i = 0; i < in->n_tensors; i++) {
		const struct titan_ckpt_tensor_info *t = &in->tensors[i];
		int64_t n0 = t->ndim ? t->shape[0] : 1;

		if (titan_ckpt_find(f, t->part, t->name) != t || t->ndim < 0 || t->ndim > 4)
			abort();
		if (t->numel < 0 || t->numel > MAX_ELEMS)
			continue;
		if (!(x = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(*x))))
			abort();
		fuzz_check_error(titan_ckpt_read(f, t, 0, n0, x));
		if (n0 > 1)
			fuzz_check_error(titan_ckpt_read(f, t, n0 / 2, n0 - n0 / 2, x));
		if (titan_ckpt_read(f, t, n0, 1, x) == 0)
			abort(); /* a row past the last one */
		titan_error_clear();
		if (t->ndim == 2 && t->shape[1] > 1)
			fuzz_check_error(titan_ckpt_read_window(f, t, 0, n0, 1, t->shape[1] - 1, x));
		fuzz_check_error(titan_ckpt_verify(f, t, NULL));
		free(x);
	}
}

/* titan_ckpt_load into the table of the file's dims, when that is small */
static void load(const char *path, const struct titan_ckpt_info *in, struct build *b)
{
	struct titan_param_table t;
	struct titan_param_table_opts o;
	struct titan_ckpt_state st = {0};
	int rc;

	titan_param_table_opts_default(&o);
	o.shard_degree = (int)b->shards;
	o.shard_rank = (int)(b->load_flags >> 6) % o.shard_degree;
	if (in->dims.n_layers > 4 || in->dims.dim > 4096 || in->dims.vocab_size > 4096)
		return;
	rc = titan_param_table_init(&t, &in->dims, &o);
	fuzz_check_error(rc);
	if (rc < 0)
		return;
	if (t.arena_floats <= MAX_ARENA) {
		st.table = &t;
		st.params = calloc((size_t)t.arena_floats + 1, sizeof(float));
		st.exp_avg = calloc((size_t)t.arena_floats + 1, sizeof(float));
		st.exp_avg_sq = calloc((size_t)t.arena_floats + 1, sizeof(float));
		st.train.dp_world_size = b->world;
		st.train.loader = calloc(b->world, sizeof(*st.train.loader));
		if (!st.params || !st.exp_avg || !st.exp_avg_sq || !st.train.loader)
			abort();
		rc = titan_ckpt_load(path, &st, b->load_flags & 0x3f);
		fuzz_check_error(rc);
		free(st.params);
		free(st.exp_avg);
		free(st.exp_avg_sq);
		free(st.train.loader);
	}
	titan_param_table_release(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_path("ckpt.h5");
	struct build b = {.in = {data, size}, .world = 1, .shards = 1};
	struct titan_ckpt_file *f = NULL;
	struct stat sb;
	int rc;

	H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the builder's refusals are expected */
	titan_ckpt_block_elems_ = 64;
	titan_ckpt_block_bytes_ = 256;
	build_file(&b, path);
	if (b.trunc && stat(path, &sb) == 0 && sb.st_size > 0 &&
	    truncate(path, sb.st_size - (off_t)(b.trunc % (uint64_t)sb.st_size)) < 0)
		abort();
	rc = titan_ckpt_open(path, &f);
	if (rc == 0 && b.hostile)
		abort(); /* opened a file with data from outside it or filters */
	fuzz_check_error(rc);
	if (rc == 0) {
		read_all(f);
		load(path, titan_ckpt_file_info(f), &b);
		titan_ckpt_close(f);
	}
	return 0;
}
