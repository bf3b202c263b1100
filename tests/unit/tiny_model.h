/* tiny_model.h — small models and estimator options shared by the unit
 * tests that build or estimate one (test_engine, test_estimate,
 * test_measure).  Include after cmocka.h. */
#ifndef TITAN_TEST_TINY_MODEL_H
#define TITAN_TEST_TINY_MODEL_H

#include <math.h>
#include <string.h>

#include "titan/estimate.h"
#include "titan/model.h"

/* debugmodel's settings with these sizes: head_dim dim / heads, FFN of
 * multiple_of 16. */
static inline struct titan_model_dims tiny_dims(int64_t dim, int64_t layers, int64_t heads,
						int64_t kv, int64_t vocab)
{
	struct titan_model_dims d;

	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.dim = dim;
	d.n_layers = layers;
	d.n_heads = heads;
	d.n_kv_heads = kv;
	d.head_dim = dim / heads;
	d.vocab_size = vocab;
	d.multiple_of = 16;
	d.ffn_dim_multiplier = NAN;
	d.ffn_hidden = titan_ffn_hidden_dim(d.dim, d.multiple_of, d.ffn_dim_multiplier);
	return d;
}

/* titan-estimate --device cpu on one rank: fp32, 1F1B, chunks of 1024. */
static inline struct titan_est_opts tiny_cpu_opts(int64_t batch, int64_t seq,
						  enum titan_est_ac ac, int every, int threads)
{
	struct titan_est_opts o;

	memset(&o, 0, sizeof(o));
	assert_int_equal(titan_est_device_lookup("cpu", &o.dev), 0);
	o.ngpu = 1;
	o.gpus_per_node = 8;
	o.layout = (struct titan_est_layout){1, 1, 1, 1, 1};
	o.local_batch = batch;
	o.seq_len = seq;
	o.accum = 1;
	o.pp_microbatch = 1;
	o.schedule = TITAN_EST_1F1B;
	o.ac = ac;
	o.ac_every = every;
	o.param_bytes = o.master_bytes = o.reduce_bytes = o.optim_bytes = 4;
	o.ce_chunk = 1024;
	o.mfu = 0.4;
	o.threads = threads;
	return o;
}

#endif
