/*
 * lib/config/toml.c — reading torchtitan's TOML job files
 * (torchtitan/models/llama3/train_configs/NAME.toml) over a titan_config:
 * titan_config_load_toml_string, and titan_config_load_file for a name
 * ending in ".toml".
 *
 * Why our own reader: titan's dependencies are Debian packages (docs/build.md),
 * and Debian 12 packages no C TOML library (tomlc99 and tomlc17 are not
 * packaged; libtoml11-dev and libcpptoml-dev are C++ header libraries).  A job
 * file uses a small part of TOML, so this reader takes that part and says so
 * for the rest, like parse.c does for YAML:
 *
 *   accepted: comments; [section] and dotted [a.b] tables; key = value with
 *   bare, quoted and dotted keys; basic and literal strings, one-line and
 *   multi-line, with TOML's escapes (\uXXXX and \UXXXXXXXX included);
 *   integers (sign, '_' between digits, 0x / 0o / 0b); floats (fraction,
 *   exponent, inf and nan, which no key takes); true / false; arrays,
 *   multi-line, with comments and a trailing comma, nested; inline tables.
 *
 *   refused, naming FILE:LINE:COL: dates and times, arrays of tables
 *   ([[x]]), a key defined twice or a table header repeated, a value where
 *   a table was defined (and the reverse), a quoted key holding a '.',
 *   control characters, text that is not UTF-8, nesting deeper than 16.
 *
 * Every value then goes through the same schema as YAML (cfg_set_scalar,
 * cfg_set_list), with its "FILE:LINE:COL" as origin, after torchtitan's
 * names are translated (struct tt_name below): a key titan names
 * differently is mapped (debug.seed -> training.seed), a torchtitan key
 * with no counterpart is accepted only with the value that asks for
 * nothing titan lacks (metrics.enable_wandb = false, compile.enable =
 * false) and otherwise refused naming what titan has instead.  A TOML
 * value must have the key's type: 10 for an integer, "10" is a string.
 * A load is all or nothing: on error the config is unchanged.
 */
#include "config_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define TOML_MAX_DEPTH 16   /* arrays and inline tables */
#define TOML_MAX_KEYS 4096  /* a job file has about 60 */
#define TOML_NAME_MAX 256   /* a dotted key, as "a.b.c" */

/* ------------------------------------------------------ torchtitan names */

enum tt_kind {
	TT_MAP,    /* the same setting under titan's name `to` */
	TT_INERT,  /* no counterpart: accepted when the value is `to` (NULL: any) */
	TT_REFUSE, /* no counterpart for any value */
};

/* torchtitan's keys (job_config.py at 238fa9953, the TOML era, and the
 * names of HEAD that differ) that are not titan's.  `name` ending in ".*"
 * matches every key under it; the first match wins. */
struct tt_name {
	const char *name;
	enum tt_kind kind;
	const char *to;
	const char *why; /* what titan does instead */
};

#define NO_MOE "titan's expert parallelism runs its all-to-alls over the communicator " \
	       "(no DeepEP, no overlap with the pipeline)"
#define LOADER "titan's loader reads memory-mapped shards in the training process, " \
	       "with no worker processes"
#define QUANT "it configures a float8/MX converter, enabled only by model.converters " \
	      "(which titan-train refuses on the CPU; titan-estimate models float8)"

static const struct tt_name tt_names[] = {
	/* renamed */
	{ "debug.seed", TT_MAP, "training.seed", NULL },
	{ "debug.deterministic", TT_MAP, "training.deterministic", NULL },
	{ "debug.print_config", TT_MAP, "job.print_config", NULL },
	{ "compile.enable_async_tensor_parallel", TT_MAP,
	  "parallelism.enable_async_tensor_parallel", NULL },
	{ "experimental.pipeline_parallel_split_points", TT_MAP,
	  "parallelism.pipeline_parallel_split_points", NULL },
	{ "training.max_context_length", TT_MAP, "training.seq_len", NULL },
	/* HEAD's profiler (torchtitan/tools/profiler.py) is titan's profiling */
	{ "profiler.profiler_repeat", TT_REFUSE, NULL,
	  "titan traces profiling.profiler_active steps every profiling.profile_freq steps" },
	{ "profiler.profiler_skip_first", TT_REFUSE, NULL,
	  "titan's profiler waits profiling.profiler_warmup steps in each window" },
	{ "profiler.profiler_skip_first_wait", TT_REFUSE, NULL,
	  "titan's profiler waits profiling.profiler_warmup steps in each window" },
	{ "profiler.memory_snapshot_freq", TT_REFUSE, NULL,
	  "titan snapshots memory with profiling.enable_memory_snapshot at profiling.profile_freq" },
	{ "profiler.*", TT_MAP, "profiling.*", NULL },
	/* batch size in tokens (HEAD) */
	{ "training.num_tokens_per_train_step", TT_REFUSE, NULL,
	  "titan counts sequences: set training.global_batch_size to the tokens divided "
	  "by training.seq_len" },
	{ "training.num_tokens_per_microbatch_per_dp_rank", TT_REFUSE, NULL,
	  "titan counts sequences: set training.local_batch_size to the tokens divided "
	  "by training.seq_len" },
	{ "parallelism.num_pp_microbatches", TT_REFUSE, NULL,
	  "set parallelism.pipeline_parallel_microbatch_size (training.local_batch_size "
	  "divided by the microbatches)" },
	/* pipeline splits */
	{ "parallelism.module_fqns_per_model_part", TT_REFUSE, NULL,
	  "titan's parallelism.pipeline_parallel_split_points names the first layer of "
	  "each stage after the first ([\"layers.4\"]); or set "
	  "parallelism.pipeline_parallel_layers_per_stage" },
	{ "parallelism.pipeline_parallel_first_stage_less_layers", TT_REFUSE, NULL,
	  "titan splits layers by parallelism.pipeline_parallel_split_points or "
	  "parallelism.pipeline_parallel_layers_per_stage" },
	{ "parallelism.pipeline_parallel_last_stage_less_layers", TT_REFUSE, NULL,
	  "titan splits layers by parallelism.pipeline_parallel_split_points or "
	  "parallelism.pipeline_parallel_layers_per_stage" },
	{ "parallelism.pipeline_parallel_schedule_csv", TT_INERT, "",
	  "titan runs its built-in schedules (parallelism.pipeline_parallel_schedule)" },
	{ "parallelism.pipeline_parallel_expert_parallel_overlap", TT_INERT, NULL, NO_MOE },
	{ "parallelism.context_parallel_load_balancer", TT_INERT, "headtail",
	  "titan's context parallelism balances the causal mask head-tail only" },
	{ "parallelism.expert_parallel_comm_backend", TT_INERT, NULL, NO_MOE },
	/* features titan does not have */
	{ "job.config_file", TT_REFUSE, NULL, "give the file with --config" },
	{ "job.save_config_file", TT_REFUSE, NULL,
	  "'titan-config --config FILE -o OUT.yaml' writes the resolved config" },
	{ "job.custom_config_module", TT_INERT, "", "titan loads no Python modules" },
	{ "metrics.enable_wandb", TT_INERT, "false",
	  "titan has no Weights & Biases logger; metrics.enable_tensorboard and "
	  "metrics.save_jsonl_file record the same metrics" },
	{ "model.print_after_conversion", TT_INERT, "false",
	  "titan converts no modules of the model" },
	{ "training.gc_debug", TT_INERT, "false", "titan has no garbage collector to debug" },
	{ "training.dataloader.*", TT_INERT, NULL, LOADER },
	{ "validation.dataloader.*", TT_INERT, NULL, LOADER },
	{ "checkpoint.enable_ft_dataloader_checkpoints", TT_INERT, NULL,
	  "titan has no torchft fault tolerance" },
	{ "checkpoint.initial_load_in_hf_quantized", TT_INERT, "false",
	  "titan reads Hugging Face weights in float formats only" },
	{ "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", TT_INERT,
	  NULL, NO_MOE },
	{ "activation_checkpoint.early_stop", TT_INERT, "false",
	  "titan's recomputation always runs whole blocks" },
	{ "activation_checkpoint.memory_budget", TT_INERT, NULL,
	  "titan has no memory_budget mode (activation_checkpoint.mode: none, "
	  "selective, full)" },
	{ "activation_checkpoint.visualize_memory_budget_pareto", TT_INERT, "false",
	  "titan has no memory_budget mode" },
	{ "activation_checkpoint.determinism_check", TT_INERT, "default",
	  "titan's recomputation is deterministic" },
	{ "activation_checkpoint.debug", TT_INERT, "false",
	  "titan has no checkpoint debug mode" },
	{ "compile.enable", TT_INERT, "false",
	  "titan has no torch.compile: its C and CUDA kernels are compiled already" },
	{ "compile.components", TT_INERT, NULL, "titan has no torch.compile" },
	{ "compile.backend", TT_INERT, NULL, "titan has no torch.compile" },
	{ "quantize.*", TT_INERT, NULL, QUANT },
	{ "float8.*", TT_REFUSE, NULL,
	  "torchtitan's 2024 [float8] section: titan has model.converters = [\"float8\"] "
	  "(refused by titan-train on the CPU)" },
	{ "comm.save_traces_file_prefix", TT_INERT, "rank_",
	  "titan names flight-recorder traces rank_N" },
	{ "comm.mode", TT_INERT, "default", "titan runs real collectives only" },
	{ "memory_estimation.enable", TT_INERT, "false",
	  "titan-estimate estimates the memory of a job config" },
	{ "memory_estimation.disable_fake_mode", TT_INERT, NULL,
	  "titan-estimate estimates the memory of a job config" },
	{ "fault_tolerance.enable", TT_INERT, "false", "titan has no torchft fault tolerance" },
	{ "fault_tolerance.*", TT_INERT, NULL, "titan has no torchft fault tolerance" },
	{ "experimental.custom_import", TT_INERT, "", "titan loads no Python modules" },
	{ "experimental.custom_args_module", TT_INERT, "", "titan loads no Python modules" },
	{ "debug.deterministic_warn_only", TT_INERT, "false",
	  "titan's training.deterministic has no warn-only mode" },
	{ "debug.moe_force_load_balance", TT_INERT, "false", NO_MOE },
};

static const struct tt_name *tt_find(const char *name)
{
	for (size_t i = 0; i < sizeof tt_names / sizeof *tt_names; i++) {
		const char *n = tt_names[i].name;
		size_t len = strlen(n);
		if (len > 2 && !strcmp(n + len - 2, ".*")) {
			if (!strncmp(name, n, len - 1))
				return &tt_names[i];
		} else if (!strcmp(name, n)) {
			return &tt_names[i];
		}
	}
	return NULL;
}

/* titan's key for a TT_MAP entry `t` matching `name`, in buf */
static const char *mapped_name(const struct tt_name *t, const char *name, char *buf, size_t n)
{
	size_t len = strlen(t->to);
	if (len > 2 && !strcmp(t->to + len - 2, ".*")) /* section renamed */
		snprintf(buf, n, "%.*s%s", (int)(len - 1), t->to, name + strlen(t->name) - 1);
	else
		snprintf(buf, n, "%s", t->to);
	return buf;
}

const char *cfg_titan_name_of(const char *name, char *buf, size_t n)
{
	const struct tt_name *t = tt_find(name);
	if (!t || t->kind != TT_MAP || !titan_config_find(mapped_name(t, name, buf, n)))
		return NULL;
	return buf;
}

/* ------------------------------------------------------------- values */

enum tv_type { TV_STRING, TV_INT, TV_FLOAT, TV_BOOL, TV_ARRAY };

struct tval {
	enum tv_type type;
	char *text;          /* STRING: the string; else the value as text */
	struct tval *items;  /* ARRAY */
	size_t n;
	size_t line, col;
};

static void tval_free(struct tval *v)
{
	for (size_t i = 0; i < v->n; i++)
		tval_free(&v->items[i]);
	free(v->items);
	free(v->text);
	memset(v, 0, sizeof *v);
}

static const char *tv_kind(const struct tval *v)
{
	static const char *const names[] = { "a string", "an integer", "a float",
					     "a boolean", "an array" };
	return names[v->type];
}

/* ------------------------------------------------------------- parser */

struct def {
	char *name;
	bool table; /* a [table] header (else a value or an inline table) */
	size_t line, col;
	char *from; /* "\x01titan.name" entries: the torchtitan name that set it */
};

struct tparse {
	const char *name;       /* the file, for messages */
	const char *s, *p, *end;
	const char *line_start;
	size_t line;
	char table[TOML_NAME_MAX]; /* the current [table] ("" at the top) */
	struct def *defs;
	size_t ndefs;
	struct titan_config *c;
};

static size_t col_of(const struct tparse *P, const char *at)
{
	size_t col = 1;
	for (const char *q = P->line_start; q < at; q++)
		col += ((unsigned char)*q & 0xC0) != 0x80;
	return col;
}

TITAN_PRINTF(3, 4)
static int perr(const struct tparse *P, const char *at, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return titan_error(TITAN_E_INVALID, "%s:%zu:%zu: %s", P->name, P->line,
			   col_of(P, at), why);
}

/* The character at p as text for a message. */
static const char *show_char(char *buf, size_t n, const struct tparse *P)
{
	if (P->p >= P->end)
		return "the end of the file";
	if (*P->p == '\n' || *P->p == '\r')
		return "the end of the line";
	unsigned char ch = (unsigned char)*P->p;
	if (ch < 0x20 || ch == 0x7F || ch >= 0x80)
		snprintf(buf, n, "byte \\x%02X", ch);
	else
		snprintf(buf, n, "'%c'", ch);
	return buf;
}

static void skip_ws(struct tparse *P)
{
	while (P->p < P->end && (*P->p == ' ' || *P->p == '\t'))
		P->p++;
}

/* Consume `ch` when it is next. */
static bool eat(struct tparse *P, char ch)
{
	if (P->p >= P->end || *P->p != ch)
		return false;
	P->p++;
	return true;
}

static bool at_newline(const struct tparse *P)
{
	return P->p < P->end && (*P->p == '\n' ||
				 (*P->p == '\r' && P->p + 1 < P->end && P->p[1] == '\n'));
}

static void newline(struct tparse *P)
{
	P->p += *P->p == '\r' ? 2 : 1;
	P->line++;
	P->line_start = P->p;
}

/* A comment to the end of the line (the newline not consumed). */
static int skip_comment(struct tparse *P)
{
	if (P->p >= P->end || *P->p != '#')
		return 0;
	for (P->p++; P->p < P->end && !at_newline(P); P->p++) {
		unsigned char ch = (unsigned char)*P->p;
		if ((ch < 0x20 && ch != '\t') || ch == 0x7F)
			return perr(P, P->p, "control character \\x%02X in a comment", ch);
	}
	return 0;
}

/* Blanks, an optional comment, then the end of the line or the file. */
static int end_of_line(struct tparse *P, const char *after)
{
	char b[32];
	skip_ws(P);
	int rc = skip_comment(P);
	if (rc < 0)
		return rc;
	if (P->p >= P->end)
		return 0;
	if (!at_newline(P))
		return perr(P, P->p, "expected the end of the line after %s, got %s", after,
			    show_char(b, sizeof b, P));
	newline(P);
	return 0;
}

/* Blanks, comments and newlines (inside an array). */
static int skip_space(struct tparse *P)
{
	for (;;) {
		skip_ws(P);
		int rc = skip_comment(P);
		if (rc < 0)
			return rc;
		if (!at_newline(P))
			return 0;
		newline(P);
	}
}

/* A growable string. */
struct sbuf {
	char *s;
	size_t n, cap;
};

static int sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *ns = realloc(b->s, cap);
		if (!ns)
			return titan_error(TITAN_E_NOMEM, "out of memory reading TOML");
		b->s = ns;
		b->cap = cap;
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = '\0';
	return 0;
}

static int sb_utf8(struct sbuf *b, uint32_t cp)
{
	char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | cp >> 12);
		u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | cp >> 18);
		u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
		u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	return sb_put(b, u, n);
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* A string at p ('"', '\'', '"""' or '''').  `multi_ok`: keys take
 * one-line strings only. */
static int parse_string(struct tparse *P, struct sbuf *out, bool multi_ok)
{
	const char q = *P->p;
	const char *open = P->p;
	const bool literal = q == '\'';
	bool multi = false;
	int rc;

	if (P->end - P->p >= 3 && P->p[1] == q && P->p[2] == q) {
		if (!multi_ok)
			return perr(P, open, "a key cannot be a multi-line string");
		multi = true;
		P->p += 3;
		if (at_newline(P)) /* a newline right after the opening is trimmed */
			newline(P);
	} else {
		P->p++;
	}
	if ((rc = sb_put(out, "", 0)) < 0)
		return rc;
	for (;;) {
		if (P->p >= P->end)
			return perr(P, open, "unterminated string");
		unsigned char ch = (unsigned char)*P->p;
		if (ch == (unsigned char)q) {
			if (!multi) {
				P->p++;
				return 0;
			}
			size_t run = 0;
			while (P->p + run < P->end && P->p[run] == q)
				run++;
			if (run >= 3) {
				if (run > 5)
					return perr(P, P->p, "too many quotes closing a multi-line string");
				if ((rc = sb_put(out, P->p, run - 3)) < 0)
					return rc;
				P->p += run;
				return 0;
			}
			if ((rc = sb_put(out, P->p, run)) < 0)
				return rc;
			P->p += run;
			continue;
		}
		if (at_newline(P)) {
			if (!multi)
				return perr(P, P->p, "newline in a one-line string");
			if ((rc = sb_put(out, "\n", 1)) < 0)
				return rc;
			newline(P);
			continue;
		}
		if ((ch < 0x20 && ch != '\t') || ch == 0x7F)
			return perr(P, P->p, "control character \\x%02X in a string (write it "
				    "as an escape)", ch);
		if (ch != '\\' || literal) {
			if ((rc = sb_put(out, P->p, 1)) < 0)
				return rc;
			P->p++;
			continue;
		}
		/* an escape */
		const char *esc = P->p++;
		if (P->p >= P->end)
			return perr(P, esc, "unterminated string");
		char e = *P->p;
		const char *simple = strchr("btnfr\"\\", e);
		if (e && simple) {
			static const char map[] = "\b\t\n\f\r\"\\";
			if ((rc = sb_put(out, &map[simple - "btnfr\"\\"], 1)) < 0)
				return rc;
			P->p++;
			continue;
		}
		if (e == 'u' || e == 'U') {
			int nd = e == 'u' ? 4 : 8;
			uint32_t cp = 0;
			P->p++;
			for (int i = 0; i < nd; i++) {
				int h = P->p + i < P->end ? hexval(P->p[i]) : -1;
				if (h < 0)
					return perr(P, esc, "\\%c takes %d hexadecimal digits", e, nd);
				cp = cp << 4 | (uint32_t)h;
			}
			if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
				return perr(P, esc, "\\%c%.*s is not a Unicode scalar value", e, nd,
					    P->p);
			if (cp == 0)
				return perr(P, esc, "\\%c%.*s: a NUL character cannot be in a value",
					    e, nd, P->p);
			P->p += nd;
			if ((rc = sb_utf8(out, cp)) < 0)
				return rc;
			continue;
		}
		if (multi) {
			/* a backslash ending a line trims the newlines and blanks after it */
			const char *q2 = P->p;
			while (q2 < P->end && (*q2 == ' ' || *q2 == '\t'))
				q2++;
			P->p = q2;
			if (at_newline(P)) {
				while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || at_newline(P))) {
					if (at_newline(P))
						newline(P);
					else
						P->p++;
				}
				continue;
			}
			P->p = esc + 1;
		}
		char b[32];
		return perr(P, esc, "unknown escape \\%s in a string", show_char(b, sizeof b, P));
	}
}

static bool bare_key_char(char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '-';
}

/* A key, dotted or not, appended to `name` (which holds `prefix` already,
 * "" or ending in '.'). */
static int parse_key(struct tparse *P, char *name, size_t cap)
{
	char b[32];
	for (;;) {
		size_t len = strlen(name);
		const char *start = P->p;
		if (P->p < P->end && (*P->p == '"' || *P->p == '\'')) {
			struct sbuf s = {0};
			int rc = parse_string(P, &s, false);
			if (rc < 0) {
				free(s.s);
				return rc;
			}
			if (!s.n || strchr(s.s, '.')) {
				rc = perr(P, start, "the quoted key '%.60s' is %s: no key of a job "
					  "config is", s.s, s.n ? "dotted" : "empty");
				free(s.s);
				return rc;
			}
			if (len + s.n + 1 >= cap) {
				free(s.s);
				return perr(P, start, "key longer than %d bytes", TOML_NAME_MAX - 1);
			}
			memcpy(name + len, s.s, s.n + 1);
			free(s.s);
		} else {
			while (P->p < P->end && bare_key_char(*P->p))
				P->p++;
			if (P->p == start)
				return perr(P, P->p, "expected a key, got %s",
					    show_char(b, sizeof b, P));
			size_t n = (size_t)(P->p - start);
			if (len + n + 1 >= cap)
				return perr(P, start, "key longer than %d bytes", TOML_NAME_MAX - 1);
			memcpy(name + len, start, n);
			name[len + n] = '\0';
		}
		skip_ws(P);
		if (P->p >= P->end || *P->p != '.')
			return 0;
		P->p++;
		skip_ws(P);
		len = strlen(name);
		if (len + 2 >= cap)
			return perr(P, P->p, "key longer than %d bytes", TOML_NAME_MAX - 1);
		name[len] = '.';
		name[len + 1] = '\0';
	}
}

/* Record `name` as defined at `at`; a duplicate or a clash between a value
 * and a table is an error. */
static int define(struct tparse *P, const char *name, bool table, const char *at)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < P->ndefs; i++) {
		const struct def *d = &P->defs[i];
		size_t dn = strlen(d->name);
		if (!strcmp(d->name, name)) {
			if (table && d->table)
				return perr(P, at, "[%s]: duplicate table (first at line %zu, "
					    "column %zu)", name, d->line, d->col);
			if (table != d->table)
				return perr(P, at, "%s: already a %s (line %zu, column %zu), "
					    "not a %s", name, d->table ? "table" : "value",
					    d->line, d->col, table ? "table" : "value");
			return perr(P, at, "%s: duplicate key (first at line %zu, column %zu)",
				    name, d->line, d->col);
		}
		if (!d->table && dn < n && !strncmp(name, d->name, dn) && name[dn] == '.')
			return perr(P, at, "%s: '%s' is a value (line %zu, column %zu), not a "
				    "table", name, d->name, d->line, d->col);
		if (!table && n < dn && !strncmp(d->name, name, n) && d->name[n] == '.')
			return perr(P, at, "%s: already a table (line %zu, column %zu), not a "
				    "value", name, d->line, d->col);
	}
	if (P->ndefs == TOML_MAX_KEYS)
		return perr(P, at, "more than %d keys: not a job config", TOML_MAX_KEYS);
	if (!(P->ndefs & (P->ndefs + 1))) { /* grow at 0, 1, 3, 7, ... entries */
		struct def *nd = realloc(P->defs, (2 * P->ndefs + 1) * sizeof *nd);
		if (!nd)
			return titan_error(TITAN_E_NOMEM, "out of memory reading TOML");
		P->defs = nd;
	}
	struct def *d = &P->defs[P->ndefs];
	if (!(d->name = titan_strdup(name)))
		return TITAN_E_NOMEM;
	d->table = table;
	d->from = NULL;
	d->line = P->line;
	d->col = col_of(P, at);
	P->ndefs++;
	return 0;
}

/* A number, a boolean or a date at p, as one token. */
static bool digits_ok(const char *s, size_t n, int base)
{
	/* digits of `base` with '_' only between two digits */
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '_') {
			if (i == 0 || i + 1 == n || s[i + 1] == '_')
				return false;
			continue;
		}
		int h = hexval(s[i]);
		if (h < 0 || h >= base)
			return false;
	}
	return true;
}

static int parse_scalar(struct tparse *P, struct tval *v)
{
	const char *start = P->p;
	while (P->p < P->end && (bare_key_char(*P->p) || *P->p == '+' || *P->p == '.' ||
				 *P->p == ':'))
		P->p++;
	size_t n = (size_t)(P->p - start);
	char tok[128], clean[128];
	char b[32];

	if (!n)
		return perr(P, start, "expected a value, got %s", show_char(b, sizeof b, P));
	if (n >= sizeof tok)
		return perr(P, start, "'%.40s...' is not a TOML value", start);
	memcpy(tok, start, n);
	tok[n] = '\0';

	if (!strcmp(tok, "true") || !strcmp(tok, "false")) {
		v->type = TV_BOOL;
		return (v->text = titan_strdup(tok)) ? 0 : TITAN_E_NOMEM;
	}
	const char *t = tok + (*tok == '+' || *tok == '-');
	if (!strcmp(t, "inf") || !strcmp(t, "nan")) {
		v->type = TV_FLOAT;
		return (v->text = titan_strdup(tok)) ? 0 : TITAN_E_NOMEM;
	}
	/* dates and times: 1979-05-27, 07:32:00, 1979-05-27T07:32:00Z */
	if (strchr(tok, ':') || (n >= 10 && tok[4] == '-' && tok[7] == '-') ||
	    (P->p < P->end && *P->p == ' ' && n == 10 && tok[4] == '-'))
		return perr(P, start, "'%s': dates and times are not part of a job config", tok);

	char *out;
	if (t[0] == '0' && (t[1] == 'x' || t[1] == 'o' || t[1] == 'b')) {
		int base = t[1] == 'x' ? 16 : t[1] == 'o' ? 8 : 2;
		if (t != tok)
			return perr(P, start, "'%s': a sign is not allowed before 0%c", tok, t[1]);
		if (!digits_ok(t + 2, strlen(t + 2), base))
			return perr(P, start, "'%s' is not a base-%d integer", tok, base);
		uint64_t u = 0;
		for (const char *q = t + 2; *q; q++) {
			if (*q == '_')
				continue;
			if (u > (UINT64_MAX - (uint64_t)hexval(*q)) / (uint64_t)base ||
			    u * (uint64_t)base + (uint64_t)hexval(*q) > (uint64_t)INT64_MAX)
				return perr(P, start, "'%s' is out of range for a 64-bit integer", tok);
			u = u * (uint64_t)base + (uint64_t)hexval(*q);
		}
		snprintf(clean, sizeof clean, "%" PRIu64, u);
		v->type = TV_INT;
		return (v->text = titan_strdup(clean)) ? 0 : TITAN_E_NOMEM;
	}

	/* decimal: int [frac] [exp] */
	const char *q = t;
	size_t ni = strspn(q, "0123456789_");
	if (!digits_ok(q, ni, 10))
		return perr(P, start, "'%s' is not a TOML value (strings are quoted)", tok);
	if (ni > 1 && q[0] == '0')
		return perr(P, start, "'%s': leading zeros are not allowed", tok);
	q += ni;
	bool is_float = false;
	if (*q == '.') {
		size_t nf = strspn(q + 1, "0123456789_");
		if (!digits_ok(q + 1, nf, 10))
			return perr(P, start, "'%s': a '.' needs digits on both sides", tok);
		q += 1 + nf;
		is_float = true;
	}
	if (*q == 'e' || *q == 'E') {
		const char *e = q + 1 + (q[1] == '+' || q[1] == '-');
		size_t ne = strspn(e, "0123456789_");
		if (!digits_ok(e, ne, 10))
			return perr(P, start, "'%s': the exponent needs digits", tok);
		q = e + ne;
		is_float = true;
	}
	if (*q)
		return perr(P, start, "'%s' is not a TOML value (strings are quoted)", tok);
	size_t j = 0;
	for (const char *r = tok; *r; r++)
		if (*r != '_')
			clean[j++] = *r;
	clean[j] = '\0';
	if (!is_float) {
		int64_t x;
		if (titan_parse_i64(clean, &x) < 0)
			return perr(P, start, "'%s' is out of range for a 64-bit integer", tok);
		snprintf(clean, sizeof clean, "%" PRId64, x);
	}
	v->type = is_float ? TV_FLOAT : TV_INT;
	out = titan_strdup(clean[0] == '+' ? clean + 1 : clean);
	if (!out)
		return TITAN_E_NOMEM;
	v->text = out;
	return 0;
}

static int apply(struct tparse *P, const char *name, const struct tval *v);
static int parse_keyvals_inline(struct tparse *P, const char *prefix, int depth);

static int parse_value(struct tparse *P, struct tval *v, int depth)
{
	int rc;
	v->line = P->line;
	v->col = col_of(P, P->p);
	if (P->p >= P->end)
		return perr(P, P->p, "expected a value, got the end of the file");
	if (*P->p == '"' || *P->p == '\'') {
		struct sbuf s = {0};
		if ((rc = parse_string(P, &s, true)) < 0) {
			free(s.s);
			return rc;
		}
		v->type = TV_STRING;
		v->text = s.s;
		return 0;
	}
	if (*P->p == '[') {
		if (depth >= TOML_MAX_DEPTH)
			return perr(P, P->p, "nested deeper than %d levels: not a job config",
				    TOML_MAX_DEPTH);
		v->type = TV_ARRAY;
		P->p++;
		size_t cap = 0;
		for (;;) {
			if ((rc = skip_space(P)) < 0)
				return rc;
			if (eat(P, ']'))
				return 0;
			if (P->p < P->end && *P->p == '{')
				return perr(P, P->p, "an array of tables is not part of a job config");
			if (v->n == cap) {
				cap = cap ? 2 * cap : 4;
				struct tval *ni = realloc(v->items, cap * sizeof *ni);
				if (!ni)
					return titan_error(TITAN_E_NOMEM, "out of memory reading TOML");
				v->items = ni;
			}
			memset(&v->items[v->n], 0, sizeof *v->items);
			rc = parse_value(P, &v->items[v->n++], depth + 1);
			if (rc < 0)
				return rc;
			if ((rc = skip_space(P)) < 0)
				return rc;
			if (eat(P, ','))
				continue;
			if (eat(P, ']'))
				return 0;
			char b[32];
			return perr(P, P->p, "expected ',' or ']' in an array, got %s",
				    show_char(b, sizeof b, P));
		}
	}
	return parse_scalar(P, v);
}

/* key = value at p, under `prefix` ("" or "a.b."). */
static int parse_keyval(struct tparse *P, const char *prefix, int depth)
{
	char name[TOML_NAME_MAX], b[32];
	const char *at = P->p;
	int rc;

	snprintf(name, sizeof name, "%s", prefix);
	if ((rc = parse_key(P, name, sizeof name)) < 0)
		return rc;
	skip_ws(P);
	if (P->p >= P->end || *P->p != '=')
		return perr(P, P->p, "%s: expected '=' after the key, got %s", name,
			    show_char(b, sizeof b, P));
	P->p++;
	skip_ws(P);
	/* an inline table is a table that cannot be reopened */
	const bool inline_table = P->p < P->end && *P->p == '{';
	if ((rc = define(P, name, inline_table, at)) < 0)
		return rc;
	if (inline_table) {
		if (depth >= TOML_MAX_DEPTH)
			return perr(P, P->p, "nested deeper than %d levels: not a job config",
				    TOML_MAX_DEPTH);
		/* an inline table under a key of titan's: say what it should be */
		const struct titan_config_key *k = titan_config_find(name);
		if (k) {
			char org[512], exp[320];
			snprintf(org, sizeof org, "%s:%zu:%zu", P->name, P->line, col_of(P, P->p));
			return cfg_key_error(TITAN_E_INVALID, org, k, "expected %s, got an "
					     "inline table", cfg_expected(k, exp, sizeof exp));
		}
		char pre[TOML_NAME_MAX + 1];
		snprintf(pre, sizeof pre, "%s.", name);
		return parse_keyvals_inline(P, pre, depth + 1);
	}
	struct tval v = {0};
	rc = parse_value(P, &v, depth);
	if (rc == 0)
		rc = apply(P, name, &v);
	tval_free(&v);
	return rc;
}

static int parse_keyvals_inline(struct tparse *P, const char *prefix, int depth)
{
	char b[32];
	int rc;
	P->p++; /* '{' */
	skip_ws(P);
	if (P->p < P->end && *P->p == '}') {
		P->p++;
		return 0;
	}
	for (;;) {
		skip_ws(P);
		if ((rc = parse_keyval(P, prefix, depth)) < 0)
			return rc;
		skip_ws(P);
		if (eat(P, ','))
			continue;
		if (eat(P, '}'))
			return 0;
		return perr(P, P->p, "expected ',' or '}' in an inline table, got %s",
			    show_char(b, sizeof b, P));
	}
}

static int parse_document(struct tparse *P)
{
	char b[32];
	int rc;
	for (;;) {
		if ((rc = skip_space(P)) < 0)
			return rc;
		if (P->p >= P->end)
			return 0;
		if (*P->p == '[') {
			const char *at = P->p++;
			if (P->p < P->end && *P->p == '[')
				return perr(P, at, "arrays of tables ([[...]]) are not part of a "
					    "job config");
			skip_ws(P);
			P->table[0] = '\0';
			if ((rc = parse_key(P, P->table, sizeof P->table)) < 0)
				return rc;
			if (P->p >= P->end || *P->p != ']')
				return perr(P, P->p, "expected ']' after the table name, got %s",
					    show_char(b, sizeof b, P));
			P->p++;
			if ((rc = define(P, P->table, true, at)) < 0)
				return rc;
			const struct titan_config_key *k = titan_config_find(P->table);
			if (k) {
				char exp[320];
				return titan_error(TITAN_E_INVALID, "%s:%zu:%zu: [%s]: a key of "
						   "section [%s], not a table: write '%s = ...' "
						   "under [%s] (%s)", P->name, P->line,
						   col_of(P, at), P->table, k->section, k->key,
						   k->section, cfg_expected(k, exp, sizeof exp));
			}
			if ((rc = end_of_line(P, "the table name")) < 0)
				return rc;
			continue;
		}
		char pre[TOML_NAME_MAX + 1] = "";
		if (P->table[0])
			snprintf(pre, sizeof pre, "%s.", P->table);
		if ((rc = parse_keyval(P, pre, 0)) < 0)
			return rc;
		if ((rc = end_of_line(P, "the value")) < 0)
			return rc;
	}
}

/* -------------------------------------------------- values into the config */

/* The value's text for a scalar key, checking its TOML type. */
static int check_type(const struct titan_config_key *k, const struct tval *v,
		      const char *org)
{
	char exp[320];
	bool ok;
	switch (k->type) {
	case TITAN_CFG_BOOL: ok = v->type == TV_BOOL; break;
	case TITAN_CFG_INT: ok = v->type == TV_INT; break;
	case TITAN_CFG_FLOAT:
		ok = v->type == TV_INT || v->type == TV_FLOAT;
		if (ok && v->type == TV_FLOAT && !isfinite(strtod(v->text, NULL)))
			return cfg_key_error(TITAN_E_INVALID, org, k,
					     "%s is not a finite number", v->text);
		break;
	case TITAN_CFG_STRING: ok = v->type == TV_STRING || v->type == TV_INT; break;
	case TITAN_CFG_ENUM: ok = v->type == TV_STRING || v->type == TV_BOOL; break;
	default: ok = v->type == TV_STRING; break; /* a list as "a,b" */
	}
	if (ok)
		return 0;
	if (v->type == TV_STRING)
		return cfg_key_error(TITAN_E_INVALID, org, k, "expected %s, got the string "
				     "\"%.60s\" (TOML values of this key are not quoted)",
				     cfg_expected(k, exp, sizeof exp), v->text);
	return cfg_key_error(TITAN_E_INVALID, org, k, "expected %s, got %s%s%s",
			     cfg_expected(k, exp, sizeof exp), tv_kind(v),
			     v->type == TV_ARRAY ? "" : " ", v->type == TV_ARRAY ? "" : v->text);
}

static int set_key(struct tparse *P, const struct titan_config_key *k, const struct tval *v,
		   const char *org)
{
	int rc;
	if (v->type == TV_ARRAY && k->type == TITAN_CFG_STRLIST) {
		const char **items = calloc(v->n ? v->n : 1, sizeof *items);
		if (!items)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		rc = 0;
		for (size_t i = 0; i < v->n && rc == 0; i++) {
			const struct tval *it = &v->items[i];
			if (it->type != TV_STRING)
				rc = titan_error(TITAN_E_INVALID, "%s:%zu:%zu: %s: list items must "
						 "be strings, got %s", P->name, it->line, it->col,
						 cfg_full_name(k), tv_kind(it));
			items[i] = it->text;
		}
		if (rc == 0)
			rc = cfg_set_list(P->c, k, items, v->n, org);
		free(items);
		return rc;
	}
	if ((rc = check_type(k, v, org)) < 0)
		return rc;
	return cfg_set_scalar(P->c, k, v->text, false, org);
}

/* A key that is neither titan's nor in tt_names. */
static int unknown(const char *name, const char *org)
{
	char sug[CFG_NAME_MAX], tail[CFG_NAME_MAX + 40] = "";
	const char *dot = strchr(name, '.');
	size_t seclen = dot ? (size_t)(dot - name) : strlen(name);

	if (!dot)
		return titan_error(TITAN_E_INVALID, "%s: %.120s: a key outside every section "
				   "(write it under its [section])", org, name);
	if (!cfg_is_section(name, seclen)) {
		static const char *const tt_sections[] = {
			"compile", "quantize", "memory_estimation", "fault_tolerance",
			"experimental", "debug", "profiler", "float8",
		};
		char sec[TOML_NAME_MAX];
		snprintf(sec, sizeof sec, "%.*s", (int)seclen, name);
		for (size_t i = 0; i < sizeof tt_sections / sizeof *tt_sections; i++)
			if (!strcmp(sec, tt_sections[i]))
				return titan_error(TITAN_E_INVALID, "%s: %.120s: unknown key of "
						   "torchtitan's [%s], which titan has no section "
						   "for (docs/config.md lists the keys it maps)",
						   org, name, sec);
		const char *s = cfg_suggest_section(sec);
		if (s)
			snprintf(tail, sizeof tail, " (did you mean '%s'?)", s);
		return titan_error(TITAN_E_INVALID, "%s: %.120s: unknown section [%s]%s: "
				   "neither titan nor torchtitan has it", org, name, sec, tail);
	}
	const char *dot2 = strchr(dot + 1, '.');
	if (dot2) {
		char head[TOML_NAME_MAX];
		snprintf(head, sizeof head, "%.*s", (int)(dot2 - name), name);
		const struct titan_config_key *k = titan_config_find(head);
		if (k) {
			char exp[320];
			return cfg_key_error(TITAN_E_INVALID, org, k, "expected %s, got a table "
					     "(%s)", cfg_expected(k, exp, sizeof exp), name);
		}
	}
	if (titan_config_suggest(name, sug, sizeof sug))
		snprintf(tail, sizeof tail, " (did you mean '%s'?)", sug);
	return titan_error(TITAN_E_INVALID, "%s: %.120s: unknown key%s", org, name, tail);
}

/* A key set twice under its two names (debug.seed and training.seed):
 * the renamed one is recorded as "\x01training.seed" when set. */
static const struct def *find_def(const struct tparse *P, const char *name)
{
	for (size_t i = 0; i < P->ndefs; i++)
		if (!strcmp(P->defs[i].name, name))
			return &P->defs[i];
	return NULL;
}

static int set_twice(const struct tparse *P, const char *org, const char *name,
		     const char *titan)
{
	char alias[TOML_NAME_MAX + 24];
	snprintf(alias, sizeof alias, "\x01%s", titan);
	const struct def *d = find_def(P, alias);
	if (!d && strcmp(name, titan))
		d = find_def(P, titan);
	if (!d)
		return 0;
	return titan_error(TITAN_E_INVALID, "%s: %.120s: %s is set already, as %s at line %zu",
			   org, name, titan, d->from ? d->from : titan, d->line);
}

static int apply(struct tparse *P, const char *name, const struct tval *v)
{
	char org[512], mapped[TOML_NAME_MAX + 16];
	const struct titan_config_key *k = titan_config_find(name);

	snprintf(org, sizeof org, "%s:%zu:%zu", P->name, v->line, v->col);
	if (k) {
		int rc = set_twice(P, org, name, name);
		return rc < 0 ? rc : set_key(P, k, v, org);
	}

	const struct tt_name *t = tt_find(name);
	if (!t)
		return unknown(name, org);
	if (t->kind == TT_MAP) {
		size_t n = strlen(t->to);
		if (!(k = titan_config_find(mapped_name(t, name, mapped, sizeof mapped))))
			return titan_error(TITAN_E_INVALID, "%s: %.120s: unknown key (torchtitan's "
					   "[%.*s] is titan's [%.*s], which has no '%s')", org,
					   name, (int)(strlen(t->name) - 2), t->name,
					   (int)(n - 2), t->to, name + strlen(t->name) - 1);
		int rc = set_twice(P, org, name, mapped);
		if (rc < 0)
			return rc;
		/* record the titan name, at the torchtitan key's place */
		char alias[TOML_NAME_MAX + 24];
		snprintf(alias, sizeof alias, "\x01%s", mapped);
		if ((rc = define(P, alias, false, P->p)) < 0)
			return rc;
		if (!(P->defs[P->ndefs - 1].from = titan_strdup(name)))
			return TITAN_E_NOMEM;
		P->defs[P->ndefs - 1].line = v->line;
		/* errors name both: "f.toml:3:8: debug.seed: training.seed: ..." */
		snprintf(org + strlen(org), sizeof org - strlen(org), ": %s", name);
		return set_key(P, k, v, org);
	}
	if (t->kind == TT_INERT) {
		if (!t->to || (v->type != TV_ARRAY && !strcmp(v->text, t->to)))
			return 0;
		/* the accepted value as TOML: false, 1, "" or "headtail" */
		const bool bare = !strcmp(t->to, "false") ||
				  (*t->to && strspn(t->to, "0123456789") == strlen(t->to));
		return titan_error(TITAN_E_INVALID, "%s: %.120s: torchtitan's key has no titan "
				   "counterpart (%s); only %s%s%s is accepted: remove the key",
				   org, name, t->why, bare ? "" : "\"", t->to, bare ? "" : "\"");
	}
	return titan_error(TITAN_E_INVALID, "%s: %.120s: torchtitan's key has no titan "
			   "counterpart: %s", org, name, t->why);
}

/* ------------------------------------------------------------- public */

/* Text of the input: no NUL, valid UTF-8, checked line by line so the
 * error names the line. */
static int check_text(struct tparse *P, char *text, size_t len)
{
	char *line = text;
	size_t ln = 1;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && text[i] == '\0') {
			P->line = ln;
			P->line_start = line;
			return perr(P, text + i, "NUL byte: not a TOML file");
		}
		if (i == len || text[i] == '\n') {
			char save = text[i];
			text[i] = '\0';
			bool ok = cfg_utf8_valid(line);
			text[i] = save;
			if (!ok)
				return titan_error(TITAN_E_INVALID, "%s:%zu: not UTF-8 text", P->name, ln);
			line = text + i + 1;
			ln++;
		}
	}
	return 0;
}

int titan_config_load_toml_string(struct titan_config *c, const char *toml, size_t len,
				  const char *name)
{
	struct titan_config tmp;
	struct tparse P = {0};
	char *text;
	int rc;

	if (!name)
		name = "<string>";
	if (!toml)
		len = 0;
	if (!(text = malloc(len + 1)))
		return titan_error(TITAN_E_NOMEM, "%s: out of memory reading TOML", name);
	if (len)
		memcpy(text, toml, len);
	text[len] = '\0';
	P.name = name;
	P.s = P.p = P.line_start = text;
	P.end = text + len;
	P.line = 1;
	if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) /* a byte order mark */
		P.p = P.line_start = text + 3;
	rc = check_text(&P, text, len);
	if (rc == 0 && (rc = titan_config_copy(&tmp, c)) == 0) {
		P.c = &tmp;
		rc = parse_document(&P);
		if (rc == 0) {
			titan_config_release(c);
			*c = tmp;
		} else {
			titan_config_release(&tmp);
		}
	}
	for (size_t i = 0; i < P.ndefs; i++) {
		free(P.defs[i].name);
		free(P.defs[i].from);
	}
	free(P.defs);
	free(text);
	return rc;
}
