/*
 * test_gguf.c — the GGUF reader and writer (lib/ckpt/gguf.c) and the
 * llama.cpp export (lib/ckpt/gguf_export.c): writer -> reader round trips
 * (every value type, arrays, F32/F16/BF16 tensors from memory and from the
 * fill callback, a non-default alignment), writer argument errors, the
 * atomic write, and every reader check on a hand-built file corrupted one
 * field at a time (the error names the field and its byte offset); the
 * export's names, shapes, values, metadata, rope_freqs, dtypes, tied
 * models and tokenizer metadata.  Fixture paths are relative to
 * $TITAN_SRCDIR (default ".").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "scratch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/ckpt.h"
#include "titan/core.h"
#include "titan/model.h"

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_gguf");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

static const char *src_path(const char *rel)
{
	static char p[1024];
	const char *s = getenv("TITAN_SRCDIR");

	snprintf(p, sizeof(p), "%s/%s", s && *s ? s : ".", rel);
	return p;
}

static bool exists(const char *p)
{
	struct stat sb;

	return stat(p, &sb) == 0;
}

static int count_files(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

/* --------------------------------------------------------- raw files */

struct raw {
	uint8_t p[8192];
	size_t n;
};

static void r_put(struct raw *r, const void *d, size_t n)
{
	assert_true(r->n + n <= sizeof(r->p));
	memcpy(r->p + r->n, d, n);
	r->n += n;
}

static void r_le(struct raw *r, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++) {
		uint8_t b = (uint8_t)(v >> (8 * i));

		r_put(r, &b, 1);
	}
}

static size_t r_str(struct raw *r, const char *s)
{
	size_t at = r->n;

	r_le(r, strlen(s), 8);
	r_put(r, s, strlen(s));
	return at;
}

static void r_pad(struct raw *r, size_t align)
{
	while (r->n % align)
		r_le(r, 0, 1);
}

static void patch(struct raw *r, size_t at, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		r->p[at + i] = (uint8_t)(v >> (8 * i));
}

static const char *save(const struct raw *r, size_t n, const char *name)
{
	const char *p = path_of(name);
	FILE *f = fopen(p, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(r->p, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
	return p;
}

/* The standard file: 4 pairs, 2 tensors ("a" F32 {4, 2} at 0, "b" F16 {8}
 * at 32), alignment 32, with the byte offset of every field we corrupt. */
struct std_file {
	struct raw r;
	size_t magic, version, nt, nk;
	size_t key0, type0, align_val, arr_key, arr_elem, arr_n, bool_val, sarr_el1;
	size_t t0, t0_ndims, t0_dim0, t0_dim1, t0_type, t0_off;
	size_t t1, t1_name, t1_type, t1_off;
	size_t data;
};

static void std_file(struct std_file *s)
{
	struct raw *r = &s->r;
	float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};

	memset(s, 0, sizeof(*s));
	r_put(r, "GGUF", 4);
	s->version = r->n;
	r_le(r, 3, 4);
	s->nt = r->n;
	r_le(r, 2, 8);
	s->nk = r->n;
	r_le(r, 5, 8);
	/* "aaaa" = "llama" */
	s->key0 = r_str(r, "aaaa");
	s->type0 = r->n;
	r_le(r, TITAN_GGUF_STRING, 4);
	r_str(r, "llama");
	/* general.alignment = 32 */
	r_str(r, "general.alignment");
	r_le(r, TITAN_GGUF_UINT32, 4);
	s->align_val = r->n;
	r_le(r, 32, 4);
	/* "bbbb" = [1, 2, 3] (u32) */
	s->arr_key = r_str(r, "bbbb");
	r_le(r, TITAN_GGUF_ARRAY, 4);
	s->arr_elem = r->n;
	r_le(r, TITAN_GGUF_UINT32, 4);
	s->arr_n = r->n;
	r_le(r, 3, 8);
	r_le(r, 1, 4);
	r_le(r, 2, 4);
	r_le(r, 3, 4);
	/* "cccc" = true */
	r_str(r, "cccc");
	r_le(r, TITAN_GGUF_BOOL, 4);
	s->bool_val = r->n;
	r_le(r, 1, 1);
	/* "dddd" = ["x", "yy"] */
	r_str(r, "dddd");
	r_le(r, TITAN_GGUF_ARRAY, 4);
	r_le(r, TITAN_GGUF_STRING, 4);
	r_le(r, 2, 8);
	r_str(r, "x");
	s->sarr_el1 = r_str(r, "yy");
	/* tensor a: F32 ne {4, 2} (row-major [2, 4]) at 0 */
	s->t0 = r_str(r, "a");
	s->t0_ndims = r->n;
	r_le(r, 2, 4);
	s->t0_dim0 = r->n;
	r_le(r, 4, 8);
	s->t0_dim1 = r->n;
	r_le(r, 2, 8);
	s->t0_type = r->n;
	r_le(r, TITAN_GGML_F32, 4);
	s->t0_off = r->n;
	r_le(r, 0, 8);
	/* tensor b: F16 ne {8} at 32 */
	s->t1 = s->t1_name = r_str(r, "b");
	r_le(r, 1, 4);
	r_le(r, 8, 8);
	s->t1_type = r->n;
	r_le(r, TITAN_GGML_F16, 4);
	s->t1_off = r->n;
	r_le(r, 32, 8);
	r_pad(r, 32);
	s->data = r->n;
	r_put(r, a, sizeof(a));
	for (int i = 0; i < 8; i++)
		r_le(r, titan_f32_to_f16((float)i / 2), 2);
	r_pad(r, 32);
}

/* Open the patched copy and expect TITAN_E_FORMAT with `msg` in the text. */
static void expect_bad(const struct raw *r, size_t n, const char *msg)
{
	const char *p = save(r, n, "bad.gguf");
	struct titan_gguf *f = titan_gguf_open(p);

	if (f) {
		titan_gguf_close(f);
		fail_msg("'%s' was accepted (expected: %s)", p, msg);
	}
	assert_int_equal(titan_error_last()->code, TITAN_E_FORMAT);
	if (!strstr(titan_error_last()->msg, msg))
		fail_msg("error '%s' lacks '%s'", titan_error_last()->msg, msg);
	assert_non_null(strstr(titan_error_last()->msg, p));
}

static void test_std_file(void **state)
{
	struct std_file s;
	struct titan_gguf *f;
	const struct titan_gguf_kv *kv;
	const struct titan_gguf_tensor *t;
	int64_t v;
	size_t n;
	const char *str;
	float out[8];

	(void)state;
	std_file(&s);
	f = titan_gguf_open(save(&s.r, s.r.n, "std.gguf"));
	assert_non_null(f);
	assert_int_equal(f->version, 3);
	assert_int_equal(f->alignment, 32);
	assert_int_equal(f->data_offset, s.data);
	assert_int_equal(f->n_kv, 5);
	assert_int_equal(f->n_tensors, 2);
	kv = titan_gguf_find_kv(f, "aaaa");
	assert_non_null(kv);
	assert_int_equal(kv->offset, s.key0);
	str = titan_gguf_kv_str(kv, &n);
	assert_int_equal(n, 5);
	assert_memory_equal(str, "llama", 5);
	kv = titan_gguf_find_kv(f, "bbbb");
	assert_int_equal(kv->type, TITAN_GGUF_ARRAY);
	assert_int_equal(kv->elem, TITAN_GGUF_UINT32);
	assert_int_equal(kv->n, 3);
	assert_int_equal(titan_gguf_arr_int(kv, 2, &v), 0);
	assert_int_equal(v, 3);
	assert_int_equal(titan_gguf_arr_int(kv, 3, &v), TITAN_E_INVALID);
	assert_null(titan_gguf_arr_str(kv, 0, &n));
	assert_int_equal(titan_gguf_kv_int(titan_gguf_find_kv(f, "cccc"), &v), 0);
	assert_int_equal(v, 1);
	kv = titan_gguf_find_kv(f, "dddd");
	str = titan_gguf_arr_str(kv, 1, &n);
	assert_int_equal(n, 2);
	assert_memory_equal(str, "yy", 2);
	assert_null(titan_gguf_find_kv(f, "nope"));
	t = titan_gguf_find(f, "a");
	assert_non_null(t);
	assert_int_equal(t->n_dims, 2);
	assert_int_equal(t->ne[0], 4);
	assert_int_equal(t->shape[0], 2);
	assert_int_equal(t->shape[1], 4);
	assert_int_equal(t->nbytes, 32);
	assert_int_equal(t->info_offset, s.t0);
	assert_int_equal(titan_gguf_tensor_to_f32(t, out), 0);
	assert_true(out[7] == 8.0f);
	t = titan_gguf_find(f, "b");
	assert_int_equal(titan_gguf_tensor_to_f32(t, out), 0);
	assert_true(out[3] == 1.5f);
	assert_null(titan_gguf_find(f, "c"));
	titan_gguf_close(f);
	titan_gguf_close(NULL);
}

static void test_bad_files(void **state)
{
	struct std_file s;
	struct raw r;
	char msg[128];

	(void)state;
	std_file(&s);
#define BAD(at, v, bytes, text)                      \
	do {                                         \
		r = s.r;                             \
		patch(&r, (at), (v), (bytes));       \
		expect_bad(&r, r.n, (text));         \
	} while (0)
	/* header */
	BAD(0, 'X', 1, "is not a GGUF file");
	BAD(s.version, 1, 4, "GGUF version 1 is not supported");
	BAD(s.version, 4, 4, "the header at byte 4: GGUF version 4 is not supported");
	BAD(s.version, 0x03000000, 4, "big-endian");
	expect_bad(&s.r, 20, "fewer than the 24 of a GGUF header");
	expect_bad(&s.r, 3, "is not a GGUF file");
	BAD(s.nk, 1ULL << 60, 8, "metadata pairs cannot fit");
	BAD(s.nt, 1ULL << 60, 8, "tensors cannot fit");
	/* metadata */
	BAD(s.key0, 1ULL << 62, 8, "key 0 at byte 24: the key length 4611686018427387904 runs "
	    "past the end of the file");
	BAD(s.key0, 0, 8, "the key is empty");
	BAD(s.key0 + 9, 0, 1, "contains a NUL byte");
	BAD(s.key0 + 9, 0xff, 1, "not valid UTF-8");
	snprintf(msg, sizeof(msg), "key 'aaaa' at byte %zu: unknown value type 13", s.type0);
	BAD(s.type0, 13, 4, msg);
	BAD(s.arr_elem, TITAN_GGUF_ARRAY, 4, "an array of arrays");
	BAD(s.arr_elem, 99, 4, "unknown array element type 99");
	BAD(s.arr_n, 1ULL << 40, 8, "array of 1099511627776 u32 elements cannot fit");
	BAD(s.arr_n, 1000, 8, "cannot fit in the");
	BAD(s.bool_val, 2, 1, "bool value 2");
	BAD(s.sarr_el1, 1ULL << 50, 8, "an array string length 1125899906842624 runs past the end");
	r = s.r;
	memcpy(r.p + s.arr_key + 8, "aaaa", 4);
	snprintf(msg, sizeof(msg), "key 'aaaa' at byte %zu: the key appears twice (first at byte %zu)",
		 s.arr_key, s.key0);
	expect_bad(&r, r.n, msg);
	BAD(s.align_val, 48, 4, "general.alignment 48 is not a power of two");
	BAD(s.align_val, 0, 4, "general.alignment 0 is not a power of two");
	/* tensor infos */
	snprintf(msg, sizeof(msg), "tensor 'a' at byte %zu: n_dims 5 (GGUF tensors have 1 to 4 dims)",
		 s.t0_ndims);
	BAD(s.t0_ndims, 5, 4, msg);
	BAD(s.t0_ndims, 0, 4, "n_dims 0");
	BAD(s.t0_type, 4, 4, "unknown ggml type 4");
	BAD(s.t0_type, 999, 4, "unknown ggml type 999");
	BAD(s.t0_type, 2, 4, "a row of 4 elements is not a whole number of Q4_0 blocks");
	BAD(s.t0_dim0, 1ULL << 63, 8, "dim 0 is 9223372036854775808 (at most 2^63 - 1)");
	r = s.r;
	patch(&r, s.t0_dim0, 1ULL << 40, 8);
	patch(&r, s.t0_dim1, 1ULL << 40, 8);
	expect_bad(&r, r.n, "the dims' element count overflows");
	BAD(s.t1_off, 16, 8, "tensor 'b' at byte");
	BAD(s.t1_off, 16, 8, "offset 16 is not a multiple of the alignment 32");
	BAD(s.t1_off, 0, 8, "tensor 'a' at byte"); /* sorted by (offset, size): b, then a */
	BAD(s.t1_off, 0, 8, "its data [0, 32) overlaps tensor 'b' [0, 16) in the data section");
	BAD(s.t1_off, 4096, 8, "runs past the end of the file");
	/* a size that does not match the data: [2, 4] -> [3, 4] overlaps b, [100, 4] runs past */
	BAD(s.t0_dim1, 3, 8, "its data [32, 48) overlaps tensor 'a' [0, 48)");
	BAD(s.t0_dim1, 100, 8, "F32 tensor of 1600 bytes at offset 0 of the data section");
	r = s.r;
	r.p[s.t1_name + 8] = 'a';
	expect_bad(&r, r.n, "a second tensor with this name");
	/* truncated: inside the data, inside the tensor infos, inside a key */
	expect_bad(&s.r, s.data + 40, "runs past the end of the file");
	expect_bad(&s.r, s.t0_type + 2, "the file ends inside the tensor type");
	expect_bad(&s.r, s.t1_off + 8, "the data section would start at byte");
	expect_bad(&s.r, s.sarr_el1 + 9, "key 'dddd' at byte");
	expect_bad(&s.r, s.sarr_el1 + 9, "an array string length 2 runs past the end of the file "
		   "(1 bytes left)");
	expect_bad(&s.r, s.sarr_el1 + 4, "array of 2 string elements cannot fit in the 13 bytes "
		   "left in the file");
#undef BAD
}

static void test_bad_names(void **state)
{
	struct raw r = {.n = 0};
	char name[80];

	(void)state;
	/* a 64-byte tensor name (ggml's GGML_MAX_NAME is 64 with the NUL) */
	memset(name, 'n', 64);
	name[64] = 0;
	r_put(&r, "GGUF", 4);
	r_le(&r, 3, 4);
	r_le(&r, 1, 8);
	r_le(&r, 0, 8);
	r_str(&r, name);
	r_le(&r, 1, 4);
	r_le(&r, 1, 8);
	r_le(&r, 0, 4);
	r_le(&r, 0, 8);
	r_pad(&r, 32);
	r_le(&r, 0, 4);
	expect_bad(&r, r.n, "the tensor name of 64 bytes is longer than 63");
	/* general.alignment of the wrong type */
	r.n = 0;
	r_put(&r, "GGUF", 4);
	r_le(&r, 3, 4);
	r_le(&r, 0, 8);
	r_le(&r, 1, 8);
	r_str(&r, "general.alignment");
	r_le(&r, TITAN_GGUF_UINT64, 4);
	r_le(&r, 32, 8);
	expect_bad(&r, r.n, "general.alignment is a u64, not a u32");
	/* an empty file, a folder, a missing file */
	expect_bad(&r, 0, "is not a GGUF file");
	assert_null(titan_gguf_open(dir));
	assert_int_equal(titan_error_last()->code, TITAN_E_IO);
	assert_null(titan_gguf_open(path_of("missing.gguf")));
	assert_non_null(strstr(titan_error_last()->msg, "No such file or directory"));
}

/* ------------------------------------------------------- writer */

static int fill_pattern(void *ctx, size_t index, void *out, uint64_t nbytes)
{
	int *calls = ctx;

	(*calls)++;
	for (uint64_t i = 0; i < nbytes / 4; i++) {
		float x = (float)index * 1000 + (float)i;

		memcpy((char *)out + 4 * i, &x, 4);
	}
	return 0;
}

static int fill_fail(void *ctx, size_t index, void *out, uint64_t nbytes)
{
	(void)ctx;
	(void)index;
	(void)out;
	(void)nbytes;
	return titan_error(TITAN_E_INVALID, "no data today");
}

static void test_round_trip(void **state)
{
	struct titan_gguf_writer *w = titan_gguf_writer_new();
	const char *strs[] = {"a", "", "Ġhello", "\xe4\xb8\xad"};
	const int32_t ints[] = {-1, 0, 7};
	const float fl[] = {0.5f, -2.0f};
	const bool bools[] = {true, false, true};
	const uint16_t u16 = 65535;
	const int8_t i8 = -5;
	uint16_t half[6], bf[6];
	float x[6] = {1, -2, 0.5f, 65504, -0.0f, 3.140625f}, out[64];
	int64_t shape2[2] = {3, 2}, shape1[1] = {6}, shape3[3] = {2, 2, 4}, v;
	const struct titan_gguf_kv *kv;
	const struct titan_gguf_tensor *t;
	struct titan_gguf *f;
	double d;
	size_t n;
	int calls = 0;

	(void)state;
	for (int i = 0; i < 6; i++) {
		half[i] = titan_f32_to_f16(x[i]);
		bf[i] = titan_f32_to_bf16(x[i]);
	}
	assert_non_null(w);
	assert_int_equal(titan_gguf_set_str(w, "general.architecture", "llama"), 0);
	assert_int_equal(titan_gguf_set_u32(w, "general.alignment", 64), 0);
	assert_int_equal(titan_gguf_set_i32(w, "t.i32", -7), 0);
	assert_int_equal(titan_gguf_set_u64(w, "t.u64", UINT64_MAX), 0);
	assert_int_equal(titan_gguf_set_f32(w, "t.f32", 1e-5f), 0);
	assert_int_equal(titan_gguf_set_f64(w, "t.f64", 0.1), 0);
	assert_int_equal(titan_gguf_set_bool(w, "t.bool", true), 0);
	assert_int_equal(titan_gguf_set(w, "t.u16", TITAN_GGUF_UINT16, &u16), 0);
	assert_int_equal(titan_gguf_set(w, "t.i8", TITAN_GGUF_INT8, &i8), 0);
	assert_int_equal(titan_gguf_set_array_str(w, "t.strs", strs, NULL, 4), 0);
	assert_int_equal(titan_gguf_set_array(w, "t.ints", TITAN_GGUF_INT32, ints, 3), 0);
	assert_int_equal(titan_gguf_set_array(w, "t.floats", TITAN_GGUF_FLOAT32, fl, 2), 0);
	assert_int_equal(titan_gguf_set_array(w, "t.bools", TITAN_GGUF_BOOL, bools, 3), 0);
	assert_int_equal(titan_gguf_set_array(w, "t.empty", TITAN_GGUF_UINT8, NULL, 0), 0);
	assert_int_equal(titan_gguf_add_tensor(w, "f32", TITAN_GGML_F32, 2, shape2, x), 0);
	assert_int_equal(titan_gguf_add_tensor(w, "f16", TITAN_GGML_F16, 1, shape1, half), 0);
	assert_int_equal(titan_gguf_add_tensor(w, "bf16", TITAN_GGML_BF16, 2, shape2, bf), 0);
	assert_int_equal(titan_gguf_add_tensor(w, "filled", TITAN_GGML_F32, 3, shape3, NULL), 0);
	assert_int_equal(titan_gguf_add_tensor(w, "filled2", TITAN_GGML_F32, 1, shape1, NULL), 0);
	assert_int_equal(titan_gguf_write(w, path_of("rt.gguf"), fill_pattern, &calls), 0);
	assert_int_equal(calls, 2);
	titan_gguf_writer_free(w);
	assert_int_equal(count_files(), 1); /* no temporary file left */

	f = titan_gguf_open(path_of("rt.gguf"));
	assert_non_null(f);
	assert_int_equal(f->alignment, 64);
	assert_int_equal(f->data_offset % 64, 0);
	assert_int_equal(f->n_kv, 14);
	assert_string_equal(f->kv[0].key, "general.architecture");
	assert_string_equal(f->kv[13].key, "t.empty");
	assert_int_equal(titan_gguf_kv_int(titan_gguf_find_kv(f, "t.i32"), &v), 0);
	assert_int_equal(v, -7);
	assert_int_equal(titan_gguf_kv_int(titan_gguf_find_kv(f, "t.u64"), &v), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_kv_float(titan_gguf_find_kv(f, "t.u64"), &d), 0);
	assert_true(d == 18446744073709551615.0);
	assert_int_equal(titan_gguf_kv_float(titan_gguf_find_kv(f, "t.f32"), &d), 0);
	assert_true(d == (double)1e-5f);
	assert_int_equal(titan_gguf_kv_float(titan_gguf_find_kv(f, "t.f64"), &d), 0);
	assert_true(d == 0.1);
	assert_int_equal(titan_gguf_kv_int(titan_gguf_find_kv(f, "t.bool"), &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(titan_gguf_kv_int(titan_gguf_find_kv(f, "t.u16"), &v), 0);
	assert_int_equal(v, 65535);
	assert_int_equal(titan_gguf_kv_int(titan_gguf_find_kv(f, "t.i8"), &v), 0);
	assert_int_equal(v, -5);
	assert_int_equal(titan_gguf_kv_int(titan_gguf_find_kv(f, "general.architecture"), &v),
			 TITAN_E_INVALID);
	kv = titan_gguf_find_kv(f, "t.strs");
	assert_int_equal(kv->n, 4);
	for (int i = 0; i < 4; i++) {
		const char *s = titan_gguf_arr_str(kv, (uint64_t)i, &n);

		assert_int_equal(n, strlen(strs[i]));
		assert_memory_equal(s, strs[i], n);
	}
	kv = titan_gguf_find_kv(f, "t.ints");
	assert_int_equal(titan_gguf_arr_int(kv, 0, &v), 0);
	assert_int_equal(v, -1);
	kv = titan_gguf_find_kv(f, "t.floats");
	assert_int_equal(titan_gguf_arr_float(kv, 1, &d), 0);
	assert_true(d == -2.0);
	kv = titan_gguf_find_kv(f, "t.bools");
	assert_int_equal(titan_gguf_arr_int(kv, 2, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(titan_gguf_find_kv(f, "t.empty")->n, 0);

	assert_int_equal(f->n_tensors, 5);
	t = titan_gguf_find(f, "f32");
	assert_int_equal(t->ne[0], 2);
	assert_int_equal(t->ne[1], 3);
	assert_int_equal(titan_gguf_tensor_to_f32(t, out), 0);
	assert_memory_equal(out, x, sizeof(x));
	t = titan_gguf_find(f, "f16");
	assert_int_equal(titan_gguf_tensor_to_f32(t, out), 0);
	assert_memory_equal(out, x, sizeof(x)); /* all exact in half */
	t = titan_gguf_find(f, "bf16");
	assert_int_equal(t->type, TITAN_GGML_BF16);
	assert_int_equal(titan_gguf_tensor_to_f32(t, out), 0);
	for (int i = 0; i < 6; i++)
		assert_true(out[i] == titan_bf16_to_f32(bf[i]));
	t = titan_gguf_find(f, "filled");
	assert_int_equal(t->n_dims, 3);
	assert_int_equal(t->ne[0], 4);
	assert_int_equal(t->ne[2], 2);
	assert_int_equal(t->offset % 64, 0);
	assert_int_equal(titan_gguf_tensor_to_f32(t, out), 0);
	assert_true(out[15] == 3015.0f); /* the fourth tensor: index 3 */
	for (size_t i = 0; i < f->n_tensors; i++)
		assert_int_equal(f->tensors[i].offset % 64, 0);
	/* every tensor padded, the last one included (as ggml writes them) */
	assert_int_equal(f->file_size, f->data_offset + 64 * 5);
	titan_gguf_close(f);
}

/* A string array of no elements has no string offsets (found by
 * tests/fuzz/fuzz_gguf: the reader computed NULL + 0 for them, undefined
 * behaviour that UBSan reports; tests/fuzz/regress/gguf/empty-string-array
 * is these bytes). */
static void test_empty_string_array(void **state)
{
	static const uint8_t file[] = {
		'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* version 3, no tensors */
		1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'k',    /* 1 pair: key "k" */
		9, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,         /* array of 0 strings */
	};
	struct titan_gguf_writer *w = titan_gguf_writer_new();
	const struct titan_gguf_kv *kv;
	struct titan_gguf *f;
	FILE *fp;
	size_t n;
	int64_t v;

	(void)state;
	fp = fopen(path_of("empty.gguf"), "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(file, sizeof(file), 1, fp), 1);
	assert_int_equal(fclose(fp), 0);
	assert_non_null(w);
	assert_int_equal(titan_gguf_set_array_str(w, "none", NULL, NULL, 0), 0);
	assert_int_equal(titan_gguf_write(w, path_of("written.gguf"), NULL, NULL), 0);
	titan_gguf_writer_free(w);
	for (int i = 0; i < 2; i++) {
		f = titan_gguf_open(path_of(i ? "written.gguf" : "empty.gguf"));
		assert_non_null(f);
		assert_int_equal(f->n_kv, 1);
		kv = &f->kv[0];
		assert_int_equal(kv->type, TITAN_GGUF_ARRAY);
		assert_int_equal(kv->elem, TITAN_GGUF_STRING);
		assert_int_equal(kv->n, 0);
		assert_null(titan_gguf_arr_str(kv, 0, &n));
		assert_int_equal(titan_gguf_arr_int(kv, 0, &v), TITAN_E_INVALID);
		titan_gguf_close(f);
	}
	titan_error_clear();
}

static void test_writer_errors(void **state)
{
	struct titan_gguf_writer *w = titan_gguf_writer_new();
	int64_t shape[2] = {2, 33}, neg[1] = {-1}, one[1] = {4};
	char name[80];
	const uint16_t two[1] = {2};
	int calls = 0;

	(void)state;
	assert_int_equal(titan_gguf_set_u32(w, "k", 1), 0);
	assert_int_equal(titan_gguf_set_u32(w, "k", 2), TITAN_E_INVALID);
	assert_non_null(strstr(titan_error_last()->msg, "key 'k' is set twice"));
	assert_int_equal(titan_gguf_set_u32(w, "", 2), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_set_u32(w, "bad\xff", 2), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_set_u32(w, "general.alignment", 24), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_set_u64(w, "general.alignment", 32), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_set_array(w, "a", TITAN_GGUF_ARRAY, two, 1), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_set_array(w, "a", TITAN_GGUF_STRING, two, 1), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_set_array(w, "a", TITAN_GGUF_BOOL, two, 1), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_add_tensor(w, "t", TITAN_GGML_F32, 1, one, NULL), 0);
	assert_int_equal(titan_gguf_add_tensor(w, "t", TITAN_GGML_F32, 1, one, NULL), TITAN_E_INVALID);
	assert_non_null(strstr(titan_error_last()->msg, "tensor 't' is added twice"));
	memset(name, 'n', 64);
	name[64] = 0;
	assert_int_equal(titan_gguf_add_tensor(w, name, TITAN_GGML_F32, 1, one, NULL), TITAN_E_INVALID);
	name[63] = 0;
	assert_int_equal(titan_gguf_add_tensor(w, name, TITAN_GGML_F32, 1, one, NULL), 0);
	assert_int_equal(titan_gguf_add_tensor(w, "u", 4, 1, one, NULL), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_add_tensor(w, "u", TITAN_GGML_F32, 0, one, NULL), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_add_tensor(w, "u", TITAN_GGML_F32, 5, one, NULL), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_add_tensor(w, "u", TITAN_GGML_F32, 1, neg, NULL), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_add_tensor(w, "u", 2 /* Q4_0 */, 2, shape, NULL), TITAN_E_INVALID);
	assert_non_null(strstr(titan_error_last()->msg, "rows of 33 are not whole Q4_0 blocks"));
	/* no fill for a tensor without data; a failing fill; a missing folder:
	 * nothing is left behind */
	assert_int_equal(titan_gguf_write(w, path_of("w.gguf"), NULL, NULL), TITAN_E_INVALID);
	assert_int_equal(titan_gguf_write(w, path_of("w.gguf"), fill_fail, NULL), TITAN_E_INVALID);
	assert_non_null(strstr(titan_error_last()->msg, "no data today"));
	assert_int_equal(titan_gguf_write(w, path_of("no/such/w.gguf"), fill_pattern, &calls),
			 TITAN_E_IO);
	assert_non_null(strstr(titan_error_last()->msg, "No such file or directory"));
	assert_int_equal(count_files(), 0);
	assert_int_equal(titan_gguf_write(w, path_of("w.gguf"), fill_pattern, &calls), 0);
	assert_int_equal(count_files(), 1);
	titan_gguf_writer_free(w);
	titan_gguf_writer_free(NULL);
}

/* ------------------------------------------------------- export */

static int get_arena(void *ctx, const struct titan_param *p, float *out)
{
	const struct titan_param_arena *a = ctx;

	memcpy(out, titan_param_view(a, p), (size_t)p->numel * sizeof(float));
	return 0;
}

static void tiny(struct titan_model_dims *d, bool tied, int64_t vocab)
{
	assert_int_equal(titan_model_flavor("debugmodel", d), 0);
	snprintf(d->flavor, sizeof(d->flavor), "custom");
	d->dim = 32;
	d->n_layers = 2;
	d->n_heads = 4;
	d->n_kv_heads = 2;
	d->head_dim = 8;
	d->ffn_hidden = 48;
	d->multiple_of = 48;
	d->vocab_size = vocab;
	d->tied = tied;
	d->rope_scaling = true;
	d->rope_scaling_factor = 8;
	d->rope_low_freq_factor = 1;
	d->rope_high_freq_factor = 4;
	d->rope_original_max_position = 8192;
	d->rope_theta = 500000;
}

static int64_t kv_i(const struct titan_gguf *f, const char *key)
{
	const struct titan_gguf_kv *kv = titan_gguf_find_kv(f, key);
	int64_t v;

	if (!kv)
		fail_msg("no key %s", key);
	assert_int_equal(titan_gguf_kv_int(kv, &v), 0);
	return v;
}

static void export_one(bool tied, enum titan_ckpt_dtype dt)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena a;
	struct titan_gguf_export_opts o;
	struct titan_gguf *f;
	float *buf = malloc(64 * 64 * sizeof(float)), rope[4];
	const char *path = path_of("e.gguf");
	size_t n;
	double x;

	tiny(&d, tied, 40);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&a, &t, NULL, TITAN_MEM_PARAMS), 0);
	titan_model_init_params(&a, 5);
	titan_gguf_export_opts_default(&o);
	o.dtype = dt;
	assert_int_equal(titan_gguf_export(path, &t, get_arena, &a, &o), 0);
	f = titan_gguf_open(path);
	assert_non_null(f);
	assert_memory_equal(titan_gguf_kv_str(titan_gguf_find_kv(f, "general.architecture"), &n),
			    "llama", 5);
	assert_int_equal(kv_i(f, "llama.block_count"), 2);
	assert_int_equal(kv_i(f, "llama.embedding_length"), 32);
	assert_int_equal(kv_i(f, "llama.feed_forward_length"), 48);
	assert_int_equal(kv_i(f, "llama.attention.head_count"), 4);
	assert_int_equal(kv_i(f, "llama.attention.head_count_kv"), 2);
	assert_int_equal(kv_i(f, "llama.rope.dimension_count"), 8);
	assert_int_equal(kv_i(f, "llama.vocab_size"), 40);
	assert_int_equal(kv_i(f, "llama.context_length"), 131072);
	assert_int_equal(kv_i(f, "general.file_type"),
			 dt == TITAN_CKPT_FLOAT32 ? 0 : dt == TITAN_CKPT_FLOAT16 ? 1 : 32);
	assert_int_equal(titan_gguf_kv_float(titan_gguf_find_kv(f, "llama.rope.freq_base"), &x), 0);
	assert_true(x == 500000.0);
	assert_int_equal(titan_gguf_find_kv(f, "llama.attention.layer_norm_rms_epsilon")->type,
			 TITAN_GGUF_FLOAT32);
	assert_null(titan_gguf_find_kv(f, "tokenizer.ggml.tokens"));
	assert_int_equal(f->n_tensors, (size_t)t.n + 1);
	/* rope_freqs: high frequencies 1, low ones 8, a band in between */
	titan_gguf_rope_freqs(&d, rope);
	assert_true(rope[0] == 1.0f && rope[3] == 8.0f);
	assert_int_equal(titan_gguf_tensor_to_f32(titan_gguf_find(f, "rope_freqs.weight"), buf), 0);
	assert_memory_equal(buf, rope, sizeof(rope));
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];
		const struct titan_gguf_tensor *g;
		char name[64];

		assert_int_equal(titan_gguf_param_name(p, name, sizeof(name)), 0);
		g = titan_gguf_find(f, name);
		assert_non_null(g);
		assert_int_equal(g->n_dims, p->ndim);
		assert_int_equal(g->shape[0], p->shape[0]);
		assert_int_equal(g->ne[0], p->ndim == 2 ? p->shape[1] : p->shape[0]);
		assert_int_equal(g->type, p->ndim == 1 || dt == TITAN_CKPT_FLOAT32 ? TITAN_GGML_F32 :
				 dt == TITAN_CKPT_FLOAT16 ? TITAN_GGML_F16 : TITAN_GGML_BF16);
		assert_int_equal(titan_gguf_tensor_to_f32(g, buf), 0);
		for (int64_t k = 0; k < p->numel; k++) {
			float want = titan_param_view(&a, p)[k];

			if (g->type != TITAN_GGML_F32) /* round to nearest even, then widen */
				titan_ckpt_uncast(dt, (uint16_t[]){dt == TITAN_CKPT_FLOAT16 ?
					titan_f32_to_f16(want) : titan_f32_to_bf16(want)}, &want, 1);
			assert_true(buf[k] == want); /* q/k too: no permutation */
		}
	}
	assert_true(titan_gguf_find(f, "output.weight") ? !tied : tied);
	assert_non_null(titan_gguf_find(f, "blk.1.ffn_down.weight"));
	titan_gguf_close(f);
	titan_param_arena_release(&a);
	titan_param_table_release(&t);
	free(buf);
}

static void test_export(void **state)
{
	(void)state;
	export_one(false, TITAN_CKPT_FLOAT32);
	export_one(true, TITAN_CKPT_FLOAT32);
	export_one(false, TITAN_CKPT_BFLOAT16);
	export_one(false, TITAN_CKPT_FLOAT16);
}

static void test_export_tokenizer(void **state)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena a;
	struct titan_gguf_export_opts o;
	struct titan_gguf *f;
	const struct titan_gguf_kv *tok, *types, *merges;
	const char *s;
	size_t n;
	int64_t v;

	(void)state;
	tiny(&d, false, 528); /* tiny.tiktoken: 265 ranks + 256 specials = 521 ids */
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&a, &t, NULL, TITAN_MEM_PARAMS), 0);
	titan_gguf_export_opts_default(&o);
	o.tokenizer = src_path("tests/fixtures/tok/tiny.tiktoken");
	o.name = "tiny";
	assert_int_equal(titan_gguf_export(path_of("t.gguf"), &t, get_arena, &a, &o), 0);
	f = titan_gguf_open(path_of("t.gguf"));
	assert_non_null(f);
	s = titan_gguf_kv_str(titan_gguf_find_kv(f, "general.name"), &n);
	assert_memory_equal(s, "tiny", 4);
	s = titan_gguf_kv_str(titan_gguf_find_kv(f, "tokenizer.ggml.model"), &n);
	assert_memory_equal(s, "gpt2", n);
	s = titan_gguf_kv_str(titan_gguf_find_kv(f, "tokenizer.ggml.pre"), &n);
	assert_int_equal(n, 9);
	assert_memory_equal(s, "llama-bpe", 9);
	tok = titan_gguf_find_kv(f, "tokenizer.ggml.tokens");
	types = titan_gguf_find_kv(f, "tokenizer.ggml.token_type");
	merges = titan_gguf_find_kv(f, "tokenizer.ggml.merges");
	assert_int_equal(tok->n, 528);
	assert_int_equal(types->n, 528);
	assert_int_equal(types->elem, TITAN_GGUF_INT32);
	assert_true(merges->n >= 265 - 256); /* at least one merge per multi-byte rank */
	/* byte 0x20 (rank 32) is "Ġ" in GPT-2's byte-level alphabet, 0x41 is "A" */
	s = titan_gguf_arr_str(tok, 32, &n);
	assert_int_equal(n, 2);
	assert_memory_equal(s, "\xc4\xa0", 2);
	s = titan_gguf_arr_str(tok, 65, &n);
	assert_memory_equal(s, "A", 1);
	assert_int_equal(titan_gguf_arr_int(types, 65, &v), 0);
	assert_int_equal(v, 1);
	/* the first special: <|begin_of_text|>, a control token and BOS */
	s = titan_gguf_arr_str(tok, 265, &n);
	assert_int_equal(n, strlen("<|begin_of_text|>"));
	assert_memory_equal(s, "<|begin_of_text|>", n);
	assert_int_equal(titan_gguf_arr_int(types, 265, &v), 0);
	assert_int_equal(v, 3);
	assert_int_equal(kv_i(f, "tokenizer.ggml.bos_token_id"), 265);
	assert_int_equal(kv_i(f, "tokenizer.ggml.eos_token_id"), 266);
	/* ids past the tokenizer: [PAD521].. as unused tokens */
	s = titan_gguf_arr_str(tok, 521, &n);
	assert_memory_equal(s, "[PAD521]", n);
	assert_int_equal(titan_gguf_arr_int(types, 527, &v), 0);
	assert_int_equal(v, 5);
	/* every merge "A B" joins two tokens into a third */
	for (uint64_t i = 0; i < merges->n; i++) {
		const char *m = titan_gguf_arr_str(merges, i, &n);

		assert_non_null(memchr(m, ' ', n));
	}
	titan_gguf_close(f);

	/* a tokenizer with more ids than the model: an error, no file */
	titan_param_arena_release(&a);
	titan_param_table_release(&t);
	tiny(&d, false, 300);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&a, &t, NULL, TITAN_MEM_PARAMS), 0);
	assert_int_equal(titan_gguf_export(path_of("big.gguf"), &t, get_arena, &a, &o),
			 TITAN_E_INVALID);
	assert_non_null(strstr(titan_error_last()->msg, "has 521 token ids, more than the model's "
			       "vocab_size 300"));
	assert_false(exists(path_of("big.gguf")));
	titan_param_arena_release(&a);
	titan_param_table_release(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_std_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_string_array, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writer_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_export, setup, teardown),
		cmocka_unit_test_setup_teardown(test_export_tokenizer, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
