/*
 * tests/unit/test_toml.c — unit tests of lib/config/toml.c: the TOML reader
 * (every value type it takes, every construct it refuses, with the exact
 * "NAME:LINE:COL: key: why" message), torchtitan's names mapped or refused,
 * all-or-nothing loads, the .toml dispatch of titan_config_load_file and
 * torchtitan's own llama3 job files (tests/data/torchtitan).  Paths are
 * relative to $TITAN_SRCDIR (default ".").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/config.h"
#include "titan/core.h"

static const char *path_of(char *buf, size_t n, const char *rel)
{
	const char *s = getenv("TITAN_SRCDIR");
	snprintf(buf, n, "%s/%s", s && *s ? s : ".", rel);
	return buf;
}

/* Load `toml` ("t.toml") over the defaults into *c; must succeed. */
static void load_ok(struct titan_config *c, const char *toml)
{
	assert_int_equal(titan_config_init(c), 0);
	int rc = titan_config_load_toml_string(c, toml, strlen(toml), "t.toml");
	if (rc != 0)
		print_error("toml:\n%s\nrc %d: %s\n", toml, rc, titan_errmsg());
	assert_int_equal(rc, 0);
}

/* Load `toml`; expect TITAN_E_INVALID with exactly `msg` and the config
 * unchanged. */
static void expect_error_n(const char *toml, size_t len, const char *msg)
{
	struct titan_config c, d;
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_init(&d), 0);
	int rc = titan_config_load_toml_string(&c, toml, len, "t.toml");
	if (rc != TITAN_E_INVALID || strcmp(titan_errmsg(), msg) != 0)
		print_error("toml:\n%s\nrc %d, message: %s\nexpected: %s\n", toml, rc,
			    titan_errmsg(), msg);
	assert_int_equal(rc, TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), msg);
	assert_null(titan_config_diff(&c, &d));
	titan_config_release(&c);
	titan_config_release(&d);
}

static void expect_error(const char *toml, const char *msg)
{
	expect_error_n(toml, strlen(toml), msg);
}

static void test_values(void **state)
{
	(void)state;
	struct titan_config c;

	/* strings: basic with escapes, literal, multi-line of both; integers
	 * with '_', sign, hex, octal, binary; floats with exponent; booleans;
	 * arrays over lines with comments and a trailing comma */
	load_ok(&c, "# a comment\n"
		    "[job]  # after a header\n"
		    "description = \"tab\\there \\\"q\\\" \\\\ \\u00e9\\U0001F600\"\n"
		    "dump_folder = 'C:\\out'\n"
		    "[training]\n"
		    "steps = 1_000\n"
		    "seq_len = 0x80\n"
		    "local_batch_size = 0o10\n"
		    "global_batch_size = 0b10000\n"
		    "seed = +42\n"
		    "max_norm = 2.5e-1\n"
		    "shuffle = true\n"
		    "deterministic = false\n"
		    "[optimizer]\n"
		    "lr = 8E-4\n"
		    "eps = 1\n" /* an integer for a float key */
		    "[checkpoint]\n"
		    "exclude_from_loading = [\n"
		    "  \"optimizer\", # one\n"
		    "  'dataloader',\n"
		    "]\n"
		    "[model]\n"
		    "converters = []\n"
		    "tie_word_embeddings = false\n");
	assert_string_equal(c.job.description, "tab\there \"q\" \\ \xC3\xA9\xF0\x9F\x98\x80");
	assert_string_equal(c.job.dump_folder, "C:\\out");
	assert_int_equal(c.training.steps, 1000);
	assert_int_equal(c.training.seq_len, 128);
	assert_int_equal(c.training.local_batch_size, 8);
	assert_int_equal(c.training.global_batch_size, 16);
	assert_int_equal(c.training.seed, 42);
	assert_true(c.training.max_norm == 0.25);
	assert_true(c.training.shuffle);
	assert_true(c.optimizer.lr == 8e-4);
	assert_true(c.optimizer.eps == 1.0);
	assert_int_equal(c.checkpoint.exclude_from_loading.n, 2);
	assert_string_equal(c.checkpoint.exclude_from_loading.items[0], "optimizer");
	assert_string_equal(c.checkpoint.exclude_from_loading.items[1], "dataloader");
	assert_int_equal(c.model.converters.n, 0);
	assert_int_equal(c.model.tie_word_embeddings_e, TITAN_TIE_FALSE);
	titan_config_release(&c);

}

static void test_values_more(void **state)
{
	(void)state;
	struct titan_config c;

	/* multi-line strings: the first newline trimmed, a line-ending
	 * backslash joins, quotes inside; dotted and quoted keys, CRLF,
	 * inline tables, a byte order mark, an empty file */
	load_ok(&c, "\xEF\xBB\xBFtraining.steps = 7\r\n"
		    "validation = { enable = true, freq = 3 }\n"
		    "[job]\r\n"
		    "description = \"\"\"\nline one\n  \\\n   joined \"quoted\" \"\"\"\r\n"
		    "dump_folder = \'\'\'\nraw \\n\'\'\'\n"
		    "[\"optimizer\"]\n"
		    "'lr' = 0.5\n"
		    "[parallelism]\n"
		    "pipeline_parallel_split_points = [\"layers.2\", \"layers.4\"]\n"
		    "[lr_scheduler]\n"
		    "warmup_steps = -0\n"
		    "decay_ratio = 0.0\n");
	assert_string_equal(c.job.description, "line one\n  joined \"quoted\" ");
	assert_string_equal(c.job.dump_folder, "raw \\n");
	assert_int_equal(c.training.steps, 7);
	assert_true(c.validation.enable);
	assert_int_equal(c.validation.freq, 3);
	assert_true(c.optimizer.lr == 0.5);
	assert_int_equal(c.parallelism.pipeline_parallel_split_points.n, 2);
	assert_int_equal(c.lr_scheduler.warmup_steps, 0);
	titan_config_release(&c);

	load_ok(&c, "");
	titan_config_release(&c);
	load_ok(&c, "# only a comment\n\n[training]\n");
	titan_config_release(&c);
}

/* torchtitan's names: mapped, inert with their neutral value, refused */
static void test_torchtitan_names(void **state)
{
	(void)state;
	struct titan_config c;

	load_ok(&c, "[debug]\nseed = 7\ndeterministic = true\n"
		    "deterministic_warn_only = false\n"
		    "[profiler]\nenable_profiling = true\nprofile_freq = 20\n"
		    "[compile]\nenable = false\ncomponents = [\"model\", \"loss\"]\n"
		    "enable_async_tensor_parallel = true\n"
		    "[quantize.linear.float8]\nfilter_fqns = [\"output\"]\n"
		    "enable_fsdp_float8_all_gather = true\n"
		    "[metrics]\nenable_wandb = false\n"
		    "[training]\nmax_context_length = 512\ndataloader.num_workers = 4\n"
		    "[parallelism]\ncontext_parallel_load_balancer = \"headtail\"\n"
		    "expert_parallel_degree = 1\n");
	assert_int_equal(c.training.seed, 7);
	assert_true(c.training.deterministic);
	assert_true(c.profiling.enable_profiling);
	assert_int_equal(c.profiling.profile_freq, 20);
	assert_true(c.parallelism.enable_async_tensor_parallel);
	assert_int_equal(c.training.seq_len, 512);
	titan_config_release(&c);

	expect_error("[debug]\nseed = 7\n[training]\nseed = 3\n",
		     "t.toml:4:8: training.seed: training.seed is set already, as debug.seed at "
		     "line 2");
	expect_error("training.seed = 3\ndebug.seed = 7\n",
		     "t.toml:2:14: debug.seed: training.seed is set already, as training.seed at "
		     "line 1");
	expect_error("[debug]\nseed = 7\n[debug]\n",
		     "t.toml:3:1: [debug]: duplicate table (first at line 1, column 1)");
	expect_error("[debug]\nseed = -1\n",
		     "t.toml:2:8: debug.seed: training.seed: -1 is out of range (minimum 0)");
	expect_error("[metrics]\nenable_wandb = true\n",
		     "t.toml:2:16: metrics.enable_wandb: torchtitan's key has no titan "
		     "counterpart (titan has no Weights & Biases logger; "
		     "metrics.enable_tensorboard and metrics.save_jsonl_file record the same "
		     "metrics); only false is accepted: remove the key");
	expect_error("[compile]\nenable = true\n",
		     "t.toml:2:10: compile.enable: torchtitan's key has no titan counterpart "
		     "(titan has no torch.compile: its C and CUDA kernels are compiled "
		     "already); only false is accepted: remove the key");
	expect_error("[parallelism]\ncontext_parallel_load_balancer = \"ptrr\"\n",
		     "t.toml:2:34: parallelism.context_parallel_load_balancer: torchtitan's "
		     "key has no titan counterpart (titan's context parallelism balances the "
		     "causal mask head-tail only); only \"headtail\" is accepted: remove the key");
	expect_error("[parallelism]\nexpert_parallel_comm_backend = \"deepep\"\n"
		     "pipeline_parallel_expert_parallel_overlap = true\n"
		     "expert_parallel_degree = 0\n",
		     "t.toml:4:26: parallelism.expert_parallel_degree: 0 is out of range "
		     "(minimum 1)");
	expect_error("[parallelism]\nmodule_fqns_per_model_part = [[\"layers.0\"], "
		     "[\"layers.1\"]]\n",
		     "t.toml:2:30: parallelism.module_fqns_per_model_part: torchtitan's key has "
		     "no titan counterpart: titan's parallelism.pipeline_parallel_split_points "
		     "names the first layer of each stage after the first ([\"layers.4\"]); or "
		     "set parallelism.pipeline_parallel_layers_per_stage");
	expect_error("[training]\nnum_tokens_per_train_step = 65536\n",
		     "t.toml:2:29: training.num_tokens_per_train_step: torchtitan's key has no "
		     "titan counterpart: titan counts sequences: set "
		     "training.global_batch_size to the tokens divided by training.seq_len");
	expect_error("[profiler]\nprofiler_repeat = 2\n",
		     "t.toml:2:19: profiler.profiler_repeat: torchtitan's key has no titan "
		     "counterpart: titan traces profiling.profiler_active steps every "
		     "profiling.profile_freq steps");
	expect_error("[profiler]\nno_such = 2\n",
		     "t.toml:2:11: profiler.no_such: unknown key (torchtitan's [profiler] is "
		     "titan's [profiling], which has no 'no_such')");
	expect_error("[compile]\nmode = 2\n",
		     "t.toml:2:8: compile.mode: unknown key of torchtitan's [compile], which "
		     "titan has no section for (docs/config.md lists the keys it maps)");
	expect_error("[wandb]\nproject = \"x\"\n",
		     "t.toml:2:11: wandb.project: unknown section [wandb]: neither titan nor "
		     "torchtitan has it");
	expect_error("[trainig]\nsteps = 1\n",
		     "t.toml:2:9: trainig.steps: unknown section [trainig] (did you mean "
		     "'training'?): neither titan nor torchtitan has it");
	expect_error("[training]\nstpes = 1\n",
		     "t.toml:2:9: training.stpes: unknown key (did you mean 'training.steps'?)");
	expect_error("steps = 1\n",
		     "t.toml:1:9: steps: a key outside every section (write it under its "
		     "[section])");
}

/* YAML and the command line take titan's names only, and say which */
static void test_names_in_yaml(void **state)
{
	(void)state;
	struct titan_config c;
	const char *y = "debug:\n  seed: 3\n";
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_load_string(&c, y, strlen(y), "t.yaml"), TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), "t.yaml:2:3: debug.seed: torchtitan's name: titan's "
			    "is 'training.seed'");
	y = "training:\n  steps: 2\n  max_context_length: 64\n";
	assert_int_equal(titan_config_load_string(&c, y, strlen(y), "t.yaml"), TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), "t.yaml:3:3: training.max_context_length: "
			    "torchtitan's name: titan's is 'training.seq_len'");
	assert_int_equal(titan_config_set(&c, "profiler.profile_freq", "3", "command line"),
			 TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), "command line: profiler.profile_freq: torchtitan's "
			    "name: titan's is 'profiling.profile_freq'");
	assert_int_equal(titan_config_set(&c, "debug.deterministic", NULL, "command line"),
			 TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), "command line: debug.deterministic: torchtitan's "
			    "name: titan's is 'training.deterministic'");
	/* a torchtitan section with no renamed key: unknown, as before */
	y = "debug:\n  foo: 3\n";
	assert_int_equal(titan_config_load_string(&c, y, strlen(y), "t.yaml"), TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), "t.yaml:1:1: debug: unknown section");
	assert_int_equal(c.training.steps, 10000);
	titan_config_release(&c);
}

/* type mismatches and values out of the schema */
static void test_value_errors(void **state)
{
	(void)state;
	expect_error("[training]\nsteps = \"10\"\n",
		     "t.toml:2:9: training.steps: expected an integer, got the string \"10\" "
		     "(TOML values of this key are not quoted)");
	expect_error("[training]\nsteps = 1.5\n",
		     "t.toml:2:9: training.steps: expected an integer, got a float 1.5");
	expect_error("[training]\nshuffle = 1\n",
		     "t.toml:2:11: training.shuffle: expected a boolean (true/false), got an "
		     "integer 1");
	expect_error("[training]\nsteps = [1]\n",
		     "t.toml:2:9: training.steps: expected an integer, got an array");
	expect_error("[training]\nsteps = { a = 1 }\n",
		     "t.toml:2:9: training.steps: expected an integer, got an inline table");
	expect_error("[training]\nseq_len = 0\n",
		     "t.toml:2:11: training.seq_len: 0 is out of range (minimum 1)");
	expect_error("[optimizer]\nlr = inf\n",
		     "t.toml:2:6: optimizer.lr: inf is not a finite number");
	expect_error("[optimizer]\nlr = -nan\n",
		     "t.toml:2:6: optimizer.lr: -nan is not a finite number");
	expect_error("[checkpoint]\nasync_mode = \"async_with_pinned_mem\"\n",
		     "t.toml:2:14: checkpoint.async_mode: 'async_with_pinned_mem' is not one "
		     "of disabled, async");
	expect_error("[model]\nconverters = [\"float8\", 1]\n",
		     "t.toml:2:25: model.converters: list items must be strings, got an integer");
	expect_error("[training.steps]\n",
		     "t.toml:1:1: [training.steps]: a key of section [training], not a table: "
		     "write 'steps = ...' under [training] (an integer)");
	expect_error("[training]\nsteps.x = 1\n",
		     "t.toml:2:11: training.steps: expected an integer, got a table "
		     "(training.steps.x)");
	expect_error("[training]\nsteps = 99999999999999999999\n",
		     "t.toml:2:9: '99999999999999999999' is out of range for a 64-bit integer");
	expect_error("[training]\nsteps = 0xffffffffffffffff\n",
		     "t.toml:2:9: '0xffffffffffffffff' is out of range for a 64-bit integer");
}

/* the syntax: every construct outside the subset, and malformed input */
static void test_syntax_errors(void **state)
{
	(void)state;
	expect_error("[training]\nsteps = 1\nsteps = 2\n",
		     "t.toml:3:1: training.steps: duplicate key (first at line 2, column 1)");
	expect_error("[training]\n[job]\n[training]\n",
		     "t.toml:3:1: [training]: duplicate table (first at line 1, column 1)");
	expect_error("[training]\nsteps = 1\n[training.steps.x]\n",
		     "t.toml:3:1: training.steps.x: 'training.steps' is a value (line 2, "
		     "column 1), not a table");
	expect_error("[training.dataloader]\nnum_workers = 1\n[training]\n"
		     "dataloader = 2\n",
		     "t.toml:4:1: training.dataloader: already a table (line 1, column 1), "
		     "not a value");
	expect_error("[[training]]\n",
		     "t.toml:1:1: arrays of tables ([[...]]) are not part of a job config");
	expect_error("[model]\nconverters = [{ a = 1 }]\n",
		     "t.toml:2:15: an array of tables is not part of a job config");
	expect_error("[job]\ndescription = 1979-05-27\n",
		     "t.toml:2:15: '1979-05-27': dates and times are not part of a job config");
	expect_error("[job]\ndescription = 07:32:00\n",
		     "t.toml:2:15: '07:32:00': dates and times are not part of a job config");
	expect_error("[job]\ndescription = hello\n",
		     "t.toml:2:15: 'hello' is not a TOML value (strings are quoted)");
	expect_error("[training]\nsteps = 010\n",
		     "t.toml:2:9: '010': leading zeros are not allowed");
	expect_error("[training]\nsteps = 1__0\n",
		     "t.toml:2:9: '1__0' is not a TOML value (strings are quoted)");
	expect_error("[training]\nsteps = -0x10\n",
		     "t.toml:2:9: '-0x10': a sign is not allowed before 0x");
	expect_error("[training]\nsteps = 0x\n",
		     "t.toml:2:9: '0x' is not a base-16 integer");
	expect_error("[optimizer]\nlr = 1.\n",
		     "t.toml:2:6: '1.': a '.' needs digits on both sides");
	expect_error("[optimizer]\nlr = 1e\n",
		     "t.toml:2:6: '1e': the exponent needs digits");
	expect_error("[job]\ndescription = \"abc\n",
		     "t.toml:2:19: newline in a one-line string");
	expect_error("[job]\ndescription = \"abc",
		     "t.toml:2:15: unterminated string");
	expect_error("[job]\ndescription = \"\"\"abc\"\"",
		     "t.toml:2:15: unterminated string");
	expect_error("[job]\ndescription = \"a\\qb\"\n",
		     "t.toml:2:17: unknown escape \\'q' in a string");
	expect_error("[job]\ndescription = \"\\u12\"\n",
		     "t.toml:2:16: \\u takes 4 hexadecimal digits");
	expect_error("[job]\ndescription = \"\\uD800\"\n",
		     "t.toml:2:16: \\uD800 is not a Unicode scalar value");
	expect_error("[job]\ndescription = \"\\u0000\"\n",
		     "t.toml:2:16: \\u0000: a NUL character cannot be in a value");
	expect_error("[job]\ndescription = \"a\x01\"\n",
		     "t.toml:2:17: control character \\x01 in a string (write it as an escape)");
	expect_error("# \x7f\n",
		     "t.toml:1:3: control character \\x7F in a comment");
	expect_error("[job]\ndescription = \"\xff\"\n", "t.toml:2: not UTF-8 text");
	expect_error_n("[job]\n\0", 7, "t.toml:2:1: NUL byte: not a TOML file");
	expect_error("[training]\nsteps = 1 2\n",
		     "t.toml:2:11: expected the end of the line after the value, got '2'");
	expect_error("[training] x\n",
		     "t.toml:1:12: expected the end of the line after the table name, got 'x'");
	expect_error("[training\n",
		     "t.toml:1:10: expected ']' after the table name, got the end of the line");
	expect_error("[training]\nsteps 1\n",
		     "t.toml:2:7: training.steps: expected '=' after the key, got '1'");
	expect_error("[training]\nsteps =\n",
		     "t.toml:2:8: expected a value, got the end of the line");
	expect_error("[training]\n= 1\n", "t.toml:2:1: expected a key, got '='");
	expect_error("[\"a.b\"]\n",
		     "t.toml:1:2: the quoted key 'a.b' is dotted: no key of a job config is");
	expect_error("[\"\"]\n",
		     "t.toml:1:2: the quoted key '' is empty: no key of a job config is");
	expect_error("[model]\nconverters = [\"a\" \"b\"]\n",
		     "t.toml:2:19: expected ',' or ']' in an array, got '\"'");
	expect_error("training = { steps = 1\n",
		     "t.toml:1:23: expected ',' or '}' in an inline table, got the end of the line");
	expect_error("[job]\ndescription = \"\"\"\"\"\"\"\"\"\n",
		     "t.toml:2:18: too many quotes closing a multi-line string");

	/* nesting and size limits */
	char deep[64];
	snprintf(deep, sizeof deep, "[model]\nconverters = %s\n", "[[[[[[[[[[[[[[[[[[");
	expect_error(deep, "t.toml:2:30: nested deeper than 16 levels: not a job config");
	char *many = malloc(5000 * 16);
	assert_non_null(many);
	size_t n = 0;
	for (int i = 0; i < 4100; i++)
		n += (size_t)sprintf(many + n, "[t%d]\n", i);
	expect_error(many, "t.toml:4097:1: more than 4096 keys: not a job config");
	free(many);
}

/* A failed load leaves the config as it was, even after keys were set. */
static void test_atomic(void **state)
{
	(void)state;
	struct titan_config c, d;
	load_ok(&c, "[training]\nsteps = 5\n");
	assert_int_equal(titan_config_copy(&d, &c), 0);
	const char *bad = "[training]\nsteps = 9\nseq_len = 0\n";
	assert_int_equal(titan_config_load_toml_string(&c, bad, strlen(bad), "t.toml"),
			 TITAN_E_INVALID);
	assert_null(titan_config_diff(&c, &d));
	assert_int_equal(c.training.steps, 5);
	titan_config_release(&c);
	titan_config_release(&d);
}

/* torchtitan's llama3 job files load and give their values; the .toml name
 * picks the reader, and --from forces it */
static void test_torchtitan_files(void **state)
{
	(void)state;
	struct titan_config c;
	char p[1024];

	assert_int_equal(titan_config_init(&c), 0);
	int rc = titan_config_load_file(&c, path_of(p, sizeof p,
						    "tests/data/torchtitan/debug_model.toml"));
	if (rc)
		print_error("%s\n", titan_errmsg());
	assert_int_equal(rc, 0);
	assert_string_equal(c.job.description, "Llama 3 debug training");
	assert_int_equal(c.model.flavor_e, TITAN_FLAVOR_DEBUGMODEL);
	assert_string_equal(c.model.hf_assets_path, "./tests/assets/tokenizer");
	assert_true(c.optimizer.lr == 8e-4);
	assert_int_equal(c.lr_scheduler.warmup_steps, 2);
	assert_true(c.lr_scheduler.decay_ratio == 0.8);
	assert_int_equal(c.training.local_batch_size, 8);
	assert_int_equal(c.training.seq_len, 2048);
	assert_int_equal(c.training.steps, 10);
	assert_int_equal(c.metrics.log_freq, 1);
	assert_int_equal(c.parallelism.pipeline_parallel_schedule_e,
			 TITAN_SCHEDULE_INTERLEAVED_1F1B);
	assert_int_equal(c.checkpoint.interval, 10);
	assert_false(c.checkpoint.last_save_model_only);
	assert_int_equal(c.activation_checkpoint.mode_e, TITAN_ACT_CKPT_SELECTIVE);
	assert_string_equal(c.activation_checkpoint.selective_ac_option, "2");
	assert_int_equal(c.validation.freq, 5);
	assert_int_equal(c.validation.steps, 10);
	assert_int_equal(titan_config_validate(&c), 0);
	titan_config_release(&c);

	assert_int_equal(titan_config_init(&c), 0);
	rc = titan_config_load_file(&c, path_of(p, sizeof p,
						"tests/data/torchtitan/llama3_8b.toml"));
	if (rc)
		print_error("%s\n", titan_errmsg());
	assert_int_equal(rc, 0);
	assert_int_equal(c.model.flavor_e, TITAN_FLAVOR_8B);
	assert_true(c.optimizer.lr == 3e-4);
	assert_int_equal(c.training.seq_len, 8192);
	assert_int_equal(c.training.local_batch_size, 1);
	assert_int_equal(c.training.steps, 1000);
	assert_string_equal(c.training.dataset, "c4");
	assert_string_equal(c.activation_checkpoint.selective_ac_option, "op");
	assert_true(c.metrics.enable_tensorboard);
	assert_true(c.profiling.enable_profiling);
	assert_int_equal(c.profiling.profile_freq, 100);
	assert_true(c.checkpoint.last_save_model_only);
	titan_config_release(&c);

	/* the same text as YAML is refused by the YAML reader */
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_load_file_format(
				 &c, path_of(p, sizeof p, "tests/data/torchtitan/debug_model.toml"),
				 TITAN_CONFIG_YAML),
			 TITAN_E_INVALID);
	assert_int_equal(titan_config_load_file_format(
				 &c, path_of(p, sizeof p, "tests/data/torchtitan/debug_model.toml"),
				 TITAN_CONFIG_TOML),
			 0);
	assert_int_equal(c.training.steps, 10);
	titan_config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_values_more),
		cmocka_unit_test(test_torchtitan_names),
		cmocka_unit_test(test_names_in_yaml),
		cmocka_unit_test(test_value_errors),
		cmocka_unit_test(test_syntax_errors),
		cmocka_unit_test(test_atomic),
		cmocka_unit_test(test_torchtitan_files),
	};
	return cmocka_run_group_tests_name("toml", tests, NULL, NULL);
}
