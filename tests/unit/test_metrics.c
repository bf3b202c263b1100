/*
 * test_metrics.c — the trainer's metrics row and its sinks
 * (lib/train/metrics.h): the console line, the metrics.jsonl object and
 * the TensorBoard event of one row are exactly what titan-train writes
 * (the format strings, key order and torchtitan's tags spelt out here:
 * what it wrote before the row existed, plus issue 27's max loss,
 * retries/OOMs on the CPU, validation throughput and memory), on the CPU on one rank and on CUDA with several
 * ranks (the caching allocator's keys, the max-rank keys); the same for a
 * validation row; a metrics file on a full disk keeps its last complete
 * row.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <stdio.h>
#include <sys/stat.h>

#include "scratch.h"
#include "titan/core.h"
#include "titan/trace.h"

#include "train/metrics.h"

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_metrics");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

#define GIB 1073741824.0

static struct titan_metrics_row row(bool cuda, int world)
{
	struct titan_metrics_row r = {
		.step = 7, .loss = 4.25, .grad_norm = 1.5, .lr = 0.0008, .max_loss = 4.75,
		.tokens_seen = 4096,
		.tps = 12345.5, .tflops = 0.5, .mfu_pct = 2.25, .step_time_s = 0.5,
		.data_time_s = 0.125, .checkpoint_blocked_s = 0.25,
		.memory_peak_bytes = 3 << 20, .cuda = cuda, .max_active = 1 << 30,
		.max_reserved = 3 << 29, .num_alloc_retries = cuda ? 2 : 0, .num_ooms = cuda ? 1 : 0,
		.total_mem = 16.0 * GIB, .world_size = world, .max_rank_reserved = 2.0 * GIB,
		.max_rank_step_time_s = 0.75,
	};

	for (int k = 0; k < TITAN_MEM_NTAGS; k++)
		r.memory_peak_by_tag[k] = (int64_t)k << 20;
	return r;
}

static char *printed(void (*fn)(FILE *, const void *), const void *arg)
{
	static char buf[1024];
	FILE *f = fmemopen(buf, sizeof(buf), "w");

	assert_non_null(f);
	fn(f, arg);
	fclose(f);
	return buf;
}

static void print_step(FILE *f, const void *r)
{
	titan_metrics_print(f, "[rank1]:", r);
}

static void print_validation(FILE *f, const void *r)
{
	titan_validation_print(f, "[titan] - root - INFO - ", r);
}

static void test_console(void **state)
{
	struct titan_metrics_row r = row(false, 1);
	struct titan_validation_row v = {3, 4.125, 96, 1234.6, 1 << 30, 3 << 29, 16.0 * GIB};

	(void)state;
	assert_string_equal(printed(print_step, &r),
			    "[rank1]:step:  7  loss:  4.25000  grad_norm:  1.5000  memory:  "
			    "1.50GiB(9.38%)  tps: 12,346  tflops: 0.50  mfu: 2.25%\n");
	assert_string_equal(printed(print_validation, &v),
			    "[titan] - root - INFO - validate step:  3  loss:  4.12500  memory:  "
			    "1.50GiB(9.38%)  tps: 1,235\n");
}

static char *json(const struct titan_metrics_row *r)
{
	static char out[4096];
	struct titan_json j;

	titan_json_init(&j);
	titan_metrics_json(&j, r);
	snprintf(out, sizeof(out), "%.*s", (int)j.len, j.buf);
	titan_json_release(&j);
	return out;
}

static void test_jsonl(void **state)
{
	struct titan_metrics_row cpu = row(false, 1), gpu = row(true, 2);
	struct titan_validation_row v = {3, 4.125, 96, 1234.6, 1 << 30, 3 << 29, 16.0 * GIB};
	struct titan_json j;
	char want[4096], tags[1024] = "";
	size_t n = 0;

	(void)state;
	for (int k = 0; k < TITAN_MEM_NTAGS; k++)
		n += (size_t)snprintf(tags + n, sizeof(tags) - n, "%s\"%s\":%d", k ? "," : "",
				      titan_mem_tag_name((enum titan_mem_tag)k), k << 20);
	snprintf(want, sizeof(want), "{\"step\":7,\"loss\":4.25,\"max_loss\":4.75,"
		 "\"grad_norm\":1.5,\"lr\":0.0008,"
		 "\"tokens_seen\":4096,\"tps\":12345.5,\"tflops\":0.5,\"mfu_pct\":2.25,"
		 "\"step_time_s\":0.5,\"data_time_s\":0.125,\"checkpoint_blocked_s\":0.25,"
		 "\"memory_peak_bytes\":3145728,\"memory_peak_by_tag\":{%s}}", tags);
	assert_string_equal(json(&cpu), want);
	snprintf(want + strlen(want) - 1, sizeof(want) - strlen(want) + 1,
		 ",\"memory_max_active_bytes\":1073741824,\"memory_max_active_pct\":6.25,"
		 "\"memory_max_reserved_bytes\":1610612736,\"memory_max_reserved_pct\":9.375,"
		 "\"num_alloc_retries\":2,\"num_ooms\":1,\"world_size\":2,"
		 "\"memory_peak_bytes_max_rank\":2147483648,\"step_time_s_max_rank\":0.75}");
	assert_string_equal(json(&gpu), want);
	titan_json_init(&j);
	titan_validation_json(&j, &v);
	{
		static const char want_v[] = "{\"step\":3,\"validation_loss\":4.125,"
					     "\"validation_tokens\":96,\"validation_tps\":1234.6,"
					     "\"validation_memory_peak_bytes\":1610612736}";

		assert_int_equal(j.len, strlen(want_v));
		assert_memory_equal(j.buf, want_v, j.len);
	}
	titan_json_release(&j);
}

static long read_file(const char *pattern, unsigned char *buf, size_t cap)
{
	glob_t g;
	FILE *f;
	long n;

	assert_int_equal(glob(pattern, 0, NULL, &g), 0);
	assert_int_equal(g.gl_pathc, 1);
	f = fopen(g.gl_pathv[0], "rb");
	assert_non_null(f);
	n = (long)fread(buf, 1, cap, f);
	fclose(f);
	globfree(&g);
	return n;
}

/* The scalars titan-train writes, in its order. */
static void old_scalars(struct titan_tfevents *e, const struct titan_metrics_row *r)
{
	static const char *const tag[] = {"params", "grads", "optim", "activations", "comm",
					  "workspace", "data", "other"};
	char t[96];

	assert_int_equal(TITAN_MEM_NTAGS, 8);
	titan_tfevents_scalar(e, "loss_metrics/global_avg_loss", 4.25);
	titan_tfevents_scalar(e, "loss_metrics/global_max_loss", 4.75);
	titan_tfevents_scalar(e, "grad_norm", 1.5);
	titan_tfevents_scalar(e, "lr", 0.0008);
	titan_tfevents_scalar(e, "n_tokens_seen", 4096);
	titan_tfevents_scalar(e, "throughput(tps)", 12345.5);
	titan_tfevents_scalar(e, "tflops", 0.5);
	titan_tfevents_scalar(e, "mfu(%)", 2.25);
	titan_tfevents_scalar(e, "time_metrics/end_to_end(s)", 0.5);
	titan_tfevents_scalar(e, "time_metrics/data_loading(s)", 0.125);
	titan_tfevents_scalar(e, "time_metrics/data_loading(%)", 25);
	titan_tfevents_scalar(e, "time_metrics/checkpoint_blocked(s)", 0.25);
	titan_tfevents_scalar(e, "memory/max_active(GiB)", 1);
	titan_tfevents_scalar(e, "memory/max_active(%)", 6.25);
	titan_tfevents_scalar(e, "memory/max_reserved(GiB)", 1.5);
	titan_tfevents_scalar(e, "memory/max_reserved(%)", 9.375);
	/* every row since issue 27: 0 on the CPU */
	titan_tfevents_scalar(e, "memory/num_alloc_retries", r->cuda ? 2 : 0);
	titan_tfevents_scalar(e, "memory/num_ooms", r->cuda ? 1 : 0);
	for (int k = 0; k < 8; k++) {
		snprintf(t, sizeof(t), "memory/by_tag/%s(GiB)", tag[k]);
		titan_tfevents_scalar(e, t, (double)k / 1024);
	}
	if (r->world_size > 1) {
		titan_tfevents_scalar(e, "memory/max_reserved_max_rank(GiB)", 2);
		titan_tfevents_scalar(e, "time_metrics/end_to_end_max_rank(s)", 0.75);
	}
}

static void test_tensorboard(void **state)
{
	static unsigned char got[8192], want[8192];
	struct titan_validation_row v = {3, 4.125, 96, 1234.6, 1 << 30, 3 << 29, 16.0 * GIB};
	char a[600], b[600], pat[700];
	long ng, nw;

	(void)state;
	for (int c = 0; c < 2; c++) {
		struct titan_metrics_row r = row(c == 1, c == 1 ? 4 : 1);
		struct titan_tfevents *eg, *ew;

		snprintf(a, sizeof(a), "%s/got%d", dir, c);
		snprintf(b, sizeof(b), "%s/want%d", dir, c);
		assert_int_equal(mkdir(a, 0777), 0);
		assert_int_equal(mkdir(b, 0777), 0);
		assert_int_equal(titan_tfevents_open(&eg, a, 1.5), 0);
		assert_int_equal(titan_tfevents_open(&ew, b, 1.5), 0);
		assert_int_equal(titan_metrics_tensorboard(eg, &r, 2.0), 0);
		old_scalars(ew, &r);
		assert_int_equal(titan_tfevents_write(ew, 7, 2.0), 0);
		assert_int_equal(titan_validation_tensorboard(eg, &v, 3.0), 0);
		titan_tfevents_scalar(ew, "validation_metrics/loss", 4.125);
		titan_tfevents_scalar(ew, "validation_metrics/throughput(tps)", 1234.6);
		titan_tfevents_scalar(ew, "validation_metrics/memory/max_active(GiB)", 1);
		titan_tfevents_scalar(ew, "validation_metrics/memory/max_active(%)", 6.25);
		titan_tfevents_scalar(ew, "validation_metrics/memory/max_reserved(GiB)", 1.5);
		titan_tfevents_scalar(ew, "validation_metrics/memory/max_reserved(%)", 9.375);
		titan_tfevents_scalar(ew, "validation_metrics/tokens", 96);
		assert_int_equal(titan_tfevents_write(ew, 3, 3.0), 0);
		assert_int_equal(titan_tfevents_close(eg), 0);
		assert_int_equal(titan_tfevents_close(ew), 0);
		snprintf(pat, sizeof(pat), "%s/events.out.tfevents.*", a);
		ng = read_file(pat, got, sizeof(got));
		snprintf(pat, sizeof(pat), "%s/events.out.tfevents.*", b);
		nw = read_file(pat, want, sizeof(want));
		assert_true(ng > 600 && ng < (long)sizeof(got));
		assert_int_equal(ng, nw);
		assert_memory_equal(got, want, (size_t)ng);
	}
}

/* /dev/full: the write fails, the error names the file. */
static void test_write_line_full_disk(void **state)
{
	struct titan_json j;
	FILE *f = fopen("/dev/full", "w");

	(void)state;
	if (!f)
		skip();
	titan_json_init(&j);
	titan_json_object_begin(&j);
	titan_json_object_end(&j);
	assert_int_equal(titan_metrics_write_line(f, "m.jsonl", &j), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "cannot write metrics to 'm.jsonl'"));
	titan_json_release(&j);
	fclose(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_console),
		cmocka_unit_test(test_jsonl),
		cmocka_unit_test(test_tensorboard),
		cmocka_unit_test(test_write_line_full_disk),
	};
	return cmocka_run_group_tests_name("metrics", tests, setup, teardown);
}
