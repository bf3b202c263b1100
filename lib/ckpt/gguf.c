/*
 * gguf.c — GGUF (ggml's model file format, version 3): a strict reader
 * over a read-only mmap and an atomic streaming writer.  The layout and
 * the list of checks are at the GGUF section of lib/titan/ckpt.h; the
 * reference reader is ggml's gguf.cpp (gguf_init_from_file_impl), which
 * this one is at least as strict as, apart from tensor order: ggml wants
 * the tensors contiguous in info order, the spec and this reader only
 * aligned and disjoint.  The export of a titan model is gguf_export.c.
 */
#include "titan/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/tok.h"

static const char *const vtype_names[TITAN_GGUF_NTYPES] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
	"f64",
};
/* bytes of a scalar value; 0 for string and array */
static const uint8_t vtype_size[TITAN_GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* gguf-py's GGML_QUANT_SIZES: (elements, bytes) per block */
static const struct {
	const char *name;
	uint32_t block, bytes;
} ggml_types[TITAN_GGML_NTYPES] = {
	[0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
	[3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
	[8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 40},      [10] = {"Q2_K", 256, 84},
	[11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
	[14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
	[17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
	[20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
	[23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
	[26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
	[29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
	[35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},    [40] = {"NVFP4", 64, 36},
	[41] = {"Q1_0", 128, 18},    [42] = {"Q2_0", 64, 18},
};

const char *titan_gguf_type_name(enum titan_gguf_type t)
{
	return (unsigned)t < TITAN_GGUF_NTYPES ? vtype_names[t] : NULL;
}

const char *titan_ggml_type_name(uint32_t type)
{
	return type < TITAN_GGML_NTYPES ? ggml_types[type].name : NULL;
}

int titan_ggml_type_block(uint32_t type, uint32_t *block, uint32_t *block_bytes)
{
	if (type >= TITAN_GGML_NTYPES || !ggml_types[type].name)
		return TITAN_E_INVALID;
	*block = ggml_types[type].block;
	*block_bytes = ggml_types[type].bytes;
	return 0;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* Bytes of a tensor with `numel` elements, ne[0] a multiple of the block:
 * 0, or 1 when the size overflows. */
static int tensor_nbytes(uint32_t type, uint64_t numel, uint64_t *out)
{
	uint64_t blocks = numel / ggml_types[type].block;

	return __builtin_mul_overflow(blocks, (uint64_t)ggml_types[type].bytes, out) ? 1 : 0;
}

/* ------------------------------------------------------------------ reader */

struct cur {
	const char *path;
	const uint8_t *p;
	uint64_t size, at;
	char what[160];     /* the field being read: "key 3", "tensor 'x'" */
};

static int fail(const struct cur *c, uint64_t at, const char *fmt, ...) TITAN_PRINTF(3, 4);
static int fail(const struct cur *c, uint64_t at, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return titan_error(TITAN_E_FORMAT, "'%s': %s at byte %" PRIu64 ": %s", c->path, c->what, at,
			   msg);
}

static uint64_t left(const struct cur *c)
{
	return c->size - c->at;
}

/* n more bytes of `field` must be in the file */
static int need(const struct cur *c, uint64_t n, const char *field)
{
	if (n > left(c))
		return fail(c, c->at, "the file ends inside %s: %" PRIu64 " bytes needed, %" PRIu64
			    " left (truncated?)", field, n, left(c));
	return 0;
}

static int read_str(struct cur *c, const char *field, const uint8_t **s, uint64_t *len)
{
	uint64_t at = c->at, n;
	int rc;

	if ((rc = need(c, 8, field)) < 0)
		return rc;
	n = rd64(c->p + c->at);
	if (n > left(c) - 8)
		return fail(c, at, "%s length %" PRIu64 " runs past the end of the file (%" PRIu64
			    " bytes left)", field, n, left(c) - 8);
	*s = c->p + at + 8;
	*len = n;
	c->at += 8 + n;
	return 0;
}

/* A key or tensor name: non-empty UTF-8 without NUL, at most `max` bytes. */
static int check_name(const struct cur *c, uint64_t at, const char *field, const uint8_t *s,
		      uint64_t n, uint64_t max)
{
	if (n == 0)
		return fail(c, at, "%s is empty", field);
	if (n > max)
		return fail(c, at, "%s of %" PRIu64 " bytes is longer than %" PRIu64, field, n, max);
	if (memchr(s, 0, (size_t)n))
		return fail(c, at, "%s contains a NUL byte", field);
	if (titan_utf8_valid_prefix(s, (size_t)n) != n)
		return fail(c, at, "%s is not valid UTF-8 (byte %" PRIu64 " of it)", field,
			    (uint64_t)titan_utf8_valid_prefix(s, (size_t)n));
	return 0;
}

/* Growable arrays used while parsing. */
struct pool {
	char *p;
	size_t n, cap;
};

static int pool_add(struct pool *pl, const uint8_t *s, size_t n, size_t *off)
{
	if (pl->n + n + 1 > pl->cap) {
		size_t cap = pl->cap ? pl->cap : 4096;
		char *q;

		while (cap < pl->n + n + 1)
			cap *= 2;
		if (!(q = realloc(pl->p, cap)))
			return titan_error(TITAN_E_NOMEM, "out of memory");
		pl->p = q;
		pl->cap = cap;
	}
	memcpy(pl->p + pl->n, s, n);
	pl->p[pl->n + n] = 0;
	*off = pl->n;
	pl->n += n + 1;
	return 0;
}

struct u64vec {
	uint64_t *p;
	size_t n, cap;
};

static int u64_push(struct u64vec *v, uint64_t x)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 1024;
		uint64_t *q = realloc(v->p, cap * sizeof(*q));

		if (!q)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		v->p = q;
		v->cap = cap;
	}
	v->p[v->n++] = x;
	return 0;
}

/* One value of type t (not ARRAY) at the cursor: skip it, checking it. */
static int read_scalar(struct cur *c, enum titan_gguf_type t, const char *field)
{
	const uint8_t *s;
	uint64_t n;
	int rc;

	if (t == TITAN_GGUF_STRING)
		return read_str(c, field, &s, &n);
	if ((rc = need(c, vtype_size[t], field)) < 0)
		return rc;
	if (t == TITAN_GGUF_BOOL && c->p[c->at] > 1)
		return fail(c, c->at, "bool value %u (GGUF bools are 0 or 1)", c->p[c->at]);
	c->at += vtype_size[t];
	return 0;
}

static int read_kv(struct cur *c, size_t i, struct titan_gguf_kv *kv, struct pool *pool,
		   size_t *key_off, struct u64vec *str_at)
{
	const uint8_t *key;
	uint64_t klen, t;
	int rc;

	kv->offset = c->at;
	snprintf(c->what, sizeof(c->what), "key %zu", i);
	if ((rc = read_str(c, "the key", &key, &klen)) < 0 ||
	    (rc = check_name(c, kv->offset, "the key", key, klen, UINT64_MAX)) < 0 ||
	    (rc = pool_add(pool, key, (size_t)klen, key_off)) < 0)
		return rc;
	snprintf(c->what, sizeof(c->what), "key '%.*s'", klen > 100 ? 100 : (int)klen, key);
	if ((rc = need(c, 4, "the value type")) < 0)
		return rc;
	t = rd32(c->p + c->at);
	if (t >= TITAN_GGUF_NTYPES)
		return fail(c, c->at, "unknown value type %" PRIu64 " (0 to 12)", t);
	c->at += 4;
	kv->type = (enum titan_gguf_type)t;
	kv->n = 1;
	if (t != TITAN_GGUF_ARRAY) {
		kv->data = c->p + c->at;
		return read_scalar(c, kv->type, "the value");
	}
	if ((rc = need(c, 12, "the array header")) < 0)
		return rc;
	t = rd32(c->p + c->at);
	if (t >= TITAN_GGUF_NTYPES)
		return fail(c, c->at, "unknown array element type %" PRIu64 " (0 to 12)", t);
	if (t == TITAN_GGUF_ARRAY)
		return fail(c, c->at, "an array of arrays (ggml does not read nested arrays)");
	kv->elem = (enum titan_gguf_type)t;
	kv->n = rd64(c->p + c->at + 4);
	c->at += 12;
	{
		uint64_t min = t == TITAN_GGUF_STRING ? 8 : vtype_size[t];

		if (kv->n > left(c) / min)
			return fail(c, c->at - 8, "array of %" PRIu64 " %s elements cannot fit in the "
				    "%" PRIu64 " bytes left in the file", kv->n, vtype_names[t], left(c));
	}
	kv->data = c->p + c->at;
	if (t == TITAN_GGUF_STRING) {
		kv->str0_ = str_at->n;
		for (uint64_t k = 0; k < kv->n; k++) {
			uint64_t off = c->at - (uint64_t)(kv->data - c->p);
			const uint8_t *s;
			uint64_t n;

			if ((rc = read_str(c, "an array string", &s, &n)) < 0 ||
			    (rc = u64_push(str_at, off)) < 0)
				return rc;
		}
		return 0;
	}
	if (t == TITAN_GGUF_BOOL) {
		for (uint64_t k = 0; k < kv->n; k++)
			if (kv->data[k] > 1)
				return fail(c, c->at + k, "bool element %" PRIu64 " is %u (GGUF bools "
					    "are 0 or 1)", k, kv->data[k]);
	}
	c->at += kv->n * vtype_size[t];
	return 0;
}

static int read_tensor_info(struct cur *c, size_t i, struct titan_gguf_tensor *t,
			    struct pool *pool, size_t *name_off)
{
	const uint8_t *name;
	uint64_t nlen, numel = 1, v;
	uint32_t nd, type;
	int rc;

	t->info_offset = c->at;
	snprintf(c->what, sizeof(c->what), "tensor %zu", i);
	if ((rc = read_str(c, "the tensor name", &name, &nlen)) < 0 ||
	    (rc = check_name(c, t->info_offset, "the tensor name", name, nlen,
			     TITAN_GGUF_MAX_NAME)) < 0 ||
	    (rc = pool_add(pool, name, (size_t)nlen, name_off)) < 0)
		return rc;
	snprintf(c->what, sizeof(c->what), "tensor '%.*s'", (int)nlen, name);
	if ((rc = need(c, 4, "n_dims")) < 0)
		return rc;
	nd = rd32(c->p + c->at);
	if (nd < 1 || nd > 4)
		return fail(c, c->at, "n_dims %" PRIu32 " (GGUF tensors have 1 to 4 dims)", nd);
	c->at += 4;
	t->n_dims = (int)nd;
	if ((rc = need(c, 8ull * nd, "the dims")) < 0)
		return rc;
	for (int d = 0; d < 4; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < nd; d++) {
		v = rd64(c->p + c->at);
		if (v > INT64_MAX)
			return fail(c, c->at, "dim %" PRIu32 " is %" PRIu64 " (at most 2^63 - 1)", d, v);
		if (__builtin_mul_overflow(numel, v, &numel) || numel > INT64_MAX)
			return fail(c, c->at, "the dims' element count overflows");
		t->ne[d] = (int64_t)v;
		c->at += 8;
	}
	for (int d = 0; d < t->n_dims; d++)
		t->shape[d] = t->ne[t->n_dims - 1 - d];
	t->numel = (int64_t)numel;
	if ((rc = need(c, 4, "the tensor type")) < 0)
		return rc;
	type = rd32(c->p + c->at);
	if (type >= TITAN_GGML_NTYPES || !ggml_types[type].name)
		return fail(c, c->at, "unknown ggml type %" PRIu32, type);
	t->type = type;
	if (t->ne[0] % ggml_types[type].block)
		return fail(c, c->at, "a row of %" PRId64 " elements is not a whole number of %s "
			    "blocks (%" PRIu32 " elements)", t->ne[0], ggml_types[type].name,
			    ggml_types[type].block);
	if (tensor_nbytes(type, numel, &t->nbytes))
		return fail(c, c->at, "the byte size overflows");
	c->at += 4;
	if ((rc = need(c, 8, "the tensor offset")) < 0)
		return rc;
	t->offset = rd64(c->p + c->at);
	c->at += 8;
	return 0;
}

static int cmp_kv_name(const void *a, const void *b, void *ctx)
{
	const struct titan_gguf_kv *kv = ctx;

	return strcmp(kv[*(const size_t *)a].key, kv[*(const size_t *)b].key);
}

static int cmp_tensor_name(const void *a, const void *b, void *ctx)
{
	const struct titan_gguf_tensor *t = ctx;

	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static int cmp_tensor_offset(const void *a, const void *b, void *ctx)
{
	const struct titan_gguf_tensor *t = ctx, *x = &t[*(const size_t *)a],
					*y = &t[*(const size_t *)b];

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int check_alignment(struct cur *c, struct titan_gguf *f)
{
	const struct titan_gguf_kv *kv = titan_gguf_find_kv(f, "general.alignment");
	uint32_t a;

	f->alignment = TITAN_GGUF_DEFAULT_ALIGNMENT;
	if (!kv)
		return 0;
	snprintf(c->what, sizeof(c->what), "key 'general.alignment'");
	if (kv->type != TITAN_GGUF_UINT32)
		return fail(c, kv->offset, "general.alignment is a %s, not a u32",
			    vtype_names[kv->type]);
	a = rd32(kv->data);
	if (!is_pow2(a))
		return fail(c, kv->offset, "general.alignment %" PRIu32 " is not a power of two", a);
	f->alignment = a;
	return 0;
}

/* Offsets aligned, inside the file, disjoint; names unique. */
static int check_tensors(struct cur *c, struct titan_gguf *f)
{
	uint64_t data_len = f->file_size - f->data_offset;
	size_t *order = f->by_name_;
	const struct titan_gguf_tensor *prev = NULL;

	for (size_t i = 0; i < f->n_tensors; i++) {
		const struct titan_gguf_tensor *t = &f->tensors[i];

		snprintf(c->what, sizeof(c->what), "tensor '%s'", t->name);
		if (t->offset % f->alignment)
			return fail(c, t->info_offset, "offset %" PRIu64 " is not a multiple of the "
				    "alignment %" PRIu32, t->offset, f->alignment);
		if (t->offset > data_len || t->nbytes > data_len - t->offset)
			return fail(c, t->info_offset, "%s %s of %" PRIu64 " bytes at offset %" PRIu64
				    " of the data section (file bytes %" PRIu64 "..%" PRIu64 ") runs "
				    "past the end of the file (%zu bytes): truncated, or dims and type "
				    "that do not match the data", ggml_types[t->type].name,
				    t->n_dims == 1 ? "vector" : "tensor", t->nbytes, t->offset,
				    f->data_offset + t->offset, f->data_offset + t->offset + t->nbytes,
				    f->file_size);
	}
	for (size_t i = 0; i < f->n_tensors; i++)
		order[i] = i;
	qsort_r(order, f->n_tensors, sizeof(size_t), cmp_tensor_offset, f->tensors);
	for (size_t i = 0; i < f->n_tensors; i++) {
		const struct titan_gguf_tensor *t = &f->tensors[order[i]];

		if (t->nbytes == 0)
			continue;
		if (prev && t->offset < prev->offset + prev->nbytes) {
			snprintf(c->what, sizeof(c->what), "tensor '%s'", t->name);
			return fail(c, t->info_offset, "its data [%" PRIu64 ", %" PRIu64 ") overlaps "
				    "tensor '%s' [%" PRIu64 ", %" PRIu64 ") in the data section",
				    t->offset, t->offset + t->nbytes, prev->name, prev->offset,
				    prev->offset + prev->nbytes);
		}
		if (!prev || t->offset + t->nbytes > prev->offset + prev->nbytes)
			prev = t;
	}
	qsort_r(order, f->n_tensors, sizeof(size_t), cmp_tensor_name, f->tensors);
	for (size_t i = 1; i < f->n_tensors; i++) {
		const struct titan_gguf_tensor *a = &f->tensors[order[i - 1]],
					       *b = &f->tensors[order[i]];

		if (!strcmp(a->name, b->name)) {
			snprintf(c->what, sizeof(c->what), "tensor '%s'", b->name);
			return fail(c, a->info_offset > b->info_offset ? a->info_offset : b->info_offset,
				    "a second tensor with this name (the first is at byte %" PRIu64 ")",
				    a->info_offset < b->info_offset ? a->info_offset : b->info_offset);
		}
	}
	for (size_t i = 0; i < f->n_tensors; i++)
		f->tensors[i].data = c->p + f->data_offset + f->tensors[i].offset;
	return 0;
}

static int parse(struct titan_gguf *f, struct cur *c)
{
	struct pool pool = {0};
	struct u64vec str_at = {0};
	size_t *names = NULL, *order = NULL;
	uint64_t nt, nk, v;
	int rc = 0;

	snprintf(c->what, sizeof(c->what), "the header");
	if (c->size < 4 || memcmp(c->p, "GGUF", 4))
		return titan_error(TITAN_E_FORMAT, "'%s' is not a GGUF file: it does not start with "
				   "\"GGUF\"", f->path);
	if (c->size < 24)
		return fail(c, 0, "the file has %" PRIu64 " bytes, fewer than the 24 of a GGUF "
			    "header (truncated?)", c->size);
	f->version = rd32(c->p + 4);
	if (f->version == 0x02000000 || f->version == 0x03000000)
		return fail(c, 4, "a big-endian GGUF file (version %u byte-swapped): only "
			    "little-endian files are read", f->version >> 24);
	if (f->version != 2 && f->version != 3)
		return fail(c, 4, "GGUF version %" PRIu32 " is not supported (2 and 3 are%s)",
			    f->version, f->version == 1 ? "; llama.cpp dropped version 1 too" : "");
	nt = rd64(c->p + 8);
	nk = rd64(c->p + 16);
	c->at = 24;
	/* smallest pair: 8 + 1 (key) + 4 + 1; smallest tensor info: 8 + 1 + 4 + 8 + 4 + 8 */
	if (nk > left(c) / 14)
		return fail(c, 16, "%" PRIu64 " metadata pairs cannot fit in the %" PRIu64 " bytes "
			    "after the header", nk, left(c));
	if (nt > left(c) / 33)
		return fail(c, 8, "%" PRIu64 " tensors cannot fit in the %" PRIu64 " bytes after the "
			    "header", nt, left(c));
	f->n_kv = (size_t)nk;
	f->n_tensors = (size_t)nt;
	f->kv = titan_calloc((f->n_kv + 1) * sizeof(*f->kv), TITAN_MEM_OTHER);
	f->tensors = titan_calloc((f->n_tensors + 1) * sizeof(*f->tensors), TITAN_MEM_OTHER);
	names = calloc(f->n_kv + f->n_tensors + 1, sizeof(*names));
	order = calloc(f->n_kv + f->n_tensors + 1, sizeof(*order));
	if (!f->kv || !f->tensors || !names || !order) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory reading '%s'", f->path);
		goto done;
	}
	for (size_t i = 0; i < f->n_kv && rc == 0; i++)
		rc = read_kv(c, i, &f->kv[i], &pool, &names[i], &str_at);
	for (size_t i = 0; i < f->n_tensors && rc == 0; i++)
		rc = read_tensor_info(c, i, &f->tensors[i], &pool, &names[f->n_kv + i]);
	if (rc < 0)
		goto done;
	f->pool_ = pool.p;
	f->str_at_ = str_at.p;
	pool.p = NULL;
	str_at.p = NULL;
	for (size_t i = 0; i < f->n_kv; i++) {
		f->kv[i].key = f->pool_ + names[i];
		/* (an empty string array has no offsets: str_at_ may be NULL) */
		if (f->kv[i].type == TITAN_GGUF_ARRAY && f->kv[i].elem == TITAN_GGUF_STRING &&
		    f->kv[i].n > 0)
			f->kv[i].str_at_ = f->str_at_ + f->kv[i].str0_;
	}
	for (size_t i = 0; i < f->n_tensors; i++)
		f->tensors[i].name = f->pool_ + names[f->n_kv + i];
	/* duplicate keys */
	for (size_t i = 0; i < f->n_kv; i++)
		order[i] = i;
	qsort_r(order, f->n_kv, sizeof(size_t), cmp_kv_name, f->kv);
	for (size_t i = 1; i < f->n_kv; i++) {
		const struct titan_gguf_kv *a = &f->kv[order[i - 1]], *b = &f->kv[order[i]];

		if (!strcmp(a->key, b->key)) {
			snprintf(c->what, sizeof(c->what), "key '%.100s'", a->key);
			rc = fail(c, a->offset > b->offset ? a->offset : b->offset, "the key appears "
				  "twice (first at byte %" PRIu64 ")",
				  a->offset < b->offset ? a->offset : b->offset);
			goto done;
		}
	}
	if ((rc = check_alignment(c, f)) < 0)
		goto done;
	v = (c->at + f->alignment - 1) / f->alignment * f->alignment;
	f->data_offset = v < c->at ? UINT64_MAX : v;
	if (f->n_tensors > 0 && f->data_offset > f->file_size) {
		snprintf(c->what, sizeof(c->what), "the data section");
		rc = fail(c, c->at, "the data section would start at byte %" PRIu64 ", past the end of "
			  "the file (%zu bytes): truncated", f->data_offset, f->file_size);
		goto done;
	}
	if (f->data_offset > f->file_size)
		f->data_offset = f->file_size;
	f->by_name_ = titan_calloc((f->n_tensors + 1) * sizeof(size_t), TITAN_MEM_OTHER);
	if (!f->by_name_) {
		rc = TITAN_E_NOMEM;
		goto done;
	}
	rc = check_tensors(c, f);
done:
	free(pool.p);
	free(str_at.p);
	free(names);
	free(order);
	return rc;
}

struct titan_gguf *titan_gguf_open(const char *path)
{
	struct titan_gguf *f = titan_calloc(sizeof(*f), TITAN_MEM_OTHER);
	struct cur c = {.path = path};

	if (!f)
		return NULL;
	if (!(f->path = titan_strdup(path)) ||
	    titan_map_file(path, &f->map_, &f->file_size) < 0)
		goto fail;
	c.p = f->map_;
	c.size = f->file_size;
	if (parse(f, &c) < 0)
		goto fail;
	return f;
fail:
	titan_gguf_close(f);
	return NULL;
}

void titan_gguf_close(struct titan_gguf *f)
{
	if (!f)
		return;
	titan_unmap_file(f->map_, f->file_size);
	titan_free(f->kv);
	titan_free(f->tensors);
	titan_free(f->by_name_);
	free(f->pool_);
	free(f->str_at_);
	free(f->path);
	titan_free(f);
}

const struct titan_gguf_kv *titan_gguf_find_kv(const struct titan_gguf *f, const char *key)
{
	for (size_t i = 0; i < f->n_kv; i++)
		if (f->kv[i].key && !strcmp(f->kv[i].key, key))
			return &f->kv[i];
	return NULL;
}

const struct titan_gguf_tensor *titan_gguf_find(const struct titan_gguf *f, const char *name)
{
	size_t lo = 0, hi = f->n_tensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct titan_gguf_tensor *t = &f->tensors[f->by_name_[mid]];
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

/* ------------------------------------------------------------ values */

static int get_int(enum titan_gguf_type t, const uint8_t *p, int64_t *out)
{
	switch (t) {
	case TITAN_GGUF_UINT8: *out = p[0]; return 0;
	case TITAN_GGUF_INT8: *out = (int8_t)p[0]; return 0;
	case TITAN_GGUF_BOOL: *out = p[0] != 0; return 0;
	case TITAN_GGUF_UINT16: *out = (uint16_t)(p[0] | p[1] << 8); return 0;
	case TITAN_GGUF_INT16: *out = (int16_t)(uint16_t)(p[0] | p[1] << 8); return 0;
	case TITAN_GGUF_UINT32: *out = rd32(p); return 0;
	case TITAN_GGUF_INT32: *out = (int32_t)rd32(p); return 0;
	case TITAN_GGUF_INT64: *out = (int64_t)rd64(p); return 0;
	case TITAN_GGUF_UINT64:
		if (rd64(p) > INT64_MAX)
			return 1; /* out of range */
		*out = (int64_t)rd64(p);
		return 0;
	default:
		return TITAN_E_INVALID;
	}
}

static int get_float(enum titan_gguf_type t, const uint8_t *p, double *out)
{
	int64_t i;
	uint32_t u32;
	uint64_t u64;
	float f;

	if (t == TITAN_GGUF_FLOAT32) {
		u32 = rd32(p);
		memcpy(&f, &u32, 4);
		*out = f;
		return 0;
	}
	if (t == TITAN_GGUF_FLOAT64) {
		u64 = rd64(p);
		memcpy(out, &u64, 8);
		return 0;
	}
	if (t == TITAN_GGUF_UINT64) {
		*out = (double)rd64(p);
		return 0;
	}
	if (get_int(t, p, &i) < 0)
		return TITAN_E_INVALID;
	*out = (double)i;
	return 0;
}

int titan_gguf_kv_int(const struct titan_gguf_kv *kv, int64_t *out)
{
	int rc = get_int(kv->type, kv->data, out);

	if (rc == 1)
		return titan_error(TITAN_E_INVALID, "GGUF key '%s': %" PRIu64 " does not fit in int64",
				   kv->key, rd64(kv->data));
	if (rc < 0)
		return titan_error(TITAN_E_INVALID, "GGUF key '%s' is a %s, not an integer", kv->key,
				   vtype_names[kv->type]);
	return 0;
}

int titan_gguf_kv_float(const struct titan_gguf_kv *kv, double *out)
{
	if (get_float(kv->type, kv->data, out) < 0)
		return titan_error(TITAN_E_INVALID, "GGUF key '%s' is a %s, not a number", kv->key,
				   vtype_names[kv->type]);
	return 0;
}

const char *titan_gguf_kv_str(const struct titan_gguf_kv *kv, size_t *len)
{
	if (kv->type != TITAN_GGUF_STRING)
		return NULL;
	if (len)
		*len = (size_t)rd64(kv->data);
	return (const char *)kv->data + 8;
}

static int arr_check(const struct titan_gguf_kv *kv, uint64_t i, bool string)
{
	if (kv->type != TITAN_GGUF_ARRAY)
		return titan_error(TITAN_E_INVALID, "GGUF key '%s' is a %s, not an array", kv->key,
				   vtype_names[kv->type]);
	if (i >= kv->n)
		return titan_error(TITAN_E_INVALID, "GGUF key '%s': element %" PRIu64 " of %" PRIu64,
				   kv->key, i, kv->n);
	if (string != (kv->elem == TITAN_GGUF_STRING))
		return titan_error(TITAN_E_INVALID, "GGUF key '%s' is an array of %s", kv->key,
				   vtype_names[kv->elem]);
	return 0;
}

int titan_gguf_arr_int(const struct titan_gguf_kv *kv, uint64_t i, int64_t *out)
{
	int rc;

	if ((rc = arr_check(kv, i, false)) < 0)
		return rc;
	rc = get_int(kv->elem, kv->data + i * vtype_size[kv->elem], out);
	if (rc != 0)
		return titan_error(TITAN_E_INVALID, "GGUF key '%s': element %" PRIu64 " is not an "
				   "int64", kv->key, i);
	return 0;
}

int titan_gguf_arr_float(const struct titan_gguf_kv *kv, uint64_t i, double *out)
{
	int rc;

	if ((rc = arr_check(kv, i, false)) < 0)
		return rc;
	if (get_float(kv->elem, kv->data + i * vtype_size[kv->elem], out) < 0)
		return titan_error(TITAN_E_INVALID, "GGUF key '%s' is an array of %s, not numbers",
				   kv->key, vtype_names[kv->elem]);
	return 0;
}

const char *titan_gguf_arr_str(const struct titan_gguf_kv *kv, uint64_t i, size_t *len)
{
	const uint8_t *p;

	if (kv->type != TITAN_GGUF_ARRAY || kv->elem != TITAN_GGUF_STRING || i >= kv->n)
		return NULL;
	p = kv->data + kv->str_at_[i];
	if (len)
		*len = (size_t)rd64(p);
	return (const char *)p + 8;
}

int titan_gguf_tensor_to_f32(const struct titan_gguf_tensor *t, float *out)
{
	const uint8_t *p = t->data;
	int64_t n = t->numel;

	for (int64_t i = 0; i < n; i++) {
		switch (t->type) {
		case TITAN_GGML_F32: {
			uint32_t u = rd32(p + 4 * i);

			memcpy(&out[i], &u, 4);
			break;
		}
		case TITAN_GGML_F16: out[i] = titan_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)); break;
		case TITAN_GGML_BF16: out[i] = titan_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)); break;
		case 24: out[i] = (float)(int8_t)p[i]; break;
		case 25: out[i] = (float)(int16_t)(uint16_t)(p[2 * i] | p[2 * i + 1] << 8); break;
		case 26: out[i] = (float)(int32_t)rd32(p + 4 * i); break;
		case 27: out[i] = (float)(int64_t)rd64(p + 8 * i); break;
		case 28: {
			uint64_t u = rd64(p + 8 * i);
			double d;

			memcpy(&d, &u, 8);
			out[i] = (float)d;
			break;
		}
		default:
			return titan_error(TITAN_E_UNSUPPORTED, "tensor '%s': cannot convert %s to float "
					   "(quantized types are not decoded)", t->name,
					   ggml_types[t->type].name);
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ writer */

struct wtensor {
	char *name;
	uint32_t type;
	int n_dims;
	uint64_t ne[4];
	uint64_t nbytes, offset;
	const void *data;
};

struct titan_gguf_writer {
	uint8_t *meta;         /* serialized pairs */
	size_t len, cap;
	char **keys;
	size_t n_kv, cap_kv;
	struct wtensor *t;
	size_t n_t, cap_t;
	uint32_t alignment;
	bool oom;
};

struct titan_gguf_writer *titan_gguf_writer_new(void)
{
	struct titan_gguf_writer *w = calloc(1, sizeof(*w));

	if (!w) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		return NULL;
	}
	w->alignment = TITAN_GGUF_DEFAULT_ALIGNMENT;
	return w;
}

void titan_gguf_writer_free(struct titan_gguf_writer *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n_kv; i++)
		free(w->keys[i]);
	for (size_t i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->keys);
	free(w->t);
	free(w->meta);
	free(w);
}

static void put(struct titan_gguf_writer *w, const void *p, size_t n)
{
	if (w->oom)
		return;
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		uint8_t *q;

		while (cap < w->len + n)
			cap *= 2;
		if (!(q = realloc(w->meta, cap))) {
			w->oom = true;
			return;
		}
		w->meta = q;
		w->cap = cap;
	}
	memcpy(w->meta + w->len, p, n);
	w->len += n;
}

static void put_le(struct titan_gguf_writer *w, uint64_t v, int bytes)
{
	uint8_t b[8];

	for (int i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, (size_t)bytes);
}

static void put_str(struct titan_gguf_writer *w, const char *s, size_t n)
{
	put_le(w, n, 8);
	put(w, s, n);
}

static bool valid_text(const char *s, size_t n)
{
	return titan_utf8_valid_prefix((const uint8_t *)s, n) == n && !memchr(s, 0, n);
}

/* Register `key` and write its name and type; the value follows. */
static int begin_kv(struct titan_gguf_writer *w, const char *key, enum titan_gguf_type type)
{
	size_t n = key ? strlen(key) : 0;

	if (!n || !valid_text(key, n))
		return titan_error(TITAN_E_INVALID, "GGUF writer: key '%s' is empty or not UTF-8",
				   key ? key : "(null)");
	for (size_t i = 0; i < w->n_kv; i++)
		if (!strcmp(w->keys[i], key))
			return titan_error(TITAN_E_INVALID, "GGUF writer: key '%s' is set twice", key);
	if (w->n_kv == w->cap_kv) {
		size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
		char **k = realloc(w->keys, cap * sizeof(*k));

		if (!k)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		w->keys = k;
		w->cap_kv = cap;
	}
	if (!(w->keys[w->n_kv] = strdup(key)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	w->n_kv++;
	put_str(w, key, n);
	put_le(w, (uint64_t)type, 4);
	return 0;
}

static int end_kv(struct titan_gguf_writer *w)
{
	return w->oom ? titan_error(TITAN_E_NOMEM, "out of memory building GGUF metadata") : 0;
}

/* A scalar of type t at v (host layout) */
static void put_scalar(struct titan_gguf_writer *w, enum titan_gguf_type t, const void *v)
{
	uint64_t u = 0;

	switch (t) {
	case TITAN_GGUF_UINT8: u = *(const uint8_t *)v; break;
	case TITAN_GGUF_INT8: u = (uint8_t)*(const int8_t *)v; break;
	case TITAN_GGUF_BOOL: u = *(const bool *)v ? 1 : 0; break;
	case TITAN_GGUF_UINT16: u = *(const uint16_t *)v; break;
	case TITAN_GGUF_INT16: u = (uint16_t)*(const int16_t *)v; break;
	case TITAN_GGUF_UINT32: u = *(const uint32_t *)v; break;
	case TITAN_GGUF_INT32: u = (uint32_t)*(const int32_t *)v; break;
	case TITAN_GGUF_FLOAT32: {
		uint32_t b;

		memcpy(&b, v, 4);
		u = b;
		break;
	}
	case TITAN_GGUF_UINT64:
	case TITAN_GGUF_INT64:
	case TITAN_GGUF_FLOAT64: memcpy(&u, v, 8); break;
	default: TITAN_ASSERT(0);
	}
	put_le(w, u, vtype_size[t]);
}

int titan_gguf_set(struct titan_gguf_writer *w, const char *key, enum titan_gguf_type type,
		   const void *v)
{
	int rc;

	if ((unsigned)type >= TITAN_GGUF_NTYPES || type == TITAN_GGUF_ARRAY || !v)
		return titan_error(TITAN_E_INVALID, "GGUF writer: key '%s': bad value type",
				   key ? key : "(null)");
	if (key && !strcmp(key, "general.alignment")) {
		if (type != TITAN_GGUF_UINT32 || !is_pow2(*(const uint32_t *)v))
			return titan_error(TITAN_E_INVALID, "GGUF writer: general.alignment must be a "
					   "u32 power of two");
	}
	if (type == TITAN_GGUF_STRING) {
		const char *s = *(const char *const *)v;

		if (!s)
			return titan_error(TITAN_E_INVALID, "GGUF writer: key '%s': NULL string",
					   key ? key : "(null)");
		if ((rc = begin_kv(w, key, type)) < 0)
			return rc;
		put_str(w, s, strlen(s));
		return end_kv(w);
	}
	if ((rc = begin_kv(w, key, type)) < 0)
		return rc;
	put_scalar(w, type, v);
	if (!strcmp(key, "general.alignment"))
		w->alignment = *(const uint32_t *)v;
	return end_kv(w);
}

int titan_gguf_set_u32(struct titan_gguf_writer *w, const char *key, uint32_t v)
{
	return titan_gguf_set(w, key, TITAN_GGUF_UINT32, &v);
}

int titan_gguf_set_i32(struct titan_gguf_writer *w, const char *key, int32_t v)
{
	return titan_gguf_set(w, key, TITAN_GGUF_INT32, &v);
}

int titan_gguf_set_u64(struct titan_gguf_writer *w, const char *key, uint64_t v)
{
	return titan_gguf_set(w, key, TITAN_GGUF_UINT64, &v);
}

int titan_gguf_set_f32(struct titan_gguf_writer *w, const char *key, float v)
{
	return titan_gguf_set(w, key, TITAN_GGUF_FLOAT32, &v);
}

int titan_gguf_set_f64(struct titan_gguf_writer *w, const char *key, double v)
{
	return titan_gguf_set(w, key, TITAN_GGUF_FLOAT64, &v);
}

int titan_gguf_set_bool(struct titan_gguf_writer *w, const char *key, bool v)
{
	return titan_gguf_set(w, key, TITAN_GGUF_BOOL, &v);
}

int titan_gguf_set_str(struct titan_gguf_writer *w, const char *key, const char *v)
{
	return titan_gguf_set(w, key, TITAN_GGUF_STRING, &v);
}

int titan_gguf_set_array(struct titan_gguf_writer *w, const char *key, enum titan_gguf_type elem,
			 const void *values, uint64_t n)
{
	int rc;

	if ((unsigned)elem >= TITAN_GGUF_NTYPES || elem == TITAN_GGUF_ARRAY ||
	    elem == TITAN_GGUF_STRING || (n && !values))
		return titan_error(TITAN_E_INVALID, "GGUF writer: key '%s': bad array element type",
				   key ? key : "(null)");
	if (elem == TITAN_GGUF_BOOL)
		for (uint64_t i = 0; i < n; i++)
			if (((const uint8_t *)values)[i] > 1)
				return titan_error(TITAN_E_INVALID, "GGUF writer: key '%s': bool "
						   "element %" PRIu64 " is not 0 or 1", key, i);
	if ((rc = begin_kv(w, key, TITAN_GGUF_ARRAY)) < 0)
		return rc;
	put_le(w, (uint64_t)elem, 4);
	put_le(w, n, 8);
	for (uint64_t i = 0; i < n; i++)
		put_scalar(w, elem, (const uint8_t *)values + i * vtype_size[elem]);
	return end_kv(w);
}

int titan_gguf_set_array_str(struct titan_gguf_writer *w, const char *key,
			     const char *const *strs, const size_t *lens, uint64_t n)
{
	int rc;

	for (uint64_t i = 0; i < n; i++)
		if (!strs || !strs[i])
			return titan_error(TITAN_E_INVALID, "GGUF writer: key '%s': string %" PRIu64
					   " is NULL", key ? key : "(null)", i);
	if ((rc = begin_kv(w, key, TITAN_GGUF_ARRAY)) < 0)
		return rc;
	put_le(w, TITAN_GGUF_STRING, 4);
	put_le(w, n, 8);
	for (uint64_t i = 0; i < n; i++)
		put_str(w, strs[i], lens ? lens[i] : strlen(strs[i]));
	return end_kv(w);
}

int titan_gguf_add_tensor(struct titan_gguf_writer *w, const char *name, uint32_t type, int ndim,
			  const int64_t *shape, const void *data)
{
	struct wtensor t = {0};
	size_t n = name ? strlen(name) : 0;
	uint64_t numel = 1;

	if (!n || n > TITAN_GGUF_MAX_NAME || !valid_text(name, n))
		return titan_error(TITAN_E_INVALID, "GGUF writer: tensor name '%s' is empty, longer "
				   "than %d bytes or not UTF-8", name ? name : "(null)",
				   TITAN_GGUF_MAX_NAME);
	if (type >= TITAN_GGML_NTYPES || !ggml_types[type].name)
		return titan_error(TITAN_E_INVALID, "GGUF writer: tensor '%s': unknown ggml type %"
				   PRIu32, name, type);
	if (ndim < 1 || ndim > 4 || !shape)
		return titan_error(TITAN_E_INVALID, "GGUF writer: tensor '%s' has %d dims (1 to 4)",
				   name, ndim);
	for (int d = 0; d < ndim; d++) {
		if (shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)shape[d], &numel) ||
		    numel > INT64_MAX)
			return titan_error(TITAN_E_INVALID, "GGUF writer: tensor '%s' has a negative or "
					   "overflowing shape", name);
		t.ne[ndim - 1 - d] = (uint64_t)shape[d];
	}
	if (t.ne[0] % ggml_types[type].block)
		return titan_error(TITAN_E_INVALID, "GGUF writer: tensor '%s': rows of %" PRIu64
				   " are not whole %s blocks", name, t.ne[0], ggml_types[type].name);
	if (tensor_nbytes(type, numel, &t.nbytes))
		return titan_error(TITAN_E_INVALID, "GGUF writer: tensor '%s' is too big", name);
	for (size_t i = 0; i < w->n_t; i++)
		if (!strcmp(w->t[i].name, name))
			return titan_error(TITAN_E_INVALID, "GGUF writer: tensor '%s' is added twice",
					   name);
	if (w->n_t == w->cap_t) {
		size_t cap = w->cap_t ? 2 * w->cap_t : 64;
		struct wtensor *q = realloc(w->t, cap * sizeof(*q));

		if (!q)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		w->t = q;
		w->cap_t = cap;
	}
	if (!(t.name = strdup(name)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	t.type = type;
	t.n_dims = ndim;
	t.data = data;
	w->t[w->n_t++] = t;
	return 0;
}

static int write_all(FILE *fp, const void *p, size_t n, const char *path)
{
	if (n && fwrite(p, 1, n, fp) != n)
		return titan_error(TITAN_E_IO, "cannot write '%s': %s", path, strerror(errno));
	return 0;
}

static int write_pad(FILE *fp, uint64_t at, uint32_t align, const char *path)
{
	static const uint8_t zeros[256];
	uint64_t n = (align - at % align) % align;

	while (n > 0) {
		size_t k = n > sizeof(zeros) ? sizeof(zeros) : (size_t)n;
		int rc = write_all(fp, zeros, k, path);

		if (rc < 0)
			return rc;
		n -= k;
	}
	return 0;
}

int titan_gguf_write(struct titan_gguf_writer *w, const char *path, titan_gguf_fill_fn fill,
		     void *ctx)
{
	const char *shown = path && strcmp(path, "-") ? path : "standard output";
	struct titan_gguf_writer info = {0};
	struct titan_afile af = {0};
	uint64_t off = 0, at, biggest = 0;
	uint8_t *buf = NULL;
	bool opened = false;
	int rc = 0;

	/* tensor infos, with offsets */
	for (size_t i = 0; i < w->n_t; i++) {
		struct wtensor *t = &w->t[i];

		t->offset = off;
		put_str(&info, t->name, strlen(t->name));
		put_le(&info, (uint64_t)t->n_dims, 4);
		for (int d = 0; d < t->n_dims; d++)
			put_le(&info, t->ne[d], 8);
		put_le(&info, t->type, 4);
		put_le(&info, t->offset, 8);
		if (!t->data && t->nbytes > biggest)
			biggest = t->nbytes;
		if (!t->data && t->nbytes && !fill) {
			rc = titan_error(TITAN_E_INVALID, "writing '%s': tensor '%s' has no data",
					 shown, t->name);
			goto done;
		}
		off += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
	}
	if (info.oom || w->oom || (biggest && !(buf = malloc((size_t)biggest)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory writing '%s'", shown);
		goto done;
	}
	{
		uint8_t head[24] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};

		for (int i = 0; i < 8; i++) {
			head[8 + i] = (uint8_t)((uint64_t)w->n_t >> (8 * i));
			head[16 + i] = (uint8_t)((uint64_t)w->n_kv >> (8 * i));
		}
		if ((rc = titan_afile_open(&af, path)) < 0)
			goto done;
		opened = true;
		if ((rc = write_all(af.fp, head, 24, shown)) < 0 ||
		    (rc = write_all(af.fp, w->meta, w->len, shown)) < 0 ||
		    (rc = write_all(af.fp, info.meta, info.len, shown)) < 0)
			goto done;
		at = 24 + w->len + info.len;
		if ((rc = write_pad(af.fp, at, w->alignment, shown)) < 0)
			goto done;
	}
	for (size_t i = 0; i < w->n_t; i++) {
		const struct wtensor *t = &w->t[i];
		const void *p = t->data;

		if (!p && t->nbytes) {
			if ((rc = fill(ctx, i, buf, t->nbytes)) < 0)
				goto done;
			p = buf;
		}
		if ((rc = write_all(af.fp, p, (size_t)t->nbytes, shown)) < 0 ||
		    (rc = write_pad(af.fp, t->nbytes, w->alignment, shown)) < 0)
			goto done;
	}
	if (!af.tmp && fflush(af.fp) != 0)
		rc = titan_error(TITAN_E_IO, "cannot write '%s': %s", shown, strerror(errno));
done:
	if (opened)
		rc = titan_afile_close(&af, rc);
	free(info.meta);
	free(buf);
	return rc;
}
