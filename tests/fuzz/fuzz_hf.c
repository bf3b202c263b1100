/*
 * fuzz_hf.c — HuggingFace model folders (lib/ckpt/hf.c): config.json and
 * the weights, as titan-ckpt-convert --from hf reads them.
 *
 * Input: files split at FUZZ_SEPARATOR: config.json, then either
 * model.safetensors, or model.safetensors.index.json followed by
 * model-00001-of-0000N.safetensors ... (N = the number of files given).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "titan/ckpt.h"
#include "titan/core.h"
#include "titan/model.h"

#define MAX_FILES 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_part parts[MAX_FILES + 2];
	size_t np = fuzz_split(data, size, parts, MAX_FILES + 2);
	char dir[1024];
	struct titan_model_dims dims;
	struct titan_hf_model *m = NULL;
	int64_t bos, eos;
	char name[128];
	int rc;

	snprintf(dir, sizeof(dir), "%s", fuzz_path("hf"));
	fuzz_clean();
	if (mkdir(dir, 0755) < 0)
		abort();
	fuzz_write(fuzz_path("hf/config.json"), parts[0].p, parts[0].n);
	if (np == 2) {
		fuzz_write(fuzz_path("hf/model.safetensors"), parts[1].p, parts[1].n);
	} else if (np > 2) {
		fuzz_write(fuzz_path("hf/model.safetensors.index.json"), parts[1].p, parts[1].n);
		for (size_t i = 2; i < np; i++) {
			snprintf(name, sizeof(name), "hf/model-%05zu-of-%05zu.safetensors", i - 1, np - 2);
			fuzz_write(fuzz_path(name), parts[i].p, parts[i].n);
		}
	}
	fuzz_check_error(titan_hf_read_config(fuzz_path("hf/config.json"), &dims, &bos, &eos));
	rc = titan_hf_open(dir, &m);
	fuzz_check_error(rc);
	if (rc == 0) {
		const struct titan_param_table *t = titan_hf_table(m);

		for (int i = 0; i < t->n; i++) {
			float *x = malloc((size_t)t->params[i].numel * sizeof(*x));

			if (!x)
				abort();
			fuzz_check_error(titan_hf_read(m, &t->params[i], x));
			free(x);
		}
		titan_hf_close(m);
	}
	return 0;
}
