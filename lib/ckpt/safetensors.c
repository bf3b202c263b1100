/*
 * safetensors.c — the safetensors format (huggingface/safetensors): a
 * strict reader over a read-only mmap and an atomic writer.  The checks
 * mirror the HF library's read_metadata + Metadata::validate; see
 * lib/titan/ckpt.h for the layout and the list.
 */
#include "titan/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
	const char *name;
	int bits;
} dtypes[TITAN_ST_NDTYPES] = {
	[TITAN_ST_BOOL] = {"BOOL", 8},        [TITAN_ST_F4] = {"F4", 4},
	[TITAN_ST_F6_E2M3] = {"F6_E2M3", 6},  [TITAN_ST_F6_E3M2] = {"F6_E3M2", 6},
	[TITAN_ST_U8] = {"U8", 8},            [TITAN_ST_I8] = {"I8", 8},
	[TITAN_ST_F8_E5M2] = {"F8_E5M2", 8},  [TITAN_ST_F8_E4M3] = {"F8_E4M3", 8},
	[TITAN_ST_F8_E8M0] = {"F8_E8M0", 8},  [TITAN_ST_I16] = {"I16", 16},
	[TITAN_ST_U16] = {"U16", 16},         [TITAN_ST_F16] = {"F16", 16},
	[TITAN_ST_BF16] = {"BF16", 16},       [TITAN_ST_I32] = {"I32", 32},
	[TITAN_ST_U32] = {"U32", 32},         [TITAN_ST_F32] = {"F32", 32},
	[TITAN_ST_C64] = {"C64", 64},         [TITAN_ST_F64] = {"F64", 64},
	[TITAN_ST_I64] = {"I64", 64},         [TITAN_ST_U64] = {"U64", 64},
};

const char *titan_st_dtype_name(enum titan_st_dtype dt)
{
	return (unsigned)dt < TITAN_ST_NDTYPES ? dtypes[dt].name : NULL;
}

int titan_st_dtype_bits(enum titan_st_dtype dt)
{
	return (unsigned)dt < TITAN_ST_NDTYPES ? dtypes[dt].bits : 0;
}

int titan_st_dtype_parse(const char *name, enum titan_st_dtype *out)
{
	for (int i = 0; name && i < TITAN_ST_NDTYPES; i++) {
		if (!strcmp(name, dtypes[i].name)) {
			*out = (enum titan_st_dtype)i;
			return 0;
		}
	}
	return TITAN_E_INVALID;
}

/* Bytes of `numel` elements of `dt` into *bytes: 0, 1 on overflow, 2 when
 * not a whole number of bytes. */
static int tensor_bytes(enum titan_st_dtype dt, uint64_t numel, uint64_t *bytes)
{
	uint64_t bits;

	if (__builtin_mul_overflow(numel, (uint64_t)dtypes[dt].bits, &bits))
		return 1;
	if (bits % 8)
		return 2;
	*bytes = bits / 8;
	return 0;
}

/* "[2, 3]" into buf */
static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t len = 0;

	len += (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < ndim && len < n; i++)
		len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, i ? ", " : "", shape[i]);
	if (len < n)
		snprintf(buf + len, n - len, "]");
	return buf;
}

/* ------------------------------------------------------------------ reader */

static int cmp_offsets(const void *a, const void *b)
{
	const struct titan_st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

static int cmp_by_name(const void *a, const void *b, void *ctx)
{
	const struct titan_st_tensor *t = ctx;

	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* A non-negative JSON integer into *out; false otherwise. */
static bool json_u64(const json_t *v, uint64_t *out)
{
	json_int_t i;

	if (!json_is_integer(v) || (i = json_integer_value(v)) < 0)
		return false;
	*out = (uint64_t)i;
	return true;
}

static int parse_tensor(struct titan_safetensors *f, const char *name, json_t *v,
			struct titan_st_tensor *t, int64_t *shape_pool)
{
	const char *p = f->path;
	json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape");
	json_t *off = json_object_get(v, "data_offsets");
	uint64_t numel = 1, need, d;
	char buf[256];
	int rc;

	t->name = name;
	if (!json_is_object(v))
		return titan_error(TITAN_E_FORMAT,
				   "'%s': tensor '%s' is not an object with dtype, shape and "
				   "data_offsets", p, name);
	if (!json_is_string(dt))
		return titan_error(TITAN_E_FORMAT, "'%s': tensor '%s' has no \"dtype\" string", p,
				   name);
	if (titan_st_dtype_parse(json_string_value(dt), &t->dtype) < 0)
		return titan_error(TITAN_E_FORMAT,
				   "'%s': tensor '%s' has unknown dtype \"%s\" (known: BOOL, U8, I8, "
				   "I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, C64, F8_E5M2, "
				   "F8_E4M3, F8_E8M0, F4, F6_E2M3, F6_E3M2)",
				   p, name, json_string_value(dt));
	if (!json_is_array(sh))
		return titan_error(TITAN_E_FORMAT, "'%s': tensor '%s' has no \"shape\" array", p,
				   name);
	t->ndim = (int)json_array_size(sh);
	t->shape = shape_pool;
	for (int i = 0; i < t->ndim; i++) {
		if (!json_u64(json_array_get(sh, (size_t)i), &d))
			return titan_error(TITAN_E_FORMAT,
					   "'%s': tensor '%s': shape entry %d is not an integer >= 0",
					   p, name, i);
		shape_pool[i] = (int64_t)d;
		if (__builtin_mul_overflow(numel, d, &numel) || numel > INT64_MAX)
			return titan_error(TITAN_E_FORMAT,
					   "'%s': tensor '%s': the shape's element count overflows",
					   p, name);
	}
	t->numel = (int64_t)numel;
	if (!json_is_array(off) || json_array_size(off) != 2 ||
	    !json_u64(json_array_get(off, 0), &t->begin) ||
	    !json_u64(json_array_get(off, 1), &t->end))
		return titan_error(TITAN_E_FORMAT,
				   "'%s': tensor '%s' needs \"data_offsets\": [begin, end] with "
				   "integers >= 0", p, name);
	rc = tensor_bytes(t->dtype, numel, &need);
	if (rc == 1)
		return titan_error(TITAN_E_FORMAT, "'%s': tensor '%s': the byte size overflows", p,
				   name);
	if (rc == 2)
		return titan_error(TITAN_E_FORMAT,
				   "'%s': tensor '%s': %" PRIu64 " elements of %s are not a whole "
				   "number of bytes", p, name, numel, dtypes[t->dtype].name);
	if (t->end < t->begin)
		return titan_error(TITAN_E_FORMAT,
				   "'%s': tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end "
				   "before they begin", p, name, t->begin, t->end);
	if (t->end - t->begin != need)
		return titan_error(TITAN_E_FORMAT,
				   "'%s': tensor '%s': dtype %s and shape %s take %" PRIu64
				   " bytes but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
				   p, name, dtypes[t->dtype].name,
				   shape_str(buf, sizeof(buf), t->ndim, t->shape), need, t->begin,
				   t->end, t->end - t->begin);
	t->nbytes = (size_t)need;
	return 0;
}

static int parse_metadata(struct titan_safetensors *f, json_t *meta)
{
	const char *key;
	json_t *v;
	size_t i = 0;

	if (json_is_null(meta))
		return 0;
	if (!json_is_object(meta))
		return titan_error(TITAN_E_FORMAT,
				   "'%s': \"__metadata__\" is not an object of strings", f->path);
	f->n_meta = json_object_size(meta);
	f->meta_keys = titan_calloc((f->n_meta + 1) * sizeof(char *), TITAN_MEM_OTHER);
	f->meta_values = titan_calloc((f->n_meta + 1) * sizeof(char *), TITAN_MEM_OTHER);
	if (!f->meta_keys || !f->meta_values)
		return TITAN_E_NOMEM;
	json_object_foreach(meta, key, v) {
		if (!json_is_string(v))
			return titan_error(TITAN_E_FORMAT,
					   "'%s': __metadata__ value of \"%s\" is not a string",
					   f->path, key);
		f->meta_keys[i] = key;
		f->meta_values[i++] = json_string_value(v);
	}
	return 0;
}

/* Sorted by offsets, the tensors must tile [0, buffer_len) exactly. */
static int check_tiling(struct titan_safetensors *f)
{
	uint64_t at = 0;
	const char *prev = NULL;

	qsort(f->tensors, f->n_tensors, sizeof(*f->tensors), cmp_offsets);
	for (size_t i = 0; i < f->n_tensors; i++) {
		const struct titan_st_tensor *t = &f->tensors[i];

		if (t->begin > at && !prev)
			return titan_error(TITAN_E_FORMAT,
					   "'%s': the data offsets leave a hole of %" PRIu64 " bytes at "
					   "the start of the data buffer, before tensor '%s'; safetensors "
					   "needs the tensors to cover the buffer without gaps", f->path,
					   t->begin, t->name);
		if (t->begin > at)
			return titan_error(TITAN_E_FORMAT,
					   "'%s': the data offsets leave a hole of %" PRIu64 " bytes "
					   "before tensor '%s' (starts at %" PRIu64 ", '%s' ends at %"
					   PRIu64 "); safetensors needs the tensors to cover the data "
					   "buffer without gaps", f->path, t->begin - at, t->name,
					   t->begin, prev, at);
		if (t->begin < at)
			return titan_error(TITAN_E_FORMAT,
					   "'%s': tensor '%s' [%" PRIu64 ", %" PRIu64 ") overlaps tensor "
					   "'%s', which ends at %" PRIu64, f->path, t->name, t->begin,
					   t->end, prev, at);
		at = t->end;
		prev = t->name;
	}
	if (at != f->buffer_len)
		return titan_error(TITAN_E_FORMAT,
				   "'%s': the tensors cover %" PRIu64 " bytes of data but the file "
				   "has %" PRIu64 " after the header: %s", f->path, at, f->buffer_len,
				   at > f->buffer_len ? "the file is truncated"
						      : "trailing bytes after the last tensor");
	return 0;
}

static int parse_header(struct titan_safetensors *f, const uint8_t *base)
{
	const uint8_t *nul;
	json_error_t err;
	json_t *root, *v;
	const char *key;
	size_t n_dims = 0, i = 0;
	int rc;

	if ((nul = memchr(base + 8, 0, (size_t)f->header_len)))
		return titan_error(TITAN_E_FORMAT,
				   "'%s': the safetensors header has a NUL byte at offset %zu (the "
				   "header is JSON padded with spaces, never NULs)", f->path,
				   (size_t)(nul - (base + 8)) + 8);
	root = json_loadb((const char *)base + 8, (size_t)f->header_len, JSON_REJECT_DUPLICATES,
			  &err);
	if (!root)
		return titan_error(TITAN_E_FORMAT,
				   "'%s': the safetensors header is not valid JSON: %s (line %d, "
				   "column %d)", f->path, err.text, err.line, err.column);
	f->json_ = root;
	if (!json_is_object(root))
		return titan_error(TITAN_E_FORMAT, "'%s': the safetensors header is not a JSON "
				   "object", f->path);
	json_object_foreach(root, key, v) {
		if (strcmp(key, "__metadata__")) {
			f->n_tensors++;
			if (json_is_object(v) && json_is_array(json_object_get(v, "shape")))
				n_dims += json_array_size(json_object_get(v, "shape"));
		}
	}
	f->tensors = titan_calloc((f->n_tensors + 1) * sizeof(*f->tensors), TITAN_MEM_OTHER);
	f->by_name_ = titan_calloc((f->n_tensors + 1) * sizeof(size_t), TITAN_MEM_OTHER);
	f->shapes_ = titan_calloc((n_dims + 1) * sizeof(int64_t), TITAN_MEM_OTHER);
	if (!f->tensors || !f->by_name_ || !f->shapes_)
		return TITAN_E_NOMEM;
	n_dims = 0;
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "__metadata__")) {
			if ((rc = parse_metadata(f, v)) < 0)
				return rc;
			continue;
		}
		if ((rc = parse_tensor(f, key, v, &f->tensors[i], f->shapes_ + n_dims)) < 0)
			return rc;
		n_dims += (size_t)f->tensors[i++].ndim;
	}
	if ((rc = check_tiling(f)) < 0)
		return rc;
	for (i = 0; i < f->n_tensors; i++) {
		f->tensors[i].data = f->buffer + f->tensors[i].begin;
		f->by_name_[i] = i;
	}
	qsort_r(f->by_name_, f->n_tensors, sizeof(size_t), cmp_by_name, f->tensors);
	return 0;
}

struct titan_safetensors *titan_safetensors_open(const char *path)
{
	struct titan_safetensors *f = titan_calloc(sizeof(*f), TITAN_MEM_OTHER);
	const uint8_t *base;
	uint64_t n = 0;

	if (!f)
		return NULL;
	if (!(f->path = titan_strdup(path)) ||
	    titan_map_file(path, &f->map_, &f->file_size) < 0)
		goto fail;
	if (f->file_size < 8) {
		titan_error(TITAN_E_FORMAT,
			    "'%s' is not a safetensors file: %zu bytes, shorter than the 8-byte "
			    "header length", path, f->file_size);
		goto fail;
	}
	base = f->map_;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | base[i];
	f->header_len = n;
	if (n > TITAN_ST_MAX_HEADER) {
		titan_error(TITAN_E_FORMAT,
			    "'%s': header length %" PRIu64 " exceeds the safetensors limit of %llu "
			    "bytes (not a safetensors file?)", path, n, TITAN_ST_MAX_HEADER);
		goto fail;
	}
	if (n > f->file_size - 8) {
		titan_error(TITAN_E_FORMAT,
			    "'%s': header length %" PRIu64 " runs past the end of the file (%zu "
			    "bytes): truncated, or not a safetensors file", path, n, f->file_size);
		goto fail;
	}
	f->buffer = base + 8 + n;
	f->buffer_len = f->file_size - 8 - n;
	if (parse_header(f, base) < 0)
		goto fail;
	return f;
fail:
	titan_safetensors_close(f);
	return NULL;
}

void titan_safetensors_close(struct titan_safetensors *f)
{
	if (!f)
		return;
	titan_unmap_file(f->map_, f->file_size);
	json_decref(f->json_);
	titan_free(f->tensors);
	titan_free(f->by_name_);
	titan_free(f->shapes_);
	titan_free(f->meta_keys);
	titan_free(f->meta_values);
	free(f->path);
	titan_free(f);
}

const struct titan_st_tensor *titan_safetensors_find(const struct titan_safetensors *f,
						     const char *name)
{
	size_t lo = 0, hi = f->n_tensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct titan_st_tensor *t = &f->tensors[f->by_name_[mid]];
		int c = strcmp(name, t->name);

		if (!c)
			return t;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

int titan_safetensors_get(const struct titan_safetensors *f, const char *name,
			  enum titan_st_dtype dtype, int ndim, const int64_t *shape,
			  const struct titan_st_tensor **out)
{
	const struct titan_st_tensor *t = titan_safetensors_find(f, name);
	char a[256], b[256];

	if (!t)
		return titan_error(TITAN_E_INVALID, "'%s' has no tensor '%s'", f->path, name);
	if (t->dtype != dtype)
		return titan_error(TITAN_E_INVALID, "'%s': tensor '%s' has dtype %s, expected %s",
				   f->path, name, dtypes[t->dtype].name,
				   titan_st_dtype_name(dtype) ? titan_st_dtype_name(dtype) : "?");
	if (ndim >= 0 && (t->ndim != ndim ||
			  (ndim && memcmp(t->shape, shape, (size_t)ndim * sizeof(*shape)))))
		return titan_error(TITAN_E_INVALID, "'%s': tensor '%s' has shape %s, expected %s",
				   f->path, name, shape_str(a, sizeof(a), t->ndim, t->shape),
				   shape_str(b, sizeof(b), ndim, shape));
	*out = t;
	return 0;
}

const char *titan_safetensors_meta(const struct titan_safetensors *f, const char *key)
{
	for (size_t i = 0; i < f->n_meta; i++)
		if (!strcmp(f->meta_keys[i], key))
			return f->meta_values[i];
	return NULL;
}

/* IEEE half -> float, exact (subnormals, infinities, NaN kept). */
static float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
	float x;

	if (exp == 0) { /* zero or subnormal: man · 2^-24 */
		x = (float)man * 0x1p-24f;
		return sign ? -x : x;
	}
	if (exp == 31)
		u = sign | 0x7f800000u | man << 13;
	else
		u = sign | (exp + 112) << 23 | man << 13;
	memcpy(&x, &u, 4);
	return x;
}

#define LOAD(type, p, i) ({ type v_; memcpy(&v_, (const char *)(p) + (i) * sizeof(type), sizeof(type)); v_; })

int titan_st_tensor_to_f32(const struct titan_st_tensor *t, float *out)
{
	const void *p = t->data;
	int64_t n = t->numel;

	for (int64_t i = 0; i < n; i++) {
		switch (t->dtype) {
		case TITAN_ST_F32: out[i] = LOAD(float, p, i); break;
		case TITAN_ST_F64: out[i] = (float)LOAD(double, p, i); break;
		case TITAN_ST_F16: out[i] = half_to_float(LOAD(uint16_t, p, i)); break;
		case TITAN_ST_BF16: {
			uint32_t u = (uint32_t)LOAD(uint16_t, p, i) << 16;

			memcpy(&out[i], &u, 4);
			break;
		}
		case TITAN_ST_BOOL: out[i] = LOAD(uint8_t, p, i) ? 1.0f : 0.0f; break;
		case TITAN_ST_U8: out[i] = (float)LOAD(uint8_t, p, i); break;
		case TITAN_ST_I8: out[i] = (float)LOAD(int8_t, p, i); break;
		case TITAN_ST_I16: out[i] = (float)LOAD(int16_t, p, i); break;
		case TITAN_ST_U16: out[i] = (float)LOAD(uint16_t, p, i); break;
		case TITAN_ST_I32: out[i] = (float)LOAD(int32_t, p, i); break;
		case TITAN_ST_U32: out[i] = (float)LOAD(uint32_t, p, i); break;
		case TITAN_ST_I64: out[i] = (float)LOAD(int64_t, p, i); break;
		case TITAN_ST_U64: out[i] = (float)LOAD(uint64_t, p, i); break;
		default:
			return titan_error(TITAN_E_INVALID, "tensor '%s': cannot convert %s to float",
					   t->name, dtypes[t->dtype].name);
		}
	}
	return 0;
}

int titan_st_tensor_to_i64(const struct titan_st_tensor *t, int64_t *out)
{
	const void *p = t->data;
	int64_t n = t->numel;

	for (int64_t i = 0; i < n; i++) {
		switch (t->dtype) {
		case TITAN_ST_BOOL: out[i] = LOAD(uint8_t, p, i) != 0; break;
		case TITAN_ST_U8: out[i] = LOAD(uint8_t, p, i); break;
		case TITAN_ST_I8: out[i] = LOAD(int8_t, p, i); break;
		case TITAN_ST_I16: out[i] = LOAD(int16_t, p, i); break;
		case TITAN_ST_U16: out[i] = LOAD(uint16_t, p, i); break;
		case TITAN_ST_I32: out[i] = LOAD(int32_t, p, i); break;
		case TITAN_ST_U32: out[i] = LOAD(uint32_t, p, i); break;
		case TITAN_ST_I64: out[i] = LOAD(int64_t, p, i); break;
		case TITAN_ST_U64: {
			uint64_t u = LOAD(uint64_t, p, i);

			if (u > INT64_MAX)
				return titan_error(TITAN_E_INVALID,
						   "tensor '%s': element %" PRId64 " (%" PRIu64 ") does "
						   "not fit in int64", t->name, i, u);
			out[i] = (int64_t)u;
			break;
		}
		default:
			return titan_error(TITAN_E_INVALID,
					   "tensor '%s': cannot convert %s to integers", t->name,
					   dtypes[t->dtype].name);
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ writer */

/* HF's order: dtype descending (alignment), then name. */
static int cmp_write(const void *a, const void *b, void *ctx)
{
	const struct titan_st_write_tensor *x = (const struct titan_st_write_tensor *)ctx +
						 *(const size_t *)a;
	const struct titan_st_write_tensor *y = (const struct titan_st_write_tensor *)ctx +
						 *(const size_t *)b;

	if (x->dtype != y->dtype)
		return x->dtype > y->dtype ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int write_all(FILE *fp, const void *p, size_t n, const char *path)
{
	if (n && fwrite(p, 1, n, fp) != n)
		return titan_error(TITAN_E_IO, "cannot write '%s': %s", path, strerror(errno));
	return 0;
}

int titan_safetensors_write(const char *path, const struct titan_st_write_tensor *tensors,
			    size_t n, const struct titan_st_meta *meta, size_t n_meta)
{
	const char *shown = path && strcmp(path, "-") ? path : "standard output";
	size_t *order = titan_calloc((n + 1) * sizeof(size_t), TITAN_MEM_OTHER);
	uint64_t *nbytes = titan_calloc((n + 1) * sizeof(uint64_t), TITAN_MEM_OTHER);
	json_t *root = json_object(), *m = NULL;
	struct titan_afile af = {0};
	char *text = NULL;
	uint64_t at = 0, len;
	size_t hlen, pad;
	uint8_t le[8];
	bool opened = false;
	int rc = 0;

	if (!order || !nbytes || !root) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory writing '%s'", shown);
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		const struct titan_st_write_tensor *t = &tensors[i];
		uint64_t numel = 1;
		int r;

		order[i] = i;
		if (!t->name || !strcmp(t->name, "__metadata__")) {
			rc = titan_error(TITAN_E_INVALID, "writing '%s': tensor %zu has %s name",
					 shown, i, t->name ? "the reserved" : "no");
			goto fail;
		}
		if ((unsigned)t->dtype >= TITAN_ST_NDTYPES || t->ndim < 0 || (t->ndim && !t->shape)) {
			rc = titan_error(TITAN_E_INVALID, "writing '%s': tensor '%s' has a bad dtype "
					 "or shape", shown, t->name);
			goto fail;
		}
		for (int d = 0; d < t->ndim; d++) {
			if (t->shape[d] < 0 ||
			    __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel) ||
			    numel > INT64_MAX) {
				rc = titan_error(TITAN_E_INVALID, "writing '%s': tensor '%s' has a "
						 "negative or overflowing shape", shown, t->name);
				goto fail;
			}
		}
		if ((r = tensor_bytes(t->dtype, numel, &nbytes[i])) != 0) {
			rc = titan_error(TITAN_E_INVALID, "writing '%s': tensor '%s': %s", shown,
					 t->name, r == 1 ? "the byte size overflows"
							 : "not a whole number of bytes");
			goto fail;
		}
		if (nbytes[i] && !t->data) {
			rc = titan_error(TITAN_E_INVALID, "writing '%s': tensor '%s' has no data",
					 shown, t->name);
			goto fail;
		}
	}
	qsort_r(order, n, sizeof(size_t), cmp_write, (void *)tensors);

	if (meta && n_meta) {
		if (!(m = json_object()) || json_object_set_new(root, "__metadata__", m) != 0) {
			rc = titan_error(TITAN_E_NOMEM, "out of memory writing '%s'", shown);
			goto fail;
		}
		for (size_t i = 0; i < n_meta; i++) {
			json_t *s;

			if (!meta[i].key || !meta[i].value || json_object_get(m, meta[i].key)) {
				rc = titan_error(TITAN_E_INVALID, "writing '%s': metadata entry %zu "
						 "is missing or repeats the key '%s'", shown, i,
						 meta[i].key ? meta[i].key : "(null)");
				goto fail;
			}
			if (!(s = json_string(meta[i].value)) ||
			    json_object_set_new(m, meta[i].key, s) != 0) {
				rc = titan_error(TITAN_E_INVALID, "writing '%s': metadata '%s' is not "
						 "valid UTF-8", shown, meta[i].key);
				goto fail;
			}
		}
	}
	for (size_t k = 0; k < n; k++) {
		const struct titan_st_write_tensor *t = &tensors[order[k]];
		uint64_t end = at + nbytes[order[k]];
		json_t *sh = json_array(), *e;
		bool ok = sh != NULL;

		if (json_object_get(root, t->name)) {
			json_decref(sh);
			rc = titan_error(TITAN_E_INVALID, "writing '%s': tensor '%s' appears twice",
					 shown, t->name);
			goto fail;
		}
		for (int d = 0; ok && d < t->ndim; d++)
			ok = json_array_append_new(sh, json_integer(t->shape[d])) == 0;
		if (!ok) {
			json_decref(sh);
			rc = titan_error(TITAN_E_NOMEM, "out of memory writing '%s'", shown);
			goto fail;
		}
		/* "o" steals sh; keys stay in this order (dtype, shape, data_offsets) */
		e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtypes[t->dtype].name, "shape", sh,
			      "data_offsets", (json_int_t)at, (json_int_t)end);
		if (!e) {
			rc = titan_error(TITAN_E_NOMEM, "out of memory writing '%s'", shown);
			goto fail;
		}
		if (json_object_set_new(root, t->name, e) != 0) { /* consumes e */
			rc = titan_error(TITAN_E_INVALID, "writing '%s': tensor name '%s' is not "
					 "valid UTF-8", shown, t->name);
			goto fail;
		}
		at = end;
	}
	if (!(text = json_dumps(root, JSON_COMPACT))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory writing '%s'", shown);
		goto fail;
	}
	hlen = strlen(text);
	pad = (8 - hlen % 8) % 8;
	len = hlen + pad;
	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)(len >> (8 * i));

	if ((rc = titan_afile_open(&af, path)) < 0)
		goto fail;
	opened = true;
	if ((rc = write_all(af.fp, le, 8, shown)) < 0 ||
	    (rc = write_all(af.fp, text, hlen, shown)) < 0 ||
	    (rc = write_all(af.fp, "        ", pad, shown)) < 0)
		goto fail;
	for (size_t k = 0; k < n; k++)
		if ((rc = write_all(af.fp, tensors[order[k]].data, (size_t)nbytes[order[k]],
				    shown)) < 0)
			goto fail;
	if (!af.tmp && fflush(af.fp) != 0)
		rc = titan_error(TITAN_E_IO, "cannot write '%s': %s", shown, strerror(errno));
fail:
	if (opened)
		rc = titan_afile_close(&af, rc);
	free(text);
	json_decref(root);
	titan_free(order);
	titan_free(nbytes);
	return rc;
}
