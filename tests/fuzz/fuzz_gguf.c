/*
 * fuzz_gguf.c — GGUF files (lib/ckpt/gguf.c): the input is the file.  Every
 * metadata value of a file that opens is read with each getter, every
 * array element too (up to a bound), and every tensor found by name and
 * converted.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "titan/ckpt.h"
#include "titan/core.h"

#define MAX_ELEMS (1 << 20)

static void read_kv(const struct titan_gguf *f, const struct titan_gguf_kv *kv)
{
	int64_t i64;
	double d;
	size_t len;
	const char *s;

	if (titan_gguf_find_kv(f, kv->key) != kv)
		abort();
	fuzz_check_error(titan_gguf_kv_int(kv, &i64));
	fuzz_check_error(titan_gguf_kv_float(kv, &d));
	if ((s = titan_gguf_kv_str(kv, &len)) && len)
		(void)s[len - 1];
	titan_error_clear();
	if (kv->type != TITAN_GGUF_ARRAY)
		return;
	for (uint64_t i = 0; i < kv->n && i < 4096; i++) {
		fuzz_check_error(titan_gguf_arr_int(kv, i, &i64));
		fuzz_check_error(titan_gguf_arr_float(kv, i, &d));
		if ((s = titan_gguf_arr_str(kv, i, &len)) && len)
			(void)s[len - 1];
		titan_error_clear();
	}
	/* past the end: an error, not a read */
	if (titan_gguf_arr_int(kv, kv->n, &i64) == 0 || titan_gguf_arr_str(kv, kv->n, &len))
		abort();
	titan_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_path("model.gguf");
	struct titan_gguf *f;
	float *x = NULL;

	fuzz_write(path, data, size);
	if (!(f = titan_gguf_open(path))) {
		fuzz_check_error(-1);
		return 0;
	}
	if (f->data_offset > f->file_size || f->alignment == 0 ||
	    (f->alignment & (f->alignment - 1)))
		abort();
	for (size_t i = 0; i < f->n_kv; i++)
		read_kv(f, &f->kv[i]);
	for (size_t i = 0; i < f->n_tensors; i++) {
		const struct titan_gguf_tensor *t = &f->tensors[i];

		if (titan_gguf_find(f, t->name) != t)
			abort();
		if (f->data_offset + t->offset + t->nbytes > f->file_size)
			abort(); /* the reader promised the bytes are in the file */
		if (t->numel > MAX_ELEMS)
			continue;
		if (!(x = realloc(x, (size_t)(t->numel ? t->numel : 1) * sizeof(*x))))
			abort();
		fuzz_check_error(titan_gguf_tensor_to_f32(t, x));
	}
	free(x);
	titan_gguf_close(f);
	return 0;
}
