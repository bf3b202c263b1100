/*
 * test_loader.c — the data loader (lib/data/loader.c) over shards written
 * with the shard writer from the token sequence 0, 1, ..., N-1: exact
 * windows (inputs/labels) across shard boundaries, u16 and u32 payloads,
 * the validation loader's partial last batch and end, re-looping with the
 * epoch count and a warning, data-parallel ranks whose union is the
 * single-rank order, state save/restore mid-epoch, the shuffle as a
 * deterministic per-epoch permutation, and the errors that name the data.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/core.h"
#include "titan/data.h"

static char dir[64];

static void clear_dir(const char *d)
{
	DIR *dp = opendir(d);
	struct dirent *e;
	char p[512];

	while (dp && (e = readdir(dp))) {
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof(p), "%s/%s", d, e->d_name);
			unlink(p);
		}
	}
	if (dp)
		closedir(dp);
}

static int setup(void **state)
{
	(void)state;
	strcpy(dir, "/tmp/test_loader-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	clear_dir(dir);
	return rmdir(dir);
}

/* Write tokens first .. first+n-1 as shards of `per` tokens to `d`. */
static void write_split(const char *d, const char *split, uint64_t n, uint64_t per,
			uint32_t vocab, uint64_t fingerprint)
{
	struct titan_shard_writer_opts o = { per, 0, vocab, -1, -1, fingerprint };
	struct titan_shard_writer *w;
	uint32_t buf[1000];

	assert_int_equal(titan_shard_writer_open(d, split, &o, &w), 0);
	for (uint64_t i = 0; i < n;) {
		size_t k = n - i < 1000 ? (size_t)(n - i) : 1000;

		for (size_t j = 0; j < k; j++)
			buf[j] = (uint32_t)(i + j);
		assert_int_equal(titan_shard_writer_write(w, buf, k), 0);
		i += k;
	}
	assert_int_equal(titan_shard_writer_close(w), 0);
}

static struct titan_loader *open_loader(int64_t seq, int64_t batch, int rank, int degree,
					bool infinite, bool shuffle, uint64_t seed)
{
	struct titan_loader_opts o;
	struct titan_loader *l = NULL;

	titan_loader_opts_default(&o);
	o.dir = dir;
	o.split = infinite ? "train" : "val";
	o.seq_len = seq;
	o.local_batch_size = batch;
	o.dp_rank = rank;
	o.dp_degree = degree;
	o.infinite = infinite;
	o.shuffle = shuffle;
	o.seed = seed;
	if (titan_loader_open(&o, &l) < 0)
		fail_msg("titan_loader_open: %s", titan_errmsg());
	return l;
}

/* Row b holds window w: inputs w(S+1) .. w(S+1)+S-1, labels one later. */
static void check_row(const int32_t *in, const int32_t *lab, int64_t S, uint64_t w)
{
	for (int64_t t = 0; t < S; t++) {
		if (in[t] != (int32_t)(w * (uint64_t)(S + 1) + (uint64_t)t) ||
		    lab[t] != in[t] + 1)
			fail_msg("window %llu, t %lld: input %d label %d", (unsigned long long)w,
				 (long long)t, in[t], lab[t]);
	}
}

/* Which window a row holds (from its first input). */
static uint64_t window_of(const int32_t *in, int64_t S)
{
	assert_int_equal((uint64_t)in[0] % (uint64_t)(S + 1), 0);
	return (uint64_t)in[0] / (uint64_t)(S + 1);
}

/* 10 shards of 100 tokens, seq 7: windows of 8 straddle shard ends. */
static void test_windows_validation(void **state)
{
	const int64_t S = 7, B = 4;
	int32_t in[4 * 7], lab[4 * 7];
	struct titan_batch_info bi;
	struct titan_loader_info li;

	(void)state;
	clear_dir(dir);
	write_split(dir, "val", 1003, 100, 1u << 20, 0);
	struct titan_loader *l = open_loader(S, B, 0, 1, false, false, 0);

	titan_loader_get_info(l, &li);
	assert_int_equal(li.n_shards, 11);
	assert_int_equal(li.n_tokens, 1003);
	assert_int_equal(li.n_windows, 125); /* 1003 / 8, 3 tokens unused */
	assert_int_equal(li.token_bytes, 4);
	assert_int_equal(li.vocab_size, 1u << 20);
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t k = 0; k < 31; k++) {
			assert_int_equal(titan_loader_next(l, in, lab, &bi), 1);
			assert_int_equal(bi.rows, 4);
			assert_int_equal(bi.global_rows, 4);
			assert_int_equal(bi.valid_tokens, 4 * S);
			assert_int_equal(bi.global_valid_tokens, 4 * S);
			assert_int_equal(bi.epoch, 0);
			assert_int_equal(bi.position, 4 * k);
			for (int64_t b = 0; b < B; b++)
				check_row(in + b * S, lab + b * S, S, 4 * k + (uint64_t)b);
		}
		/* window 124 alone, then padding */
		assert_int_equal(titan_loader_next(l, in, lab, &bi), 1);
		assert_int_equal(bi.rows, 1);
		assert_int_equal(bi.global_rows, 1);
		assert_int_equal(bi.valid_tokens, S);
		check_row(in, lab, S, 124);
		for (int64_t t = S; t < B * S; t++) {
			assert_int_equal(in[t], 0);
			assert_int_equal(lab[t], TITAN_LABEL_IGNORE);
		}
		assert_int_equal(titan_loader_next(l, in, lab, &bi), 0);
		assert_int_equal(titan_loader_next(l, in, lab, NULL), 0);
		titan_loader_reset(l); /* the next validation run starts over */
	}
	/* random access agrees */
	titan_loader_window(l, 12, in, lab);
	check_row(in, lab, S, 12);
	titan_loader_close(l);
	titan_loader_close(NULL);
}

static void test_u16_and_seq1(void **state)
{
	int32_t in[3 * 5], lab[3 * 5];
	struct titan_loader_info li;

	(void)state;
	clear_dir(dir);
	write_split(dir, "train", 5000, 777, 65536, 0);
	struct titan_loader *l = open_loader(5, 3, 0, 1, true, false, 0);

	titan_loader_get_info(l, &li);
	assert_int_equal(li.token_bytes, 2);
	assert_int_equal(li.n_shards, 7);
	assert_int_equal(li.n_windows, 833);
	for (uint64_t k = 0; k < 277; k++) {
		assert_int_equal(titan_loader_next(l, in, lab, NULL), 1);
		for (int b = 0; b < 3; b++)
			check_row(in + b * 5, lab + b * 5, 5, 3 * k + (uint64_t)b);
	}
	titan_loader_close(l);

	/* seq_len 1: windows of 2 tokens */
	l = open_loader(1, 3, 0, 1, true, false, 0);
	assert_int_equal(titan_loader_next(l, in, lab, NULL), 1);
	assert_int_equal(titan_loader_next(l, in, lab, NULL), 1);
	for (int b = 0; b < 3; b++)
		check_row(in + b, lab + b, 1, 3 + (uint64_t)b);
	titan_loader_close(l);
}

static char logbuf[8192];

static void test_reloop(void **state)
{
	const int64_t S = 7;
	int32_t in[8 * 7], lab[8 * 7];
	struct titan_batch_info bi;
	struct titan_loader_state st;
	FILE *log = tmpfile();

	(void)state;
	clear_dir(dir);
	write_split(dir, "train", 1003, 100, 1u << 20, 0); /* 125 windows */
	titan_log_set_stream(log);
	titan_log_set_level(TITAN_LOG_WARN);

	/* 25 batches of 5 end the epoch exactly; the 26th starts epoch 1 */
	struct titan_loader *l = open_loader(S, 5, 0, 1, true, false, 0);
	for (int k = 0; k < 25; k++)
		assert_int_equal(titan_loader_next(l, in, lab, NULL), 1);
	titan_loader_get_state(l, &st);
	assert_int_equal(st.epoch, 0);
	assert_int_equal(st.position, 125);
	assert_int_equal(ftell(log), 0); /* no warning yet */
	assert_int_equal(titan_loader_next(l, in, lab, &bi), 1);
	assert_int_equal(bi.epoch, 1);
	assert_int_equal(bi.position, 0);
	for (int b = 0; b < 5; b++)
		check_row(in + b * S, lab + b * S, S, (uint64_t)b);
	titan_loader_close(l);

	/* batches of 8: the 16th takes windows 120..124 then 0..2 */
	l = open_loader(S, 8, 0, 1, true, false, 0);
	for (int k = 0; k < 15; k++)
		assert_int_equal(titan_loader_next(l, in, lab, NULL), 1);
	assert_int_equal(titan_loader_next(l, in, lab, &bi), 1);
	assert_int_equal(bi.rows, 8);
	assert_int_equal(bi.epoch, 0);
	assert_int_equal(bi.position, 120);
	for (int b = 0; b < 8; b++)
		check_row(in + b * S, lab + b * S, S, b < 5 ? 120 + (uint64_t)b : (uint64_t)b - 5);
	titan_loader_get_state(l, &st);
	assert_int_equal(st.epoch, 1);
	assert_int_equal(st.position, 3);
	titan_loader_close(l);

	/* a batch larger than the data goes round several times */
	l = open_loader(S, 300, 0, 1, true, false, 0);
	int32_t *bin = malloc(300 * 7 * sizeof(int32_t)), *blab = malloc(300 * 7 * sizeof(int32_t));
	assert_int_equal(titan_loader_next(l, bin, blab, &bi), 1);
	for (int b = 0; b < 300; b++)
		check_row(bin + b * S, blab + b * S, S, (uint64_t)b % 125);
	titan_loader_get_state(l, &st);
	assert_int_equal(st.epoch, 2);
	assert_int_equal(st.position, 50);
	free(bin);
	free(blab);
	titan_loader_close(l);

	titan_log_set_stream(NULL);
	titan_log_set_level(TITAN_LOG_ERROR);
	rewind(log);
	size_t n = fread(logbuf, 1, sizeof(logbuf) - 1, log);
	logbuf[n] = 0;
	fclose(log);
	assert_non_null(strstr(logbuf, "re-looping: epoch 1"));
	assert_non_null(strstr(logbuf, "re-looping: epoch 2"));
	assert_non_null(strstr(logbuf, dir));
	assert_non_null(strstr(logbuf, "WARN"));
}

/* Global rows of `calls` calls with R ranks of local batch G/R. */
static int32_t *run_ranks(int R, int64_t G, int64_t S, int calls, bool shuffle, uint64_t seed)
{
	int64_t L = G / R;
	int32_t *all = calloc((size_t)(calls * G * S), sizeof(int32_t));
	int32_t *lab = malloc((size_t)(L * S) * sizeof(int32_t));
	struct titan_batch_info bi;

	for (int r = 0; r < R; r++) {
		struct titan_loader *l = open_loader(S, L, r, R, true, shuffle, seed);

		for (int k = 0; k < calls; k++) {
			int32_t *dst = all + ((int64_t)k * G + r * L) * S;

			assert_int_equal(titan_loader_next(l, dst, lab, &bi), 1);
			assert_int_equal(bi.rows, L);
			assert_int_equal(bi.global_rows, G);
			assert_int_equal(bi.global_valid_tokens, G * S);
			for (int64_t b = 0; b < L; b++) {
				for (int64_t t = 0; t < S; t++)
					assert_int_equal(lab[b * S + t], dst[b * S + t] + 1);
			}
		}
		titan_loader_close(l);
	}
	free(lab);
	return all;
}

static void test_data_parallel(void **state)
{
	const int64_t S = 7, G = 12;
	const int calls = 40; /* 480 rows: almost 4 epochs of 125 */

	(void)state;
	clear_dir(dir);
	write_split(dir, "train", 1003, 100, 1u << 20, 0);
	for (int sh = 0; sh < 2; sh++) {
		int32_t *one = run_ranks(1, G, S, calls, sh, 99);
		for (int R = 2; R <= 12; R++) {
			if (G % R)
				continue;
			int32_t *many = run_ranks(R, G, S, calls, sh, 99);
			assert_memory_equal(one, many, (size_t)(calls * G * S) * sizeof(int32_t));
			free(many);
		}
		/* each epoch's windows are each window once */
		for (int e = 0; e < 3; e++) {
			int seen[125] = { 0 };
			for (int g = 0; g < 125; g++)
				seen[window_of(one + (e * 125 + g) * S, S)]++;
			for (int w = 0; w < 125; w++)
				assert_int_equal(seen[w], 1);
		}
		if (!sh)
			for (int g = 0; g < calls * G; g++)
				assert_int_equal(window_of(one + g * S, S), (uint64_t)g % 125);
		free(one);
	}
}

static void test_state_restore(void **state)
{
	const int64_t S = 7, B = 6;
	int32_t in[6 * 7], lab[6 * 7], in2[6 * 7], lab2[6 * 7];
	struct titan_loader_state st, st2;

	(void)state;
	clear_dir(dir);
	write_split(dir, "train", 1003, 100, 1u << 20, 0);
	for (int sh = 0; sh < 2; sh++) {
		struct titan_loader *a = open_loader(S, B, 0, 1, true, sh, 5);

		for (int k = 0; k < 13; k++) /* mid-epoch: position 78 */
			assert_int_equal(titan_loader_next(a, in, lab, NULL), 1);
		titan_loader_get_state(a, &st);
		assert_int_equal(st.epoch, 0);
		assert_int_equal(st.position, 78);

		/* a fresh loader (another process) resumes from the plain integers */
		struct titan_loader *b = open_loader(S, B, 0, 1, true, sh, 5);
		struct titan_loader_state copy;
		memcpy(&copy, &st, sizeof(copy));
		assert_int_equal(titan_loader_set_state(b, &copy), 0);
		for (int k = 0; k < 40; k++) { /* across the epoch end */
			assert_int_equal(titan_loader_next(a, in, lab, NULL), 1);
			assert_int_equal(titan_loader_next(b, in2, lab2, NULL), 1);
			assert_memory_equal(in, in2, sizeof(in));
			assert_memory_equal(lab, lab2, sizeof(lab));
		}
		titan_loader_get_state(a, &st);
		titan_loader_get_state(b, &st2);
		assert_memory_equal(&st, &st2, sizeof(st));
		assert_true(st.epoch >= 1);
		titan_loader_close(b);

		/* states of other data are refused with the reason */
		b = open_loader(S + 1, B, 0, 1, true, sh, 5);
		assert_int_equal(titan_loader_set_state(b, &st), TITAN_E_INVALID);
		assert_non_null(strstr(titan_errmsg(), "seq_len"));
		titan_loader_close(b);
		if (sh) {
			b = open_loader(S, B, 0, 1, true, true, 6);
			assert_int_equal(titan_loader_set_state(b, &st), TITAN_E_INVALID);
			assert_non_null(strstr(titan_errmsg(), "seed"));
			titan_loader_close(b);
		}
		b = open_loader(S, B, 0, 1, true, sh, 5);
		st2 = st;
		st2.position = 126;
		assert_int_equal(titan_loader_set_state(b, &st2), TITAN_E_INVALID);
		titan_loader_close(b);
		titan_loader_close(a);
	}
}

static void check_permutation(struct titan_loader *l, uint64_t W, uint64_t epoch)
{
	char *seen = calloc(W, 1);

	for (uint64_t p = 0; p < W; p++) {
		uint64_t w = titan_loader_window_at(l, epoch, p);

		assert_true(w < W);
		assert_int_equal(seen[w], 0);
		seen[w] = 1;
	}
	free(seen);
}

static void test_shuffle(void **state)
{
	static const uint64_t sizes[] = {1, 2, 3, 64, 125, 1000, 4097};
	struct titan_loader_info li;

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		const uint64_t W = sizes[i];

		clear_dir(dir);
		write_split(dir, "train", W * 4 + 1, 1000, 1u << 20, 0); /* seq_len 3 */
		struct titan_loader *a = open_loader(3, 2, 0, 1, true, true, 11);
		struct titan_loader *b = open_loader(3, 2, 0, 1, true, true, 11);
		struct titan_loader *c = open_loader(3, 2, 0, 1, true, true, 12);

		titan_loader_get_info(a, &li);
		assert_int_equal(li.n_windows, W);
		uint64_t same_seed = 0, other_seed = 0, other_epoch = 0, ident = 0;
		for (uint64_t e = 0; e < 3; e++)
			check_permutation(a, W, e);
		for (uint64_t p = 0; p < W; p++) {
			uint64_t w = titan_loader_window_at(a, 0, p);

			same_seed += w == titan_loader_window_at(b, 0, p);
			other_seed += w == titan_loader_window_at(c, 0, p);
			other_epoch += w == titan_loader_window_at(a, 1, p);
			ident += w == p;
		}
		assert_int_equal(same_seed, W);
		if (W >= 64) { /* a random permutation has ~1 fixed point */
			assert_true(other_seed < W / 8);
			assert_true(other_epoch < W / 8);
			assert_true(ident < W / 8);
		}
		/* next() follows window_at */
		int32_t in[6], lab[6];
		for (uint64_t p = 0; p + 1 < 2 * W; p += 2) {
			assert_int_equal(titan_loader_next(a, in, lab, NULL), 1);
			for (uint64_t j = 0; j < 2; j++) {
				uint64_t q = p + j;
				uint64_t w = titan_loader_window_at(a, q / W, q % W);

				check_row(in + 3 * j, lab + 3 * j, 3, w);
			}
		}
		titan_loader_close(a);
		titan_loader_close(b);
		titan_loader_close(c);
	}
}

static void test_errors(void **state)
{
	struct titan_loader_opts o;
	struct titan_loader *l = (struct titan_loader *)&o;
	char other[64], p[600], q[600];

	(void)state;
	clear_dir(dir);
	titan_loader_opts_default(&o);
	o.dir = dir;
	o.seq_len = 7;
	o.local_batch_size = 2;

	/* no shards: the data is missing (exit 1), not the configuration */
	assert_int_equal(titan_loader_open(&o, &l), TITAN_E_FORMAT);
	assert_null(l);
	assert_non_null(strstr(titan_errmsg(), "no 'train' shards"));
	assert_non_null(strstr(titan_errmsg(), dir));

	/* too short for one sequence */
	write_split(dir, "train", 7, 100, 1000, 0);
	assert_int_equal(titan_loader_open(&o, &l), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "fewer than seq_len + 1 = 8"));
	assert_non_null(strstr(titan_errmsg(), dir));

	/* model vocab smaller than the shards' */
	write_split(dir, "train", 100, 100, 1000, 0);
	o.vocab_size = 512;
	assert_int_equal(titan_loader_open(&o, &l), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "train-00000.tok"));
	/* the header's vocabulary, the model's and the override that fits */
	assert_non_null(strstr(titan_errmsg(), "the shard header's vocab_size is 1000"));
	assert_non_null(strstr(titan_errmsg(), "model.vocab_size 512"));
	assert_non_null(strstr(titan_errmsg(), "--model.vocab_size=1000"));
	o.vocab_size = 1000;
	o.verify = true;
	assert_int_equal(titan_loader_open(&o, &l), 0);
	titan_loader_close(l);
	o.verify = false;

	/* bad options */
	o.dp_rank = 2;
	o.dp_degree = 2;
	assert_int_equal(titan_loader_open(&o, &l), TITAN_E_INVALID);
	o.dp_rank = 0;
	o.dp_degree = 1;
	o.split = "a/b";
	assert_int_equal(titan_loader_open(&o, &l), TITAN_E_INVALID);
	o.split = "train";

	/* a shard of another tokenizer in the middle */
	clear_dir(dir);
	strcpy(other, "/tmp/test_loader2-XXXXXX");
	assert_non_null(mkdtemp(other));
	write_split(dir, "train", 300, 100, 1000, 1);
	write_split(other, "train", 300, 100, 1000, 2);
	snprintf(p, sizeof(p), "%s/train-00001.tok", other);
	snprintf(q, sizeof(q), "%s/train-00001.tok", dir);
	assert_int_equal(rename(p, q), 0);
	assert_int_equal(titan_loader_open(&o, &l), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "fingerprints differ"));
	assert_non_null(strstr(titan_errmsg(), "train-00001.tok"));
	clear_dir(other);
	rmdir(other);
}

/* A shard truncated in place after the loader mapped it: the page touch
 * beyond its new end is a SIGBUS, caught and reported as an error naming
 * the shard and the byte offset (issue 21), not the death of the process. */
static void test_truncated_in_place(void **state)
{
	struct titan_loader *l;
	int32_t in[2 * 7], lab[2 * 7];
	char p[600];

	(void)state;
	clear_dir(dir);
	write_split(dir, "train", 100000, 60000, 200000, 0);
	for (int verify = 0; verify < 2; verify++) {
		struct titan_loader_opts o;

		titan_loader_opts_default(&o);
		o.dir = dir;
		o.seq_len = 7;
		o.local_batch_size = 2;
		o.verify = verify;
		assert_int_equal(titan_loader_open(&o, &l), 0);
		assert_int_equal(titan_loader_next(l, in, lab, NULL), 1);
		snprintf(p, sizeof(p), "%s/train-00000.tok", dir);
		assert_int_equal(truncate(p, 0), 0);
		/* the next batches read pages that are gone now */
		int rc = 1;
		for (int i = 0; i < 20000 && rc == 1; i++)
			rc = titan_loader_next(l, in, lab, NULL);
		assert_int_equal(rc, TITAN_E_IO);
		assert_non_null(strstr(titan_errmsg(), "train-00000.tok"));
		assert_non_null(strstr(titan_errmsg(), "cannot read byte offset"));
		assert_non_null(strstr(titan_errmsg(), "is 0 bytes now"));
		titan_loader_close(l);
		clear_dir(dir);
		write_split(dir, "train", 100000, 60000, 200000, 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_windows_validation),
		cmocka_unit_test(test_u16_and_seq1),
		cmocka_unit_test(test_reloop),
		cmocka_unit_test(test_data_parallel),
		cmocka_unit_test(test_state_restore),
		cmocka_unit_test(test_shuffle),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_truncated_in_place),
	};
	titan_log_set_level(TITAN_LOG_ERROR); /* re-loop warnings: test_reloop reads them */
	return cmocka_run_group_tests(tests, setup, teardown);
}
