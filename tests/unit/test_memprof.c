/*
 * test_memprof.c — lib/memprof: the memory trace reader (header checks,
 * newer versions refused, truncation and corrupt records with their
 * offsets), the replay against hand-computed answers (peak, breakdown at
 * the peak, per-tag peaks, the largest live blocks, anomalies, the live
 * limit, step entries and the leak check, the bounded timeline), a replay
 * of a real tagged-allocator trace equal to the allocator's own counters,
 * the Chrome trace reader (X, B/E, C events, the bare array, a file cut
 * short, a syntax error) and per-phase step times with exposed and
 * overlapped communication.
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

#include "titan/core.h"
#include "titan/memprof.h"

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_memprof");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

/* ------------------------------------------------------------- writing */

struct w {
	FILE *fp;
	uint32_t step;
	uint16_t phase;
	uint64_t t;
};

static void w_open(struct w *w, const char *name, int rank)
{
	struct titan_memtrace_header h = {TITAN_MEMTRACE_VERSION, rank, 1000, "host"};
	unsigned char b[TITAN_MEMTRACE_HEADER_BYTES];

	w->fp = fopen(path_of(name), "wb");
	assert_non_null(w->fp);
	titan_memtrace_encode_header(b, &h);
	assert_int_equal(fwrite(b, sizeof(b), 1, w->fp), 1);
	w->step = 0;
	w->phase = 0;
	w->t = 0;
}

static void w_rec(struct w *w, int kind, int tag, uint64_t bytes, uint64_t addr)
{
	struct titan_memtrace_record r = {(uint8_t)kind, (uint8_t)tag, w->phase, w->step, w->t += 1000,
					  bytes, addr};
	unsigned char b[TITAN_MEMTRACE_RECORD_BYTES];

	titan_memtrace_encode_record(b, &r);
	assert_int_equal(fwrite(b, sizeof(b), 1, w->fp), 1);
}

#define AL(w, tag, bytes, addr) w_rec((w), TITAN_MEMTRACE_ALLOC, (tag), (bytes), (addr))
#define FR(w, tag, bytes, addr) w_rec((w), TITAN_MEMTRACE_FREE, (tag), (bytes), (addr))
#define OFF(i) (TITAN_MEMTRACE_HEADER_BYTES + (uint64_t)(i) * TITAN_MEMTRACE_RECORD_BYTES)

static struct titan_memreplay *replay(const char *name, int top_k, int cols)
{
	struct titan_memreplay_opts o;
	struct titan_memreplay *m = NULL;

	titan_memreplay_opts_default(&o);
	o.top_k = top_k;
	o.timeline_cols = cols;
	assert_int_equal(titan_memreplay_file(path_of(name), &o, &m), 0);
	return m;
}

/* ------------------------------------------------------------- reader */

static void test_header(void **state)
{
	struct titan_memtrace_reader *r;
	struct titan_memtrace_record rec;
	unsigned char b[TITAN_MEMTRACE_HEADER_BYTES];
	struct titan_memtrace_header h = {TITAN_MEMTRACE_VERSION, 3, 123456789, "cuda:0"};
	FILE *fp;
	(void)state;

	/* round trip */
	titan_memtrace_encode_header(b, &h);
	assert_memory_equal(b, "TTNMEM\0\1", 8);
	fp = fopen(path_of("a.memtrace"), "wb");
	fwrite(b, sizeof(b), 1, fp);
	fclose(fp);
	assert_int_equal(titan_memtrace_open(&r, path_of("a.memtrace")), 0);
	assert_int_equal(titan_memtrace_header(r)->version, 1);
	assert_int_equal(titan_memtrace_header(r)->rank, 3);
	assert_int_equal(titan_memtrace_header(r)->start_unix_ns, 123456789);
	assert_string_equal(titan_memtrace_header(r)->device, "cuda:0");
	assert_int_equal(titan_memtrace_next(r, &rec, NULL), 0);
	assert_int_equal(titan_memtrace_tail_bytes(r), 0);
	titan_memtrace_close(r);
	titan_memtrace_close(NULL);

	/* a newer version is refused, naming it */
	h.version = 2;
	titan_memtrace_encode_header(b, &h);
	b[7] = 2;
	fp = fopen(path_of("new.memtrace"), "wb");
	fwrite(b, sizeof(b), 1, fp);
	fclose(fp);
	assert_int_equal(titan_memtrace_open(&r, path_of("new.memtrace")), TITAN_E_UNSUPPORTED);
	assert_null(r);
	assert_non_null(strstr(titan_errmsg(), "format version 2 is newer than this titan reads (1)"));
	assert_non_null(strstr(titan_errmsg(), "upgrade titan"));

	/* not a memtrace; a header cut short; a missing file */
	fp = fopen(path_of("junk"), "wb");
	fputs("{\"traceEvents\": []}", fp);
	fclose(fp);
	assert_int_equal(titan_memtrace_open(&r, path_of("junk")), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "not a titan memory trace"));
	fp = fopen(path_of("short.memtrace"), "wb");
	fwrite("TTNMEM\0\1\1\0\0\0", 12, 1, fp);
	fclose(fp);
	assert_int_equal(titan_memtrace_open(&r, path_of("short.memtrace")), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "truncated header"));
	assert_int_equal(titan_memtrace_open(&r, path_of("none.memtrace")), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "No such file"));
	titan_error_clear();
}

static void test_truncated_and_corrupt(void **state)
{
	struct titan_memreplay *m;
	const struct titan_memreplay_result *r;
	struct w w;
	FILE *fp;
	(void)state;

	/* 5 records, then 10 bytes of a sixth: a killed run */
	w_open(&w, "cut.memtrace", 0);
	for (int i = 0; i < 5; i++)
		AL(&w, TITAN_MEM_PARAMS, 100, 0x1000 + (uint64_t)i * 0x100);
	fwrite("\1\0\0\0\0\0\0\0\0\0", 10, 1, w.fp);
	fclose(w.fp);
	m = replay("cut.memtrace", 3, 0);
	r = titan_memreplay_get(m);
	assert_true(r->truncated);
	assert_false(r->corrupt);
	assert_int_equal(r->n_records, 5);
	assert_int_equal(r->stop_offset, OFF(5));
	assert_int_equal(r->tail_bytes, 10);
	assert_int_equal(r->file_bytes, OFF(5) + 10);
	assert_int_equal(r->total_peak, 500);
	titan_memreplay_free(m);

	/* an unknown kind at record 2 stops the replay there, with its offset */
	w_open(&w, "bad.memtrace", 0);
	AL(&w, TITAN_MEM_PARAMS, 100, 0x1000);
	AL(&w, TITAN_MEM_GRADS, 50, 0x2000);
	w_rec(&w, 7, TITAN_MEM_GRADS, 50, 0x3000);
	AL(&w, TITAN_MEM_GRADS, 50000, 0x4000);
	fclose(w.fp);
	m = replay("bad.memtrace", 3, 0);
	r = titan_memreplay_get(m);
	assert_true(r->corrupt);
	assert_false(r->truncated);
	assert_int_equal(r->n_records, 2);
	assert_int_equal(r->stop_offset, OFF(2));
	assert_int_equal(r->total_peak, 150);
	assert_non_null(strstr(r->corrupt_msg, "corrupt record at byte 128 (record 2): unknown kind 7"));
	titan_memreplay_free(m);

	/* an unknown tag */
	w_open(&w, "tag.memtrace", 0);
	AL(&w, TITAN_MEM_PARAMS, 100, 0x1000);
	w_rec(&w, TITAN_MEMTRACE_ALLOC, 8, 50, 0x3000);
	fclose(w.fp);
	m = replay("tag.memtrace", 3, 0);
	r = titan_memreplay_get(m);
	assert_true(r->corrupt);
	assert_int_equal(r->n_records, 1);
	assert_non_null(strstr(r->corrupt_msg, "byte 96 (record 1): unknown tag 8"));
	titan_memreplay_free(m);

	/* sizes whose sum passes 2^63 (found by tests/fuzz/fuzz_memtrace: the
	 * live totals overflowed) are a corrupt record, stopping at it */
	w_open(&w, "huge.memtrace", 0);
	AL(&w, TITAN_MEM_PARAMS, 100, 0x1000);
	AL(&w, TITAN_MEM_GRADS, 5764607523067790083ull, 0x2000);
	AL(&w, TITAN_MEM_GRADS, 4035225266157519876ull, 0x3000);
	AL(&w, TITAN_MEM_GRADS, 50, 0x4000);
	fclose(w.fp);
	m = replay("huge.memtrace", 3, 16);
	r = titan_memreplay_get(m);
	assert_true(r->corrupt);
	assert_int_equal(r->n_records, 2);
	assert_int_equal(r->stop_offset, OFF(2));
	assert_int_equal(r->total_peak, 5764607523067790183ll);
	assert_non_null(strstr(r->corrupt_msg, "corrupt record at byte 128 (record 2): an "
				"allocation of 4035225266157519876 bytes"));
	titan_memreplay_free(m);
	/* one size past INT64_MAX alone */
	w_open(&w, "huge1.memtrace", 0);
	AL(&w, TITAN_MEM_PARAMS, UINT64_MAX, 0x1000);
	fclose(w.fp);
	m = replay("huge1.memtrace", 3, 0);
	r = titan_memreplay_get(m);
	assert_true(r->corrupt);
	assert_int_equal(r->n_records, 0);
	assert_int_equal(r->total_peak, 0);
	titan_memreplay_free(m);

	/* a time stamp near 2^64 ns on a timeline of one column: the column
	 * widened until its width wrapped around to 0 and divided by it
	 * (SIGFPE; found by tests/fuzz/fuzz_memtrace); the last column takes
	 * what no column can reach */
	w_open(&w, "late.memtrace", 0);
	AL(&w, TITAN_MEM_PARAMS, 100, 0x1000);
	w.t = UINT64_MAX - 1000;
	AL(&w, TITAN_MEM_PARAMS, 200, 0x2000);
	fclose(w.fp);
	for (int cols = 1; cols <= 16; cols *= 4) {
		m = replay("late.memtrace", 3, cols);
		r = titan_memreplay_get(m);
		assert_false(r->truncated || r->corrupt);
		assert_int_equal(r->n_records, 2);
		assert_int_equal(r->n_cols, cols);
		assert_true(r->cols[0].used);
		assert_int_equal(r->cols[0].max_total, cols == 1 ? 300 : 100);
		titan_memreplay_free(m);
	}

	/* an empty trace (header only) is complete and has no peak */
	w_open(&w, "empty.memtrace", 0);
	fclose(w.fp);
	m = replay("empty.memtrace", 3, 16);
	r = titan_memreplay_get(m);
	assert_false(r->truncated || r->corrupt);
	assert_int_equal(r->n_records, 0);
	assert_int_equal(r->total_peak, 0);
	assert_int_equal(r->n_steps, 0);
	titan_memreplay_free(m);

	/* a bad header fails the replay itself */
	fp = fopen(path_of("x.memtrace"), "wb");
	fputs("hello", fp);
	fclose(fp);
	m = (struct titan_memreplay *)1;
	assert_int_equal(titan_memreplay_file(path_of("x.memtrace"), NULL, &m), TITAN_E_FORMAT);
	assert_null(m);
	titan_error_clear();
}

/* ------------------------------------------------------------- replay */

/* A scripted run with a known answer:
 *   step 0: params 1000 @A, optim 2000 @B
 *   step 1 forward: activations 300 @C, 500 @D; loss: workspace 700 @E
 *     -> peak 4500 = params 1000, optim 2000, act 800, ws 700 (step 1, loss)
 *   step 1 loss: free E; backward: free D, C; workspace 100 @F, free F
 *   step 2 forward: activations 400 @C (reused address); backward: free C
 *   activations' own peak 800, workspace's 700. */
static void test_known_answer(void **state)
{
	struct titan_memreplay *m;
	const struct titan_memreplay_result *r;
	struct w w;
	(void)state;

	w_open(&w, "k.memtrace", 5);
	AL(&w, TITAN_MEM_PARAMS, 1000, 0xA);
	AL(&w, TITAN_MEM_OPTIM, 2000, 0xB);
	w.step = 1;
	w.phase = 2;
	AL(&w, TITAN_MEM_ACTIVATIONS, 300, 0xC);
	AL(&w, TITAN_MEM_ACTIVATIONS, 500, 0xD);
	w.phase = 3;
	AL(&w, TITAN_MEM_WORKSPACE, 700, 0xE); /* record 4: the peak */
	FR(&w, TITAN_MEM_WORKSPACE, 700, 0xE);
	w.phase = 4;
	FR(&w, TITAN_MEM_ACTIVATIONS, 500, 0xD);
	FR(&w, TITAN_MEM_ACTIVATIONS, 300, 0xC);
	AL(&w, TITAN_MEM_WORKSPACE, 100, 0xF);
	FR(&w, TITAN_MEM_WORKSPACE, 100, 0xF);
	w.step = 2;
	w.phase = 2;
	AL(&w, TITAN_MEM_ACTIVATIONS, 400, 0xC);
	w.phase = 4;
	FR(&w, TITAN_MEM_ACTIVATIONS, 400, 0xC);
	fclose(w.fp);

	m = replay("k.memtrace", 3, 0);
	r = titan_memreplay_get(m);
	assert_int_equal(r->header.rank, 5);
	assert_int_equal(r->n_records, 12);
	assert_int_equal(r->n_alloc, 7);
	assert_int_equal(r->n_free, 5);
	assert_int_equal(r->total_peak, 4500);
	assert_int_equal(r->peak_at_total[TITAN_MEM_PARAMS], 1000);
	assert_int_equal(r->peak_at_total[TITAN_MEM_OPTIM], 2000);
	assert_int_equal(r->peak_at_total[TITAN_MEM_ACTIVATIONS], 800);
	assert_int_equal(r->peak_at_total[TITAN_MEM_WORKSPACE], 700);
	assert_int_equal(r->peak_at_total[TITAN_MEM_GRADS], 0);
	assert_int_equal(r->peak[TITAN_MEM_ACTIVATIONS], 800);
	assert_int_equal(r->peak[TITAN_MEM_WORKSPACE], 700);
	assert_int_equal(r->at_peak.step, 1);
	assert_int_equal(r->at_peak.phase, 3);
	assert_int_equal(r->at_peak.offset, OFF(4));
	assert_int_equal(r->at_peak.index, 4);
	assert_int_equal(r->at_peak.t_ns, 5000);
	assert_int_equal(r->total_cur, 3000);
	assert_int_equal(r->cur[TITAN_MEM_ACTIVATIONS], 0);
	assert_int_equal(r->live_blocks_at_peak, 5);
	assert_int_equal(r->max_live_blocks, 5);
	/* the three largest blocks live at the peak */
	assert_int_equal(r->n_top, 3);
	assert_int_equal(r->top[0].bytes, 2000);
	assert_int_equal(r->top[0].tag, TITAN_MEM_OPTIM);
	assert_int_equal(r->top[0].step, 0);
	assert_int_equal(r->top[1].bytes, 1000);
	assert_int_equal(r->top[2].bytes, 700);
	assert_int_equal(r->top[2].tag, TITAN_MEM_WORKSPACE);
	assert_int_equal(r->top[2].step, 1);
	assert_int_equal(r->top[2].phase, 3);
	/* step entries */
	assert_int_equal(r->n_steps, 3);
	assert_int_equal(r->steps[1].step, 1);
	assert_int_equal(r->steps[1].live_at_start, 3000);
	assert_int_equal(r->steps[1].peak, 4500);
	assert_int_equal(r->steps[1].peak_phase, 3);
	assert_int_equal(r->steps[1].n_events, 8);
	assert_int_equal(r->steps[1].first_phase, 2);
	assert_int_equal(r->steps[1].phase_seen, (1 << 2) | (1 << 3) | (1 << 4));
	assert_int_equal(r->steps[1].phase_t_ns[2], 3000);
	assert_int_equal(r->steps[1].phase_t_ns[4], 7000);
	assert_int_equal(r->steps[2].live_at_start, 3000);
	assert_int_equal(r->steps[2].peak, 3400);
	assert_int_equal(r->anomalies[0] + r->anomalies[1] + r->anomalies[2], 0);
	assert_false(r->truncated || r->corrupt);
	titan_memreplay_free(m);

	/* the peak is the first time the maximum is reached, the blocks are
	 * those live then, even when a later equal total follows */
	w_open(&w, "tie.memtrace", 0);
	AL(&w, TITAN_MEM_PARAMS, 10, 1);
	AL(&w, TITAN_MEM_GRADS, 10, 2);
	FR(&w, TITAN_MEM_GRADS, 10, 2);
	AL(&w, TITAN_MEM_OPTIM, 10, 3);
	fclose(w.fp);
	m = replay("tie.memtrace", 5, 0);
	r = titan_memreplay_get(m);
	assert_int_equal(r->total_peak, 20);
	assert_int_equal(r->peak_at_total[TITAN_MEM_GRADS], 10);
	assert_int_equal(r->peak_at_total[TITAN_MEM_OPTIM], 0);
	assert_int_equal(r->n_top, 2);
	assert_true(r->top[0].tag == TITAN_MEM_PARAMS || r->top[1].tag == TITAN_MEM_PARAMS);
	assert_true(r->top[0].tag == TITAN_MEM_GRADS || r->top[1].tag == TITAN_MEM_GRADS);
	titan_memreplay_free(m);
}

static void test_anomalies(void **state)
{
	struct titan_memreplay *m;
	const struct titan_memreplay_result *r;
	struct w w;
	(void)state;

	w_open(&w, "an.memtrace", 0);
	AL(&w, TITAN_MEM_PARAMS, 100, 0x10);
	FR(&w, TITAN_MEM_PARAMS, 100, 0x99);      /* 1: unknown address */
	AL(&w, TITAN_MEM_GRADS, 50, 0x10);        /* 2: double alloc: 0x10 counted freed */
	FR(&w, TITAN_MEM_GRADS, 60, 0x10);        /* 3: size differs */
	FR(&w, TITAN_MEM_GRADS, 50, 0x10);        /* 4: unknown again */
	fclose(w.fp);
	m = replay("an.memtrace", 3, 0);
	r = titan_memreplay_get(m);
	assert_int_equal(r->anomalies[TITAN_MEMANOMALY_FREE_UNKNOWN], 2);
	assert_int_equal(r->anomaly_offset[TITAN_MEMANOMALY_FREE_UNKNOWN], OFF(1));
	assert_int_equal(r->anomalies[TITAN_MEMANOMALY_DOUBLE_ALLOC], 1);
	assert_int_equal(r->anomaly_offset[TITAN_MEMANOMALY_DOUBLE_ALLOC], OFF(2));
	assert_int_equal(r->anomalies[TITAN_MEMANOMALY_FREE_MISMATCH], 1);
	assert_int_equal(r->anomaly_offset[TITAN_MEMANOMALY_FREE_MISMATCH], OFF(3));
	assert_int_equal(r->total_cur, 0);
	assert_int_equal(r->cur[TITAN_MEM_PARAMS], 0);
	assert_int_equal(r->cur[TITAN_MEM_GRADS], 0);
	assert_int_equal(r->total_peak, 100);
	assert_false(r->corrupt);
	assert_string_equal(titan_memanomaly_name(TITAN_MEMANOMALY_FREE_UNKNOWN),
			    "free of an address that is not live");
	titan_memreplay_free(m);
}

static void test_live_table(void **state)
{
	struct titan_memreplay_opts o;
	struct titan_memreplay *m;
	struct titan_memtrace_record rec = {TITAN_MEMTRACE_ALLOC, TITAN_MEM_ACTIVATIONS, 2, 1, 0, 8, 0};
	const struct titan_memreplay_result *r;
	(void)state;

	/* 100k blocks in, every other one out, the rest out in a scrambled
	 * order: the table grows and deletes without losing a block */
	titan_memreplay_opts_default(&o);
	o.top_k = 4;
	assert_int_equal(titan_memreplay_new(&m, &o), 0);
	for (uint64_t i = 0; i < 100000; i++) {
		rec.addr = 0x1000 + i * 64;
		rec.bytes = i + 1;
		rec.t_ns = i;
		assert_int_equal(titan_memreplay_feed(m, &rec, OFF(i)), 0);
	}
	rec.kind = TITAN_MEMTRACE_FREE;
	for (uint64_t i = 0; i < 100000; i += 2) {
		rec.addr = 0x1000 + i * 64;
		rec.bytes = i + 1;
		assert_int_equal(titan_memreplay_feed(m, &rec, 0), 0);
	}
	for (uint64_t k = 0; k < 50000; k++) {
		uint64_t i = 2 * ((k * 7919) % 50000) + 1;

		rec.addr = 0x1000 + i * 64;
		rec.bytes = i + 1;
		assert_int_equal(titan_memreplay_feed(m, &rec, 0), 0);
	}
	r = titan_memreplay_finish(m);
	assert_int_equal(r->total_cur, 0);
	assert_int_equal(r->anomalies[TITAN_MEMANOMALY_FREE_UNKNOWN], 0);
	assert_int_equal(r->anomalies[TITAN_MEMANOMALY_FREE_MISMATCH], 0);
	assert_int_equal(r->total_peak, 100000LL * 100001 / 2);
	assert_int_equal(r->max_live_blocks, 100000);
	assert_int_equal(r->n_top, 4);
	assert_int_equal(r->top[0].bytes, 100000);
	assert_int_equal(r->top[3].bytes, 99997);
	titan_memreplay_free(m);

	/* the live limit */
	o.max_live = 10;
	assert_int_equal(titan_memreplay_new(&m, &o), 0);
	rec.kind = TITAN_MEMTRACE_ALLOC;
	for (uint64_t i = 0; i < 10; i++) {
		rec.addr = i + 1;
		assert_int_equal(titan_memreplay_feed(m, &rec, OFF(i)), 0);
	}
	rec.addr = 99;
	assert_int_equal(titan_memreplay_feed(m, &rec, OFF(10)), TITAN_E_UNSUPPORTED);
	assert_non_null(strstr(titan_errmsg(), "more than 10 live blocks at byte 384: raise --max-live"));
	titan_memreplay_free(m);
	titan_memreplay_free(NULL);
	titan_error_clear();
}

static void test_leak_check(void **state)
{
	struct titan_memreplay *m;
	const struct titan_memreplay_result *r;
	struct titan_memleak lk;
	struct w w;
	uint64_t addr = 0x100;
	(void)state;

	/* steps 1..6, each leaking 64 bytes of "other" and step 1 allocating
	 * 1000 bytes of optimizer state once (warm-up, left out) */
	w_open(&w, "leak.memtrace", 0);
	AL(&w, TITAN_MEM_PARAMS, 4096, addr++);
	for (uint32_t s = 1; s <= 6; s++) {
		w.step = s;
		w.phase = 2;
		AL(&w, TITAN_MEM_ACTIVATIONS, 512, 0x9000);
		w.phase = 4;
		FR(&w, TITAN_MEM_ACTIVATIONS, 512, 0x9000);
		w.phase = 5;
		if (s == 1)
			AL(&w, TITAN_MEM_OPTIM, 1000, addr++);
		AL(&w, TITAN_MEM_OTHER, 64, addr++);
	}
	fclose(w.fp);
	m = replay("leak.memtrace", 0, 0);
	r = titan_memreplay_get(m);
	titan_memleak_check(r, &lk);
	/* complete steps: 1..5 (6 has no successor); step 1 left out */
	assert_true(lk.valid);
	assert_int_equal(lk.first_step, 2);
	assert_int_equal(lk.last_step, 5);
	assert_int_equal(lk.first_live, 4096 + 1000 + 2 * 64);
	assert_int_equal(lk.last_live, 4096 + 1000 + 5 * 64);
	assert_int_equal(lk.growth, 3 * 64);
	assert_true(fabs(lk.per_step - 64) < 1e-9);
	assert_int_equal(lk.tag_growth[TITAN_MEM_OTHER], 192);
	assert_int_equal(lk.tag_growth[TITAN_MEM_OPTIM], 0);
	assert_int_equal(lk.max_step_growth, 64);
	titan_memreplay_free(m);

	/* two steps only: step 1 is the only complete one -> no verdict */
	w_open(&w, "short.memtrace", 0);
	w.step = 1;
	AL(&w, TITAN_MEM_PARAMS, 1, 1);
	w.step = 2;
	AL(&w, TITAN_MEM_PARAMS, 1, 2);
	fclose(w.fp);
	m = replay("short.memtrace", 0, 0);
	titan_memleak_check(titan_memreplay_get(m), &lk);
	assert_false(lk.valid);
	titan_memreplay_free(m);
}

static void test_timeline(void **state)
{
	struct titan_memreplay_opts o;
	struct titan_memreplay *m;
	const struct titan_memreplay_result *r;
	struct titan_memtrace_record rec = {0};
	int64_t best = 0;
	(void)state;

	/* a sawtooth over 10 s in 100 columns: every column's highest total
	 * is the tooth height; the peak tooth survives the compressions */
	titan_memreplay_opts_default(&o);
	o.timeline_cols = 100;
	o.top_k = 1;
	assert_int_equal(titan_memreplay_new(&m, &o), 0);
	for (uint64_t i = 0; i < 20000; i++) {
		rec.kind = TITAN_MEMTRACE_ALLOC;
		rec.tag = TITAN_MEM_ACTIVATIONS;
		rec.t_ns = i * 500000;
		rec.bytes = i == 12345 ? 9999 : 100;
		rec.addr = 42;
		rec.step = (uint32_t)(i / 100);
		assert_int_equal(titan_memreplay_feed(m, &rec, 0), 0);
		rec.kind = TITAN_MEMTRACE_FREE;
		rec.t_ns += 1000;
		assert_int_equal(titan_memreplay_feed(m, &rec, 0), 0);
	}
	r = titan_memreplay_finish(m);
	assert_int_equal(r->n_cols, 100);
	assert_true((uint64_t)r->n_cols * r->col_ns > r->t_end_ns);
	assert_true((uint64_t)r->n_cols * r->col_ns / 2 <= r->t_end_ns);
	for (int k = 0; k < r->n_cols; k++) {
		const struct titan_memcol *c = &r->cols[k];

		if (!c->used)
			continue;
		assert_int_equal(c->min_total, 0);
		assert_int_equal(c->last[TITAN_MEM_ACTIVATIONS], 0);
		assert_true(c->max_total == 100 || c->max_total == 9999);
		assert_int_equal(c->at_max[TITAN_MEM_ACTIVATIONS], c->max_total);
		if (c->max_total > best)
			best = c->max_total;
	}
	assert_int_equal(best, 9999);
	assert_int_equal(r->total_peak, 9999);
	assert_int_equal(r->at_peak.t_ns, 12345ull * 500000);
	assert_int_equal(r->n_steps, 200);
	titan_memreplay_free(m);
}

/* The tagged allocator's own trace replays to the allocator's counters. */
static void test_real_allocator(void **state)
{
	struct titan_allocator *a = titan_allocator_new("replayed", NULL);
	struct titan_memreplay *m;
	const struct titan_memreplay_result *r;
	struct titan_mem_stats st;
	void *p[64] = {0};
	FILE *fp = fopen(path_of("real.memtrace"), "wb");
	(void)state;

	assert_non_null(a);
	assert_non_null(fp);
	assert_int_equal(titan_mem_trace_start(a, fp), 0);
	for (int i = 0; i < 2000; i++) {
		int k = (i * 37) % 64;

		titan_mem_set_step(a, (uint32_t)(i / 100), (uint16_t)(i % 6));
		if (p[k]) {
			titan_mem_free(a, p[k]);
			p[k] = NULL;
		} else {
			p[k] = titan_mem_alloc(a, (size_t)(1 + (i * 7919) % 5000),
					       (enum titan_mem_tag)(i % TITAN_MEM_NTAGS));
			assert_non_null(p[k]);
		}
	}
	assert_int_equal(titan_mem_trace_stop(a), 0);
	fclose(fp);
	titan_mem_get_stats(a, &st);
	m = replay("real.memtrace", 3, 64);
	r = titan_memreplay_get(m);
	assert_string_equal(r->header.device, "replayed");
	assert_int_equal(r->n_records, 2000);
	assert_int_equal(r->total_peak, st.total_peak);
	assert_int_equal(r->total_cur, st.total_cur);
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		assert_int_equal(r->cur[t], st.cur[t]);
		assert_int_equal(r->peak[t], st.peak[t]);
		assert_int_equal(r->peak_at_total[t], st.peak_at_total[t]);
	}
	assert_int_equal(r->anomalies[0] + r->anomalies[1] + r->anomalies[2], 0);
	titan_memreplay_free(m);
	for (int k = 0; k < 64; k++)
		titan_mem_free(a, p[k]);
	titan_allocator_free(a);
}

/* --------------------------------------------------------- Chrome traces */

static void write_text(const char *name, const char *text)
{
	FILE *fp = fopen(path_of(name), "wb");

	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

static const char trace_text[] =
	"{\"displayTimeUnit\": \"ms\",\n"
	" \"otherData\": {\"tool\": \"titan-train\", \"step\": 7},\n"
	" \"traceEvents\": [\n"
	"  {\"name\":\"data\",\"cat\":\"train\",\"ph\":\"X\",\"ts\":0,\"dur\":10,\"pid\":2,\"tid\":0,\"args\":{\"step\":7}},\n"
	"  {\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,\"args\":{\"name\":\"rank 2\"}},\n"
	"  {\"name\":\"forward\",\"cat\":\"model\",\"ph\":\"B\",\"ts\":10,\"pid\":2,\"tid\":0},\n"
	"  {\"name\":\"layer 0 forward\",\"ph\":\"X\",\"ts\":12,\"dur\":20,\"pid\":2,\"tid\":0,\"args\":{\"step\":7}},\n"
	"  {\"name\":\"forward\",\"ph\":\"E\",\"ts\":40,\"pid\":2,\"tid\":0,\"args\":{\"step\":7}},\n"
	"  {\"name\":\"host memory (bytes)\",\"ph\":\"C\",\"ts\":41,\"pid\":2,\"args\":{\"value\":4096,\"x\":\"y\"}},\n"
	"  {\"name\":\"all_reduce\",\"cat\":\"comm\",\"ph\":\"X\",\"ts\":50,\"dur\":30,\"pid\":2,\"tid\":1,\"args\":{\"step\":7}},\n"
	"  {\"name\":\"step\",\"cat\":\"train\",\"ph\":\"X\",\"ts\":0,\"dur\":100,\"pid\":2,\"tid\":0,\"args\":{\"step\":7}}\n"
	"]}\n";

static void test_chrome_read(void **state)
{
	struct titan_chrome_trace *t;
	char cut[sizeof(trace_text)];
	(void)state;

	write_text("t.json", trace_text);
	assert_int_equal(titan_chrome_read(path_of("t.json"), &t), 0);
	assert_false(t->truncated);
	assert_int_equal(t->pid, 2);
	assert_int_equal(t->meta_step, 7);
	assert_int_equal(t->n_spans, 5);
	assert_string_equal(t->spans[0].name, "data");
	assert_string_equal(t->spans[0].cat, "train");
	assert_true(t->spans[0].dur == 10);
	assert_string_equal(t->spans[1].name, "layer 0 forward");
	assert_string_equal(t->spans[2].name, "forward"); /* B/E pair, closed at 40 */
	assert_true(t->spans[2].ts == 10 && t->spans[2].dur == 30);
	assert_int_equal(t->spans[2].step, 7);
	assert_ptr_equal(t->spans[0].cat, t->spans[4].cat); /* names are stored once */
	assert_int_equal(t->spans[3].tid, 1);
	assert_int_equal(t->n_counters, 1); /* the string arg is not a sample */
	assert_string_equal(t->counters[0].name, "host memory (bytes)");
	assert_string_equal(t->counters[0].series, "value");
	assert_true(t->counters[0].value == 4096);
	titan_chrome_free(t);
	titan_chrome_free(NULL);

	/* cut inside the 7th event: the 6 before it are kept */
	memcpy(cut, trace_text, sizeof(cut));
	cut[strstr(trace_text, "all_reduce") - trace_text + 5] = '\0';
	write_text("cut.json", cut);
	assert_int_equal(titan_chrome_read(path_of("cut.json"), &t), 0);
	assert_true(t->truncated);
	assert_int_equal(t->n_events, 5); /* M is an event without ts: not counted */
	assert_int_equal(t->n_spans, 3);
	assert_int_equal(t->stop_offset, (uint64_t)(strstr(trace_text, "  {\"name\":\"all_reduce") - trace_text + 2));
	titan_chrome_free(t);

	/* the bare array form */
	write_text("arr.json", "[{\"name\":\"step\",\"ph\":\"X\",\"ts\":1,\"dur\":2,\"pid\":0,\"tid\":0},\n"
			       " {\"name\":\"x\",\"ph\":\"X\",\"ts\":1.5,\"dur\":0.5,\"pid\":\"p\",\"tid\":\"t\"}]");
	assert_int_equal(titan_chrome_read(path_of("arr.json"), &t), 0);
	assert_int_equal(t->n_spans, 2);
	assert_int_equal(t->spans[0].step, -1);
	assert_true(t->spans[1].pid != 0);
	titan_chrome_free(t);

	/* a syntax error is named with its byte offset; so is a non-trace */
	write_text("bad.json", "{\"traceEvents\": [{\"ph\":\"X\",\"ts\":1,}, {}]}");
	assert_int_equal(titan_chrome_read(path_of("bad.json"), &t), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "bad trace event at byte"));
	write_text("notrace.json", "{\"a\": 1}");
	assert_int_equal(titan_chrome_read(path_of("notrace.json"), &t), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "no traceEvents"));
	write_text("empty.json", "");
	assert_int_equal(titan_chrome_read(path_of("empty.json"), &t), TITAN_E_FORMAT);
	assert_int_equal(titan_chrome_read(path_of("missing.json"), &t), TITAN_E_IO);
	titan_error_clear();
}

/* ---------------------------------------------------------- step times */

static void test_step_times(void **state)
{
	/* two steps on tid 0; step 2 has two microbatches (forward and
	 * backward twice), an all_reduce on tid 1 half under backward, and a
	 * blocking all_gather on tid 0 outside every phase.  tid 0 has op
	 * events (cat "op"), so it is busy only while one runs, not for all
	 * of its backward span: of the all_reduce (310-350) only 335-345,
	 * under buf_copy_rows, is hidden */
	const struct titan_span sp[] = {
		{"step", "train", 0, 100, 1, 0, 0},
		{"data", "train", 0, 5, 1, 0, 0},
		{"forward", "model", 5, 30, 1, 0, 0},
		{"layer 0 forward", "model", 6, 10, 1, 0, 0},
		{"loss", "model", 35, 5, 1, 0, 0},
		{"backward", "model", 40, 50, 1, 0, 0},
		{"optimizer", "train", 90, 8, 1, 0, 0},
		{"step", "train", 200, 200, 2, 0, 0},
		{"data", "train", 200, 10, 2, 0, 0},
		{"forward", "model", 210, 20, 2, 0, 0},
		{"backward", "model", 230, 40, 2, 0, 0},
		{"forward", "model", 270, 20, -1, 0, 0},  /* no args.step: by containment */
		{"backward", "model", 290, 40, 2, 0, 0},
		{"all_reduce", "comm", 310, 40, 2, 0, 1}, /* 310-330 hidden, 330-350 exposed */
		{"matmul_bwd", "op", 300, 5, 2, 0, 0},    /* titan-train's op events: */
		{"buf_copy_rows", "op", 335, 10, 2, 0, 0}, /* in no part; busy */
		{"allGather", "", 360, 10, 2, 0, 0},       /* blocking: exposed */
		{"optimizer", "train", 380, 15, 2, 0, 0},
		{"step", "train", 0, 50, 1, 1, 0},         /* another pid */
	};
	struct titan_step_time *st;
	size_t n;
	double v[] = {3, 1, 2, 10};
	(void)state;

	assert_int_equal(titan_step_times(sp, sizeof(sp) / sizeof(sp[0]), 0, &st, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(st[0].step, 1);
	assert_true(st[0].total == 100);
	assert_true(st[0].part[TITAN_TIME_DATA] == 5);
	assert_true(st[0].part[TITAN_TIME_FORWARD] == 30);
	assert_true(st[0].part[TITAN_TIME_LOSS] == 5);
	assert_true(st[0].part[TITAN_TIME_BACKWARD] == 50);
	assert_true(st[0].part[TITAN_TIME_OPTIMIZER] == 8);
	assert_true(st[0].part[TITAN_TIME_COMM_EXPOSED] == 0);
	assert_true(fabs(st[0].part[TITAN_TIME_OTHER] - 2) < 1e-9);
	assert_int_equal(st[1].step, 2);
	assert_true(st[1].total == 200);
	assert_true(st[1].part[TITAN_TIME_FORWARD] == 40);
	assert_true(st[1].part[TITAN_TIME_BACKWARD] == 80);
	assert_true(fabs(st[1].part[TITAN_TIME_COMM_OVERLAPPED] - 10) < 1e-9);
	/* 310-335 and 345-350 of the all_reduce, 360-370 of the all_gather */
	assert_true(fabs(st[1].part[TITAN_TIME_COMM_EXPOSED] - 40) < 1e-9);
	/* 200 - data 10 - fwd 40 - bwd 80 - opt 15 - exposed outside the
	 * phases 20 (330-335, 345-350, 360-370) */
	assert_true(fabs(st[1].part[TITAN_TIME_OTHER] - 35) < 1e-9);
	free(st);

	/* without op events on tid 0 (no op tracing) its phase spans make it
	 * busy: 310-330 of the all_reduce hidden under backward */
	{
		struct titan_span noop[sizeof(sp) / sizeof(sp[0])];
		size_t m = 0;

		for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++)
			if (strcmp(sp[i].cat, "op"))
				noop[m++] = sp[i];
		assert_int_equal(titan_step_times(noop, m, 0, &st, &n), 0);
		assert_int_equal(n, 2);
		assert_true(fabs(st[1].part[TITAN_TIME_COMM_OVERLAPPED] - 20) < 1e-9);
		assert_true(fabs(st[1].part[TITAN_TIME_COMM_EXPOSED] - 30) < 1e-9);
		assert_true(fabs(st[1].part[TITAN_TIME_OTHER] - 25) < 1e-9);
		free(st);
	}

	assert_int_equal(titan_step_times(sp, sizeof(sp) / sizeof(sp[0]), 9, &st, &n), 0);
	assert_int_equal(n, 0);
	assert_null(st);

	assert_true(titan_span_is_comm(&(struct titan_span){"AllReduce", "", 0, 0, 0, 0, 0}));
	assert_true(titan_span_is_comm(&(struct titan_span){"reduce-scatter grads", "", 0, 0, 0, 0, 0}));
	assert_true(titan_span_is_comm(&(struct titan_span){"x", "nccl", 0, 0, 0, 0, 0}));
	assert_false(titan_span_is_comm(&(struct titan_span){"layer 3 backward", "model", 0, 0, 0, 0, 0}));
	assert_true(titan_median(v, 4) == 2.5);
	assert_true(titan_median(v, 3) == 2);
	assert_string_equal(titan_time_part_name(TITAN_TIME_COMM_EXPOSED), "comm_exposed");
	assert_string_equal(titan_memprof_phase_name(4), "backward");
	assert_string_equal(titan_memprof_phase_name(99), "other");
}

/* Communication by collective: nested and overlapping spans on the comm
 * thread, each stretch to the innermost (latest started) span, the same
 * hidden/exposed cut as the step's totals, which they add up to. */
static void test_step_times_by_collective(void **state)
{
	const struct titan_span sp[] = {
		{"step", "train", 0, 100, 1, 0, 0},
		{"forward", "model", 0, 50, 1, 0, 0},       /* busy 0-50 */
		{"grad sync", "comm", 40, 40, 1, 0, 1},     /* 40-45 hidden, 60-70 exposed */
		{"reduce_scatter w (fsdp)", "comm", 45, 15, 1, 0, 1}, /* 45-50 hidden, 50-60 */
		{"all_reduce x (dp)", "comm", 70, 20, 1, 0, 1},       /* 70-90 exposed */
		{"all_reduce y (dp)", "comm", 92, 3, 1, 0, 1},        /* exposed */
	};
	struct titan_step_time *st;
	size_t n;
	(void)state;

	assert_int_equal(titan_step_times(sp, sizeof(sp) / sizeof(sp[0]), 0, &st, &n), 0);
	assert_int_equal(n, 1);
	assert_true(fabs(st[0].part[TITAN_TIME_COMM_EXPOSED] - 43) < 1e-9);
	assert_true(fabs(st[0].part[TITAN_TIME_COMM_OVERLAPPED] - 10) < 1e-9);
	assert_int_equal(st[0].n_comm, 3);
	assert_string_equal(st[0].comm[0].name, "grad");
	assert_int_equal(st[0].comm[0].calls, 1);
	assert_true(fabs(st[0].comm[0].exposed - 10) < 1e-9 && fabs(st[0].comm[0].overlapped - 5) < 1e-9);
	assert_string_equal(st[0].comm[1].name, "reduce_scatter");
	assert_true(fabs(st[0].comm[1].exposed - 10) < 1e-9 && fabs(st[0].comm[1].overlapped - 5) < 1e-9);
	assert_string_equal(st[0].comm[2].name, "all_reduce");
	assert_int_equal(st[0].comm[2].calls, 2);
	assert_true(fabs(st[0].comm[2].exposed - 23) < 1e-9 && st[0].comm[2].overlapped == 0);
	free(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_header, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated_and_corrupt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_known_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomalies, setup, teardown),
		cmocka_unit_test(test_live_table),
		cmocka_unit_test_setup_teardown(test_leak_check, setup, teardown),
		cmocka_unit_test(test_timeline),
		cmocka_unit_test_setup_teardown(test_real_allocator, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chrome_read, setup, teardown),
		cmocka_unit_test(test_step_times),
		cmocka_unit_test(test_step_times_by_collective),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
