/*
 * test_ckpt_crc.c — checkpoint checksums (lib/ckpt: the crc32c attribute of
 * every dataset): the CRC terms of windows that tile a tensor (row ranges,
 * TP column windows, 2- and 4-byte elements) XOR to the tensor's CRC32C;
 * written files carry the CRC32C of each dataset's stored bytes, also when
 * the writes cross I/O blocks; a flipped byte fails a whole read and
 * titan_ckpt_verify naming the dataset, while partial reads leave their
 * terms for titan_ckpt_load_dist; a dataset without the attribute reads
 * unchecked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "scratch.h"

#include "config.h"
#include "titan/ckpt.h"
#include "titan/core.h"

#include "ckpt/ckpt_impl.h" /* the window terms, per-file sums, block sizes */

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_ckpt_crc");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

#if TITAN_HAVE_HDF5
static uint64_t xs = 0x243F6A8885A308D3ull;

static uint32_t rnd(void)
{
	xs ^= xs << 13;
	xs ^= xs >> 7;
	xs ^= xs << 17;
	return (uint32_t)(xs >> 32);
}

/* Windows [r0, r1) x [c0, c1) cut out of a row-major buffer, packed. */
static void window(const unsigned char *t, int64_t ncols, int esz, int64_t r0, int64_t r1,
		   int64_t c0, int64_t c1, unsigned char *out)
{
	for (int64_t r = r0; r < r1; r++)
		memcpy(out + (r - r0) * (c1 - c0) * esz, t + (r * ncols + c0) * esz,
		       (size_t)((c1 - c0) * esz));
}

static void test_window_terms(void **state)
{
	enum { R = 37, C = 29 };
	static unsigned char t[R * C * 4], w[R * C * 4];
	(void)state;

	for (size_t i = 0; i < sizeof(t); i++)
		t[i] = (unsigned char)rnd();
	for (int esz = 2; esz <= 4; esz += 2) {
		const uint32_t whole = titan_crc32c(0, t, (size_t)(R * C * esz));

		/* one window: the whole tensor */
		assert_int_equal(titan_ckpt_crc_window_(t, 0, R, 0, C, C, R, esz), whole);
		for (int k = 0; k < 50; k++) {
			/* random cuts of the rows and of the columns: a grid of windows */
			int64_t rc[4] = {0, 1 + rnd() % (R - 2), 0, R}, cc[4] = {0, 1 + rnd() % (C - 2), 0, C};
			uint32_t x = 0;

			rc[2] = rc[1] + rnd() % (R - rc[1]);
			cc[2] = cc[1] + rnd() % (C - cc[1]);
			for (int a = 0; a < 3; a++)
				for (int b = 0; b < 3; b++) {
					window(t, C, esz, rc[a], rc[a + 1], cc[b], cc[b + 1], w);
					/* visited in any order: XOR commutes */
					x ^= titan_ckpt_crc_window_(w, rc[a], rc[a + 1] - rc[a], cc[b],
								   cc[b + 1] - cc[b], C, R, esz);
				}
			assert_int_equal(x, whole);
		}
		/* empty windows add nothing */
		assert_int_equal(titan_ckpt_crc_window_(t, 3, 0, 0, C, C, R, esz), 0);
		assert_int_equal(titan_ckpt_crc_window_(t, 3, 2, 4, 0, C, R, esz), 0);
	}
}

struct tens {
	const char *name;
	int ndim;
	int64_t shape[2];
	enum titan_ckpt_dtype dt;
	float *data;
};

static void write_file(const char *path, struct tens *ts, int n)
{
	struct titan_model_dims d;
	struct titan_ckpt_writer *w;

	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	assert_int_equal(titan_ckpt_writer_open(path, &d, "", &w), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(titan_ckpt_writer_tensor(w, TITAN_CKPT_MODEL, ts[i].name, ts[i].ndim,
							  ts[i].shape, ts[i].data, ts[i].dt), 0);
	assert_int_equal(titan_ckpt_writer_close(w, 0), 0);
}

/* The stored bytes of a tensor, from the file. */
static uint32_t stored_crc(const char *path, const struct titan_ckpt_tensor_info *t, uint64_t off)
{
	FILE *fp = fopen(path, "rb");
	unsigned char *b = malloc(t->storage_bytes);
	uint32_t c;

	assert_non_null(fp);
	assert_non_null(b);
	assert_int_equal(fseek(fp, (long)off, SEEK_SET), 0);
	assert_int_equal(fread(b, 1, t->storage_bytes, fp), t->storage_bytes);
	fclose(fp);
	c = titan_crc32c(0, b, t->storage_bytes);
	free(b);
	return c;
}

static uint64_t offset_of(const char *path, const char *name)
{
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d;
	haddr_t off;

	assert_true(f >= 0);
	d = H5Dopen2(f, name, H5P_DEFAULT);
	assert_true(d >= 0);
	off = H5Dget_offset(d);
	H5Dclose(d);
	H5Fclose(f);
	return (uint64_t)off;
}

static void flip(const char *path, uint64_t at)
{
	FILE *fp = fopen(path, "r+b");
	int c;

	assert_non_null(fp);
	fseek(fp, (long)at, SEEK_SET);
	c = fgetc(fp);
	fseek(fp, (long)at, SEEK_SET);
	fputc(c ^ 0x40, fp);
	fclose(fp);
}

static void test_files(void **state)
{
	enum { R = 50, C = 24 };
	static float a[R * C], b[R * C], v[R];
	struct tens ts[] = {
		{"a.weight", 2, {R, C}, TITAN_CKPT_FLOAT32, a},
		{"b.weight", 2, {R, C}, TITAN_CKPT_BFLOAT16, b},
		{"v.weight", 1, {R, 1}, TITAN_CKPT_FLOAT16, v},
	};
	const char *path = path_of("c.h5");
	const int64_t block_bytes = titan_ckpt_block_bytes_, block_elems = titan_ckpt_block_elems_;
	struct titan_ckpt_file *f;
	const struct titan_ckpt_info *in;
	const struct titan_ckpt_tensor_info *ta;
	uint32_t crc;
	(void)state;

	for (int i = 0; i < R * C; i++) {
		a[i] = (float)(int32_t)rnd() * 1e-9f;
		b[i] = (float)(int32_t)rnd() * 1e-9f;
	}
	for (int i = 0; i < R; i++)
		v[i] = (float)i / 7.0f;
	/* blocks of a few rows: the writes and reads cross block boundaries */
	titan_ckpt_block_bytes_ = 7 * C * 4;
	titan_ckpt_block_elems_ = 5 * C;
	write_file(path, ts, 3);
	assert_int_equal(titan_ckpt_open(path, &f), 0);
	in = titan_ckpt_file_info(f);
	assert_int_equal(in->n_tensors, 3);
	for (size_t i = 0; i < in->n_tensors; i++) {
		const struct titan_ckpt_tensor_info *t = &in->tensors[i];
		char name[128];

		snprintf(name, sizeof(name), "model/%s", t->name);
		assert_true(t->has_crc32c);
		assert_int_equal(t->crc32c, stored_crc(path, t, offset_of(path, name)));
		assert_int_equal(titan_ckpt_verify(f, t, &crc), 0);
		assert_int_equal(crc, t->crc32c);
	}
	titan_ckpt_close(f);
	/* the same state gives the same bytes */
	write_file(path_of("d.h5"), ts, 3);
	{
		char cmd[1200];

		snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", path, path_of("d.h5"));
		assert_int_equal(system(cmd), 0);
	}

	/* one byte of a.weight's row 31, column 5 flipped */
	flip(path, offset_of(path, "model/a.weight") + (31 * C + 5) * 4 + 2);
	assert_int_equal(titan_ckpt_open(path, &f), 0);
	ta = titan_ckpt_find(f, TITAN_CKPT_MODEL, "a.weight");
	assert_int_equal(titan_ckpt_verify(f, ta, &crc), TITAN_E_FORMAT);
	assert_int_not_equal(crc, ta->crc32c);
	assert_non_null(strstr(titan_errmsg(), "model/a.weight: checksum mismatch"));
	assert_non_null(strstr(titan_errmsg(), "c.h5"));
	assert_int_equal(titan_ckpt_read(f, ta, 0, R, b), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "the file is damaged"));
	/* the others are intact */
	assert_int_equal(titan_ckpt_verify(f, titan_ckpt_find(f, TITAN_CKPT_MODEL, "b.weight"), NULL), 0);
	titan_ckpt_close(f);

	/* partial reads are not checked alone; their terms add up to the CRC
	 * of what is in the file (what the ranks of a load XOR-reduce) */
	assert_int_equal(titan_ckpt_open(path, &f), 0);
	ta = titan_ckpt_find(f, TITAN_CKPT_MODEL, "a.weight");
	assert_int_equal(titan_ckpt_read_window(f, ta, 0, 20, 0, 10, a), 0);
	assert_int_equal(titan_ckpt_read_window(f, ta, 0, 20, 10, C - 10, a), 0);
	assert_int_equal(titan_ckpt_read(f, ta, 20, R - 20, a), 0);
	titan_ckpt_verify(f, ta, &crc);
	assert_int_equal(titan_ckpt_file_sum_(f, ta), crc);
	assert_int_not_equal(titan_ckpt_file_sum_(f, ta), ta->crc32c);
	titan_ckpt_close(f);

	/* without the attribute (an older titan's file): read, not checked */
	{
		hid_t h = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);

		assert_true(h >= 0);
		assert_true(H5Adelete_by_name(h, "model/a.weight", TITAN_CKPT_CRC_ATTR, H5P_DEFAULT) >= 0);
		H5Fclose(h);
	}
	assert_int_equal(titan_ckpt_open(path, &f), 0);
	ta = titan_ckpt_find(f, TITAN_CKPT_MODEL, "a.weight");
	assert_false(ta->has_crc32c);
	assert_int_equal(titan_ckpt_verify(f, ta, NULL), 0);
	assert_int_equal(titan_ckpt_read(f, ta, 0, R, a), 0);
	titan_ckpt_close(f);
	titan_ckpt_block_bytes_ = block_bytes;
	titan_ckpt_block_elems_ = block_elems;
}
/* TP windows of the 3-d stacked experts (w1/w3 [E, F, C] on dim 1, w2
 * [E, C, F] on dim 2): read back as packed C-order slices, the terms of
 * the windows that tile a tensor XOR to its CRC32C; a window written alone
 * stores the term of its bytes, which a read of that window gives back. */
static void test_expert_windows(void **state)
{
	enum { E = 3, A = 4, B = 6 };
	const int64_t shape[3] = {E, A, B};
	static float t[E * A * B], got[E * A * B];
	struct titan_model_dims d;
	struct titan_ckpt_writer *w;
	struct titan_ckpt_file *f;
	const struct titan_ckpt_tensor_info *ti;
	const char *path = path_of("e.h5");
	(void)state;

	for (int i = 0; i < E * A * B; i++)
		t[i] = (float)i;
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	assert_int_equal(titan_ckpt_writer_open(path, &d, "", &w), 0);
	assert_int_equal(titan_ckpt_writer_tensor(w, TITAN_CKPT_MODEL, "x", 3, shape, t,
						  TITAN_CKPT_FLOAT32), 0);
	/* y: only [.., .., 2, 5) of dim 2 written, the rest HDF5's fill */
	{
		float part[E * A * 3];

		for (int e = 0; e < E; e++)
			for (int a = 0; a < A; a++)
				for (int b = 0; b < 3; b++)
					part[(e * A + a) * 3 + b] = t[(e * A + a) * B + 2 + b];
		assert_int_equal(titan_ckpt_writer_window_(w, TITAN_CKPT_MODEL, "y", 3, shape, 1, 2,
							   2, 2, 3, part + A * 3,
							   TITAN_CKPT_FLOAT32, 0), 0);
	}
	assert_int_equal(titan_ckpt_writer_close(w, 0), 0);

	assert_int_equal(titan_ckpt_open(path, &f), 0);
	ti = titan_ckpt_find(f, TITAN_CKPT_MODEL, "x");
	assert_non_null(ti);
	for (int wd = 1; wd <= 2; wd++) {
		const int64_t n = shape[wd], cut = wd == 1 ? 1 : 4;
		uint32_t before = titan_ckpt_file_sum_(f, ti);

		for (int h = 0; h < 2; h++) {
			const int64_t c0 = h ? cut : 0, nc = h ? n - cut : cut;

			assert_int_equal(titan_ckpt_read_window_dim(f, ti, 0, E, wd, c0, nc, got), 0);
			for (int e = 0, k = 0; e < E; e++)
				for (int a = 0; a < A; a++)
					for (int b = 0; b < B; b++) {
						const int64_t i = wd == 1 ? a : b;

						if (i >= c0 && i < c0 + nc)
							assert_true(got[k++] == t[(e * A + a) * B + b]);
					}
		}
		/* the two halves' terms: the whole tensor's CRC32C */
		assert_int_equal(titan_ckpt_file_sum_(f, ti) ^ before, ti->crc32c);
	}
	/* outside the dim: refused naming it */
	assert_int_equal(titan_ckpt_read_window_dim(f, ti, 0, E, 2, 4, 3, got), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "of dim 2"));
	ti = titan_ckpt_find(f, TITAN_CKPT_MODEL, "y");
	assert_non_null(ti);
	assert_int_equal(titan_ckpt_read_window_dim(f, ti, 1, 2, 2, 2, 3, got), 0);
	for (int k = 0, e = 1; e < 3; e++)
		for (int a = 0; a < A; a++)
			for (int b = 2; b < 5; b++)
				assert_true(got[k++] == t[(e * A + a) * B + b]);
	assert_int_equal(titan_ckpt_file_sum_(f, ti), ti->crc32c);
	titan_ckpt_close(f);
}
#else
static void test_expert_windows(void **state)
{
	(void)state;
	skip();
}

static void test_window_terms(void **state)
{
	(void)state;
	skip();
}

static void test_files(void **state)
{
	(void)state;
	skip();
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_window_terms),
		cmocka_unit_test(test_files),
		cmocka_unit_test(test_expert_windows),
	};
	return cmocka_run_group_tests_name("ckpt_crc", tests, setup, teardown);
}
