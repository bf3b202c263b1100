/*
 * fuzz_chrome.c — Chrome trace-event JSON (lib/memprof/spans.c), the
 * timing traces titan-train writes through lib/trace: the input is the
 * file.  A trace that reads is split into steps as titan-memprof time does.
 */
#include <stdlib.h>

#include "fuzz.h"
#include "titan/core.h"
#include "titan/memprof.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_path("trace.json");
	struct titan_chrome_trace *t = NULL;
	struct titan_step_time *st = NULL;
	size_t n = 0;
	int rc;

	fuzz_write(path, data, size);
	rc = titan_chrome_read(path, &t);
	fuzz_check_error(rc);
	if (rc < 0)
		return 0;
	if (t->truncated && t->stop_offset > size)
		abort();
	for (size_t i = 0; i < t->n_spans; i++)
		if (!t->spans[i].name || !t->spans[i].cat)
			abort();
	fuzz_check_error(titan_step_times(t->spans, t->n_spans, t->pid, &st, &n));
	if (n) {
		double *v = malloc(n * sizeof(*v));

		if (!v)
			abort();
		for (size_t i = 0; i < n; i++)
			v[i] = st[i].total;
		(void)titan_median(v, n);
		free(v);
	}
	free(st);
	titan_chrome_free(t);
	return 0;
}
