/*
 * lib/config/value.c — typed values of the job configuration: defaults
 * (titan_config_init), release and deep copy, setting one key from text
 * with type, range, enum and UTF-8 checks (titan_config_set), formatting a
 * value as text and comparing two configs.
 */
#include "config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Longest piece of user text quoted back in a message. */
#define SHOW 120

int cfg_key_error(int code, const char *origin, const struct titan_config_key *k,
		  const char *fmt, ...)
{
	char why[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (origin && *origin)
		return titan_error(code, "%s: %s: %s", origin, cfg_full_name(k), why);
	return titan_error(code, "%s: %s", cfg_full_name(k), why);
}

bool cfg_is_null_text(const char *s)
{
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
	       !strcmp(s, "NULL");
}

bool cfg_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "true", "yes", "on" };
	static const char *const no[] = { "false", "no", "off" };
	for (size_t i = 0; i < 3; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return true;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return true;
		}
	}
	return false;
}

bool cfg_utf8_valid(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	while (*s) {
		unsigned c = *s;
		size_t len;
		uint32_t cp;
		if (c < 0x80) {
			s++;
			continue;
		} else if ((c & 0xE0) == 0xC0) {
			len = 2;
			cp = c & 0x1F;
		} else if ((c & 0xF0) == 0xE0) {
			len = 3;
			cp = c & 0x0F;
		} else if ((c & 0xF8) == 0xF0) {
			len = 4;
			cp = c & 0x07;
		} else {
			return false;
		}
		for (size_t i = 1; i < len; i++) {
			if ((s[i] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i] & 0x3F);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
		    (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		s += len;
	}
	return true;
}

const char *cfg_format_float(char *buf, size_t n, double v)
{
	titan_format_double(buf, n, v);
	if (!isfinite(v))
		return buf;
	/* A mantissa without a point gets ".0", so every YAML reader (YAML 1.1
	 * ones too) sees a float: "1.0", "500000.0", "1.0e-08". */
	size_t len = strlen(buf), digits = strspn(buf + (buf[0] == '-'), "0123456789");
	size_t at = digits + (buf[0] == '-');
	if (digits && (buf[at] == '\0' || buf[at] == 'e') && len + 3 <= n) {
		memmove(buf + at + 2, buf + at, len - at + 1);
		memcpy(buf + at, ".0", 2);
	}
	return buf;
}

/* Bound of a range for a message: "1", "0.5". */
static const char *fmt_bound(char *buf, size_t n, const struct titan_config_key *k,
			     double v)
{
	if (k->type == TITAN_CFG_INT)
		snprintf(buf, n, "%.0f", v);
	else
		titan_format_double(buf, n, v);
	return buf;
}

static int check_range(const struct titan_config_key *k, double v, const char *text,
		       const char *origin)
{
	char b[48];
	if (k->min <= k->max) {
		if (v < k->min)
			return cfg_key_error(TITAN_E_INVALID, origin, k,
					     "%.*s is out of range (minimum %s)", SHOW,
					     text, fmt_bound(b, sizeof b, k, k->min));
		if (v > k->max)
			return cfg_key_error(TITAN_E_INVALID, origin, k,
					     "%.*s is out of range (maximum %s)", SHOW,
					     text, fmt_bound(b, sizeof b, k, k->max));
	}
	if ((k->flags & TITAN_CFG_NONZERO) && v == 0) {
		if (k->min < 0)
			return cfg_key_error(TITAN_E_INVALID, origin, k,
					     "%.*s is not allowed (use %s or a value >= 1)",
					     SHOW, text, fmt_bound(b, sizeof b, k, k->min));
		return cfg_key_error(TITAN_E_INVALID, origin, k,
				     "%.*s is not allowed (must be > 0)", SHOW, text);
	}
	return 0;
}

/* Strict decimal integer with an optional sign. */
static int parse_int(const struct titan_config_key *k, const char *text,
		     const char *origin, int64_t *out)
{
	const char *p = text + (*text == '+' || *text == '-');
	if (!*p || strspn(p, "0123456789") != strlen(p))
		return cfg_key_error(TITAN_E_INVALID, origin, k,
				     "expected an integer, got '%.*s'", SHOW, text);
	if (titan_parse_i64(text, out) < 0)
		return cfg_key_error(TITAN_E_INVALID, origin, k,
				     "%.*s is out of range for a 64-bit integer", SHOW, text);
	return check_range(k, (double)*out, text, origin);
}

static int parse_float(const struct titan_config_key *k, const char *text,
		       const char *origin, double *out)
{
	/* A number starts with a sign, a digit or a point (no "inf", "nan",
	 * leading blanks); the core parser checks the rest. */
	const char *p = text + (*text == '+' || *text == '-');
	if (!(isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1]))) ||
	    titan_parse_double(text, out) < 0)
		return cfg_key_error(TITAN_E_INVALID, origin, k,
				     "expected a number, got '%.*s'", SHOW, text);
	if (!isfinite(*out))
		return cfg_key_error(TITAN_E_INVALID, origin, k,
				     "%.*s is out of range for a number", SHOW, text);
	return check_range(k, *out, text, origin);
}

static void strlist_free(struct titan_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

static int strlist_dup(struct titan_strlist *dst, const char *const *items, size_t n)
{
	dst->n = 0;
	dst->items = NULL;
	if (!n)
		return 0;
	dst->items = calloc(n, sizeof *dst->items);
	if (!dst->items)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		dst->items[i] = titan_strdup(items[i]);
		if (!dst->items[i]) {
			dst->n = i;
			strlist_free(dst);
			return TITAN_E_NOMEM;
		}
	}
	dst->n = n;
	return 0;
}

int cfg_set_list(struct titan_config *c, const struct titan_config_key *k,
		 const char *const *items, size_t n, const char *origin)
{
	for (size_t i = 0; i < n; i++) {
		if (!cfg_utf8_valid(items[i]))
			return cfg_key_error(TITAN_E_INVALID, origin, k,
					     "item %zu is not valid UTF-8", i + 1);
		if (!items[i][0])
			return cfg_key_error(TITAN_E_INVALID, origin, k,
					     "item %zu is empty", i + 1);
	}
	struct titan_strlist nl;
	int rc = strlist_dup(&nl, items, n);
	if (rc < 0)
		return rc;
	struct titan_strlist *l = cfg_field(c, k);
	strlist_free(l);
	*l = nl;
	return 0;
}

/* "a, b,c" -> items (blanks around items dropped); "" -> no items. */
static int set_list_text(struct titan_config *c, const struct titan_config_key *k,
			 const char *text, const char *origin)
{
	size_t cap = 1;
	for (const char *p = text; *p; p++)
		cap += *p == ',';
	char *copy = titan_strdup(text);
	char **items = calloc(cap, sizeof *items);
	int rc = TITAN_E_NOMEM;
	if (!copy || !items) {
		if (copy)
			titan_error(TITAN_E_NOMEM, "out of memory");
		goto out;
	}
	size_t n = 0;
	const char *blank = " \t\r\n";
	if (copy[strspn(copy, blank)] != '\0') {
		for (char *p = copy;;) {
			char *end = strchr(p, ',');
			if (end)
				*end = '\0';
			p += strspn(p, blank);
			size_t len = strlen(p);
			while (len && strchr(blank, p[len - 1]))
				p[--len] = '\0';
			if (!len) {
				rc = cfg_key_error(TITAN_E_INVALID, origin, k,
						   "empty item in list '%.*s'", SHOW, text);
				goto out;
			}
			items[n++] = p;
			if (!end)
				break;
			p = end + 1;
		}
	}
	rc = cfg_set_list(c, k, (const char *const *)items, n, origin);
out:
	free(items);
	free(copy);
	return rc;
}

static int set_string(char **field, const char *text)
{
	char *s = titan_strdup(text);
	if (!s)
		return TITAN_E_NOMEM;
	free(*field);
	*field = s;
	return 0;
}

/* What model.name brings besides the architecture: the family's RMSNorm
 * eps, RoPE base and Llama 3.1 RoPE scaling (torchtitan's model args).
 * Choosing a family moves these keys from the previous family's values to
 * the new one's, unless they hold another value (set by the user before
 * model.name); keys set after model.name win as any later setting does. */
static const struct {
	double norm_eps, rope_theta;
	bool rope_scaling;
	double rope_scaling_factor, rope_high_freq_factor;
} families[] = {
	[TITAN_MODEL_NAME_LLAMA3] = {1e-5, 500000.0, true, 8.0, 4.0},
	[TITAN_MODEL_NAME_QWEN3] = {1e-6, 1000000.0, false, 8.0, 4.0},
	[TITAN_MODEL_NAME_DEEPSEEK_V3] = {1e-5, 10000.0, false, 8.0, 4.0}, /* YaRN: model.rope_factor */
	/* torchtitan's llama4 RoPEScalingArgs: factor 16, low = high = 1 */
	[TITAN_MODEL_NAME_LLAMA4] = {1e-5, 500000.0, true, 16.0, 1.0},
};

static void flavor_move(struct titan_config *c, int name_was, int was, int name_now, int now);

static void family_defaults(struct titan_config *c, int was, int now)
{
	flavor_move(c, was, c->model.flavor_e, now, c->model.flavor_e);
	if (was == now || was < 0 || now < 0 || (size_t)was >= sizeof(families) / sizeof(families[0]) ||
	    (size_t)now >= sizeof(families) / sizeof(families[0]))
		return;
	if (c->model.norm_eps == families[was].norm_eps)
		c->model.norm_eps = families[now].norm_eps;
	if (c->model.rope_theta == families[was].rope_theta)
		c->model.rope_theta = families[now].rope_theta;
	if (c->model.rope_scaling == families[was].rope_scaling)
		c->model.rope_scaling = families[now].rope_scaling;
	if (c->model.rope_scaling_factor == families[was].rope_scaling_factor)
		c->model.rope_scaling_factor = families[now].rope_scaling_factor;
	if (c->model.rope_high_freq_factor == families[was].rope_high_freq_factor)
		c->model.rope_high_freq_factor = families[now].rope_high_freq_factor;
}

/* What a MoE flavor brings (torchtitan's qwen3 "debugmodel_moe",
 * "30B-A3B", "235B-A22B": every block MoE, softmax scores with
 * route_norm, no shared experts, the scores on the experts' outputs) into
 * the model.moe_* keys, and 235B-A22B's RoPE base.  As for model.name,
 * choosing a flavor moves each key from the previous flavor's value (the
 * schema default for a dense one) to the new one's unless it holds
 * another value; keys set after model.flavor win. */
static const struct moe_flavor {
	int64_t experts, top_k, inter, shared;
	const char *score_func;
	bool route_norm, before;
	double rope_theta; /* 0: the family's */
	double route_scale;
	int64_t n_dense;
	int64_t step;      /* interleave_moe_layer_step (0: 1) */
	bool no_rope_scaling; /* llama4 17bx128e: no RoPEScalingArgs */
} dense_flavor = {0, 1, -1, 1, "sigmoid", false, true, 0, 1.0, 0, 1, false},
  moe_flavors[] = {
	[TITAN_FLAVOR_DEBUGMODEL_MOE] = {64, 8, 768, 0, "softmax", true, false, 0, 1.0, 0},
	[TITAN_FLAVOR_30B_A3B] = {128, 8, 768, 0, "softmax", true, false, 0, 1.0, 0},
	[TITAN_FLAVOR_235B_A22B] = {128, 8, 1536, 0, "softmax", true, false, 5000000.0, 1.0, 0},
},
/* torchtitan's deepseekv3_configs: the first n_dense_layers blocks dense,
 * shared experts, the scores on the experts' outputs; debugmodel_mla is
 * titan's own (q_lora_rank > 0, DeepSeek-V3's sigmoid routing) */
  dsv3_flavors[] = {
	[TITAN_FLAVOR_DEBUGMODEL] = {8, 3, 256, 2, "softmax", false, false, 0, 1.0, 1},
	[TITAN_FLAVOR_DEBUGMODEL_MLA] = {8, 2, 64, 1, "sigmoid", true, false, 0, 2.5, 1},
	[TITAN_FLAVOR_16B] = {64, 6, 1408, 2, "softmax", false, false, 0, 1.0, 1},
	[TITAN_FLAVOR_236B] = {160, 6, 1536, 2, "softmax", false, false, 0, 16.0, 1},
	[TITAN_FLAVOR_671B] = {256, 8, 2048, 1, "sigmoid", true, false, 0, 2.5, 3},
},
/* torchtitan's llama4_args (models/llama4/__init__.py): MoEArgs' defaults
 * (top-1 sigmoid, one shared expert, the score on the expert's input),
 * MoE every interleave_moe_layer_step blocks (2 unless the flavor says
 * 1); the expert hidden size auto-scaled from the dense one (-1, lib/model) */
  llama4_flavors[] = {
	[TITAN_FLAVOR_DEBUGMODEL] = {8, 1, -1, 1, "sigmoid", false, true, 0, 1.0, 0, 2, false},
	[TITAN_FLAVOR_17BX16E] = {16, 1, -1, 1, "sigmoid", false, true, 0, 1.0, 0, 1, false},
	[TITAN_FLAVOR_17BX128E] = {128, 1, -1, 1, "sigmoid", false, true, 0, 1.0, 0, 2, true},
};

static const struct moe_flavor *moe_flavor(int name, int f)
{
	const struct moe_flavor *t = moe_flavors;
	size_t n = sizeof(moe_flavors) / sizeof(moe_flavors[0]);

	if (name == TITAN_MODEL_NAME_DEEPSEEK_V3) {
		t = dsv3_flavors;
		n = sizeof(dsv3_flavors) / sizeof(dsv3_flavors[0]);
	} else if (name == TITAN_MODEL_NAME_LLAMA4) {
		t = llama4_flavors;
		n = sizeof(llama4_flavors) / sizeof(llama4_flavors[0]);
	}
	if (f < 0 || (size_t)f >= n || !t[f].experts)
		return &dense_flavor;
	return &t[f];
}

static double family_theta(int name)
{
	return name >= 0 && (size_t)name < sizeof(families) / sizeof(families[0]) ?
	       families[name].rope_theta : 0;
}

/* (model.name, model.flavor) moved from (name_was, was) to (name_now, now) */
static void flavor_move(struct titan_config *c, int name_was, int was, int name_now, int now)
{
	const struct moe_flavor *a = moe_flavor(name_was, was), *b = moe_flavor(name_now, now);
	const double fa = family_theta(name_was), fb = family_theta(name_now);

	if (a == b)
		return;
	if (c->model.moe_num_experts == a->experts)
		c->model.moe_num_experts = b->experts;
	if (c->model.moe_top_k == a->top_k)
		c->model.moe_top_k = b->top_k;
	if (c->model.moe_inter_dim == a->inter)
		c->model.moe_inter_dim = b->inter;
	if (c->model.moe_num_shared_experts == a->shared)
		c->model.moe_num_shared_experts = b->shared;
	if (c->model.moe_route_norm == a->route_norm)
		c->model.moe_route_norm = b->route_norm;
	if (c->model.moe_score_before_experts == a->before)
		c->model.moe_score_before_experts = b->before;
	if (c->model.moe_route_scale == a->route_scale)
		c->model.moe_route_scale = b->route_scale;
	if (c->model.n_dense_layers == a->n_dense)
		c->model.n_dense_layers = b->n_dense;
	if (c->model.interleave_moe_layer_step == (a->step > 0 ? a->step : 1))
		c->model.interleave_moe_layer_step = b->step > 0 ? b->step : 1;
	if (a->no_rope_scaling != b->no_rope_scaling && c->model.rope_scaling == !a->no_rope_scaling)
		c->model.rope_scaling = !b->no_rope_scaling;
	if (c->model.moe_score_func && !strcmp(c->model.moe_score_func, a->score_func) &&
	    set_string(&c->model.moe_score_func, b->score_func) == 0)
		c->model.moe_score_func_e = strcmp(b->score_func, "softmax") ? TITAN_MOE_SIGMOID
									    : TITAN_MOE_SOFTMAX;
	if (c->model.rope_theta == (a->rope_theta > 0 ? a->rope_theta : fa))
		c->model.rope_theta = b->rope_theta > 0 ? b->rope_theta : fb;
}

static void flavor_defaults(struct titan_config *c, int was, int now)
{
	if (was != now)
		flavor_move(c, c->model.name_e, was, c->model.name_e, now);
}

int cfg_set_scalar(struct titan_config *c, const struct titan_config_key *k,
		   const char *text, bool is_null, const char *origin)
{
	char exp[320];
	void *f = cfg_field(c, k);

	if (!is_null && (k->flags & TITAN_CFG_NULLABLE) &&
	    (cfg_is_null_text(text) || !strcasecmp(text, "none")))
		is_null = true;
	if (is_null) {
		if (!(k->flags & TITAN_CFG_NULLABLE))
			return cfg_key_error(TITAN_E_INVALID, origin, k,
					     "null is not allowed (expected %s)",
					     cfg_expected(k, exp, sizeof exp));
		if (k->type == TITAN_CFG_FLOAT) {
			*(double *)f = NAN;
		} else {
			TITAN_ASSERT(k->type == TITAN_CFG_INT); /* schema: NULLABLE on INT/FLOAT */
			*(int64_t *)f = TITAN_CFG_NONE_INT;
		}
		return 0;
	}

	switch (k->type) {
	case TITAN_CFG_BOOL: {
		bool b;
		if (!cfg_parse_bool(text, &b))
			return cfg_key_error(TITAN_E_INVALID, origin, k,
					     "expected a boolean (true/false), got '%.*s'",
					     SHOW, text);
		*(bool *)f = b;
		return 0;
	}
	case TITAN_CFG_INT: {
		int64_t v;
		int rc = parse_int(k, text, origin, &v);
		if (rc < 0)
			return rc;
		*(int64_t *)f = v;
		return 0;
	}
	case TITAN_CFG_FLOAT: {
		double v;
		int rc = parse_float(k, text, origin, &v);
		if (rc < 0)
			return rc;
		*(double *)f = v;
		return 0;
	}
	case TITAN_CFG_STRING:
		if (!cfg_utf8_valid(text))
			return cfg_key_error(TITAN_E_INVALID, origin, k,
					     "the value is not valid UTF-8");
		return set_string(f, text);
	case TITAN_CFG_ENUM:
		/* Case-insensitive match, stored as the schema spells it. */
		for (const char *const *ch = k->choices; *ch; ch++)
			if (!strcasecmp(text, *ch)) {
				int *e = (int *)((char *)c + k->enum_offset);
				int rc = set_string(f, *ch), was = *e;
				if (rc == 0) /* the enum beside it: the choice's index */
					*e = (int)(ch - k->choices);
				if (rc == 0 && k->enum_offset == offsetof(struct titan_config,
									   model.name_e))
					family_defaults(c, was, *e);
				if (rc == 0 && k->enum_offset == offsetof(struct titan_config,
									   model.flavor_e))
					flavor_defaults(c, was, *e);
				return rc;
			}
		{
			char ch[300];
			cfg_expected(k, ch, sizeof ch); /* "one of a, b" */
			return cfg_key_error(TITAN_E_INVALID, origin, k,
					     "'%.*s' is not %s", SHOW, text, ch);
		}
	case TITAN_CFG_STRLIST:
		return set_list_text(c, k, text, origin);
	}
	return titan_error(TITAN_E_INTERNAL, "%s: bad schema type", cfg_full_name(k));
}

int titan_config_set(struct titan_config *c, const char *name, const char *value,
		     const char *origin)
{
	const char *pre = origin && *origin ? origin : NULL;
	const struct titan_config_key *k = titan_config_find(name);
	char sug[CFG_NAME_MAX], tail[CFG_NAME_MAX + 32] = "";

	if (!k) {
		/* torchtitan's "--section.no_flag" sets a boolean to false. */
		const char *dot = strchr(name, '.');
		if (dot && !strncmp(dot + 1, "no_", 3) && !value) {
			char alt[CFG_NAME_MAX];
			int len = snprintf(alt, sizeof alt, "%.*s.%s", (int)(dot - name),
					   name, dot + 4);
			const struct titan_config_key *b = titan_config_find(alt);
			if (len > 0 && (size_t)len < sizeof alt && b &&
			    b->type == TITAN_CFG_BOOL) {
				*(bool *)cfg_field(c, b) = false;
				return 0;
			}
		}
		if (!dot) {
			if (titan_config_suggest(name, sug, sizeof sug))
				snprintf(tail, sizeof tail, " (did you mean '%s'?)", sug);
			return titan_error(TITAN_E_INVALID,
					   "%s%s%.*s: not a section.key name%s", pre ? pre : "",
					   pre ? ": " : "", SHOW, name, tail);
		}
		char tt[CFG_NAME_MAX + 16];
		if (cfg_titan_name_of(name, tt, sizeof tt))
			return titan_error(TITAN_E_INVALID, "%s%s%.*s: torchtitan's name: titan's "
					   "is '%s'", pre ? pre : "", pre ? ": " : "", SHOW, name, tt);
		if (!cfg_is_section(name, (size_t)(dot - name))) {
			char sec[CFG_NAME_MAX];
			snprintf(sec, sizeof sec, "%.*s", (int)(dot - name), name);
			const char *s = cfg_suggest_section(sec);
			if (s)
				snprintf(tail, sizeof tail, " (did you mean '%s'?)", s);
			return titan_error(TITAN_E_INVALID, "%s%s%.*s: unknown section '%s'%s",
					   pre ? pre : "", pre ? ": " : "", SHOW, name,
					   sec, tail);
		}
		if (titan_config_suggest(name, sug, sizeof sug))
			snprintf(tail, sizeof tail, " (did you mean '%s'?)", sug);
		return titan_error(TITAN_E_INVALID, "%s%s%.*s: unknown key%s",
				   pre ? pre : "", pre ? ": " : "", SHOW, name, tail);
	}
	if (!value) {
		if (k->type == TITAN_CFG_BOOL) {
			*(bool *)cfg_field(c, k) = true;
			return 0;
		}
		char exp[320];
		return cfg_key_error(TITAN_E_INVALID, pre, k, "missing value (expected %s)",
				     cfg_expected(k, exp, sizeof exp));
	}
	return cfg_set_scalar(c, k, value, false, pre);
}

/* ---- lifecycle */

void titan_config_release(struct titan_config *c)
{
	if (!c)
		return;
	for (size_t i = 0, n = titan_config_nkeys(); i < n; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		void *f = cfg_field(c, k);
		if (k->type == TITAN_CFG_STRING || k->type == TITAN_CFG_ENUM)
			free(*(char **)f);
		else if (k->type == TITAN_CFG_STRLIST)
			strlist_free(f);
	}
	memset(c, 0, sizeof *c);
}

int titan_config_init(struct titan_config *c)
{
	memset(c, 0, sizeof *c);
	for (size_t i = 0, n = titan_config_nkeys(); i < n; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		int rc;
		if (k->type == TITAN_CFG_STRLIST)
			rc = set_list_text(c, k, k->def, "default");
		else
			rc = cfg_set_scalar(c, k, k->def,
					    !k->def[0] && (k->flags & TITAN_CFG_NULLABLE),
					    "default");
		if (rc < 0) {
			titan_config_release(c);
			return rc;
		}
	}
	return 0;
}

int titan_config_copy(struct titan_config *dst, const struct titan_config *src)
{
	size_t n = titan_config_nkeys();
	*dst = *src;
	/* Detach every owned pointer first so a failure can release dst. */
	for (size_t i = 0; i < n; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		void *f = cfg_field(dst, k);
		if (k->type == TITAN_CFG_STRING || k->type == TITAN_CFG_ENUM)
			*(char **)f = NULL;
		else if (k->type == TITAN_CFG_STRLIST)
			*(struct titan_strlist *)f = (struct titan_strlist){ 0, NULL };
	}
	for (size_t i = 0; i < n; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		const void *s = cfg_cfield(src, k);
		void *f = cfg_field(dst, k);
		int rc = 0;
		if ((k->type == TITAN_CFG_STRING || k->type == TITAN_CFG_ENUM) &&
		    *(char *const *)s) {
			if (!(*(char **)f = titan_strdup(*(char *const *)s)))
				rc = TITAN_E_NOMEM;
		} else if (k->type == TITAN_CFG_STRLIST) {
			const struct titan_strlist *l = s;
			rc = strlist_dup(f, (const char *const *)l->items, l->n);
		}
		if (rc < 0) {
			titan_config_release(dst);
			return rc;
		}
	}
	return 0;
}

/* ---- output helpers */

/* Append `s` at buf[len] (truncating, NUL-terminated); the untruncated length. */
static size_t append(char *buf, size_t n, size_t len, const char *s)
{
	size_t sl = strlen(s);
	if (len + 1 < n) {
		size_t m = len + sl < n ? sl : n - len - 1;
		memcpy(buf + len, s, m);
		buf[len + m] = '\0';
	}
	return len + sl;
}

size_t cfg_format(const struct titan_config *c, const struct titan_config_key *k,
		  char *buf, size_t n)
{
	char tmp[64];
	const void *f = cfg_cfield(c, k);
	const char *s = "";
	switch (k->type) {
	case TITAN_CFG_BOOL:
		s = *(const bool *)f ? "true" : "false";
		break;
	case TITAN_CFG_INT: {
		int64_t v = *(const int64_t *)f;
		if ((k->flags & TITAN_CFG_NULLABLE) && v == TITAN_CFG_NONE_INT)
			s = "null";
		else
			s = (snprintf(tmp, sizeof tmp, "%" PRId64, v), tmp);
		break;
	}
	case TITAN_CFG_FLOAT: {
		double v = *(const double *)f;
		s = isnan(v) && (k->flags & TITAN_CFG_NULLABLE)
			    ? "null"
			    : cfg_format_float(tmp, sizeof tmp, v);
		break;
	}
	case TITAN_CFG_STRING:
	case TITAN_CFG_ENUM:
		s = *(char *const *)f ? *(char *const *)f : "";
		break;
	case TITAN_CFG_STRLIST: {
		const struct titan_strlist *l = f;
		size_t len = 0;
		if (n)
			buf[0] = '\0';
		for (size_t i = 0; i < l->n; i++) {
			if (i)
				len = append(buf, n, len, ",");
			len = append(buf, n, len, l->items[i]);
		}
		return len;
	}
	}
	size_t len = strlen(s);
	if (n) {
		size_t m = len < n ? len : n - 1;
		memcpy(buf, s, m);
		buf[m] = '\0';
	}
	return len;
}

int titan_config_format_value(const struct titan_config *c, const char *name,
			      char *buf, size_t n)
{
	const struct titan_config_key *k = titan_config_find(name);
	if (!k)
		return titan_error(TITAN_E_INVALID, "%.*s: unknown key", SHOW, name);
	size_t len = cfg_format(c, k, buf, n);
	if (len >= n)
		return titan_error(TITAN_E_INVALID,
				   "%s: the value (%zu bytes) does not fit in %zu bytes",
				   name, len, n);
	return 0;
}

static bool str_eq(const char *a, const char *b)
{
	return !strcmp(a ? a : "", b ? b : "");
}

const char *titan_config_diff(const struct titan_config *a, const struct titan_config *b)
{
	for (size_t i = 0, n = titan_config_nkeys(); i < n; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		const void *fa = cfg_cfield(a, k), *fb = cfg_cfield(b, k);
		bool eq = true;
		switch (k->type) {
		case TITAN_CFG_BOOL: eq = *(const bool *)fa == *(const bool *)fb; break;
		case TITAN_CFG_INT: eq = *(const int64_t *)fa == *(const int64_t *)fb; break;
		case TITAN_CFG_FLOAT: {
			double x = *(const double *)fa, y = *(const double *)fb;
			eq = (isnan(x) && isnan(y)) || x == y;
			break;
		}
		case TITAN_CFG_STRING:
		case TITAN_CFG_ENUM:
			eq = str_eq(*(char *const *)fa, *(char *const *)fb);
			break;
		case TITAN_CFG_STRLIST: {
			const struct titan_strlist *la = fa, *lb = fb;
			eq = la->n == lb->n;
			for (size_t j = 0; eq && j < la->n; j++)
				eq = str_eq(la->items[j], lb->items[j]);
			break;
		}
		}
		if (!eq)
			return cfg_full_name(k);
	}
	return NULL;
}
