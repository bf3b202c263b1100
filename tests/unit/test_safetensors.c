/*
 * test_safetensors.c — the safetensors reader and writer (lib/ckpt/
 * safetensors.c): round trip over every layout rule (HF order, alignment,
 * metadata, scalars, empty tensors), byte-identical output to the HF
 * library's own serialization tests, the atomic write, each malformed
 * header giving an error that names the problem, conversions (F16/BF16
 * specials), and files written by Python: tests/fixtures/safetensors/
 * python.safetensors and the golden files of tests/ref/make_golden.py.
 * Fixture paths are relative to $TITAN_SRCDIR (default ".").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "scratch.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/ckpt.h"
#include "titan/core.h"

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_safetensors");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
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

static const char *src_path(const char *rel)
{
	static char p[1024];
	const char *s = getenv("TITAN_SRCDIR");

	snprintf(p, sizeof(p), "%s/%s", s && *s ? s : ".", rel);
	return p;
}

/* A raw file: u64 length (of `header` unless `len` != UINT64_MAX), header,
 * `n` data bytes. */
static const char *write_raw_len(const char *name, uint64_t len, const char *header,
				 const void *data, size_t n)
{
	const char *p = path_of(name);
	FILE *f = fopen(p, "wb");
	uint8_t le[8];

	if (len == UINT64_MAX)
		len = strlen(header);
	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)(len >> (8 * i));
	assert_non_null(f);
	assert_int_equal(fwrite(le, 1, 8, f), 8);
	if (*header)
		assert_int_equal(fwrite(header, 1, strlen(header), f), strlen(header));
	if (n)
		assert_int_equal(fwrite(data, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
	return p;
}

static const char *write_raw(const char *name, const char *header, size_t data_bytes)
{
	static const uint8_t zeros[256];

	assert_true(data_bytes <= sizeof(zeros));
	return write_raw_len(name, UINT64_MAX, header, zeros, data_bytes);
}

static const uint8_t *read_all(const char *p, size_t *n)
{
	static uint8_t buf[4096];
	FILE *f = fopen(p, "rb");

	assert_non_null(f);
	*n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	return buf;
}

/* ------------------------------------------------------------ round trip */

static void test_round_trip(void **state)
{
	const float f32[6] = {0.0f, 1.5f, -2.0f, 3.25f, 1e-3f, -0.0f};
	const uint16_t bf16[4] = {0x3f80, 0xbfc0, 0x4040, 0x3e20}; /* 1, -1.5, 3, 0.15625 */
	const int32_t i32 = -7;
	const int64_t i64[4] = {INT64_MIN, -1, 1LL << 40, INT64_MAX};
	const int64_t s23[2] = {2, 3}, s4[1] = {4}, s0[1] = {0}, s212[3] = {2, 1, 2};
	const struct titan_st_write_tensor t[] = {
		{"w.f32", TITAN_ST_F32, 2, s23, f32},
		{"b.bf16", TITAN_ST_BF16, 1, s4, bf16},
		{"scalar", TITAN_ST_I32, 0, NULL, &i32},
		{"empty", TITAN_ST_U8, 1, s0, NULL},
		{"a.i64", TITAN_ST_I64, 3, s212, i64},
		{"a.f32", TITAN_ST_F32, 1, s4, f32},
	};
	const struct titan_st_meta meta[] = {
		{"format", "pt"}, {"note", "ünï ✓ \"quoted\"\n"}, {"empty", ""},
	};
	const char *p = path_of("rt.safetensors");
	const struct titan_st_tensor *x;
	struct titan_safetensors *f;
	float out[6];
	int64_t oi[4];
	(void)state;

	assert_int_equal(titan_safetensors_write(p, t, 6, meta, 3), 0);
	assert_int_equal(count_files(), 1); /* no temporary left */
	f = titan_safetensors_open(p);
	assert_non_null(f);
	assert_int_equal(f->n_tensors, 6);
	assert_int_equal(f->header_len % 8, 0);
	/* HF's layout order: dtype descending (I64 > F32 > I32 > BF16 > U8), then name */
	assert_string_equal(f->tensors[0].name, "a.i64");
	assert_string_equal(f->tensors[1].name, "a.f32");
	assert_string_equal(f->tensors[2].name, "w.f32");
	assert_string_equal(f->tensors[3].name, "scalar");
	assert_string_equal(f->tensors[4].name, "b.bf16");
	assert_string_equal(f->tensors[5].name, "empty");
	assert_int_equal(f->buffer_len, 32 + 16 + 24 + 4 + 8 + 0);
	for (size_t i = 0; i < f->n_tensors; i++) {
		int bytes = titan_st_dtype_bits(f->tensors[i].dtype) / 8;

		/* every tensor aligned to its element size */
		assert_int_equal((uintptr_t)f->tensors[i].data % (uintptr_t)bytes, 0);
	}
	x = titan_safetensors_find(f, "w.f32");
	assert_non_null(x);
	assert_int_equal(x->dtype, TITAN_ST_F32);
	assert_int_equal(x->ndim, 2);
	assert_int_equal(x->shape[0], 2);
	assert_int_equal(x->shape[1], 3);
	assert_int_equal(x->numel, 6);
	assert_int_equal(x->nbytes, 24);
	assert_memory_equal(x->data, f32, sizeof(f32));
	x = titan_safetensors_find(f, "scalar");
	assert_int_equal(x->ndim, 0);
	assert_int_equal(x->numel, 1);
	assert_int_equal(*(const int32_t *)x->data, -7);
	x = titan_safetensors_find(f, "empty");
	assert_int_equal(x->numel, 0);
	assert_int_equal(x->nbytes, 0);
	assert_int_equal(x->begin, x->end);
	x = titan_safetensors_find(f, "b.bf16");
	assert_int_equal(titan_st_tensor_to_f32(x, out), 0);
	assert_true(out[0] == 1.0f && out[1] == -1.5f && out[2] == 3.0f && out[3] == 0.15625f);
	x = titan_safetensors_find(f, "a.i64");
	assert_int_equal(titan_st_tensor_to_i64(x, oi), 0);
	assert_memory_equal(oi, i64, sizeof(i64));
	assert_null(titan_safetensors_find(f, "nope"));
	assert_null(titan_safetensors_find(f, ""));
	/* metadata keeps its order */
	assert_int_equal(f->n_meta, 3);
	assert_string_equal(f->meta_keys[0], "format");
	assert_string_equal(f->meta_keys[2], "empty");
	assert_string_equal(titan_safetensors_meta(f, "note"), "ünï ✓ \"quoted\"\n");
	assert_string_equal(titan_safetensors_meta(f, "empty"), "");
	assert_null(titan_safetensors_meta(f, "nope"));

	/* checked lookups */
	assert_int_equal(titan_safetensors_get(f, "w.f32", TITAN_ST_F32, 2, s23, &x), 0);
	assert_int_equal(titan_safetensors_get(f, "w.f32", TITAN_ST_F32, -1, NULL, &x), 0);
	assert_int_equal(titan_safetensors_get(f, "scalar", TITAN_ST_I32, 0, NULL, &x), 0);
	assert_int_equal(titan_safetensors_get(f, "w.f32", TITAN_ST_F32, 1, s4, &x),
			 TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "tensor 'w.f32' has shape [2, 3], expected [4]"));
	assert_int_equal(titan_safetensors_get(f, "w.f32", TITAN_ST_BF16, -1, NULL, &x),
			 TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "has dtype F32, expected BF16"));
	assert_int_equal(titan_safetensors_get(f, "gone", TITAN_ST_F32, -1, NULL, &x),
			 TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "has no tensor 'gone'"));
	assert_int_equal(titan_st_tensor_to_i64(titan_safetensors_find(f, "w.f32"), oi),
			 TITAN_E_INVALID);
	titan_safetensors_close(f);
	titan_safetensors_close(NULL);

	/* no tensors, no metadata: "{}" padded */
	assert_int_equal(titan_safetensors_write(p, NULL, 0, NULL, 0), 0);
	f = titan_safetensors_open(p);
	assert_non_null(f);
	assert_int_equal(f->n_tensors, 0);
	assert_int_equal(f->n_meta, 0);
	titan_safetensors_close(f);
}

/* The byte streams of the HF library's own tests (safetensors/src/
 * tensor.rs: test_serialization, test_serialization_forced_alignement,
 * test_empty): our writer produces the same bytes. */
static void test_hf_bytes(void **state)
{
	const float v[6] = {0, 1, 2, 3, 4, 5};
	const int64_t s123[3] = {1, 2, 3}, s1123[4] = {1, 1, 2, 3};
	const char *h1 = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
	const char *h2 = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}";
	struct titan_st_write_tensor t = {"attn.0", TITAN_ST_F32, 3, s123, v};
	const uint8_t *b;
	size_t n;
	(void)state;

	assert_int_equal(titan_safetensors_write(path_of("hf1"), &t, 1, NULL, 0), 0);
	b = read_all(path_of("hf1"), &n);
	assert_int_equal(strlen(h1), 64);
	assert_int_equal(n, 8 + 64 + 24);
	assert_int_equal(b[0], 64);
	assert_memory_equal(b + 8, h1, 64);
	assert_memory_equal(b + 72, v, 24);

	t.name = "attn0";
	t.ndim = 4;
	t.shape = s1123;
	assert_int_equal(titan_safetensors_write(path_of("hf2"), &t, 1, NULL, 0), 0);
	b = read_all(path_of("hf2"), &n);
	assert_int_equal(n, 8 + 72 + 24);
	assert_int_equal(b[0], 72); /* 65 bytes of JSON + 7 spaces */
	assert_memory_equal(b + 8, h2, 65);
	assert_memory_equal(b + 8 + 65, "       ", 7);

	assert_int_equal(titan_safetensors_write(path_of("hf3"), NULL, 0, NULL, 0), 0);
	b = read_all(path_of("hf3"), &n);
	assert_int_equal(n, 16);
	assert_memory_equal(b, "\x08\0\0\0\0\0\0\0{}      ", 16);
	{
		const struct titan_st_meta m = {"framework", "pt"};

		assert_int_equal(titan_safetensors_write(path_of("hf4"), NULL, 0, &m, 1), 0);
		b = read_all(path_of("hf4"), &n);
		assert_int_equal(n, 48);
		assert_int_equal(b[0], 40);
		assert_memory_equal(b + 8, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", 40);
	}
}

static void test_writer_errors(void **state)
{
	const float v[4] = {0};
	const int64_t s2[1] = {2}, sneg[1] = {-1}, s3[1] = {3};
	struct titan_st_write_tensor t[2] = {
		{"x", TITAN_ST_F32, 1, s2, v}, {"x", TITAN_ST_F16, 1, s2, v},
	};
	struct titan_st_meta m[2] = {{"k", "v"}, {"k", "w"}};
	(void)state;

	assert_int_equal(titan_safetensors_write(path_of("e"), t, 2, NULL, 0), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "tensor 'x' appears twice"));
	t[1].name = "__metadata__";
	assert_int_equal(titan_safetensors_write(path_of("e"), t, 2, NULL, 0), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "reserved"));
	t[1].name = "bad\xff";
	assert_int_equal(titan_safetensors_write(path_of("e"), t, 2, NULL, 0), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "not valid UTF-8"));
	t[1].name = "y";
	t[1].shape = sneg;
	assert_int_equal(titan_safetensors_write(path_of("e"), t, 2, NULL, 0), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "negative"));
	t[1].shape = s3;
	t[1].dtype = TITAN_ST_F4; /* 3 × 4 bits */
	assert_int_equal(titan_safetensors_write(path_of("e"), t, 2, NULL, 0), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "whole number of bytes"));
	t[1].dtype = TITAN_ST_F16;
	assert_int_equal(titan_safetensors_write(path_of("e"), t, 2, m, 2), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "repeats the key 'k'"));
	/* nothing was left behind, under the name or a temporary one */
	assert_int_equal(count_files(), 0);
	/* a folder that does not exist */
	assert_int_equal(titan_safetensors_write("/nonexistent-dir/x.safetensors", t, 1, NULL, 0),
			 TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "/nonexistent-dir/x.safetensors"));
	/* the F4 tensor with an even count is fine */
	t[1].dtype = TITAN_ST_F4;
	t[1].shape = s2;
	assert_int_equal(titan_safetensors_write(path_of("ok"), t, 2, m, 1), 0);
	{
		struct titan_safetensors *f = titan_safetensors_open(path_of("ok"));

		assert_non_null(f);
		assert_int_equal(titan_safetensors_find(f, "y")->nbytes, 1);
		titan_safetensors_close(f);
	}
}

/* ---------------------------------------------------------- bad headers */

/* open must fail with `code` and a message containing `want` (and the file name) */
static void expect_bad(const char *p, int code, const char *want)
{
	struct titan_safetensors *f;

	titan_error_clear();
	f = titan_safetensors_open(p);
	if (f) {
		titan_safetensors_close(f);
		fail_msg("'%s' opened, expected an error with \"%s\"", p, want);
	}
	if (titan_error_last()->code != code || !strstr(titan_errmsg(), want) ||
	    !strstr(titan_errmsg(), p))
		fail_msg("error %d \"%s\", expected %d with \"%s\"", titan_error_last()->code,
			 titan_errmsg(), code, want);
}

#define T32(name, b, e) "\"" name "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" #b "," #e "]}"

static void test_bad_headers(void **state)
{
	const int E = TITAN_E_FORMAT;
	(void)state;

	expect_bad(path_of("missing"), TITAN_E_IO, "No such file");
	expect_bad(dir, TITAN_E_IO, "not a regular file");
	{
		FILE *f = fopen(path_of("short"), "wb");

		fwrite("\x02\0\0", 1, 3, f);
		fclose(f);
		expect_bad(path_of("short"), E, "shorter than the 8-byte header length");
	}
	expect_bad(write_raw_len("huge", 100000001ULL, "{}", NULL, 0), E,
		   "exceeds the safetensors limit of 100000000 bytes");
	expect_bad(write_raw_len("past", 1000, "{}", NULL, 0), E,
		   "header length 1000 runs past the end of the file (10 bytes)");
	expect_bad(write_raw("json", "{\"a\":", 0), E, "the safetensors header is not valid JSON");
	expect_bad(write_raw("junk", "{}  x", 0), E, "not valid JSON");
	expect_bad(write_raw_len("nulpad", 3, "{}", "\0", 1), E, "has a NUL byte at offset 10");
	expect_bad(write_raw("array", "[]", 0), E, "is not a JSON object");
	expect_bad(write_raw("utf8", "{\"\xc3\x28\":{}}", 0), E, "not valid JSON");
	expect_bad(write_raw("dup", "{" T32("a", 0, 8) "," T32("a", 8, 16) "}", 16), E,
		   "duplicate");
	expect_bad(write_raw("dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[],\"data_offsets\":[0,4]}}",
			     4), E, "tensor 'a' has unknown dtype \"F33\"");
	expect_bad(write_raw("dtype2", "{\"a\":{\"dtype\":\"f32\",\"shape\":[],\"data_offsets\":[0,4]}}",
			     4), E, "unknown dtype \"f32\"");
	expect_bad(write_raw("nodtype", "{\"a\":{\"shape\":[],\"data_offsets\":[0,4]}}", 4), E,
		   "tensor 'a' has no \"dtype\" string");
	expect_bad(write_raw("noshape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4), E,
		   "tensor 'a' has no \"shape\" array");
	expect_bad(write_raw("negshape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
			     4), E, "tensor 'a': shape entry 0 is not an integer >= 0");
	expect_bad(write_raw("realshape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}",
			     4), E, "shape entry 0 is not an integer");
	expect_bad(write_raw("nooff", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), E,
		   "tensor 'a' needs \"data_offsets\": [begin, end]");
	expect_bad(write_raw("off3", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}",
			     4), E, "needs \"data_offsets\"");
	expect_bad(write_raw("notobj", "{\"a\":[1,2]}", 0), E, "tensor 'a' is not an object");
	expect_bad(write_raw("size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}",
			     20), E, "dtype F32 and shape [2, 3] take 24 bytes but data_offsets [0, 20] hold 20");
	expect_bad(write_raw("backwards", "{" T32("a", 8, 0) "}", 8), E,
		   "data_offsets [8, 0] end before they begin");
	expect_bad(write_raw("overlap", "{" T32("a", 0, 8) "," T32("b", 4, 12) "}", 12), E,
		   "tensor 'b' [4, 12) overlaps tensor 'a', which ends at 8");
	expect_bad(write_raw("hole", "{" T32("a", 0, 8) "," T32("b", 12, 20) "}", 20), E,
		   "hole of 4 bytes before tensor 'b' (starts at 12, 'a' ends at 8)");
	expect_bad(write_raw("hole0", "{" T32("a", 4, 12) "}", 12), E,
		   "hole of 4 bytes at the start of the data buffer, before tensor 'a'");
	expect_bad(write_raw("trailing", "{" T32("a", 0, 8) "}", 9), E,
		   "the tensors cover 8 bytes of data but the file has 9 after the header: "
		   "trailing bytes");
	expect_bad(write_raw("truncated", "{" T32("a", 0, 8) "," T32("b", 8, 16) "}", 12), E,
		   "the file is truncated");
	expect_bad(write_raw("nodata", "{}", 4), E, "trailing bytes");
	expect_bad(write_raw("meta", "{\"__metadata__\":{\"k\":1}}", 0), E,
		   "__metadata__ value of \"k\" is not a string");
	expect_bad(write_raw("meta2", "{\"__metadata__\":[\"k\"]}", 0), E,
		   "\"__metadata__\" is not an object of strings");
	expect_bad(write_raw("f4", "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", 1),
		   E, "3 elements of F4 are not a whole number of bytes");
	expect_bad(write_raw("overflow",
			     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
			     "\"data_offsets\":[0,0]}}", 0), E, "element count overflows");
	expect_bad(write_raw("overflow2",
			     "{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
			     "\"data_offsets\":[0,0]}}", 0), E, "byte size overflows");
}

/* What HF accepts, we accept: key order, trailing spaces, null metadata,
 * unknown fields, scalars, zero-size tensors at any offset. */
static void test_good_headers(void **state)
{
	struct titan_safetensors *f;
	const struct titan_st_tensor *t;
	(void)state;

	f = titan_safetensors_open(write_raw("order", "{" T32("b", 8, 16) "," T32("a", 0, 8) "}   \n\t ",
					     16));
	assert_non_null(f);
	assert_string_equal(f->tensors[0].name, "a");
	assert_string_equal(f->tensors[1].name, "b");
	assert_int_equal(titan_safetensors_find(f, "b")->begin, 8);
	titan_safetensors_close(f);

	f = titan_safetensors_open(write_raw(
		"misc", "{\"__metadata__\":null,\"z\":{\"dtype\":\"U8\",\"shape\":[0,5],"
			"\"data_offsets\":[2,2],\"extra\":[1]},\"s\":{\"dtype\":\"I16\",\"shape\":[],"
			"\"data_offsets\":[0,2]},\"e\":{\"dtype\":\"BOOL\",\"shape\":[0],"
			"\"data_offsets\":[2,2]}}", 2));
	assert_non_null(f);
	assert_int_equal(f->n_tensors, 3);
	assert_int_equal(f->n_meta, 0);
	t = titan_safetensors_find(f, "z");
	assert_int_equal(t->ndim, 2);
	assert_int_equal(t->numel, 0);
	assert_int_equal(titan_safetensors_find(f, "s")->numel, 1);
	titan_safetensors_close(f);

	f = titan_safetensors_open(write_raw("empty", "{}", 0));
	assert_non_null(f);
	assert_int_equal(f->n_tensors, 0);
	titan_safetensors_close(f);
}

/* ------------------------------------------------------------ conversions */

static void test_convert(void **state)
{
	const uint16_t h[8] = {0x3c00, 0x8000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0xfc00, 0x7e00};
	const uint16_t bf[3] = {0x7f80, 0x0001, 0xc2f7};
	const double d[2] = {0.1, -1e300};
	const int64_t s8[1] = {8}, s3[1] = {3}, s2[1] = {2};
	const struct titan_st_write_tensor t[] = {
		{"h", TITAN_ST_F16, 1, s8, h}, {"bf", TITAN_ST_BF16, 1, s3, bf},
		{"d", TITAN_ST_F64, 1, s2, d},
	};
	struct titan_safetensors *f;
	float o[8];
	(void)state;

	assert_int_equal(titan_safetensors_write(path_of("c"), t, 3, NULL, 0), 0);
	assert_non_null(f = titan_safetensors_open(path_of("c")));
	assert_int_equal(titan_st_tensor_to_f32(titan_safetensors_find(f, "h"), o), 0);
	assert_true(o[0] == 1.0f);
	assert_true(o[1] == 0.0f && signbit(o[1]));
	assert_true(o[2] == 0x1p-24f);           /* smallest subnormal */
	assert_true(o[3] == 1023 * 0x1p-24f);    /* largest subnormal */
	assert_true(o[4] == 65504.0f);
	assert_true(isinf(o[5]) && o[5] > 0);
	assert_true(isinf(o[6]) && o[6] < 0);
	assert_true(isnan(o[7]));
	assert_int_equal(titan_st_tensor_to_f32(titan_safetensors_find(f, "bf"), o), 0);
	assert_true(isinf(o[0]));
	assert_true(o[1] == 0x1p-133f);
	assert_true(o[2] == -123.5f);
	assert_int_equal(titan_st_tensor_to_f32(titan_safetensors_find(f, "d"), o), 0);
	assert_true(o[0] == 0.1f);
	assert_true(isinf(o[1]) && o[1] < 0);
	titan_safetensors_close(f);

	for (int i = 0; i < TITAN_ST_NDTYPES; i++) {
		enum titan_st_dtype dt;

		assert_int_equal(titan_st_dtype_parse(titan_st_dtype_name((enum titan_st_dtype)i), &dt), 0);
		assert_int_equal(dt, i);
	}
	assert_null(titan_st_dtype_name(TITAN_ST_NDTYPES));
	assert_int_equal(titan_st_dtype_bits(TITAN_ST_F6_E3M2), 6);
	assert_int_equal(titan_st_dtype_bits(TITAN_ST_C64), 64);
}

/* ------------------------------------------------------- written by Python */

static void test_python_fixture(void **state)
{
	const char *p = src_path("tests/fixtures/safetensors/python.safetensors");
	struct titan_safetensors *f;
	const struct titan_st_tensor *t;
	const int64_t s23[2] = {2, 3}, s04[2] = {0, 4}, s34[2] = {3, 4};
	float o[12];
	int64_t q[5];
	(void)state;

	if (access(p, R_OK) != 0)
		fail_msg("missing fixture %s (tests/ref/make_golden.py writes it)", p);
	f = titan_safetensors_open(p);
	assert_non_null(f);
	assert_int_equal(f->n_tensors, 11);
	assert_string_equal(titan_safetensors_meta(f, "format"), "pt");
	assert_string_equal(titan_safetensors_meta(f, "note"),
			    "written by tests/ref/make_golden.py — ✓ ü");
	assert_string_equal(titan_safetensors_meta(f, "empty"), "");
	/* data order is the writing order, whatever the header's key order */
	assert_string_equal(f->tensors[0].name, "f32");
	assert_string_equal(f->tensors[10].name, "layers.0.attention.wq.weight");

	assert_int_equal(titan_safetensors_get(f, "f32", TITAN_ST_F32, 2, s23, &t), 0);
	assert_int_equal(titan_st_tensor_to_f32(t, o), 0);
	assert_true(o[0] == 0.0f && o[1] == 1.5f && o[2] == -2.0f && o[3] == 3.25f &&
		    o[4] == 1e-3f && o[5] == 0.0f && signbit(o[5]));
	assert_int_equal(titan_safetensors_get(f, "f64", TITAN_ST_F64, -1, NULL, &t), 0);
	{
		double d[3];

		memcpy(d, t->data, sizeof(d));
		assert_true(d[0] == 1.0 / 3.0 && d[1] == -2.5 && d[2] == 1e300);
	}
	assert_int_equal(titan_safetensors_get(f, "f16", TITAN_ST_F16, -1, NULL, &t), 0);
	assert_int_equal(titan_st_tensor_to_f32(t, o), 0);
	assert_true(o[0] == 1.0f && o[1] == -2.0f && o[2] == 0.5f && o[3] == 65504.0f);
	assert_int_equal(titan_safetensors_get(f, "bf16", TITAN_ST_BF16, -1, NULL, &t), 0);
	assert_int_equal(titan_st_tensor_to_f32(t, o), 0);
	assert_true(o[0] == 1.0f && o[1] == -1.5f && o[2] == 3.0f && o[3] == 0.15625f);
	assert_int_equal(titan_safetensors_get(f, "i32", TITAN_ST_I32, -1, NULL, &t), 0);
	assert_int_equal(titan_st_tensor_to_i64(t, q), 0);
	assert_true(q[0] == INT32_MIN && q[1] == -1 && q[2] == 0 && q[3] == 1 && q[4] == INT32_MAX);
	assert_int_equal(titan_safetensors_get(f, "i64", TITAN_ST_I64, -1, NULL, &t), 0);
	assert_int_equal(titan_st_tensor_to_i64(t, q), 0);
	assert_true(q[0] == -(1LL << 62) && q[1] == (1LL << 40) + 3);
	assert_int_equal(titan_safetensors_get(f, "u8", TITAN_ST_U8, -1, NULL, &t), 0);
	assert_int_equal(titan_st_tensor_to_i64(t, q), 0);
	assert_true(q[0] == 0 && q[1] == 7 && q[2] == 255);
	assert_int_equal(titan_safetensors_get(f, "bool", TITAN_ST_BOOL, -1, NULL, &t), 0);
	assert_int_equal(titan_st_tensor_to_i64(t, q), 0);
	assert_true(q[0] == 1 && q[1] == 0);
	assert_int_equal(titan_safetensors_get(f, "scalar", TITAN_ST_F32, 0, NULL, &t), 0);
	assert_int_equal(titan_st_tensor_to_f32(t, o), 0);
	assert_true(o[0] == 42.0f);
	assert_int_equal(titan_safetensors_get(f, "empty", TITAN_ST_F32, 2, s04, &t), 0);
	assert_int_equal(t->nbytes, 0);
	assert_int_equal(titan_safetensors_get(f, "layers.0.attention.wq.weight", TITAN_ST_F32, 2,
					       s34, &t), 0);
	assert_int_equal(titan_st_tensor_to_f32(t, o), 0);
	for (int i = 0; i < 12; i++)
		assert_true(o[i] == (float)i);
	titan_safetensors_close(f);
}

/* The golden files of tests/ref/make_golden.py open and hold what
 * tests/ref/README.md says: for each parameter its initial value, its
 * step-1 gradient and its value after training, with matching shapes. */
static void test_golden_files(void **state)
{
	static const char *const configs[] = {"A", "B", "C"};
	(void)state;

	for (size_t c = 0; c < sizeof(configs) / sizeof(*configs); c++) {
		char rel[128], key[256];
		const char *p, *v;
		struct titan_safetensors *f;
		const struct titan_st_tensor *t, *g;
		int64_t steps, dim, vocab, n_layers, one[1];
		int n_params = 0;

		snprintf(rel, sizeof(rel), "tests/fixtures/golden/%s.safetensors", configs[c]);
		p = src_path(rel);
		f = titan_safetensors_open(p);
		if (!f)
			fail_msg("%s", titan_errmsg());
		assert_string_equal(titan_safetensors_meta(f, "format"), "titan-golden");
		assert_string_equal(titan_safetensors_meta(f, "format_version"), "1");
		assert_string_equal(titan_safetensors_meta(f, "golden.config"), configs[c]);
		assert_int_equal(titan_parse_i64(titan_safetensors_meta(f, "training.steps"), &steps), 0);
		assert_int_equal(titan_parse_i64(titan_safetensors_meta(f, "model.dim"), &dim), 0);
		assert_int_equal(titan_parse_i64(titan_safetensors_meta(f, "model.vocab_size"), &vocab), 0);
		assert_int_equal(titan_parse_i64(titan_safetensors_meta(f, "model.n_layers"), &n_layers), 0);
		one[0] = steps;
		assert_int_equal(titan_safetensors_get(f, "losses", TITAN_ST_F32, 1, one, &t), 0);
		assert_int_equal(titan_safetensors_get(f, "grad_norms", TITAN_ST_F32, 1, one, &t), 0);
		assert_int_equal(titan_safetensors_get(f, "lrs", TITAN_ST_F64, 1, one, &t), 0);
		assert_int_equal(titan_safetensors_get(f, "valid_tokens", TITAN_ST_I32, 1, one, &t), 0);
		{
			const int64_t s[2] = {vocab, dim};

			assert_int_equal(titan_safetensors_get(f, "tok_embeddings.weight", TITAN_ST_F32,
							       2, s, &t), 0);
		}
		v = titan_safetensors_meta(f, "model.tie_word_embeddings");
		assert_non_null(v);
		assert_true((titan_safetensors_find(f, "output.weight") != NULL) == !strcmp(v, "false"));
		/* every parameter has grad. and final. twins of its shape */
		for (size_t i = 0; i < f->n_tensors; i++) {
			const char *n = f->tensors[i].name;

			if (!strstr(n, ".weight") || !strncmp(n, "grad.", 5) || !strncmp(n, "final.", 6))
				continue;
			n_params++;
			snprintf(key, sizeof(key), "grad.%s", n);
			assert_int_equal(titan_safetensors_get(f, key, TITAN_ST_F32, f->tensors[i].ndim,
							       f->tensors[i].shape, &g), 0);
			snprintf(key, sizeof(key), "final.%s", n);
			assert_int_equal(titan_safetensors_get(f, key, TITAN_ST_F32, f->tensors[i].ndim,
							       f->tensors[i].shape, &g), 0);
		}
		/* tok_embeddings, 9 per layer, norm, and output unless tied */
		assert_int_equal(n_params, 1 + 9 * n_layers + 1 + !strcmp(v, "false"));
		titan_safetensors_close(f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hf_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writer_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_headers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_good_headers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_convert, setup, teardown),
		cmocka_unit_test(test_python_fixture),
		cmocka_unit_test(test_golden_files),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
