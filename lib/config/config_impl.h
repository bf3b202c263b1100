/*
 * lib/config/config_impl.h — private helpers shared by the files of the
 * config module (schema.c, value.c, parse.c, emit.c, overrides.c).
 * Not installed; the public API is lib/titan/config.h.
 */
#ifndef TITAN_CONFIG_IMPL_H
#define TITAN_CONFIG_IMPL_H

#include "titan/config.h"
#include "titan/core.h"

#include <stdbool.h>
#include <stddef.h>

/* Longest "section.key" plus NUL (checked by a test). */
#define CFG_NAME_MAX 64

/* ---- schema.c */
/* The full "section.key" of a schema entry (static storage). */
const char *cfg_full_name(const struct titan_config_key *k);
/* Sections in schema order. */
size_t cfg_nsections(void);
const char *cfg_section_at(size_t i);
/* `name` (first `len` bytes) is a section of the schema. */
bool cfg_is_section(const char *name, size_t len);
/* Closest section name to an unknown one, or NULL. */
const char *cfg_suggest_section(const char *name);
/* Type as a word for help and messages ("int", "float", ...). */
const char *cfg_type_name(enum titan_config_type t);
/* What a value of this key should be, for "expected ..." messages:
 * "an integer", "a boolean (true/false)", "one of a, b", ... */
const char *cfg_expected(const struct titan_config_key *k, char *buf, size_t n);

/* ---- toml.c */
/* titan's name of a key torchtitan names differently ("debug.seed" ->
 * "training.seed", "profiler.profile_freq" -> "profiling.profile_freq";
 * `buf` holds it), or NULL: YAML and the command line take titan's names
 * only and say which. */
const char *cfg_titan_name_of(const char *torchtitan_name, char *buf, size_t n);

/* ---- value.c */
static inline void *cfg_field(struct titan_config *c, const struct titan_config_key *k)
{
	return (char *)c + k->offset;
}
static inline const void *cfg_cfield(const struct titan_config *c,
				     const struct titan_config_key *k)
{
	return (const char *)c + k->offset;
}
/* Set one key from the text of a scalar.  `is_null`: the value is a null
 * (YAML plain ~/null/empty).  Errors are "ORIGIN: section.key: why" (ORIGIN
 * omitted when NULL); on error the config is unchanged. */
int cfg_set_scalar(struct titan_config *c, const struct titan_config_key *k,
		   const char *text, bool is_null, const char *origin);
/* Set a STRLIST key from items (copied). */
int cfg_set_list(struct titan_config *c, const struct titan_config_key *k,
		 const char *const *items, size_t n, const char *origin);
/* Record "ORIGIN: section.key: why" (printf-style why) and return code. */
int cfg_key_error(int code, const char *origin, const struct titan_config_key *k,
		  const char *fmt, ...) TITAN_PRINTF(4, 5);
/* Text of a value as the YAML printer writes it, without quotes; lists are
 * comma-separated.  NULL-safe for released configs.  Returns the length the
 * full text needs (like snprintf). */
size_t cfg_format(const struct titan_config *c, const struct titan_config_key *k,
		  char *buf, size_t n);
/* A float as YAML text: shortest round-trip digits, ".0" added to integral
 * values so the value reads as a float ("1.0", "500000.0", "1e-08"). */
const char *cfg_format_float(char *buf, size_t n, double v);
/* Plain YAML scalars that mean null: "", "~", "null", "Null", "NULL". */
bool cfg_is_null_text(const char *s);
/* Parse a boolean: true/false/yes/no/on/off, any case. */
bool cfg_parse_bool(const char *s, bool *out);
/* Valid UTF-8 (no NUL, no overlong forms or surrogates). */
bool cfg_utf8_valid(const char *s);

#endif
