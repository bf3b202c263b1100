/*
 * test_ckpt_hf.c — float32 -> bfloat16 / float16 rounding (to nearest,
 * ties to even, against hand-checked bit patterns, the compiler's
 * _Float16 and a brute-force nearest search), the HF q/k permutation (a
 * hand-checked example and tt -> HF -> tt identity), HF names, and the HF
 * export/import of lib/ckpt/hf*.c: round trip bit-exact in float32, sharded
 * output with an index, config.json contents, and bad HF folders.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "scratch.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/ckpt.h"
#include "titan/core.h"
#include "titan/model.h"

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_ckpt_hf");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

static float f_of(uint32_t u)
{
	float x;

	memcpy(&x, &u, 4);
	return x;
}

static uint32_t u_of(float x)
{
	uint32_t u;

	memcpy(&u, &x, 4);
	return u;
}

/* ------------------------------------------------------------ rounding */

static void test_bf16(void **state)
{
	static const struct { uint32_t in; uint16_t out; } cases[] = {
		{0x3f800000, 0x3f80}, /* 1 */
		{0x3f808000, 0x3f80}, /* 1 + 2^-8: a tie, to even (down) */
		{0x3f818000, 0x3f82}, /* 1 + 3·2^-8: a tie, to even (up) */
		{0x3f808001, 0x3f81}, /* just above the tie */
		{0x3f807fff, 0x3f80}, /* just below */
		{0xbf808001, 0xbf81}, /* negative */
		{0x7f7fffff, 0x7f80}, /* largest float rounds to inf */
		{0x7f7f7fff, 0x7f7f}, /* largest bf16 stays */
		{0x7f800000, 0x7f80}, /* inf */
		{0xff800000, 0xff80},
		{0x00000001, 0x0000}, /* smallest subnormal rounds to 0 */
		{0x00008000, 0x0000}, /* tie at a subnormal, to even */
		{0x00018000, 0x0002},
		{0x80000000, 0x8000}, /* -0 */
		{0x7fc00000, 0x7fc0}, /* NaN */
		{0x7f800001, 0x7fc0}, /* signalling NaN becomes quiet, stays NaN */
		{0xffffffff, 0xffff},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint16_t got = titan_f32_to_bf16(f_of(cases[i].in));

		if (got != cases[i].out)
			fail_msg("bf16(0x%08x) = 0x%04x, want 0x%04x", cases[i].in, got, cases[i].out);
	}
	/* every bf16 widens exactly and narrows back to itself (NaNs stay NaN) */
	for (uint32_t b = 0; b < 65536; b++) {
		float x = titan_bf16_to_f32((uint16_t)b);

		assert_int_equal(u_of(x), b << 16);
		if (!isnan(x))
			assert_int_equal(titan_f32_to_bf16(x), b);
		else
			assert_true(isnan(titan_bf16_to_f32(titan_f32_to_bf16(x))));
	}
	/* random finite floats: the nearest bf16, ties to an even mantissa */
	struct titan_rng r;

	titan_rng_init(&r, 3, 0);
	for (int i = 0; i < 200000; i++) {
		float x = f_of(titan_rng_u32(&r));
		uint16_t b;
		double e, lo, hi;

		if (!isfinite(x) || fabsf(x) > 3.3e38f)
			continue;
		b = titan_f32_to_bf16(x);
		e = fabs((double)titan_bf16_to_f32(b) - x);
		lo = fabs((double)titan_bf16_to_f32((uint16_t)(b - 1)) - x);
		hi = fabs((double)titan_bf16_to_f32((uint16_t)(b + 1)) - x);
		if ((b & 0x7fff) != 0 && e > lo)
			fail_msg("bf16 of %a: 0x%04x is not nearest", (double)x, b);
		if ((b & 0x7fff) != 0x7f7f && e > hi)
			fail_msg("bf16 of %a: 0x%04x is not nearest", (double)x, b);
		if ((e == lo || e == hi) && e != 0 && (b & 1))
			fail_msg("bf16 of %a: tie not to even", (double)x);
	}
}

static void test_f16(void **state)
{
	static const struct { float in; uint16_t out; } cases[] = {
		{1.0f, 0x3c00}, {65504.0f, 0x7bff}, {65519.99f, 0x7bff}, {65520.0f, 0x7c00},
		{1e9f, 0x7c00}, {-1e9f, 0xfc00}, {0x1p-14f, 0x0400}, {0x1p-24f, 0x0001},
		{0x1p-25f, 0x0000}, {0x1.000002p-25f, 0x0001}, {0x1.8p-24f, 0x0002},
		{0x1.4p-24f, 0x0001}, {0x1.002p0f, 0x3c00}, {0x1.006p0f, 0x3c02}, {0x1.0021p0f, 0x3c01},
		{-0.0f, 0x8000}, {INFINITY, 0x7c00},
	};
	struct titan_rng r;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint16_t got = titan_f32_to_f16(cases[i].in);

		if (got != cases[i].out)
			fail_msg("f16(%a) = 0x%04x, want 0x%04x", (double)cases[i].in, got, cases[i].out);
	}
	assert_true(isnan(titan_f16_to_f32(titan_f32_to_f16(NAN))));
	for (uint32_t h = 0; h < 65536; h++) {
		float x = titan_f16_to_f32((uint16_t)h);

		if (!isnan(x))
			assert_int_equal(titan_f32_to_f16(x), h);
	}
#if defined(__FLT16_MAX__)
	/* the compiler's conversion (libgcc, round to nearest even) as oracle */
	titan_rng_init(&r, 4, 0);
	for (int i = 0; i < 500000; i++) {
		float x = f_of(titan_rng_u32(&r) & 0xc7ffffffu); /* mostly in f16 range */
		_Float16 h = (_Float16)x;
		uint16_t want;

		if (isnan(x))
			continue;
		memcpy(&want, &h, 2);
		if (titan_f32_to_f16(x) != want)
			fail_msg("f16(%a) = 0x%04x, the compiler says 0x%04x", (double)x,
				 titan_f32_to_f16(x), want);
	}
#else
	(void)r;
#endif
}

/* ------------------------------------------------------------ permutation */

static void test_permutation(void **state)
{
	/* one head of 4: pairs (0,1), (2,3) -> HF halves (0,2), (1,3) */
	const float tt4[4] = {0, 1, 2, 3}, hf4[4] = {0, 2, 1, 3};
	/* two heads of 6, 2 columns: HF row h·6 + i·3 + j is tt row h·6 + 2j + i */
	float tt[24], hf[24], back[24], want[24];
	const int order[12] = {0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11};
	float out[4];

	(void)state;
	titan_hf_permute_qk(tt4, out, 1, 4, 1, true);
	assert_memory_equal(out, hf4, sizeof(out));
	titan_hf_permute_qk(hf4, out, 1, 4, 1, false);
	assert_memory_equal(out, tt4, sizeof(out));
	for (int i = 0; i < 24; i++)
		tt[i] = (float)i;
	for (int r = 0; r < 12; r++) {
		want[2 * r] = (float)(2 * order[r]);
		want[2 * r + 1] = (float)(2 * order[r] + 1);
	}
	titan_hf_permute_qk(tt, hf, 2, 12, 2, true);
	assert_memory_equal(hf, want, sizeof(hf));
	titan_hf_permute_qk(hf, back, 2, 12, 2, false);
	assert_memory_equal(back, tt, sizeof(tt));
	/* random 8 heads x 16 dims x 5 cols: identity both ways */
	{
		enum { R = 8 * 16, C = 5 };
		static float a[R * C], b[R * C], c[R * C];
		struct titan_rng r;

		titan_rng_init(&r, 1, 1);
		titan_rng_fill_normal(&r, 0, a, R * C, 0, 1);
		titan_hf_permute_qk(a, b, 8, R, C, true);
		titan_hf_permute_qk(b, c, 8, R, C, false);
		assert_memory_equal(a, c, sizeof(a));
		titan_hf_permute_qk(a, b, 8, R, C, false);
		titan_hf_permute_qk(b, c, 8, R, C, true);
		assert_memory_equal(a, c, sizeof(a));
	}
}

static void test_names(void **state)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	char name[128];

	(void)state;
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	const struct { const char *tt, *hf; } map[] = {
		{"tok_embeddings.weight", "model.embed_tokens.weight"},
		{"layers.3.attention.wq.weight", "model.layers.3.self_attn.q_proj.weight"},
		{"layers.3.attention.wk.weight", "model.layers.3.self_attn.k_proj.weight"},
		{"layers.3.attention.wv.weight", "model.layers.3.self_attn.v_proj.weight"},
		{"layers.3.attention.wo.weight", "model.layers.3.self_attn.o_proj.weight"},
		{"layers.5.feed_forward.w1.weight", "model.layers.5.mlp.gate_proj.weight"},
		{"layers.5.feed_forward.w2.weight", "model.layers.5.mlp.down_proj.weight"},
		{"layers.5.feed_forward.w3.weight", "model.layers.5.mlp.up_proj.weight"},
		{"layers.0.attention_norm.weight", "model.layers.0.input_layernorm.weight"},
		{"layers.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"},
		{"norm.weight", "model.norm.weight"},
		{"output.weight", "lm_head.weight"},
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		const struct titan_param *p = titan_param_find(&t, map[i].tt);

		assert_non_null(p);
		assert_int_equal(titan_hf_param_name(p, name, sizeof(name)), 0);
		assert_string_equal(name, map[i].hf);
	}
	assert_int_equal(titan_hf_param_name(&t.params[0], name, 8), TITAN_E_INVALID);
	titan_param_table_release(&t);
}

/* ------------------------------------------------------------ export/import */

static int get_arena(void *ctx, const struct titan_param *p, float *out)
{
	const struct titan_param_arena *a = ctx;

	memcpy(out, titan_param_view(a, p), (size_t)p->numel * sizeof(float));
	return 0;
}

static void tiny(struct titan_model_dims *d, bool tied)
{
	assert_int_equal(titan_model_flavor("debugmodel", d), 0);
	snprintf(d->flavor, sizeof(d->flavor), "custom");
	d->dim = 32;
	d->n_layers = 2;
	d->n_heads = 4;
	d->n_kv_heads = 2;
	d->head_dim = 8;
	d->ffn_hidden = 48;
	d->multiple_of = 48;
	d->vocab_size = 40;
	d->tied = tied;
}

static void round_trip(bool tied, uint64_t max_shard, int want_files)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena a;
	struct titan_hf_export_opts o;
	struct titan_hf_model *m;
	const struct titan_param_table *mt;
	float *buf;
	char out[512];
	int nfiles = 0;
	DIR *dd;
	struct dirent *e;

	tiny(&d, tied);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&a, &t, NULL, TITAN_MEM_PARAMS), 0);
	titan_model_init_params(&a, 77);
	titan_hf_export_opts_default(&o);
	o.max_shard_size = max_shard;
	snprintf(out, sizeof(out), "%s/hf-%d-%llu", dir, tied, (unsigned long long)max_shard);
	assert_int_equal(titan_hf_export(out, &t, get_arena, &a, &o), 0);
	dd = opendir(out);
	while ((e = readdir(dd)))
		nfiles += e->d_name[0] != '.';
	closedir(dd);
	assert_int_equal(nfiles, want_files);

	assert_int_equal(titan_hf_open(out, &m), 0);
	mt = titan_hf_table(m);
	assert_int_equal(mt->n, t.n);
	assert_int_equal(mt->dims.tied, tied);
	assert_string_equal(mt->dims.flavor, "custom");
	buf = malloc((size_t)mt->arena_floats * sizeof(float));
	for (int i = 0; i < t.n; i++) {
		assert_string_equal(mt->params[i].name, t.params[i].name);
		assert_int_equal(titan_hf_read(m, &mt->params[i], buf), 0);
		assert_memory_equal(buf, titan_param_view(&a, &t.params[i]),
				    (size_t)t.params[i].numel * sizeof(float));
	}
	free(buf);
	titan_hf_close(m);
	titan_param_arena_release(&a);
	titan_param_table_release(&t);
}

static void test_export_import(void **state)
{
	(void)state;
	round_trip(false, 0, 3);      /* model.safetensors, config.json, generation_config.json */
	round_trip(true, 0, 3);
	round_trip(false, 8000, 3 + 12); /* 12 shards (transformers rule) + index */
}

static void test_export_files(void **state)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena a;
	struct titan_hf_export_opts o;
	struct titan_safetensors *st;
	json_t *c;
	json_error_t je;
	int64_t bos, eos;
	struct titan_model_dims back;

	(void)state;
	assert_int_equal(titan_model_flavor("1B", &d), 0); /* tied, vocab 128256 */
	d.n_layers = 1;                                     /* keep it small-ish */
	d.vocab_size = 128256;
	d.dim = 64;
	d.n_heads = 4;
	d.n_kv_heads = 2;
	d.head_dim = 16;
	d.ffn_hidden = 96;
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&a, &t, NULL, TITAN_MEM_PARAMS), 0);
	titan_model_init_params(&a, 1);
	titan_hf_export_opts_default(&o);
	o.dtype = TITAN_CKPT_BFLOAT16;
	assert_int_equal(titan_hf_export(path_of("out"), &t, get_arena, &a, &o), 0);
	c = json_load_file(path_of("out/config.json"), 0, &je);
	assert_non_null(c);
	assert_string_equal(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)),
			    "LlamaForCausalLM");
	assert_int_equal(json_integer_value(json_object_get(c, "bos_token_id")), 128000);
	assert_int_equal(json_integer_value(json_object_get(c, "eos_token_id")), 128001);
	assert_int_equal(json_integer_value(json_object_get(c, "hidden_size")), 64);
	assert_int_equal(json_integer_value(json_object_get(c, "intermediate_size")), 96);
	assert_int_equal(json_integer_value(json_object_get(c, "num_key_value_heads")), 2);
	assert_true(json_is_true(json_object_get(c, "tie_word_embeddings")));
	assert_string_equal(json_string_value(json_object_get(c, "torch_dtype")), "bfloat16");
	assert_string_equal(json_string_value(json_object_get(json_object_get(c, "rope_scaling"),
								"rope_type")), "llama3");
	assert_int_equal(json_integer_value(json_object_get(c, "max_position_embeddings")), 131072);
	assert_true(json_real_value(json_object_get(c, "rms_norm_eps")) == 1e-5);
	json_decref(c);
	assert_int_equal(titan_hf_read_config(path_of("out/config.json"), &back, &bos, &eos), 0);
	assert_int_equal(bos, 128000);
	assert_int_equal(eos, 128001);
	assert_true(back.tied && back.rope_scaling && back.rope_scaling_factor == 8.0 &&
		    back.rope_original_max_position == 8192 && back.rope_theta == 500000.0);
	st = titan_safetensors_open(path_of("out/model.safetensors"));
	assert_non_null(st);
	assert_int_equal(st->n_tensors, t.n);
	assert_null(titan_safetensors_find(st, "lm_head.weight"));
	assert_int_equal(titan_safetensors_find(st, "model.embed_tokens.weight")->dtype, TITAN_ST_BF16);
	assert_string_equal(titan_safetensors_meta(st, "format"), "pt");
	titan_safetensors_close(st);
	titan_param_arena_release(&a);
	titan_param_table_release(&t);
}

static void write_text(const char *p, const char *s)
{
	FILE *f = fopen(p, "w");

	assert_non_null(f);
	fputs(s, f);
	fclose(f);
}

static void test_bad_hf(void **state)
{
	struct titan_model_dims d;
	struct titan_hf_model *m;
	static const struct { const char *json; int code; const char *msg; } cfgs[] = {
		{"[1]", TITAN_E_FORMAT, "not a JSON object"},
		{"{\"hidden_size\": 32", TITAN_E_FORMAT, "config.json':1:"},
		{"{\"architectures\": [\"MistralForCausalLM\"]}", TITAN_E_UNSUPPORTED, "LlamaForCausalLM"},
		{"{\"hidden_size\": 32}", TITAN_E_FORMAT, "'intermediate_size' is missing"},
		{"{\"hidden_size\": 32, \"intermediate_size\": 8, \"num_hidden_layers\": 1, "
		 "\"num_attention_heads\": 4, \"vocab_size\": 9, \"attention_bias\": true}",
		 TITAN_E_UNSUPPORTED, "bias"},
		{"{\"hidden_size\": 32, \"intermediate_size\": 8, \"num_hidden_layers\": 1, "
		 "\"num_attention_heads\": 4, \"vocab_size\": 9, \"rope_scaling\": {\"rope_type\": "
		 "\"yarn\"}}", TITAN_E_UNSUPPORTED, "llama3"},
		{"{\"hidden_size\": 32, \"intermediate_size\": 8, \"num_hidden_layers\": 1, "
		 "\"num_attention_heads\": 4, \"vocab_size\": 9, \"head_dim\": 16}",
		 TITAN_E_UNSUPPORTED, "head_dim 16"},
		{"{\"hidden_size\": 32, \"intermediate_size\": 8, \"num_hidden_layers\": 1, "
		 "\"num_attention_heads\": 3, \"vocab_size\": 9}", TITAN_E_FORMAT, "bad dims"},
		{"{\"hidden_size\": \"32\"}", TITAN_E_FORMAT, "'hidden_size' is not an integer"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
		int rc;

		write_text(path_of("config.json"), cfgs[i].json);
		rc = titan_hf_read_config(path_of("config.json"), &d, NULL, NULL);
		if (rc != cfgs[i].code || !strstr(titan_errmsg(), cfgs[i].msg))
			fail_msg("%s: %d %s", cfgs[i].json, rc, titan_errmsg());
	}
	assert_int_equal(titan_hf_read_config(path_of("nope.json"), &d, NULL, NULL), TITAN_E_IO);
	/* dims past what a table can count (4·dim overflowed int64, found by
	 * tests/fuzz/fuzz_hf; hidden_size 80000000000000 overflowed wq's element
	 * count: tests/fuzz/regress/hf): refused as they are read, by the
	 * checks a checkpoint's dims get (titan_ckpt_dims_check) */
	write_text(path_of("config.json"), "{\"hidden_size\": 4000000000000000000, "
		   "\"intermediate_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
		   "\"vocab_size\": 16}");
	assert_int_equal(titan_hf_read_config(path_of("config.json"), &d, NULL, NULL), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "hidden_size 4000000000000000000: must be in [1, "));
	assert_int_equal(titan_hf_open(dir, &m), TITAN_E_FORMAT);
	write_text(path_of("config.json"), "{\"hidden_size\": 2000000000, "
		   "\"intermediate_size\": 16, \"num_hidden_layers\": 802, \"num_attention_heads\": 2, "
		   "\"vocab_size\": 16}");
	assert_int_equal(titan_hf_open(dir, &m), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "more than a model titan can hold"));
	/* rms_norm_eps 0 or -1, rope_theta 0: refused as --from hf refuses them */
	write_text(path_of("config.json"), "{\"hidden_size\": 8, \"intermediate_size\": 8, "
		   "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 4, "
		   "\"rms_norm_eps\": -1}");
	assert_int_equal(titan_hf_read_config(path_of("config.json"), &d, NULL, NULL), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "rms_norm_eps -1: must be a finite number above 0"));
	write_text(path_of("config.json"), "{\"hidden_size\": 8, \"intermediate_size\": 8, "
		   "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 4, "
		   "\"rope_theta\": 0}");
	assert_int_equal(titan_hf_read_config(path_of("config.json"), &d, NULL, NULL), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "rope_theta 0: must be a finite number above 0"));
	/* a good config without weights; then weights missing a tensor / with an extra one */
	write_text(path_of("config.json"), "{\"hidden_size\": 8, \"intermediate_size\": 8, "
		   "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 4, "
		   "\"tie_word_embeddings\": true}");
	assert_int_equal(titan_hf_open(dir, &m), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "no model.safetensors"));
	{
		float z[64] = {0};
		const int64_t emb[2] = {4, 8}, sq[2] = {8, 8}, f[2] = {8, 8}, v1[1] = {8};
		struct titan_st_write_tensor ts[] = {
			{"model.embed_tokens.weight", TITAN_ST_F32, 2, emb, z},
			{"model.layers.0.self_attn.q_proj.weight", TITAN_ST_F32, 2, sq, z},
			{"model.layers.0.self_attn.k_proj.weight", TITAN_ST_F32, 2, sq, z},
			{"model.layers.0.self_attn.v_proj.weight", TITAN_ST_F32, 2, sq, z},
			{"model.layers.0.self_attn.o_proj.weight", TITAN_ST_F32, 2, sq, z},
			{"model.layers.0.mlp.gate_proj.weight", TITAN_ST_F32, 2, f, z},
			{"model.layers.0.mlp.up_proj.weight", TITAN_ST_F32, 2, f, z},
			{"model.layers.0.mlp.down_proj.weight", TITAN_ST_F32, 2, f, z},
			{"model.layers.0.input_layernorm.weight", TITAN_ST_F32, 1, v1, z},
			{"model.layers.0.post_attention_layernorm.weight", TITAN_ST_F32, 1, v1, z},
			{"model.norm.weight", TITAN_ST_F32, 1, v1, z},
			{"model.layers.0.self_attn.rotary_emb.inv_freq", TITAN_ST_F32, 1, v1, z},
			{"lm_head.weight", TITAN_ST_F32, 2, emb, z}, /* tied: ignored */
			{"model.layers.0.self_attn.q_proj.bias", TITAN_ST_F32, 1, v1, z},
		};

		assert_int_equal(titan_safetensors_write(path_of("model.safetensors"), ts, 13, NULL, 0), 0);
		assert_int_equal(titan_hf_open(dir, &m), 0);
		titan_hf_close(m);
		assert_int_equal(titan_safetensors_write(path_of("model.safetensors"), ts, 14, NULL, 0), 0);
		assert_int_equal(titan_hf_open(dir, &m), TITAN_E_INVALID);
		assert_non_null(strstr(titan_errmsg(), "'model.layers.0.self_attn.q_proj.bias' is not "
				       "a weight"));
		assert_int_equal(titan_safetensors_write(path_of("model.safetensors"), ts + 1, 10, NULL, 0), 0);
		assert_int_equal(titan_hf_open(dir, &m), TITAN_E_INVALID);
		assert_non_null(strstr(titan_errmsg(), "model.safetensors': tensor "
				       "'model.embed_tokens.weight' is missing"));
		ts[5].shape = emb;
		assert_int_equal(titan_safetensors_write(path_of("model.safetensors"), ts, 11, NULL, 0), 0);
		assert_int_equal(titan_hf_open(dir, &m), TITAN_E_INVALID);
		assert_non_null(strstr(titan_errmsg(), "'model.layers.0.mlp.gate_proj.weight' has shape "
				       "[4, 8], config.json makes it [8, 8]"));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bf16),
		cmocka_unit_test(test_f16),
		cmocka_unit_test(test_permutation),
		cmocka_unit_test(test_names),
		cmocka_unit_test_setup_teardown(test_export_import, setup, teardown),
		cmocka_unit_test_setup_teardown(test_export_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_hf, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
