/*
 * lib/config/emit.c — writing a titan_config as YAML with libyaml's emitter
 * (titan_config_write_yaml): every section and key in schema order, strings
 * quoted and escaped by libyaml where needed, floats with the shortest text
 * that reads back to the same double, nullable unset values as `null`,
 * lists as flow sequences.  titan_config_load_file() reads the output back
 * to equal values.
 */
#include "config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

/*
 * Text that a YAML reader would take for something other than a string in
 * plain style: null, a boolean (YAML 1.1 included), a number (decimal,
 * hex, octal, binary, sexagesimal, with underscores, .inf/.nan).  Such
 * strings are written quoted.
 */
static bool needs_quote(const char *s)
{
	bool b;
	if (cfg_is_null_text(s) || cfg_parse_bool(s, &b) || !strcasecmp(s, "y") ||
	    !strcasecmp(s, "n"))
		return true;
	const char *p = s + (*s == '+' || *s == '-');
	if (*p == '.' && (!strcasecmp(p + 1, "inf") || !strcasecmp(p + 1, "nan")))
		return true;
	char *end;
	(void)strtod(s, &end);
	if (end != s && *end == '\0')
		return true;
	if (isdigit((unsigned char)*p) &&
	    strspn(p, "0123456789_:.xXoObBabcdefABCDEF+-") == strlen(p))
		return true;
	return false;
}

struct emit {
	yaml_emitter_t em;
	FILE *fp;
	int rc;
};

static int write_handler(void *data, unsigned char *buf, size_t size)
{
	struct emit *e = data;
	return fwrite(buf, 1, size, e->fp) == size;
}

static int emit_fail(struct emit *e)
{
	if (e->rc < 0)
		return e->rc;
	switch (e->em.error) {
	case YAML_MEMORY_ERROR:
		return e->rc = titan_error(TITAN_E_NOMEM, "out of memory writing YAML");
	case YAML_WRITER_ERROR:
		return e->rc = titan_error(TITAN_E_IO, "cannot write the configuration: %s",
					   strerror(errno ? errno : EIO));
	default:
		return e->rc = titan_error(TITAN_E_INTERNAL, "YAML emitter: %s",
					   e->em.problem ? e->em.problem : "unknown error");
	}
}

static int emit_event(struct emit *e, yaml_event_t *ev, int init_ok)
{
	if (e->rc < 0) {
		if (init_ok)
			yaml_event_delete(ev);
		return e->rc;
	}
	if (!init_ok)
		return e->rc = titan_error(TITAN_E_NOMEM, "out of memory writing YAML");
	if (!yaml_emitter_emit(&e->em, ev)) /* frees the event either way */
		return emit_fail(e);
	return 0;
}

/* A scalar; `text` is a string value (quoted when it would read as
 * something else) or, with !string, a number/bool/null in plain style. */
static int emit_scalar(struct emit *e, const char *text, bool string, const char *key)
{
	yaml_event_t ev;
	bool quote = string && needs_quote(text);
	if (e->rc < 0)
		return e->rc;
	int ok = yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text,
					      (int)strlen(text), !quote, 1,
					      YAML_ANY_SCALAR_STYLE);
	if (!ok && !cfg_utf8_valid(text))
		return e->rc = titan_error(TITAN_E_INVALID,
					   "%s: the value is not valid UTF-8; cannot write it",
					   key);
	return emit_event(e, &ev, ok);
}

static int emit_value(struct emit *e, const struct titan_config *c,
		      const struct titan_config_key *k)
{
	const char *name = cfg_full_name(k);
	const void *f = cfg_cfield(c, k);
	yaml_event_t ev;

	switch (k->type) {
	case TITAN_CFG_STRING:
	case TITAN_CFG_ENUM: {
		const char *s = *(char *const *)f;
		return emit_scalar(e, s ? s : "", true, name);
	}
	case TITAN_CFG_STRLIST: {
		const struct titan_strlist *l = f;
		emit_event(e, &ev,
			   yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
								YAML_FLOW_SEQUENCE_STYLE));
		for (size_t i = 0; i < l->n; i++)
			emit_scalar(e, l->items[i], true, name);
		return emit_event(e, &ev, yaml_sequence_end_event_initialize(&ev));
	}
	default: {
		char buf[64];
		cfg_format(c, k, buf, sizeof buf);
		return emit_scalar(e, buf, false, name);
	}
	}
}

int titan_config_write_yaml(const struct titan_config *c, FILE *fp)
{
	struct emit e = { .fp = fp, .rc = 0 };
	yaml_event_t ev;

	if (!yaml_emitter_initialize(&e.em))
		return titan_error(TITAN_E_NOMEM, "out of memory writing YAML");
	yaml_emitter_set_output(&e.em, write_handler, &e);
	yaml_emitter_set_unicode(&e.em, 1);
	yaml_emitter_set_width(&e.em, -1);
	yaml_emitter_set_indent(&e.em, 2);
	errno = 0;

	emit_event(&e, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING));
	emit_event(&e, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1));
	emit_event(&e, &ev, yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
								YAML_BLOCK_MAPPING_STYLE));
	for (size_t i = 0, n = titan_config_nkeys(); i < n && e.rc == 0; i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		const struct titan_config_key *prev = i ? titan_config_key_at(i - 1) : NULL;
		if (!prev || strcmp(prev->section, k->section)) {
			if (prev)
				emit_event(&e, &ev, yaml_mapping_end_event_initialize(&ev));
			emit_scalar(&e, k->section, true, k->section);
			emit_event(&e, &ev,
				   yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
								       YAML_BLOCK_MAPPING_STYLE));
		}
		emit_scalar(&e, k->key, true, cfg_full_name(k));
		emit_value(&e, c, k);
	}
	emit_event(&e, &ev, yaml_mapping_end_event_initialize(&ev)); /* last section */
	emit_event(&e, &ev, yaml_mapping_end_event_initialize(&ev)); /* top level */
	emit_event(&e, &ev, yaml_document_end_event_initialize(&ev, 1));
	emit_event(&e, &ev, yaml_stream_end_event_initialize(&ev));
	if (e.rc == 0 && !yaml_emitter_flush(&e.em))
		emit_fail(&e);
	yaml_emitter_delete(&e.em);
	if (e.rc == 0 && (fflush(fp) != 0 || ferror(fp)))
		e.rc = titan_error(TITAN_E_IO, "cannot write the configuration: %s",
				   strerror(errno ? errno : EIO));
	return e.rc;
}
