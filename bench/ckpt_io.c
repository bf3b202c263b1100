/*
 * ckpt_io.c — bench/ckpt_io.sh's timer.  `save` writes a full checkpoint
 * (weights, both AdamW moments, training state) of a Llama 3 1B-shaped
 * model with LAYERS layers through titan_ckpt_save (FOLDER/step-1.h5);
 * `load` reads it back with titan_ckpt_load.  Prints "save|load BYTES
 * SECONDS" (the save timed is the second of two; see below).  Weights come from torchtitan's init and the moments from the
 * RNG, so the bytes do not compress.  With bfloat16: a model-only export.
 *
 *   ckpt_io save|load FOLDER LAYERS [bfloat16]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/ckpt.h"

int main(int argc, char **argv)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena p, m, v;
	struct titan_loader_state l = {0};
	struct titan_ckpt_state st = {0};
	struct titan_rng r;
	struct stat sb;
	char *path = NULL;
	bool bf16 = argc > 4 && !strcmp(argv[4], "bfloat16"), save;
	unsigned flags = bf16 ? TITAN_CKPT_MODEL_ONLY : 0;
	uint64_t t0, t1;

	if (argc < 4 || (strcmp(argv[1], "save") && strcmp(argv[1], "load"))) {
		fprintf(stderr, "usage: ckpt_io save|load FOLDER LAYERS [bfloat16]\n");
		return 2;
	}
	save = !strcmp(argv[1], "save");
	titan_model_flavor("1B", &d);
	d.n_layers = atoi(argv[3]);
	if (titan_param_table_init(&t, &d, NULL) < 0 ||
	    titan_param_arena_init(&p, &t, NULL, TITAN_MEM_PARAMS) < 0 ||
	    titan_param_arena_init(&m, &t, NULL, TITAN_MEM_OPTIM) < 0 ||
	    titan_param_arena_init(&v, &t, NULL, TITAN_MEM_OPTIM) < 0)
		goto fail;
	titan_model_init_params(&p, 1);
	titan_rng_init(&r, 2, 0);
	titan_rng_fill_normal(&r, 0, m.data, (size_t)t.arena_floats, 0, 1e-3f);
	titan_rng_fill_uniform(&r, (uint64_t)t.arena_floats, v.data, (size_t)t.arena_floats, 0, 1e-6f);
	st.table = &t;
	st.params = p.data;
	st.exp_avg = m.data;
	st.exp_avg_sq = v.data;
	st.train.dp_world_size = 1;
	st.train.loader = &l;
	if (save) {
		/* an untimed save first: on a VM the first write into fresh page
		 * cache pays for the host faulting memory in (0.2 GB/s here for
		 * raw pwrite as for HDF5, ~1 GB/s the second time) */
		if (titan_ckpt_save(argv[2], 1, &st, flags, bf16 ? TITAN_CKPT_BFLOAT16 :
				    TITAN_CKPT_FLOAT32, &path) < 0)
			goto fail;
		unlink(path);
		free(path);
		path = NULL;
		t0 = titan_time_ns();
		if (titan_ckpt_save(argv[2], 1, &st, flags, bf16 ? TITAN_CKPT_BFLOAT16 :
				    TITAN_CKPT_FLOAT32, &path) < 0)
			goto fail;
		t1 = titan_time_ns();
	} else {
		if (!(path = malloc(4096)) || titan_ckpt_path(path, 4096, argv[2], 1) < 0)
			goto fail;
		t0 = titan_time_ns();
		if (titan_ckpt_load(path, &st, flags) < 0)
			goto fail;
		t1 = titan_time_ns();
	}
	if (stat(path, &sb) != 0)
		goto fail;
	printf("%s %lld %.3f\n", argv[1], (long long)sb.st_size, (double)(t1 - t0) * 1e-9);
	free(path);
	return 0;
fail:
	fprintf(stderr, "ckpt_io: error: %s\n", titan_errmsg());
	return 1;
}
