/*
 * fuzz_safetensors.c — safetensors files (lib/ckpt/safetensors.c): the
 * input is the file.  Every tensor of a file that opens is looked up by
 * name and converted (as titan-ckpt-convert and the golden tests do).
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "titan/ckpt.h"
#include "titan/core.h"

#define MAX_ELEMS (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_path("model.safetensors");
	struct titan_safetensors *f;
	float *x = NULL;
	int64_t *v = NULL;

	fuzz_write(path, data, size);
	if (!(f = titan_safetensors_open(path))) {
		fuzz_check_error(-1);
		return 0;
	}
	if (f->buffer_len != f->file_size - 8 - f->header_len)
		abort();
	for (size_t i = 0; i < f->n_meta; i++)
		if (titan_safetensors_meta(f, f->meta_keys[i]) == NULL)
			abort();
	for (size_t i = 0; i < f->n_tensors; i++) {
		const struct titan_st_tensor *t = &f->tensors[i], *u;

		/* inside the data buffer, and found again by name */
		if (t->end < t->begin || t->end > f->buffer_len || t->nbytes != t->end - t->begin ||
		    (t->nbytes && (const uint8_t *)t->data != f->buffer + t->begin))
			abort();
		if (titan_safetensors_find(f, t->name) != t)
			abort();
		if (titan_safetensors_get(f, t->name, t->dtype, t->ndim, t->shape, &u) < 0 || u != t)
			abort();
		fuzz_check_error(titan_safetensors_get(f, t->name, TITAN_ST_F32, 1, &t->numel, &u));
		if (t->numel > MAX_ELEMS)
			continue;
		if (!(x = realloc(x, (size_t)(t->numel ? t->numel : 1) * sizeof(*x))) ||
		    !(v = realloc(v, (size_t)(t->numel ? t->numel : 1) * sizeof(*v))))
			abort();
		fuzz_check_error(titan_st_tensor_to_f32(t, x));
		fuzz_check_error(titan_st_tensor_to_i64(t, v));
	}
	free(x);
	free(v);
	titan_safetensors_close(f);
	return 0;
}
