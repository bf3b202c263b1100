/*
 * layout.c — how the model splits over ranks, shared by titan-train
 * (lib/train) and titan-estimate (lib/estimate) so that both split it the
 * same way: torchtitan's pipeline stage split (distributed/
 * pipeline_parallel.py: generate_llm_fqn_per_model_part, explicit
 * pipeline_parallel_split_points, pipeline_parallel_layers_per_stage) and
 * the divisibility that tensor parallelism (heads, kv heads, FFN hidden
 * units, sequence-parallel tokens) and context parallelism (2 x cp
 * load-balanced chunks of each sequence) need.
 */
#include "titan/model.h"

#include <stdlib.h>
#include <string.h>

/* Blocks of each stage from split points "layers.N" (each starts a stage). */
static int split_points(const struct titan_config *c, int64_t L, int nstages, int *first)
{
	const struct titan_strlist *sp = &c->parallelism.pipeline_parallel_split_points;

	if ((int64_t)sp->n != nstages - 1)
		return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_split_points: %zu "
				   "points make %zu stages, but pipeline_parallel_degree is %d",
				   (size_t)sp->n, (size_t)sp->n + 1, nstages);
	first[0] = 0;
	for (int s = 1; s < nstages; s++) {
		const char *p = sp->items[s - 1];
		int64_t l;

		if (strncmp(p, "layers.", 7) || titan_parse_i64(p + 7, &l) < 0 || l < 1 || l >= L ||
		    l <= first[s - 1])
			return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_split_points: "
					   "'%s' is not layers.N with N increasing in 1 .. %lld", p,
					   (long long)(L - 1));
		first[s] = (int)l;
	}
	first[nstages] = (int)L;
	return 0;
}

int titan_pp_split(const struct titan_config *c, int64_t L, int nstages, int stage,
		   struct titan_pp_stage *out)
{
	int *first = calloc((size_t)nstages + 1, sizeof(*first));
	const int64_t units = L + 2; /* the embedding and norm + output weigh one block each */
	int rc = 0;

	if (!first)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if (c->parallelism.pipeline_parallel_split_points.n > 0) {
		rc = split_points(c, L, nstages, first);
	} else {
		int64_t per = units / nstages, extra = units % nstages, at = 0;

		if (c->parallelism.pipeline_parallel_layers_per_stage > 0) {
			per = c->parallelism.pipeline_parallel_layers_per_stage;
			extra = 0;
			if ((units + per - 1) / per != nstages)
				rc = titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_"
						 "layers_per_stage %lld: %lld blocks + embedding + "
						 "output make %lld stages, but the schedule runs %d",
						 (long long)per, (long long)L,
						 (long long)((units + per - 1) / per), nstages);
		} else if (per < 2 && nstages > 1) {
			rc = titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_degree %d: "
					 "%lld blocks cannot give every stage one besides the "
					 "embedding and the output (at most %lld stages)", nstages,
					 (long long)L, (long long)(units / 2));
		}
		/* torchtitan's generate_llm_fqn_per_model_part: `per` units a
		 * stage, the first `extra` stages one more; the embedding takes
		 * one of stage 0's, norm + output one of the last stage's */
		for (int s = 0; rc == 0 && s < nstages; s++) {
			int64_t n = per + (s < extra ? 1 : 0) - (s == 0) - (s == nstages - 1);

			first[s] = (int)at;
			at = at + n < L ? at + n : L;
		}
		first[nstages] = (int)L;
		for (int s = 0; rc == 0 && s < nstages; s++)
			if (first[s + 1] <= first[s] && nstages > 1)
				rc = titan_error(TITAN_E_INVALID, "pipeline stage %d of %d would hold "
						 "no block (n_layers %lld)", s, nstages, (long long)L);
	}
	if (rc == 0) {
		out->l0 = first[stage];
		out->l1 = first[stage + 1];
		out->first = stage == 0;
		out->last = stage == nstages - 1;
		out->index = stage;
	}
	free(first);
	return rc;
}

int titan_model_check_tp_cp(const struct titan_model_dims *d, int64_t tp, int64_t cp,
			    int64_t seq_len, int64_t rows)
{
	int64_t div;

	if (tp < 1 || cp < 1)
		return titan_error(TITAN_E_INVALID, "parallelism: tensor_parallel_degree %lld and "
				   "context_parallel_degree %lld must be at least 1", (long long)tp,
				   (long long)cp);
	if (d->n_heads % tp || d->n_kv_heads % tp || d->ffn_hidden % tp)
		return titan_error(TITAN_E_INVALID, "parallelism.tensor_parallel_degree %lld must "
				   "divide model n_heads %lld, n_kv_heads %lld and the FFN hidden "
				   "size %lld", (long long)tp, (long long)d->n_heads,
				   (long long)d->n_kv_heads, (long long)d->ffn_hidden);
	/* sequence parallelism shards each row's tokens by tp, CP the sequence
	 * into 2·cp chunks (titan_config_validate checks the same product) */
	if (__builtin_mul_overflow(tp, cp > 1 ? 2 * cp : 1, &div) || seq_len < 1 || seq_len % div)
		return cp > 1 ? titan_error(TITAN_E_INVALID, "training.seq_len: %lld is not divisible "
					    "by %lld (parallelism.tensor_parallel_degree %lld x 2 x "
					    "context_parallel_degree %lld)", (long long)seq_len,
					    (long long)div, (long long)tp, (long long)cp)
			      : titan_error(TITAN_E_INVALID, "training.seq_len: %lld is not divisible "
					    "by %lld (parallelism.tensor_parallel_degree: sequence "
					    "parallelism shards the sequence)", (long long)seq_len,
					    (long long)div);
	if (rows < 1 || (rows * (seq_len / cp)) % tp)
		return titan_error(TITAN_E_INVALID, "sequence parallelism: the %lld tokens of a "
				   "microbatch (%lld rows x %lld tokens per rank) do not split over "
				   "tensor_parallel_degree %lld", (long long)(rows * (seq_len / cp)),
				   (long long)rows, (long long)(seq_len / cp), (long long)tp);
	return 0;
}
