/*
 * fuzz_memtrace.c — memory traces (lib/memprof/memtrace.c, replay.c): the
 * input is a *.memtrace file, read record by record (offsets must add up)
 * and replayed with a timeline, as titan-memprof summary does.
 */
#include <stdlib.h>

#include "fuzz.h"
#include "titan/core.h"
#include "titan/memprof.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_path("x.memtrace");
	struct titan_memtrace_reader *r = NULL;
	struct titan_memtrace_record rec;
	struct titan_memreplay_opts o;
	struct titan_memreplay *m = NULL;
	struct titan_memleak lk;
	uint64_t off, n = 0;
	int rc;

	fuzz_write(path, data, size);
	rc = titan_memtrace_open(&r, path);
	fuzz_check_error(rc);
	if (rc == 0) {
		while ((rc = titan_memtrace_next(r, &rec, &off)) > 0)
			if (off != TITAN_MEMTRACE_HEADER_BYTES + n++ * TITAN_MEMTRACE_RECORD_BYTES)
				abort();
		fuzz_check_error(rc);
		if (rc == 0 && titan_memtrace_offset(r) + titan_memtrace_tail_bytes(r) != size)
			abort(); /* every byte is a header, a record or the tail */
	}
	titan_memtrace_close(r);
	titan_memreplay_opts_default(&o);
	o.top_k = 3;
	o.max_live = 1000;
	o.timeline_cols = size % 64;
	rc = titan_memreplay_file(path, &o, &m);
	fuzz_check_error(rc);
	if (rc == 0) {
		const struct titan_memreplay_result *res = titan_memreplay_get(m);

		if (res->n_records != res->n_alloc + res->n_free || res->n_top > o.top_k)
			abort();
		titan_memleak_check(res, &lk);
	}
	titan_memreplay_free(m);
	return 0;
}
