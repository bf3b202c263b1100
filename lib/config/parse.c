/*
 * lib/config/parse.c — reading a YAML job configuration (libyaml's document
 * API, so every node keeps its line and column) over a titan_config:
 * titan_config_load_file and titan_config_load_string.
 *
 * The file is a mapping of sections, each a mapping of keys to scalars (or,
 * for list keys, a sequence of scalars).  An empty file, or a section with
 * no keys ("training:" alone), changes nothing.  Errors name the node:
 * "PATH:LINE:COL: section.key: why" (1-based line and column).  A load is
 * all or nothing: on error the config is unchanged.
 */
#include "config_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

/* Where a node is, as "NAME:LINE:COL". */
static const char *origin_of(char *buf, size_t n, const char *name, const yaml_node_t *node)
{
	snprintf(buf, n, "%s:%zu:%zu", name, node->start_mark.line + 1,
		 node->start_mark.column + 1);
	return buf;
}

static const char *kind_of(const yaml_node_t *node)
{
	switch (node->type) {
	case YAML_MAPPING_NODE: return "a mapping";
	case YAML_SEQUENCE_NODE: return "a sequence";
	default: return "a scalar";
	}
}

static const char *scalar_text(const yaml_node_t *node)
{
	return (const char *)node->data.scalar.value;
}

static bool is_null_node(const yaml_node_t *node)
{
	return node->type == YAML_SCALAR_NODE &&
	       node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	       cfg_is_null_text(scalar_text(node));
}

/* A scalar may hold a NUL ("\0" escape): C strings cannot. */
static bool has_nul(const yaml_node_t *node)
{
	return strlen(scalar_text(node)) != node->data.scalar.length;
}

static int parser_error(const yaml_parser_t *p, const char *name, const char *text,
			size_t len)
{
	if (p->error == YAML_MEMORY_ERROR)
		return titan_error(TITAN_E_NOMEM, "%s: out of memory reading YAML", name);
	if (p->error == YAML_READER_ERROR) {
		/* Reader errors (bad UTF-8, control characters) carry a byte
		 * offset only: count lines and characters up to it. */
		size_t line = 1, col = 1, off = p->problem_offset;
		for (size_t i = 0; i < off && i < len; i++) {
			if (text[i] == '\n') {
				line++;
				col = 1;
			} else if (((unsigned char)text[i] & 0xC0) != 0x80) {
				col++;
			}
		}
		return titan_error(TITAN_E_INVALID, "%s:%zu:%zu: %s", name, line, col,
				   p->problem ? p->problem : "cannot read the input");
	}
	char ctx[160] = "";
	if (p->context)
		snprintf(ctx, sizeof ctx, " (%s at line %zu, column %zu)", p->context,
			 p->context_mark.line + 1, p->context_mark.column + 1);
	return titan_error(TITAN_E_INVALID, "%s:%zu:%zu: YAML syntax error: %s%s", name,
			   p->problem_mark.line + 1, p->problem_mark.column + 1,
			   p->problem ? p->problem : "unknown error", ctx);
}

/* The key node of a pair before `pr` in a mapping whose text is `key`. */
static yaml_node_t *earlier_key(yaml_document_t *doc, yaml_node_pair_t *first,
				yaml_node_pair_t *pr, const char *key)
{
	for (yaml_node_pair_t *q = first; q < pr; q++) {
		yaml_node_t *qk = yaml_document_get_node(doc, q->key);
		if (qk->type == YAML_SCALAR_NODE && !strcmp(scalar_text(qk), key))
			return qk;
	}
	return NULL;
}

/* A config nests two levels (section, key; a list value three); libyaml's
 * loader takes quadratic time in the nesting depth (a 400 KB line of
 * brackets took a minute): refuse deep documents in one linear pass of
 * events first.
 *
 * The same pass bounds what aliases expand to: the loader shares an
 * anchored node, but every alias of it in a list key becomes a copy
 * (1,000 aliases of a 4 MB anchor took 4 GB; nested anchors of lists of
 * aliases grow exponentially: "billion laughs").  Without aliases the
 * values of a config are no larger than its file (CONFIG_MAX_BYTES), so
 * the expanded values may not be either; a job config needs a handful of
 * anchors and aliases, not thousands. */
#define CONFIG_MAX_DEPTH 16
#define CONFIG_MAX_BYTES (4u << 20)
#define CONFIG_MAX_ANCHORS 1024
#define CONFIG_MAX_ALIASES 4096

struct anchor_size {
	char *name;
	uint64_t size;  /* the bytes its value expands to */
};

static const struct anchor_size *find_anchor(const struct anchor_size *a, size_t n,
					     const char *name)
{
	while (n--) /* the newest definition of a name wins */
		if (!strcmp(a[n].name, name))
			return &a[n];
	return NULL;
}

static int check_events(const char *name, const char *yaml, size_t len)
{
	yaml_parser_t p;
	yaml_event_t ev;
	/* size[d]: the expanded bytes so far of the open collection at depth
	 * d (0: the document); open[d]: its anchor, when it has one */
	uint64_t size[CONFIG_MAX_DEPTH + 2] = {0}, total;
	char *open[CONFIG_MAX_DEPTH + 2] = {0};
	struct anchor_size anchors[CONFIG_MAX_ANCHORS];
	size_t nanchors = 0, naliases = 0;
	int depth = 0, rc = 0;

	if (!yaml_parser_initialize(&p))
		return titan_error(TITAN_E_NOMEM, "%s: out of memory reading YAML", name);
	yaml_parser_set_input_string(&p, (const unsigned char *)(yaml ? yaml : ""), yaml ? len : 0);
	for (;;) {
		const char *anchor = NULL;
		char *owned = NULL;
		uint64_t add = 0;

		if (!yaml_parser_parse(&p, &ev))
			break; /* the loader reports syntax errors with their place */
		switch (ev.type) {
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (++depth > CONFIG_MAX_DEPTH) {
				rc = titan_error(TITAN_E_INVALID, "%s:%zu:%zu: nested deeper than %d "
						 "levels: not a job config", name,
						 ev.start_mark.line + 1, ev.start_mark.column + 1,
						 CONFIG_MAX_DEPTH);
				break;
			}
			size[depth] = 0;
			anchor = (const char *)(ev.type == YAML_SEQUENCE_START_EVENT ?
						ev.data.sequence_start.anchor :
						ev.data.mapping_start.anchor);
			if (anchor && !(open[depth] = strdup(anchor)))
				rc = titan_error(TITAN_E_NOMEM, "%s: out of memory reading YAML", name);
			anchor = NULL;
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			if (depth < 1)
				break;
			add = size[depth];
			owned = open[depth];
			open[depth] = NULL;
			depth--;
			break;
		case YAML_SCALAR_EVENT:
			add = ev.data.scalar.length + 1;
			anchor = (const char *)ev.data.scalar.anchor;
			break;
		case YAML_ALIAS_EVENT: {
			const struct anchor_size *a = find_anchor(anchors, nanchors,
								  (const char *)ev.data.alias.anchor);

			if (++naliases > CONFIG_MAX_ALIASES) {
				rc = titan_error(TITAN_E_INVALID, "%s:%zu:%zu: more than %d YAML "
						 "aliases: not a job config", name,
						 ev.start_mark.line + 1, ev.start_mark.column + 1,
						 CONFIG_MAX_ALIASES);
				break;
			}
			add = a ? a->size : 0; /* unknown: the loader says so */
			total = add;
			for (int d = 0; d <= depth; d++)
				total += size[d];
			if (total > CONFIG_MAX_BYTES)
				rc = titan_error(TITAN_E_INVALID, "%s:%zu:%zu: the alias '*%.60s' "
						 "expands the config's values past %u MiB (a large "
						 "anchor repeated): not a job config", name,
						 ev.start_mark.line + 1, ev.start_mark.column + 1,
						 (const char *)ev.data.alias.anchor,
						 CONFIG_MAX_BYTES >> 20);
			break;
		}
		default:
			break;
		}
		if (rc == 0 && (anchor || owned)) {
			if (nanchors == CONFIG_MAX_ANCHORS) {
				rc = titan_error(TITAN_E_INVALID, "%s:%zu:%zu: more than %d YAML "
						 "anchors: not a job config", name,
						 ev.start_mark.line + 1, ev.start_mark.column + 1,
						 CONFIG_MAX_ANCHORS);
			} else if (!owned && !(owned = strdup(anchor))) {
				rc = titan_error(TITAN_E_NOMEM, "%s: out of memory reading YAML", name);
			} else {
				anchors[nanchors].name = owned;
				anchors[nanchors++].size = add;
				owned = NULL;
			}
		}
		free(owned);
		if (depth >= 0 && depth <= CONFIG_MAX_DEPTH)
			size[depth] += add;
		const bool end = ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
		if (end || rc < 0)
			break;
	}
	for (size_t i = 0; i < nanchors; i++)
		free(anchors[i].name);
	for (int d = 0; d < CONFIG_MAX_DEPTH + 2; d++)
		free(open[d]);
	yaml_parser_delete(&p);
	return rc;
}

/* Apply one "key: value" pair of a section. */
static int apply_value(struct titan_config *c, const struct titan_config_key *k,
		       yaml_document_t *doc, yaml_node_t *val, const char *name)
{
	char org[512], exp[320];
	origin_of(org, sizeof org, name, val);

	if (val->type == YAML_SCALAR_NODE) {
		if (has_nul(val))
			return cfg_key_error(TITAN_E_INVALID, org, k,
					     "the value contains a NUL character");
		return cfg_set_scalar(c, k, scalar_text(val), is_null_node(val), org);
	}
	if (val->type != YAML_SEQUENCE_NODE || k->type != TITAN_CFG_STRLIST)
		return cfg_key_error(TITAN_E_INVALID, org, k, "expected %s, got %s",
				     cfg_expected(k, exp, sizeof exp), kind_of(val));

	size_t n = (size_t)(val->data.sequence.items.top - val->data.sequence.items.start);
	const char **items = calloc(n ? n : 1, sizeof *items);
	if (!items)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *it = yaml_document_get_node(doc, val->data.sequence.items.start[i]);
		origin_of(org, sizeof org, name, it);
		if (it->type != YAML_SCALAR_NODE) {
			rc = cfg_key_error(TITAN_E_INVALID, org, k,
					   "list items must be scalars, got %s", kind_of(it));
			break;
		}
		if (is_null_node(it) || has_nul(it)) {
			rc = cfg_key_error(TITAN_E_INVALID, org, k, "list item %zu is %s",
					   i + 1, has_nul(it) ? "not text" : "null");
			break;
		}
		items[i] = scalar_text(it);
	}
	if (rc == 0)
		rc = cfg_set_list(c, k, items, n, origin_of(org, sizeof org, name, val));
	free(items);
	return rc;
}

static int apply_section(struct titan_config *c, yaml_document_t *doc, const char *sec,
			 yaml_node_t *map, const char *name)
{
	char org[512], full[CFG_NAME_MAX + 128], sug[CFG_NAME_MAX], tail[CFG_NAME_MAX + 32];

	if (is_null_node(map))
		return 0;
	if (map->type != YAML_MAPPING_NODE)
		return titan_error(TITAN_E_INVALID,
				   "%s: %s: a section must be a mapping of keys, got %s",
				   origin_of(org, sizeof org, name, map), sec, kind_of(map));

	yaml_node_pair_t *first = map->data.mapping.pairs.start;
	for (yaml_node_pair_t *pr = first; pr < map->data.mapping.pairs.top; pr++) {
		yaml_node_t *kn = yaml_document_get_node(doc, pr->key);
		yaml_node_t *vn = yaml_document_get_node(doc, pr->value);
		origin_of(org, sizeof org, name, kn);
		if (kn->type != YAML_SCALAR_NODE || has_nul(kn))
			return titan_error(TITAN_E_INVALID, "%s: %s: a key must be a name, got %s",
					   org, sec, kind_of(kn));
		const char *key = scalar_text(kn);
		snprintf(full, sizeof full, "%s.%s", sec, key);

		yaml_node_t *dup = earlier_key(doc, first, pr, key);
		if (dup)
			return titan_error(TITAN_E_INVALID,
					   "%s: %.120s: duplicate key (first at line %zu, column %zu)",
					   org, full, dup->start_mark.line + 1,
					   dup->start_mark.column + 1);
		const struct titan_config_key *k = titan_config_find(full);
		char tt[CFG_NAME_MAX + 16];
		if (!k && cfg_titan_name_of(full, tt, sizeof tt))
			return titan_error(TITAN_E_INVALID, "%s: %.120s: torchtitan's name: titan's "
					   "is '%s'", org, full, tt);
		if (!k) {
			tail[0] = '\0';
			if (titan_config_suggest(full, sug, sizeof sug))
				snprintf(tail, sizeof tail, " (did you mean '%s'?)", sug);
			return titan_error(TITAN_E_INVALID, "%s: %.120s: unknown key%s", org,
					   full, tail);
		}
		int rc = apply_value(c, k, doc, vn, name);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int apply_document(struct titan_config *c, yaml_document_t *doc, const char *name)
{
	char org[512], tail[CFG_NAME_MAX + 32];
	yaml_node_t *root = yaml_document_get_root_node(doc);

	if (!root || is_null_node(root))
		return 0;
	if (root->type != YAML_MAPPING_NODE)
		return titan_error(TITAN_E_INVALID,
				   "%s: the top level must be a mapping of sections, got %s",
				   origin_of(org, sizeof org, name, root), kind_of(root));

	yaml_node_pair_t *first = root->data.mapping.pairs.start;
	for (yaml_node_pair_t *pr = first; pr < root->data.mapping.pairs.top; pr++) {
		yaml_node_t *kn = yaml_document_get_node(doc, pr->key);
		yaml_node_t *vn = yaml_document_get_node(doc, pr->value);
		origin_of(org, sizeof org, name, kn);
		if (kn->type != YAML_SCALAR_NODE || has_nul(kn))
			return titan_error(TITAN_E_INVALID,
					   "%s: a section name must be a scalar, got %s", org,
					   kind_of(kn));
		const char *sec = scalar_text(kn);
		yaml_node_t *dup = earlier_key(doc, first, pr, sec);
		if (dup)
			return titan_error(TITAN_E_INVALID,
					   "%s: %.120s: duplicate section (first at line %zu, column %zu)",
					   org, sec, dup->start_mark.line + 1,
					   dup->start_mark.column + 1);
		if (!cfg_is_section(sec, strlen(sec)) && vn->type == YAML_MAPPING_NODE) {
			/* debug: {seed: 1}: name titan's key for the first such key */
			for (yaml_node_pair_t *q = vn->data.mapping.pairs.start;
			     q < vn->data.mapping.pairs.top; q++) {
				yaml_node_t *qk = yaml_document_get_node(doc, q->key);
				char full[CFG_NAME_MAX + 128], tt[CFG_NAME_MAX + 16];
				if (qk->type != YAML_SCALAR_NODE)
					continue;
				snprintf(full, sizeof full, "%.60s.%.60s", sec, scalar_text(qk));
				if (cfg_titan_name_of(full, tt, sizeof tt))
					return titan_error(TITAN_E_INVALID, "%s: %s: torchtitan's "
							   "name: titan's is '%s'",
							   origin_of(org, sizeof org, name, qk),
							   full, tt);
			}
		}
		if (!cfg_is_section(sec, strlen(sec))) {
			const struct titan_config_key *k = titan_config_find(sec);
			if (k)
				return titan_error(TITAN_E_INVALID,
						   "%s: %s: write the key under its section "
						   "('%s:' then '  %s:')",
						   org, sec, k->section, k->key);
			const char *s = cfg_suggest_section(sec);
			tail[0] = '\0';
			if (s)
				snprintf(tail, sizeof tail, " (did you mean '%s'?)", s);
			return titan_error(TITAN_E_INVALID, "%s: %.120s: unknown section%s", org,
					   sec, tail);
		}
		int rc = apply_section(c, doc, sec, vn, name);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int titan_config_load_string(struct titan_config *c, const char *yaml, size_t len,
			     const char *name)
{
	yaml_parser_t p;
	yaml_document_t doc;
	struct titan_config tmp;
	int rc;

	if (!name)
		name = "<string>";
	if ((rc = check_events(name, yaml, len)) < 0)
		return rc;
	if (!yaml_parser_initialize(&p))
		return titan_error(TITAN_E_NOMEM, "%s: out of memory reading YAML", name);
	yaml_parser_set_input_string(&p, (const unsigned char *)(yaml ? yaml : ""),
				     yaml ? len : 0);
	if (!yaml_parser_load(&p, &doc)) {
		rc = parser_error(&p, name, yaml, len);
		yaml_parser_delete(&p);
		return rc;
	}
	rc = titan_config_copy(&tmp, c);
	if (rc == 0) {
		rc = apply_document(&tmp, &doc, name);
		if (rc == 0) {
			/* A second document would be silently ignored: refuse it. */
			yaml_document_t doc2;
			if (!yaml_parser_load(&p, &doc2)) {
				rc = parser_error(&p, name, yaml, len);
			} else {
				yaml_node_t *r2 = yaml_document_get_root_node(&doc2);
				if (r2) {
					char org[512];
					rc = titan_error(TITAN_E_INVALID,
							 "%s: only one YAML document is allowed",
							 origin_of(org, sizeof org, name, r2));
				}
				yaml_document_delete(&doc2);
			}
		}
		if (rc == 0) {
			titan_config_release(c);
			*c = tmp;
		} else {
			titan_config_release(&tmp);
		}
	}
	yaml_document_delete(&doc);
	yaml_parser_delete(&p);
	return rc;
}

/* A job config is a few kilobytes; anything larger than CONFIG_MAX_BYTES
 * is the wrong file (--config /dev/zero read gigabytes before). */

/* The whole file in memory ("-" = stdin), at most CONFIG_MAX_BYTES. */
static int slurp(const char *path, char **out, size_t *outlen)
{
	bool std = !strcmp(path, "-");
	FILE *fp = std ? stdin : fopen(path, "rb");
	if (!fp)
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	int rc = 0;
	if (!buf) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory reading '%s'", path);
		goto out;
	}
	errno = 0;
	for (;;) {
		if (len > CONFIG_MAX_BYTES) {
			rc = titan_error(TITAN_E_INVALID, "'%s': larger than %u MiB: not a job config",
					 path, CONFIG_MAX_BYTES >> 20);
			goto out;
		}
		if (len == cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				rc = titan_error(TITAN_E_NOMEM, "out of memory reading '%s'", path);
				goto out;
			}
			buf = nb;
			cap *= 2;
		}
		size_t got = fread(buf + len, 1, cap - len, fp);
		len += got;
		if (got == 0) {
			if (ferror(fp))
				rc = titan_error(TITAN_E_IO, "cannot read '%s': %s", path,
						 strerror(errno ? errno : EIO));
			break;
		}
	}
out:
	if (!std)
		fclose(fp);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*out = buf;
	*outlen = len;
	return 0;
}

static bool is_toml_name(const char *path)
{
	size_t n = strlen(path);
	return n > 5 && !strcasecmp(path + n - 5, ".toml");
}

int titan_config_load_file_format(struct titan_config *c, const char *path,
				  enum titan_config_format format)
{
	char *buf = NULL;
	size_t len = 0;
	int rc = slurp(path, &buf, &len);
	if (rc < 0)
		return rc;
	const char *name = strcmp(path, "-") ? path : "<stdin>";
	if (format == TITAN_CONFIG_TOML || (format == TITAN_CONFIG_AUTO && is_toml_name(path)))
		rc = titan_config_load_toml_string(c, buf, len, name);
	else
		rc = titan_config_load_string(c, buf, len, name);
	free(buf);
	return rc;
}

int titan_config_load_file(struct titan_config *c, const char *path)
{
	return titan_config_load_file_format(c, path, TITAN_CONFIG_AUTO);
}
