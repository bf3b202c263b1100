/*
 * tests/unit/test_config.c — unit tests of lib/config: the schema, defaults,
 * YAML loading and its error messages (origin line:column and key), the
 * command-line overrides, resolution order, cross-key validation, the YAML
 * writer (round trips of defaults, presets and awkward strings) and the
 * --help-config text.  Paths are relative to $TITAN_SRCDIR (default ".").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/config.h"
#include "titan/core.h"

/* ------------------------------------------------------------ helpers */

static const char *srcdir(void)
{
	const char *s = getenv("TITAN_SRCDIR");
	return s && *s ? s : ".";
}

static const char *path_of(char *buf, size_t n, const char *rel)
{
	snprintf(buf, n, "%s/%s", srcdir(), rel);
	return buf;
}

#define assert_str(a, b) assert_string_equal((a), (b))

/* Load `yaml` (named "t.yaml") over defaults; expect failure `code` with
 * exactly `msg`, and the config left at its defaults. */
static void expect_load_error(const char *yaml, int code, const char *msg)
{
	struct titan_config c, d;
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_init(&d), 0);
	int rc = titan_config_load_string(&c, yaml, strlen(yaml), "t.yaml");
	if (rc != code || strcmp(titan_errmsg(), msg) != 0)
		print_error("yaml:\n%s\nrc %d, message: %s\nexpected: %s\n", yaml, rc,
			    titan_errmsg(), msg);
	assert_int_equal(rc, code);
	assert_str(titan_errmsg(), msg);
	assert_null(titan_config_diff(&c, &d));
	titan_config_release(&c);
	titan_config_release(&d);
}

/* titan_config_set on a default config; expect failure with `msg`. */
static void expect_set_error(const char *name, const char *value, const char *msg)
{
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	int rc = titan_config_set(&c, name, value, "command line");
	if (rc != TITAN_E_INVALID || strcmp(titan_errmsg(), msg) != 0)
		print_error("set %s=%s: rc %d, message: %s\nexpected: %s\n", name,
			    value ? value : "(null)", rc, titan_errmsg(), msg);
	assert_int_equal(rc, TITAN_E_INVALID);
	assert_str(titan_errmsg(), msg);
	titan_config_release(&c);
}

static void load_ok(struct titan_config *c, const char *yaml)
{
	int rc = titan_config_load_string(c, yaml, strlen(yaml), "t.yaml");
	if (rc)
		print_error("unexpected error: %s\n", titan_errmsg());
	assert_int_equal(rc, 0);
}

static void expect_validate_error(const char *yaml, const char *msg)
{
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	load_ok(&c, yaml);
	int rc = titan_config_validate(&c);
	if (rc != TITAN_E_INVALID || strcmp(titan_errmsg(), msg) != 0)
		print_error("validate: rc %d, message: %s\nexpected: %s\n", rc,
			    titan_errmsg(), msg);
	assert_int_equal(rc, TITAN_E_INVALID);
	assert_str(titan_errmsg(), msg);
	titan_config_release(&c);
}

/* Write `c` as YAML to a temporary file, load it over fresh defaults and
 * expect equal values. */
static void round_trip(const struct titan_config *c)
{
	char path[512];
	const char *tmp = getenv("TMPDIR");
	snprintf(path, sizeof path, "%s/test_config_XXXXXX", tmp && *tmp ? tmp : "/tmp");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *fp = fdopen(fd, "w");
	assert_non_null(fp);
	int rc = titan_config_write_yaml(c, fp);
	if (rc)
		print_error("write_yaml: %s\n", titan_errmsg());
	assert_int_equal(rc, 0);
	assert_int_equal(fclose(fp), 0);

	struct titan_config back;
	assert_int_equal(titan_config_init(&back), 0);
	rc = titan_config_load_file(&back, path);
	if (rc)
		print_error("reload: %s\n", titan_errmsg());
	assert_int_equal(rc, 0);
	const char *d = titan_config_diff(c, &back);
	if (d) {
		char a[256], b[256];
		titan_config_format_value(c, d, a, sizeof a);
		titan_config_format_value(&back, d, b, sizeof b);
		print_error("round trip differs at %s: '%s' vs '%s'\n", d, a, b);
	}
	assert_null(d);
	titan_config_release(&back);
	unlink(path);
}

/* -------------------------------------------------------------- schema */

static void test_schema(void **state)
{
	(void)state;
	size_t n = titan_config_nkeys();
	assert_true(n > 100);
	assert_null(titan_config_key_at(n));
	for (size_t i = 0; i < n; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		char name[128];
		snprintf(name, sizeof name, "%s.%s", k->section, k->key);
		assert_true(strlen(name) < 64);
		assert_ptr_equal(titan_config_find(name), k);
		assert_non_null(k->doc);
		assert_true(k->doc[0] != '\0');
		if (k->type == TITAN_CFG_ENUM) {
			bool found = false;
			assert_non_null(k->choices);
			for (const char *const *c = k->choices; *c; c++)
				found |= !strcmp(*c, k->def);
			assert_true(found);
		}
		if (k->flags & TITAN_CFG_NULLABLE)
			assert_true(k->type == TITAN_CFG_INT || k->type == TITAN_CFG_FLOAT);
		/* No key twice. */
		for (size_t j = 0; j < i; j++) {
			const struct titan_config_key *o = titan_config_key_at(j);
			assert_false(!strcmp(o->section, k->section) && !strcmp(o->key, k->key));
			assert_true(o->offset != k->offset);
		}
	}
	assert_null(titan_config_find("training"));
	assert_null(titan_config_find("training.nope"));
	assert_null(titan_config_find(NULL));
}

static size_t type_size(enum titan_config_type t)
{
	switch (t) {
	case TITAN_CFG_BOOL: return sizeof(bool);
	case TITAN_CFG_INT: return sizeof(int64_t);
	case TITAN_CFG_FLOAT: return sizeof(double);
	case TITAN_CFG_STRING:
	case TITAN_CFG_ENUM: return sizeof(char *);
	case TITAN_CFG_STRLIST: return sizeof(struct titan_strlist);
	}
	return 0;
}

/* Every byte of struct titan_config is a schema field or alignment
 * padding, so a field without a schema entry is caught: every type but
 * bool is 8 bytes and 8-aligned, so padding only follows a bool and runs
 * to the next multiple of 8. */
static void test_schema_covers_struct(void **state)
{
	(void)state;
	unsigned char size_at[sizeof(struct titan_config)] = { 0 };
	for (size_t i = 0, n = titan_config_nkeys(); i < n; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		size_t sz = type_size(k->type);
		assert_true(k->offset + sz <= sizeof(struct titan_config));
		for (size_t b = 0; b < sz; b++) {
			assert_int_equal(size_at[k->offset + b], 0); /* no overlap */
			size_at[k->offset + b] = (unsigned char)sz;
		}
		if (k->type != TITAN_CFG_ENUM) {
			assert_int_equal(k->enum_offset, 0);
			continue;
		}
		/* the enum beside the string */
		assert_true(k->enum_offset + sizeof(int) <= sizeof(struct titan_config));
		for (size_t b = 0; b < sizeof(int); b++) {
			assert_int_equal(size_at[k->enum_offset + b], 0);
			size_at[k->enum_offset + b] = (unsigned char)sizeof(int);
		}
	}
	for (size_t off = 0; off < sizeof size_at; off++) {
		if (size_at[off])
			continue;
		size_t end = off;
		while (end < sizeof size_at && !size_at[end])
			end++;
		/* only padding after a bool or an enum */
		bool pad = off > 0 && (size_at[off - 1] == sizeof(bool) ||
				       size_at[off - 1] == sizeof(int));
		if (!pad || end % 8 != 0)
			print_error("bytes %zu..%zu of struct titan_config have no schema key\n",
				    off, end - 1);
		assert_true(pad);
		assert_int_equal(end % 8, 0);
		off = end;
	}
}

/*
 * Every ENUM key's choices map to its C enum and back: the X-macro lists of
 * titan/config.h, the schema's choice lists and the `key`_e fields agree
 * (value = index of the choice), setting a key (in any case) sets both
 * fields, and titan_config_choice() gives the spelling of an enumerator.
 */
struct enum_pair {
	int id;
	const char *name;
};
#define PAIR(id, name) { id, name },
#define LIST(key, X) { key, (const struct enum_pair[]){ X(PAIR){ -1, NULL } } }
static const struct {
	const char *key;
	const struct enum_pair *pairs;
} enum_lists[] = {
	LIST("model.name", TITAN_MODEL_NAMES),
	LIST("model.flavor", TITAN_FLAVORS),
	LIST("model.tie_word_embeddings", TITAN_TIES),
	LIST("model.qk_norm", TITAN_TIES),
	LIST("model.moe_score_func", TITAN_MOE_SCORE_FUNCS),
	LIST("optimizer.name", TITAN_OPTIMIZERS),
	LIST("optimizer.implementation", TITAN_OPTIM_IMPLS),
	LIST("lr_scheduler.decay_type", TITAN_DECAY_TYPES),
	LIST("training.device", TITAN_DEVICES),
	LIST("training.dtype", TITAN_MASTER_DTYPES),
	LIST("training.mixed_precision_param", TITAN_MP_PARAMS),
	LIST("training.mixed_precision_reduce", TITAN_MP_REDUCES),
	LIST("training.attn_mask_type", TITAN_ATTN_MASKS),
	LIST("parallelism.fsdp_reshard_after_forward", TITAN_RESHARDS),
	LIST("parallelism.pipeline_parallel_schedule", TITAN_SCHEDULES),
	LIST("parallelism.context_parallel_rotate_method", TITAN_CP_ROTATES),
	LIST("activation_checkpoint.mode", TITAN_ACT_CKPTS),
	LIST("checkpoint.export_dtype", TITAN_EXPORT_DTYPES),
	LIST("checkpoint.async_mode", TITAN_ASYNC_MODES),
};
#undef LIST
#undef PAIR

static int enum_field(const struct titan_config *c, const struct titan_config_key *k)
{
	return *(const int *)((const char *)c + k->enum_offset);
}

static void test_enums(void **state)
{
	(void)state;
	const size_t nlists = sizeof enum_lists / sizeof enum_lists[0];
	size_t nenum = 0;
	struct titan_config c, d;

	for (size_t i = 0, n = titan_config_nkeys(); i < n; i++)
		nenum += titan_config_key_at(i)->type == TITAN_CFG_ENUM;
	assert_int_equal(nenum, nlists); /* every ENUM key has its list */

	assert_int_equal(titan_config_init(&c), 0);
	for (size_t l = 0; l < nlists; l++) {
		const struct titan_config_key *k = titan_config_find(enum_lists[l].key);
		const struct enum_pair *p = enum_lists[l].pairs;
		size_t np = 0;
		char upper[64];

		assert_non_null(k);
		assert_int_equal(k->type, TITAN_CFG_ENUM);
		/* the default's enum */
		assert_str(k->choices[enum_field(&c, k)], *(char *const *)((char *)&c + k->offset));
		for (; p[np].name; np++) {
			assert_int_equal(p[np].id, (int)np);
			assert_non_null(k->choices[np]);
			assert_str(k->choices[np], p[np].name);
			assert_str(titan_config_choice(enum_lists[l].key, p[np].id), p[np].name);
			/* text -> enum, case-insensitively, stored as spelt */
			size_t len = strlen(p[np].name);
			for (size_t b = 0; b <= len; b++)
				upper[b] = (char)toupper((unsigned char)p[np].name[b]);
			assert_int_equal(titan_config_set(&c, enum_lists[l].key, upper, "t"), 0);
			assert_int_equal(enum_field(&c, k), p[np].id);
			assert_str(*(char *const *)((char *)&c + k->offset), p[np].name);
		}
		assert_null(k->choices[np]); /* no choice without an enumerator */
		assert_null(titan_config_choice(enum_lists[l].key, (int)np));
		assert_null(titan_config_choice(enum_lists[l].key, -1));
		/* a bad value changes neither field */
		assert_int_equal(titan_config_set(&c, enum_lists[l].key, "nonesuch", "t"),
				 TITAN_E_INVALID);
		assert_int_equal(enum_field(&c, k), p[np - 1].id);
	}
	assert_null(titan_config_choice("training.steps", 0));
	assert_null(titan_config_choice("training.nonesuch", 0));

	/* by name, as code reads them */
	assert_int_equal(titan_config_set(&c, "training.device", "cuda", "t"), 0);
	assert_int_equal(c.training.device_e, TITAN_DEVICE_CUDA);
	assert_int_equal(titan_config_set(&c, "parallelism.pipeline_parallel_schedule",
					  "interleavedzerobubble", "t"), 0);
	assert_int_equal(c.parallelism.pipeline_parallel_schedule_e, TITAN_SCHEDULE_INTERLEAVED_ZB);
	assert_str(c.parallelism.pipeline_parallel_schedule, "InterleavedZeroBubble");
	assert_int_equal(titan_config_set(&c, "lr_scheduler.decay_type", "cosine", "t"), 0);
	assert_int_equal(c.lr_scheduler.decay_type_e, TITAN_DECAY_COSINE);
	assert_int_equal(titan_config_set(&c, "model.flavor", "70B", "t"), 0);
	assert_int_equal(c.model.flavor_e, TITAN_FLAVOR_70B);
	assert_int_equal(titan_config_copy(&d, &c), 0);
	assert_int_equal(d.model.flavor_e, TITAN_FLAVOR_70B);
	assert_int_equal(d.training.device_e, TITAN_DEVICE_CUDA);
	titan_config_release(&d);
	titan_config_release(&c);

	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(c.training.device_e, TITAN_DEVICE_AUTO);
	assert_int_equal(c.parallelism.pipeline_parallel_schedule_e, TITAN_SCHEDULE_1F1B);
	assert_int_equal(c.activation_checkpoint.mode_e, TITAN_ACT_CKPT_SELECTIVE);
	assert_int_equal(c.checkpoint.async_mode_e, TITAN_ASYNC_DISABLED);
	titan_config_release(&c);
}

/* titan_config_doc's text in `format` (malloc'd), and how often `needle`
 * occurs in it. */
static char *doc_text(enum titan_config_doc_format format)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);

	assert_non_null(fp);
	assert_int_equal(titan_config_doc(fp, format), 0);
	fclose(fp);
	return buf;
}

static size_t count_of(const char *s, const char *needle)
{
	size_t n = 0;
	for (; (s = strstr(s, needle)); s++)
		n++;
	return n;
}

/* titan_config_doc: one Markdown row and one man entry per key, in schema
 * order, with markup in the doc lines escaped. */
static void test_doc(void **state)
{
	(void)state;
	char *buf = doc_text(TITAN_CONFIG_DOC_MARKDOWN);
	size_t len = 0;
	FILE *fp;

	assert_int_equal(count_of(buf, "\n| `"), titan_config_nkeys());
	assert_non_null(strstr(buf, "| `training.seq_len` | int | `2048` | >= 1 | "
				    "sequence length in tokens |\n"));
	assert_non_null(strstr(buf, "| `lr_scheduler.decay_ratio` | float | `null` | 0..1; or null |"));
	assert_non_null(strstr(buf, "superseded-&lt;time>/")); /* no HTML tag */
	assert_null(strstr(buf, "<time>"));
	free(buf);

	buf = doc_text(TITAN_CONFIG_DOC_MAN);
	assert_int_equal(count_of(buf, "\n.B "), titan_config_nkeys());
	assert_non_null(strstr(buf, ".SS parallelism\n.TP\n.B parallelism.data_parallel_replicate_degree\n"
				    "\\fIint\\fR, default 1; >= 1.\n.br\n\\&DDP/HSDP replicas\n"));
	assert_int_equal(buf[0], '.');
	free(buf);

	buf = NULL;
	assert_non_null(fp = open_memstream(&buf, &len));
	assert_int_equal(titan_config_doc(fp, (enum titan_config_doc_format)7), TITAN_E_INVALID);
	fclose(fp);
	assert_int_equal(len, 0);
	free(buf);
}

static void test_defaults(void **state)
{
	(void)state;
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	assert_str(c.job.dump_folder, "./outputs");
	assert_int_equal(c.metrics.log_freq, 10);
	assert_str(c.optimizer.name, "AdamW");
	assert_true(c.optimizer.lr == 8e-4);
	assert_true(c.optimizer.beta1 == 0.9 && c.optimizer.beta2 == 0.95);
	assert_true(c.optimizer.eps == 1e-8 && c.optimizer.weight_decay == 0.1);
	assert_str(c.optimizer.implementation, "fused");
	assert_int_equal(c.lr_scheduler.warmup_steps, 200);
	assert_true(isnan(c.lr_scheduler.decay_ratio));
	assert_str(c.lr_scheduler.decay_type, "linear");
	assert_true(c.lr_scheduler.min_lr_factor == 0);
	assert_int_equal(c.training.local_batch_size, 8);
	assert_int_equal(c.training.global_batch_size, -1);
	assert_int_equal(c.training.seq_len, 2048);
	assert_true(c.training.max_norm == 1.0);
	assert_int_equal(c.training.steps, 10000);
	assert_str(c.training.dtype, "float32");
	assert_str(c.training.mixed_precision_param, "bfloat16");
	assert_str(c.training.mixed_precision_reduce, "float32");
	assert_int_equal(c.training.gc_freq, 50);
	assert_int_equal(c.training.seed, 0);
	assert_str(c.training.dataset_path, "");
	assert_int_equal(c.parallelism.data_parallel_shard_degree, -1);
	assert_int_equal(c.parallelism.data_parallel_replicate_degree, 1);
	assert_int_equal(c.parallelism.tensor_parallel_degree, 1);
	assert_str(c.parallelism.pipeline_parallel_schedule, "1F1B");
	assert_int_equal(c.parallelism.pipeline_parallel_layers_per_stage, TITAN_CFG_NONE_INT);
	assert_int_equal(c.parallelism.pipeline_parallel_split_points.n, 0);
	assert_str(c.activation_checkpoint.mode, "selective");
	assert_str(c.activation_checkpoint.selective_ac_option, "2");
	assert_false(c.checkpoint.enable);
	assert_str(c.checkpoint.folder, "checkpoint");
	assert_int_equal(c.checkpoint.interval, 500);
	assert_int_equal(c.checkpoint.keep_latest_k, 10);
	assert_int_equal(c.checkpoint.load_step, -1);
	assert_str(c.checkpoint.async_mode, "disabled");
	assert_true(c.checkpoint.last_save_model_only);
	assert_int_equal(c.comm.init_timeout_seconds, 300);
	assert_int_equal(c.comm.train_timeout_seconds, 100);
	assert_int_equal(c.comm.trace_buf_size, 20000);
	assert_str(c.comm.save_traces_folder, "comm_traces");
	assert_str(c.profiling.save_traces_folder, "profile_traces");
	assert_int_equal(c.profiling.profile_freq, 10);
	assert_int_equal(c.profiling.profiler_warmup, 3);
	assert_int_equal(c.profiling.profiler_active, 1);
	assert_false(c.validation.enable);
	assert_str(c.validation.dataset, "c4_validation");
	assert_int_equal(c.validation.steps, -1);
	assert_str(c.model.name, "llama3");
	assert_str(c.model.flavor, "debugmodel");
	assert_int_equal(c.model.dim, -1);
	assert_true(isnan(c.model.ffn_dim_multiplier));
	assert_true(c.model.norm_eps == 1e-5 && c.model.rope_theta == 500000);
	assert_true(c.model.rope_scaling);
	assert_true(c.model.rope_scaling_factor == 8 && c.model.rope_low_freq_factor == 1 &&
		    c.model.rope_high_freq_factor == 4);
	assert_int_equal(c.model.rope_original_max_position, 8192);
	assert_str(c.model.tie_word_embeddings, "auto");
	assert_true(isnan(c.metrics.peak_flops));
	assert_str(c.metrics.save_jsonl_file, "metrics.jsonl");
	assert_int_equal(titan_config_validate(&c), 0);
	titan_config_release(&c);
}

static void test_release_idempotent(void **state)
{
	(void)state;
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	titan_config_release(&c);
	titan_config_release(&c);
	titan_config_release(NULL);
	memset(&c, 0, sizeof c);
	titan_config_release(&c);
	/* A released config still formats and compares (as empty). */
	char buf[32];
	assert_int_equal(titan_config_format_value(&c, "job.dump_folder", buf, sizeof buf), 0);
	assert_str(buf, "");

	struct titan_config_overrides ov = { 0 };
	titan_config_overrides_release(&ov);
	titan_config_overrides_release(NULL);
}

static void test_copy_and_diff(void **state)
{
	(void)state;
	struct titan_config a, b;
	assert_int_equal(titan_config_init(&a), 0);
	assert_int_equal(titan_config_set(&a, "model.converters", "float8,x", NULL), 0);
	assert_int_equal(titan_config_copy(&b, &a), 0);
	assert_null(titan_config_diff(&a, &b));
	assert_ptr_not_equal(a.job.dump_folder, b.job.dump_folder);
	assert_ptr_not_equal(a.model.converters.items, b.model.converters.items);

	assert_int_equal(titan_config_set(&b, "training.steps", "7", NULL), 0);
	assert_str(titan_config_diff(&a, &b), "training.steps");
	assert_int_equal(titan_config_set(&b, "training.steps", "10000", NULL), 0);
	assert_int_equal(titan_config_set(&b, "model.converters", "float8", NULL), 0);
	assert_str(titan_config_diff(&a, &b), "model.converters");
	assert_int_equal(titan_config_set(&b, "model.converters", "float8,y", NULL), 0);
	assert_str(titan_config_diff(&a, &b), "model.converters");
	assert_int_equal(titan_config_set(&b, "model.converters", "float8,x", NULL), 0);
	assert_int_equal(titan_config_set(&b, "job.description", "other", NULL), 0);
	assert_str(titan_config_diff(&a, &b), "job.description");
	assert_int_equal(titan_config_set(&b, "job.description", "default job", NULL), 0);
	assert_int_equal(titan_config_set(&b, "lr_scheduler.decay_ratio", "0.5", NULL), 0);
	assert_str(titan_config_diff(&a, &b), "lr_scheduler.decay_ratio");
	assert_int_equal(titan_config_set(&b, "lr_scheduler.decay_ratio", "null", NULL), 0);
	assert_null(titan_config_diff(&a, &b)); /* NaN equals NaN */
	titan_config_release(&a);
	titan_config_release(&b);
}

/* -------------------------------------------------------------- loading */

static void test_presets(void **state)
{
	(void)state;
	static const char *const presets[] = { "llama3_debug", "llama3_8b", "llama3_70b",
					       "llama3_405b" };
	for (size_t i = 0; i < 4; i++) {
		char rel[128], path[1024];
		snprintf(rel, sizeof rel, "configs/%s.yaml", presets[i]);
		struct titan_config c;
		int rc = titan_config_resolve(&c, path_of(path, sizeof path, rel), NULL);
		if (rc)
			print_error("%s: %s\n", path, titan_errmsg());
		assert_int_equal(rc, 0);
		round_trip(&c);
		switch (i) {
		case 0:
			assert_str(c.model.flavor, "debugmodel");
			assert_true(c.optimizer.lr == 8e-4);
			assert_int_equal(c.lr_scheduler.warmup_steps, 2);
			assert_true(c.lr_scheduler.decay_ratio == 0.8);
			assert_int_equal(c.training.local_batch_size, 8);
			assert_int_equal(c.training.seq_len, 2048);
			assert_int_equal(c.training.steps, 10);
			assert_str(c.activation_checkpoint.selective_ac_option, "2");
			assert_int_equal(c.metrics.log_freq, 1);
			assert_int_equal(c.checkpoint.interval, 10);
			assert_false(c.checkpoint.enable);
			break;
		case 1:
			assert_str(c.model.flavor, "8B");
			assert_true(c.optimizer.lr == 3e-4);
			assert_int_equal(c.lr_scheduler.warmup_steps, 200);
			assert_int_equal(c.training.local_batch_size, 1);
			assert_int_equal(c.training.seq_len, 8192);
			assert_int_equal(c.training.steps, 1000);
			assert_str(c.activation_checkpoint.selective_ac_option, "op");
			break;
		case 2:
			assert_str(c.model.flavor, "70B");
			assert_true(c.optimizer.lr == 1.5e-4);
			assert_int_equal(c.training.local_batch_size, 8);
			assert_int_equal(c.parallelism.tensor_parallel_degree, 8);
			assert_str(c.activation_checkpoint.mode, "full");
			break;
		case 3:
			assert_str(c.model.flavor, "405B");
			assert_true(c.optimizer.lr == 8e-5);
			assert_int_equal(c.lr_scheduler.warmup_steps, 600);
			assert_int_equal(c.parallelism.tensor_parallel_degree, 8);
			assert_true(c.parallelism.enable_async_tensor_parallel);
			assert_int_equal(c.model.converters.n, 1);
			assert_str(c.model.converters.items[0], "float8");
			break;
		}
		titan_config_release(&c);
	}
}

static void test_empty_inputs(void **state)
{
	(void)state;
	struct titan_config c, d;
	char path[1024];
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_init(&d), 0);
	assert_int_equal(titan_config_load_file(&c, path_of(path, sizeof path,
							    "tests/fixtures/config/empty.yaml")), 0);
	assert_int_equal(titan_config_load_file(&c, path_of(path, sizeof path,
							    "tests/fixtures/config/comments_only.yaml")), 0);
	assert_int_equal(titan_config_load_string(&c, "", 0, "e.yaml"), 0);
	assert_int_equal(titan_config_load_string(&c, NULL, 0, NULL), 0);
	load_ok(&c, "---\n");
	load_ok(&c, "~\n");
	load_ok(&c, "training:\n# nothing yet\nmodel:\n");
	load_ok(&c, "{}\n");
	assert_null(titan_config_diff(&c, &d));
	titan_config_release(&c);
	titan_config_release(&d);
}

static void test_load_values(void **state)
{
	(void)state;
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	load_ok(&c, "training:\n"
		    "  steps: +12\n"
		    "  seed: 0\n"
		    "  max_norm: 2\n"
		    "  shuffle: YES\n"
		    "  deterministic: On\n"
		    "  enable_cpu_offload: no\n"
		    "  skip_nonfinite: TRUE\n"
		    "  dtype: BFloat16\n"
		    "optimizer:\n"
		    "  lr: 1e-4\n"
		    "  weight_decay: .5\n"
		    "  name: adamw\n"
		    "lr_scheduler:\n"
		    "  decay_ratio: ~\n"
		    "model:\n"
		    "  ffn_dim_multiplier: 1.3\n"
		    "  dim: \"4096\"\n"
		    "  converters: []\n"
		    "parallelism:\n"
		    "  pipeline_parallel_split_points:\n"
		    "    - layers.1\n"
		    "    - layers.2\n"
		    "  pipeline_parallel_layers_per_stage: 4\n"
		    "checkpoint:\n"
		    "  exclude_from_loading: 'optimizer, dataloader'\n"
		    "metrics:\n"
		    "  peak_flops: 989e12\n");
	assert_int_equal(c.training.steps, 12);
	assert_true(c.training.max_norm == 2.0);
	assert_true(c.training.shuffle && c.training.deterministic && c.training.skip_nonfinite);
	assert_false(c.training.enable_cpu_offload);
	assert_str(c.training.dtype, "bfloat16"); /* canonical spelling */
	assert_str(c.optimizer.name, "AdamW");
	assert_true(c.optimizer.lr == 1e-4 && c.optimizer.weight_decay == 0.5);
	assert_true(isnan(c.lr_scheduler.decay_ratio));
	assert_true(c.model.ffn_dim_multiplier == 1.3);
	assert_int_equal(c.model.dim, 4096);
	assert_int_equal(c.model.converters.n, 0);
	assert_int_equal(c.parallelism.pipeline_parallel_split_points.n, 2);
	assert_str(c.parallelism.pipeline_parallel_split_points.items[1], "layers.2");
	assert_int_equal(c.parallelism.pipeline_parallel_layers_per_stage, 4);
	assert_int_equal(c.checkpoint.exclude_from_loading.n, 2);
	assert_str(c.checkpoint.exclude_from_loading.items[0], "optimizer");
	assert_str(c.checkpoint.exclude_from_loading.items[1], "dataloader");
	assert_true(c.metrics.peak_flops == 989e12);
	/* Later loads go over earlier ones; null resets a nullable key. */
	load_ok(&c, "metrics:\n  peak_flops: null\nparallelism:\n"
		    "  pipeline_parallel_layers_per_stage: Null\n");
	assert_true(isnan(c.metrics.peak_flops));
	assert_int_equal(c.parallelism.pipeline_parallel_layers_per_stage, TITAN_CFG_NONE_INT);
	titan_config_release(&c);
}

static void test_errors_structure(void **state)
{
	(void)state;
	char path[1024], msg[1200];

	expect_load_error("- a\n- b\n", TITAN_E_INVALID,
			  "t.yaml:1:1: the top level must be a mapping of sections, got a sequence");
	expect_load_error("just text\n", TITAN_E_INVALID,
			  "t.yaml:1:1: the top level must be a mapping of sections, got a scalar");
	expect_load_error("training: 5\n", TITAN_E_INVALID,
			  "t.yaml:1:11: training: a section must be a mapping of keys, got a scalar");
	expect_load_error("job:\n  description: x\ntraining:\n  - steps\n", TITAN_E_INVALID,
			  "t.yaml:4:3: training: a section must be a mapping of keys, got a sequence");
	expect_load_error("trainin:\n  steps: 5\n", TITAN_E_INVALID,
			  "t.yaml:1:1: trainin: unknown section (did you mean 'training'?)");
	expect_load_error("activation_checkpointing:\n  mode: full\n", TITAN_E_INVALID,
			  "t.yaml:1:1: activation_checkpointing: unknown section (did you mean "
			  "'activation_checkpoint'?)");
	expect_load_error("job: {}\ntraining.steps: 5\n", TITAN_E_INVALID,
			  "t.yaml:2:1: training.steps: write the key under its section "
			  "('training:' then '  steps:')");
	expect_load_error("job: {}\nfloat8:\n  enable: true\n", TITAN_E_INVALID,
			  "t.yaml:2:1: float8: unknown section");
	expect_load_error("training:\n  steps: 5\noptimizer: {}\ntraining:\n  seq_len: 4\n",
			  TITAN_E_INVALID,
			  "t.yaml:4:1: training: duplicate section (first at line 1, column 1)");
	expect_load_error("training:\n  steps: 5\n  seq_len: 4\n  steps: 6\n", TITAN_E_INVALID,
			  "t.yaml:4:3: training.steps: duplicate key (first at line 2, column 3)");
	expect_load_error("training:\n  steps: 5\n  stepz: 6\n", TITAN_E_INVALID,
			  "t.yaml:3:3: training.stepz: unknown key (did you mean 'training.steps'?)");
	expect_load_error("training:\n  lr: 0.1\n", TITAN_E_INVALID,
			  "t.yaml:2:3: training.lr: unknown key (did you mean 'optimizer.lr'?)");
	expect_load_error("checkpoint:\n  enable_checkpoint: true\n", TITAN_E_INVALID,
			  "t.yaml:2:3: checkpoint.enable_checkpoint: unknown key");
	expect_load_error("training:\n  [a]: 1\n", TITAN_E_INVALID,
			  "t.yaml:2:3: training: a key must be a name, got a sequence");

	/* The same through files, with the path in the origin. */
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	path_of(path, sizeof path, "tests/fixtures/config/unknown_key.yaml");
	assert_int_equal(titan_config_load_file(&c, path), TITAN_E_INVALID);
	snprintf(msg, sizeof msg,
		 "%s:3:3: training.stepz: unknown key (did you mean 'training.steps'?)", path);
	assert_str(titan_errmsg(), msg);
	path_of(path, sizeof path, "tests/fixtures/config/not_mapping.yaml");
	assert_int_equal(titan_config_load_file(&c, path), TITAN_E_INVALID);
	snprintf(msg, sizeof msg,
		 "%s:1:1: the top level must be a mapping of sections, got a sequence", path);
	assert_str(titan_errmsg(), msg);
	path_of(path, sizeof path, "tests/fixtures/config/syntax_error.yaml");
	assert_int_equal(titan_config_load_file(&c, path), TITAN_E_INVALID);
	snprintf(msg, sizeof msg,
		 "%s:3:11: YAML syntax error: mapping values are not allowed in this context",
		 path);
	assert_str(titan_errmsg(), msg);
	titan_config_release(&c);
}

/* Aliases: a few are fine; the values they expand to may not pass the
 * file's own bound (4 MiB), nested ("billion laughs") or not, and a
 * config holds at most 1024 anchors and 4096 aliases. */
static void test_aliases(void **state)
{
	(void)state;
	struct titan_config c;
	char *y, *p;
	size_t big = 1u << 20;

	assert_int_equal(titan_config_init(&c), 0);
	y = "checkpoint:\n  exclude_from_loading: [&o optimizer, *o, rng]\n"
	    "job:\n  description: &d hello\n  print_config: false\n";
	assert_int_equal(titan_config_load_string(&c, y, strlen(y), "t.yaml"), 0);
	assert_int_equal(c.checkpoint.exclude_from_loading.n, 3);
	assert_string_equal(c.checkpoint.exclude_from_loading.items[1], "optimizer");
	titan_config_release(&c);

	/* a 1 MiB anchor and five aliases of it: 6 MiB from a 1 MiB file */
	y = malloc(big + 200);
	assert_non_null(y);
	p = y + sprintf(y, "checkpoint:\n  exclude_from_loading: [&a \"");
	memset(p, 'x', big);
	p += big;
	p += sprintf(p, "\", *a,\n   *a, *a, *a, *a]\n");
	expect_load_error(y, TITAN_E_INVALID, "t.yaml:3:8: the alias '*a' expands the config's "
			  "values past 4 MiB (a large anchor repeated): not a job config");
	free(y);
	/* nested: 10 levels of lists of 10 aliases of the one below */
	{
		char buf[4096];
		int k = sprintf(buf, "x: &l0 [aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n");

		for (int i = 1; i < 10; i++) {
			k += sprintf(buf + k, "y%d: &l%d [", i, i);
			for (int j = 0; j < 10; j++)
				k += sprintf(buf + k, "%s*l%d", j ? ", " : "", i - 1);
			k += sprintf(buf + k, "]\n");
		}
		assert_int_equal(titan_config_init(&c), 0);
		assert_int_equal(titan_config_load_string(&c, buf, (size_t)k, "t.yaml"),
				 TITAN_E_INVALID);
		assert_non_null(strstr(titan_errmsg(), "expands the config's values past 4 MiB"));
		assert_non_null(strstr(titan_errmsg(), "t.yaml:7:"));
		titan_config_release(&c);
	}
	/* thousands of anchors or aliases */
	y = malloc(64 * 5000);
	assert_non_null(y);
	p = y + sprintf(y, "job:\n  description: [");
	for (int i = 0; i < 1100; i++)
		p += sprintf(p, "%s&a%d x", i ? ", " : "", i);
	sprintf(p, "]\n");
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_load_string(&c, y, strlen(y), "t.yaml"), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "more than 1024 YAML anchors"));
	p = y + sprintf(y, "job:\n  description: [&a x");
	for (int i = 0; i < 4100; i++)
		p += sprintf(p, ", *a");
	sprintf(p, "]\n");
	assert_int_equal(titan_config_load_string(&c, y, strlen(y), "t.yaml"), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "more than 4096 YAML aliases"));
	titan_config_release(&c);
	free(y);
}

static void test_errors_values(void **state)
{
	(void)state;
	expect_load_error("training:\n  steps: abc\n", TITAN_E_INVALID,
			  "t.yaml:2:10: training.steps: expected an integer, got 'abc'");
	expect_load_error("training:\n  steps: 2.5\n", TITAN_E_INVALID,
			  "t.yaml:2:10: training.steps: expected an integer, got '2.5'");
	expect_load_error("training:\n  steps: 1_000\n", TITAN_E_INVALID,
			  "t.yaml:2:10: training.steps: expected an integer, got '1_000'");
	expect_load_error("training:\n  steps: 1e3\n", TITAN_E_INVALID,
			  "t.yaml:2:10: training.steps: expected an integer, got '1e3'");
	expect_load_error("training:\n  seed: 99999999999999999999\n", TITAN_E_INVALID,
			  "t.yaml:2:9: training.seed: 99999999999999999999 is out of range "
			  "for a 64-bit integer");
	expect_load_error("training:\n  shuffle: 3\n", TITAN_E_INVALID,
			  "t.yaml:2:12: training.shuffle: expected a boolean (true/false), got '3'");
	expect_load_error("optimizer:\n  lr: fast\n", TITAN_E_INVALID,
			  "t.yaml:2:7: optimizer.lr: expected a number, got 'fast'");
	expect_load_error("optimizer:\n  lr: .inf\n", TITAN_E_INVALID,
			  "t.yaml:2:7: optimizer.lr: expected a number, got '.inf'");
	expect_load_error("optimizer:\n  lr: nan\n", TITAN_E_INVALID,
			  "t.yaml:2:7: optimizer.lr: expected a number, got 'nan'");
	expect_load_error("optimizer:\n  lr: 1e999\n", TITAN_E_INVALID,
			  "t.yaml:2:7: optimizer.lr: expected a number, got '1e999'");
	expect_load_error("optimizer:\n  lr: 0\n", TITAN_E_INVALID,
			  "t.yaml:2:7: optimizer.lr: 0 is not allowed (must be > 0)");
	expect_load_error("optimizer:\n  lr: -1e-3\n", TITAN_E_INVALID,
			  "t.yaml:2:7: optimizer.lr: -1e-3 is out of range (minimum 0)");
	expect_load_error("optimizer:\n  beta2: 1.5\n", TITAN_E_INVALID,
			  "t.yaml:2:10: optimizer.beta2: 1.5 is out of range (maximum 1)");
	expect_load_error("training:\n  seq_len: 0\n", TITAN_E_INVALID,
			  "t.yaml:2:12: training.seq_len: 0 is out of range (minimum 1)");
	expect_load_error("parallelism:\n  data_parallel_shard_degree: 0\n", TITAN_E_INVALID,
			  "t.yaml:2:31: parallelism.data_parallel_shard_degree: 0 is not allowed "
			  "(use -1 or a value >= 1)");
	expect_load_error("parallelism:\n  data_parallel_shard_degree: -2\n", TITAN_E_INVALID,
			  "t.yaml:2:31: parallelism.data_parallel_shard_degree: -2 is out of range "
			  "(minimum -1)");
	expect_load_error("checkpoint:\n  async_mode: sync\n", TITAN_E_INVALID,
			  "t.yaml:2:15: checkpoint.async_mode: 'sync' is not one of disabled, async");
	expect_load_error("activation_checkpoint:\n  mode: 3\n", TITAN_E_INVALID,
			  "t.yaml:2:9: activation_checkpoint.mode: '3' is not one of none, "
			  "selective, full");
	expect_load_error("optimizer:\n  lr:\n", TITAN_E_INVALID,
			  "t.yaml:2:6: optimizer.lr: null is not allowed (expected a number)");
	expect_load_error("job:\n  description: ~\n", TITAN_E_INVALID,
			  "t.yaml:2:16: job.description: null is not allowed (expected a string)");
	expect_load_error("training:\n  steps: null\n", TITAN_E_INVALID,
			  "t.yaml:2:10: training.steps: null is not allowed (expected an integer)");
	expect_load_error("training:\n  steps:\n    a: 1\n", TITAN_E_INVALID,
			  "t.yaml:3:5: training.steps: expected an integer, got a mapping");
	expect_load_error("training:\n  steps: [1, 2]\n", TITAN_E_INVALID,
			  "t.yaml:2:10: training.steps: expected an integer, got a sequence");
	expect_load_error("job:\n  description: {a: b}\n", TITAN_E_INVALID,
			  "t.yaml:2:16: job.description: expected a string, got a mapping");
	expect_load_error("checkpoint:\n  async_mode: [async]\n", TITAN_E_INVALID,
			  "t.yaml:2:15: checkpoint.async_mode: expected one of disabled, async, "
			  "got a sequence");
	expect_load_error("model:\n  converters: {a: b}\n", TITAN_E_INVALID,
			  "t.yaml:2:15: model.converters: expected a list (a sequence or a "
			  "comma-separated string), got a mapping");
	expect_load_error("model:\n  converters: [a, [b]]\n", TITAN_E_INVALID,
			  "t.yaml:2:19: model.converters: list items must be scalars, got a sequence");
	expect_load_error("model:\n  converters: [a, ~]\n", TITAN_E_INVALID,
			  "t.yaml:2:19: model.converters: list item 2 is null");
	expect_load_error("model:\n  converters: a,,b\n", TITAN_E_INVALID,
			  "t.yaml:2:15: model.converters: empty item in list 'a,,b'");
	expect_load_error("job:\n  description: \"a\\0b\"\n", TITAN_E_INVALID,
			  "t.yaml:2:16: job.description: the value contains a NUL character");
	expect_load_error("training:\n  steps: [1, 2\n", TITAN_E_INVALID,
			  "t.yaml:3:1: YAML syntax error: did not find expected ',' or ']' "
			  "(while parsing a flow sequence at line 2, column 10)");
	expect_load_error("training:\n\tsteps: 1\n", TITAN_E_INVALID,
			  "t.yaml:2:1: YAML syntax error: found character that cannot start any "
			  "token (while scanning for the next token at line 2, column 1)");
	expect_load_error("job: {}\n---\njob: {}\n", TITAN_E_INVALID,
			  "t.yaml:3:1: only one YAML document is allowed");
	expect_load_error("job:\n  description: \xff\xfe\n", TITAN_E_INVALID,
			  "t.yaml:2:16: invalid leading UTF-8 octet");
	expect_load_error("job:\n  description: a\x01\n", TITAN_E_INVALID,
			  "t.yaml:2:17: control characters are not allowed");
}

/* A failed load changes nothing, even the keys before the bad one. */
static void test_load_atomic(void **state)
{
	(void)state;
	struct titan_config c, d;
	assert_int_equal(titan_config_init(&c), 0);
	load_ok(&c, "training:\n  steps: 77\n");
	assert_int_equal(titan_config_copy(&d, &c), 0);
	const char *y = "training:\n  steps: 5\n  seq_len: 64\nmodel:\n  converters: [a]\n"
			"  flavor: 9B\n";
	assert_int_equal(titan_config_load_string(&c, y, strlen(y), "t.yaml"), TITAN_E_INVALID);
	assert_str(titan_errmsg(), "t.yaml:6:11: model.flavor: '9B' is not one of debugmodel, "
				   "1B, 3B, 8B, 70B, 405B, 0.6B, 1.7B, 4B, 14B, 32B, debugmodel_moe, "
				   "30B-A3B, 235B-A22B, debugmodel_mla, 16B, 236B, 671B, 17bx16e, 17bx128e, custom");
	assert_null(titan_config_diff(&c, &d));
	assert_int_equal(c.training.steps, 77);
	/* titan_config_set is atomic too. */
	assert_int_equal(titan_config_set(&c, "training.steps", "x", NULL), TITAN_E_INVALID);
	assert_str(titan_errmsg(), "training.steps: expected an integer, got 'x'");
	assert_int_equal(titan_config_set(&c, "model.converters", "a,,b", NULL), TITAN_E_INVALID);
	assert_null(titan_config_diff(&c, &d));
	titan_config_release(&c);
	titan_config_release(&d);
}

static void test_load_file_errors(void **state)
{
	(void)state;
	struct titan_config c;
	char path[1024], msg[1200];
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_load_file(&c, "no/such/x.yaml"), TITAN_E_IO);
	assert_str(titan_errmsg(), "cannot open 'no/such/x.yaml': No such file or directory");
	path_of(path, sizeof path, "tests/fixtures/config");
	assert_int_equal(titan_config_load_file(&c, path), TITAN_E_IO);
	snprintf(msg, sizeof msg, "cannot read '%s': Is a directory", path);
	assert_str(titan_errmsg(), msg);
	struct titan_config r;
	assert_int_equal(titan_config_resolve(&r, "missing.yaml", NULL), TITAN_E_IO);
	assert_str(titan_errmsg(), "cannot open 'missing.yaml': No such file or directory");
	titan_config_release(&r); /* resolve left it released */
	titan_config_release(&c);
}

/* ------------------------------------------------------- command line */

static void test_set(void **state)
{
	(void)state;
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_set(&c, "training.shuffle", NULL, "command line"), 0);
	assert_true(c.training.shuffle);
	assert_int_equal(titan_config_set(&c, "training.shuffle", "off", "command line"), 0);
	assert_false(c.training.shuffle);
	assert_int_equal(titan_config_set(&c, "checkpoint.no_initial_load_model_only", NULL,
					  "command line"), 0);
	assert_false(c.checkpoint.initial_load_model_only);
	assert_int_equal(titan_config_set(&c, "lr_scheduler.decay_ratio", "0.25", NULL), 0);
	assert_true(c.lr_scheduler.decay_ratio == 0.25);
	assert_int_equal(titan_config_set(&c, "lr_scheduler.decay_ratio", "None", NULL), 0);
	assert_true(isnan(c.lr_scheduler.decay_ratio));
	assert_int_equal(titan_config_set(&c, "parallelism.pipeline_parallel_layers_per_stage",
					  "none", NULL), 0);
	assert_int_equal(c.parallelism.pipeline_parallel_layers_per_stage, TITAN_CFG_NONE_INT);
	assert_int_equal(titan_config_set(&c, "model.converters", "", NULL), 0);
	assert_int_equal(c.model.converters.n, 0);
	assert_int_equal(titan_config_set(&c, "model.converters", " float8 , mx ", NULL), 0);
	assert_int_equal(c.model.converters.n, 2);
	assert_str(c.model.converters.items[1], "mx");
	assert_int_equal(titan_config_set(&c, "job.description", "", NULL), 0);
	assert_str(c.job.description, "");
	assert_int_equal(titan_config_set(&c, "job.description", "null", NULL), 0);
	assert_str(c.job.description, "null"); /* text on the command line */
	assert_int_equal(titan_config_set(&c, "training.seed", "-0", NULL), 0);
	assert_int_equal(c.training.seed, 0);
	titan_config_release(&c);

	expect_set_error("training.stepz", "5",
			 "command line: training.stepz: unknown key (did you mean 'training.steps'?)");
	expect_set_error("training.lr", "5",
			 "command line: training.lr: unknown key (did you mean 'optimizer.lr'?)");
	expect_set_error("trainig.steps", "5",
			 "command line: trainig.steps: unknown section 'trainig' (did you mean "
			 "'training'?)");
	expect_set_error("steps", "5", "command line: steps: not a section.key name");
	expect_set_error("lr", "5", "command line: lr: not a section.key name (did you mean "
				    "'optimizer.lr'?)");
	expect_set_error("float8.enable", "1", "command line: float8.enable: unknown section "
					       "'float8'");
	expect_set_error("training.steps", NULL,
			 "command line: training.steps: missing value (expected an integer)");
	expect_set_error("training.no_steps", NULL,
			 "command line: training.no_steps: unknown key (did you mean "
			 "'training.steps'?)");
	expect_set_error("training.shuffle", "maybe",
			 "command line: training.shuffle: expected a boolean (true/false), got "
			 "'maybe'");
	expect_set_error("optimizer.lr", "", "command line: optimizer.lr: expected a number, "
					     "got ''");
	expect_set_error("optimizer.lr", " 1", "command line: optimizer.lr: expected a number, "
					       "got ' 1'");
	expect_set_error("metrics.peak_flops", "0",
			 "command line: metrics.peak_flops: 0 is not allowed (must be > 0)");
	expect_set_error("job.dump_folder", "bad\xc3", "command line: job.dump_folder: the value "
						       "is not valid UTF-8");
}

static void test_suggest(void **state)
{
	(void)state;
	char buf[64];
	assert_str(titan_config_suggest("training.stpes", buf, sizeof buf), "training.steps");
	assert_str(titan_config_suggest("optimizer.learning_rate", buf, sizeof buf) ?
			   buf : "(none)", "(none)");
	assert_str(titan_config_suggest("training.lr", buf, sizeof buf), "optimizer.lr");
	assert_str(titan_config_suggest("job.seed", buf, sizeof buf), "training.seed");
	assert_str(titan_config_suggest("optimiser.lr", buf, sizeof buf), "optimizer.lr");
	assert_str(titan_config_suggest("warmup_step", buf, sizeof buf),
		   "lr_scheduler.warmup_steps");
	assert_str(titan_config_suggest("parallelism.tensor_parallel_degre", buf, sizeof buf),
		   "parallelism.tensor_parallel_degree");
	/* seq_len is in two sections: no unique move. */
	assert_null(titan_config_suggest("job.seq_len", buf, sizeof buf));
	assert_null(titan_config_suggest("zzz.qqq", buf, sizeof buf));
	assert_null(titan_config_suggest("training.stpes", buf, 5)); /* too small */
}

static void test_extract_overrides(void **state)
{
	(void)state;
	char *argv[] = { "titan-train", "-v", "--training.steps=5", "--config", "x.yaml",
			 "--optimizer.lr", "1e-3", "--training.shuffle", "--training.deterministic",
			 "false", "--metrics.save_for_all_ranks", "--other.thing=3",
			 "--help-config", "--training.stepz", "7", "--job.description=a=b",
			 "file.txt", "--model.converters=", "--profiling.enable_profiling",
			 "--training.seed", "--", "--training.steps=9", "tail", NULL };
	int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
	struct titan_config_overrides ov;
	int n = titan_config_extract_overrides(&argc, argv, &ov);
	assert_int_equal(n, 11);
	assert_int_equal((int)ov.n, 11);
	/* an unknown section is taken too: resolving it suggests the right one */
	static const char *const names[] = {
		"training.steps", "optimizer.lr", "training.shuffle", "training.deterministic",
		"metrics.save_for_all_ranks", "other.thing", "training.stepz", "job.description",
		"model.converters", "profiling.enable_profiling", "training.seed"
	};
	static const char *const values[] = { "5", "1e-3", NULL, "false", NULL, "3", "7", "a=b",
					      "", NULL, NULL };
	for (size_t i = 0; i < 11; i++) {
		assert_str(ov.names[i], names[i]);
		if (values[i])
			assert_str(ov.values[i], values[i]);
		else
			assert_null(ov.values[i]);
	}
	static const char *const left[] = { "titan-train", "-v", "--config", "x.yaml",
					     "--help-config", "file.txt",
					     "--", "--training.steps=9", "tail" };
	assert_int_equal(argc, 9);
	for (int i = 0; i < argc; i++)
		assert_str(argv[i], left[i]);
	assert_null(argv[argc]);
	titan_config_overrides_release(&ov);
	assert_int_equal((int)ov.n, 0);

	/* A value that looks like an override is not taken; a negative number is. */
	char *argv2[] = { "t", "--job.description", "--training.steps=3", "--training.seed",
			  "-5", "--parallelism.data_parallel_shard_degree", "-1", NULL };
	argc = 7;
	assert_int_equal(titan_config_extract_overrides(&argc, argv2, &ov), 4);
	assert_int_equal(argc, 1);
	assert_null(ov.values[0]);
	assert_str(ov.values[1], "3");
	assert_str(ov.values[2], "-5");
	assert_str(ov.values[3], "-1");
	titan_config_overrides_release(&ov);

	/* No arguments at all. */
	char *argv3[] = { "t", NULL };
	argc = 1;
	assert_int_equal(titan_config_extract_overrides(&argc, argv3, &ov), 0);
	assert_int_equal(argc, 1);
	titan_config_overrides_release(&ov);
}

static void test_resolve_precedence(void **state)
{
	(void)state;
	char path[1024];
	path_of(path, sizeof path, "tests/fixtures/config/good.yaml");
	char *argv[] = { "t", "--training.seq_len=256", "--training.seq_len", "128",
			 "--optimizer.eps=1e-6", "--training.shuffle", NULL };
	int argc = 6;
	struct titan_config_overrides ov;
	assert_int_equal(titan_config_extract_overrides(&argc, argv, &ov), 4);

	struct titan_config c;
	assert_int_equal(titan_config_resolve(&c, path, &ov), 0);
	assert_int_equal(c.training.steps, 20);            /* file */
	assert_int_equal(c.training.seq_len, 128);         /* later override wins */
	assert_true(c.optimizer.lr == 1e-3);               /* file */
	assert_true(c.optimizer.eps == 1e-6);              /* override over default */
	assert_true(c.training.shuffle);                   /* bare flag */
	assert_int_equal(c.training.local_batch_size, 8);  /* default */
	assert_int_equal(c.parallelism.pipeline_parallel_split_points.n, 2);
	titan_config_release(&c);

	assert_int_equal(titan_config_resolve(&c, NULL, NULL), 0);
	assert_int_equal(c.training.steps, 10000);
	titan_config_release(&c);
	titan_config_overrides_release(&ov);

	/* An unknown key is reported at resolve time, with a suggestion. */
	char *argv2[] = { "t", "--training.stepz", "5", NULL };
	argc = 3;
	assert_int_equal(titan_config_extract_overrides(&argc, argv2, &ov), 1);
	assert_int_equal(titan_config_resolve(&c, path, &ov), TITAN_E_INVALID);
	assert_str(titan_errmsg(),
		   "command line: training.stepz: unknown key (did you mean 'training.steps'?)");
	titan_config_release(&c);
	titan_config_overrides_release(&ov);

	/* Cross-key checks run after the overrides. */
	char *argv3[] = { "t", "--checkpoint.keep_latest_k=1", NULL };
	argc = 2;
	assert_int_equal(titan_config_extract_overrides(&argc, argv3, &ov), 1);
	assert_int_equal(titan_config_resolve(&c, NULL, &ov), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "checkpoint.keep_latest_k: 1 is not allowed"));
	titan_config_release(&c);
	titan_config_overrides_release(&ov);
}

static void test_validate(void **state)
{
	(void)state;
	expect_validate_error("checkpoint:\n  keep_latest_k: 1\n",
			      "checkpoint.keep_latest_k: 1 is not allowed (the newest checkpoint "
			      "may still be being written); use 0 to keep all, or 2 or more");
	expect_validate_error("training:\n  local_batch_size: 4\n  global_batch_size: 6\n",
			      "training.global_batch_size: 6 is not a multiple of "
			      "training.local_batch_size 4 (or -1)");
	expect_validate_error("training:\n  local_batch_size: 4\n  global_batch_size: 8\n"
			      "parallelism:\n  data_parallel_shard_degree: 4\n",
			      "training.global_batch_size: 8 is not a multiple of "
			      "training.local_batch_size x the data parallel degree (4 x 4)");
	expect_validate_error("profiling:\n  enable_profiling: true\n  profile_freq: 3\n",
			      "profiling.profile_freq: 3 is less than profiling.profiler_warmup + "
			      "profiling.profiler_active (4)");
	expect_validate_error("activation_checkpoint:\n  selective_ac_option: every\n",
			      "activation_checkpoint.selective_ac_option: 'every' is neither 'op' "
			      "nor a non-negative integer");
	expect_validate_error("activation_checkpoint:\n  selective_ac_option: '-1'\n",
			      "activation_checkpoint.selective_ac_option: '-1' is neither 'op' "
			      "nor a non-negative integer");
	expect_validate_error("model:\n  flavor: custom\n  dim: 64\n  n_heads: 4\n"
			      "  vocab_size: 100\n",
			      "model.n_layers: must be set when model.flavor is custom");
	expect_validate_error("model:\n  dim: 100\n  n_heads: 3\n",
			      "model.n_heads: 3 does not divide model.dim 100");
	expect_validate_error("model:\n  n_heads: 8\n  n_kv_heads: 3\n",
			      "model.n_kv_heads: 3 does not divide model.n_heads 8");
	expect_validate_error("model:\n  rope_low_freq_factor: 4\n",
			      "model.rope_high_freq_factor: must be greater than "
			      "model.rope_low_freq_factor when model.rope_scaling is true");
	expect_validate_error("optimizer:\n  beta1: 1\n", "optimizer.beta1: must be < 1");
	expect_validate_error("checkpoint:\n  last_save_in_hf: true\n  last_save_model_only: "
			      "false\n",
			      "checkpoint.last_save_in_hf: needs checkpoint.last_save_model_only "
			      "(safetensors hold only the model)");
	expect_validate_error("parallelism:\n  pipeline_parallel_degree: 2\n"
			      "  pipeline_parallel_microbatch_size: 3\n",
			      "parallelism.pipeline_parallel_microbatch_size: 3 does not divide "
			      "training.local_batch_size 8");
	expect_validate_error("parallelism:\n  tensor_parallel_degree: 3\n",
			      "training.seq_len: 2048 is not divisible by 3 "
			      "(parallelism.tensor_parallel_degree x 2 x "
			      "parallelism.context_parallel_degree)");
	expect_validate_error("parallelism:\n  pipeline_parallel_degree: 2\nmodel:\n"
			      "  tie_word_embeddings: 'true'\n",
			      "model.tie_word_embeddings: tied weights cannot be used with "
			      "parallelism.pipeline_parallel_degree > 1");

	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	load_ok(&c, "model:\n  flavor: custom\n  dim: 64\n  n_layers: 2\n  n_heads: 4\n"
		    "  n_kv_heads: 2\n  vocab_size: 100\ntraining:\n  local_batch_size: 4\n"
		    "  global_batch_size: 16\nactivation_checkpoint:\n  selective_ac_option: op\n"
		    "profiling:\n  enable_profiling: true\n  profile_freq: 4\n"
		    "checkpoint:\n  keep_latest_k: 0\n");
	assert_int_equal(titan_config_validate(&c), 0);
	titan_config_release(&c);
}

/* --------------------------------------------------------------- output */

static void test_round_trip_defaults(void **state)
{
	(void)state;
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	round_trip(&c);
	/* Floats that need all 17 digits, tiny and huge values, set nullables. */
	assert_int_equal(titan_config_set(&c, "optimizer.lr", "0.1", NULL), 0);
	c.optimizer.lr = 0.1 + 0.2;
	c.optimizer.eps = 5e-324;
	c.metrics.peak_flops = 1.7976931348623157e308;
	c.model.ffn_dim_multiplier = 1.0 / 3.0;
	c.lr_scheduler.decay_ratio = 0.0;
	c.parallelism.pipeline_parallel_layers_per_stage = 3;
	c.training.seed = INT64_MAX;
	c.model.rope_theta = 1e22;
	round_trip(&c);
	titan_config_release(&c);
}

static void test_round_trip_awkward(void **state)
{
	(void)state;
	char path[1024];
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	int rc = titan_config_load_file(&c, path_of(path, sizeof path,
						    "tests/fixtures/config/awkward.yaml"));
	if (rc)
		print_error("%s\n", titan_errmsg());
	assert_int_equal(rc, 0);
	assert_str(c.job.description, "it's a \"quoted\" value: with a colon # and a hash");
	assert_str(c.job.dump_folder, "  leading and trailing spaces  ");
	assert_str(c.training.dataset, "null");
	assert_str(c.training.dataset_path, "true");
	assert_str(c.validation.dataset, "12345");
	assert_str(c.validation.dataset_path, "na\xc3\xafve \xc3\xbcn\xc3\xaf" "code \xe2\x80\x94 "
					      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x9a\x80");
	assert_str(c.model.tokenizer_path, "tab\there\nnewline");
	assert_str(c.model.hf_assets_path, "");
	assert_int_equal(c.model.converters.n, 5);
	assert_str(c.model.converters.items[1], "a, with comma");
	assert_str(c.model.converters.items[2], "null");
	assert_int_equal(c.checkpoint.exclude_from_loading.n, 3);
	assert_str(c.checkpoint.exclude_from_loading.items[1], "lr_scheduler");
	round_trip(&c);

	/* More strings a plain scalar would turn into something else. */
	static const char *const tricky[] = {
		"~", "NULL", "yes", "No", "on", "y", "1", "-2", "+3", "0x1F", "0o17", "1_000",
		"1:20", ".5", "1e5", ".inf", "-.Inf", ".NaN", "inf", "- item", "key: value",
		"#comment", "a #b", "@at", "`tick", "!tag", "&anchor", "*alias", "|", ">",
		"%pct", "'", "\"", "{", "[x]", "a\\b", "\t", "x\r\ny", " ", "\xc2\x85", "\x01",
		"---", "...", "? q", "trailing ", "\357\273\277bom",
	};
	for (size_t i = 0; i < sizeof tricky / sizeof tricky[0]; i++) {
		assert_int_equal(titan_config_set(&c, "job.description", tricky[i], NULL), 0);
		assert_int_equal(titan_config_set(&c, "training.dataset", tricky[i], NULL), 0);
		free(c.model.converters.items[0]);
		c.model.converters.items[0] = strdup(tricky[i]);
		round_trip(&c);
	}
	titan_config_release(&c);
}

static void test_write_yaml_text(void **state)
{
	(void)state;
	struct titan_config c;
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_set(&c, "model.converters", "float8,true", NULL), 0);
	char *text = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&text, &len);
	assert_non_null(fp);
	assert_int_equal(titan_config_write_yaml(&c, fp), 0);
	assert_int_equal(fclose(fp), 0);
	/* Every section and key in schema order. */
	const char *p = text;
	const char *last_section = "";
	for (size_t i = 0, n = titan_config_nkeys(); i < n; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		char want[128];
		if (strcmp(k->section, last_section)) {
			snprintf(want, sizeof want, "%s%s:\n", i ? "\n" : "", k->section);
			p = strstr(p, want + (i == 0));
			assert_non_null(p);
			last_section = k->section;
		}
		snprintf(want, sizeof want, "\n  %s: ", k->key);
		p = strstr(p, want);
		if (!p)
			print_error("missing or out of order: %s.%s\n", k->section, k->key);
		assert_non_null(p);
	}
	assert_non_null(strstr(text, "\n  lr: 0.0008\n"));
	assert_non_null(strstr(text, "\n  max_norm: 1.0\n"));
	assert_non_null(strstr(text, "\n  rope_theta: 500000.0\n"));
	assert_non_null(strstr(text, "\n  decay_ratio: null\n"));
	assert_non_null(strstr(text, "\n  pipeline_parallel_layers_per_stage: null\n"));
	assert_non_null(strstr(text, "\n  selective_ac_option: '2'\n"));
	assert_non_null(strstr(text, "\n  dataset_path: ''\n"));
	assert_non_null(strstr(text, "\n  converters: [float8, 'true']\n"));
	assert_non_null(strstr(text, "\n  pipeline_parallel_split_points: []\n"));
	assert_non_null(strstr(text, "\n  norm_eps: 1.0e-05\n"));
	assert_non_null(strstr(text, "\n  enable: false\n"));
	free(text);

	/* A full disk is an I/O error. */
	FILE *full = fopen("/dev/full", "w");
	if (full) {
		assert_int_equal(titan_config_write_yaml(&c, full), TITAN_E_IO);
		fclose(full);
	}
	/* Invalid UTF-8 put into the struct directly cannot be written. */
	free(c.job.description);
	c.job.description = strdup("bad\xff");
	FILE *null = fopen("/dev/null", "w");
	assert_non_null(null);
	assert_int_equal(titan_config_write_yaml(&c, null), TITAN_E_INVALID);
	assert_str(titan_errmsg(), "job.description: the value is not valid UTF-8; cannot "
				   "write it");
	fclose(null);
	titan_config_release(&c);
}

static void test_format_value(void **state)
{
	(void)state;
	struct titan_config c;
	char buf[64];
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_format_value(&c, "optimizer.lr", buf, sizeof buf), 0);
	assert_str(buf, "0.0008");
	assert_int_equal(titan_config_format_value(&c, "training.steps", buf, sizeof buf), 0);
	assert_str(buf, "10000");
	assert_int_equal(titan_config_format_value(&c, "training.max_norm", buf, sizeof buf), 0);
	assert_str(buf, "1.0");
	assert_int_equal(titan_config_format_value(&c, "model.rope_scaling", buf, sizeof buf), 0);
	assert_str(buf, "true");
	assert_int_equal(titan_config_format_value(&c, "lr_scheduler.decay_ratio", buf,
						   sizeof buf), 0);
	assert_str(buf, "null");
	assert_int_equal(titan_config_format_value(&c, "activation_checkpoint.mode", buf,
						   sizeof buf), 0);
	assert_str(buf, "selective");
	assert_int_equal(titan_config_set(&c, "model.converters", "a,b", NULL), 0);
	assert_int_equal(titan_config_format_value(&c, "model.converters", buf, sizeof buf), 0);
	assert_str(buf, "a,b");
	assert_int_equal(titan_config_format_value(&c, "job.dump_folder", buf, 4),
			 TITAN_E_INVALID);
	assert_str(buf, "./o");
	assert_int_equal(titan_config_format_value(&c, "model.converters", buf, 3),
			 TITAN_E_INVALID);
	assert_str(buf, "a,");
	assert_int_equal(titan_config_format_value(&c, "job.nope", buf, sizeof buf),
			 TITAN_E_INVALID);
	assert_str(titan_errmsg(), "job.nope: unknown key");
	titan_config_release(&c);
}

static void test_help(void **state)
{
	(void)state;
	char *text = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&text, &len);
	assert_non_null(fp);
	titan_config_help(fp);
	assert_int_equal(fclose(fp), 0);
	for (size_t i = 0, n = titan_config_nkeys(); i < n; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		char want[128];
		snprintf(want, sizeof want, "  %s.%s ", k->section, k->key);
		if (!strstr(text, want))
			print_error("help lacks %s\n", want);
		assert_non_null(strstr(text, want));
		assert_non_null(strstr(text, k->doc));
	}
	assert_non_null(strstr(text, "\ncheckpoint:\n"));
	assert_non_null(strstr(text, "one of disabled, async"));
	assert_non_null(strstr(text, "default 10000; >= 1"));
	assert_non_null(strstr(text, "default null"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_schema),
		cmocka_unit_test(test_schema_covers_struct),
		cmocka_unit_test(test_enums),
		cmocka_unit_test(test_doc),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_release_idempotent),
		cmocka_unit_test(test_copy_and_diff),
		cmocka_unit_test(test_presets),
		cmocka_unit_test(test_empty_inputs),
		cmocka_unit_test(test_load_values),
		cmocka_unit_test(test_errors_structure),
		cmocka_unit_test(test_aliases),
		cmocka_unit_test(test_errors_values),
		cmocka_unit_test(test_load_atomic),
		cmocka_unit_test(test_load_file_errors),
		cmocka_unit_test(test_set),
		cmocka_unit_test(test_suggest),
		cmocka_unit_test(test_extract_overrides),
		cmocka_unit_test(test_resolve_precedence),
		cmocka_unit_test(test_validate),
		cmocka_unit_test(test_round_trip_defaults),
		cmocka_unit_test(test_round_trip_awkward),
		cmocka_unit_test(test_write_yaml_text),
		cmocka_unit_test(test_format_value),
		cmocka_unit_test(test_help),
	};
	return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
