/*
 * lib/config/overrides.c — command-line overrides of the configuration
 * (torchtitan's `--section.key value` CLI of ConfigManager): pulling
 * `--section.key[=value]` out of argv before getopt_long sees it, and
 * resolving defaults < YAML file < overrides, then the cross-key checks.
 *
 * An argument is an override when it starts with "--", has a '.' before
 * any '=', and the text between "--" and the '.' is a name (letters,
 * digits, '_').  Unknown sections and keys are still taken: the error,
 * with a suggestion, comes from titan_config_resolve.  `--section.key`
 * without '=' takes the next argument as its value, except for a boolean
 * key (which takes it only when it is true/false/yes/no/on/off) and when
 * the next argument is "--" or another override.
 */
#include "config_impl.h"

#include <stdlib.h>
#include <string.h>

/* Is `arg` a config override?  Sets *namelen to the length of "section.key". */
static bool is_override(const char *arg, size_t *namelen)
{
	if (strncmp(arg, "--", 2) != 0)
		return false;
	const char *s = arg + 2;
	size_t eq = strcspn(s, "=");
	const char *dot = memchr(s, '.', eq);
	if (!dot || dot == s)
		return false;
	/* a section-like name (an unknown one is taken too: resolving it
	 * says "unknown section (did you mean ...)" instead of getopt's
	 * "unrecognized option") */
	for (const char *c = s; c < dot; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '_'))
			return false;
	*namelen = eq;
	return true;
}

static int push(struct titan_config_overrides *ov, size_t *cap, const char *name,
		size_t namelen, const char *value)
{
	if (ov->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 8;
		char **nn = realloc(ov->names, nc * sizeof *nn);
		if (!nn)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		ov->names = nn;
		char **nv = realloc(ov->values, nc * sizeof *nv);
		if (!nv)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		ov->values = nv;
		*cap = nc;
	}
	char *n = malloc(namelen + 1);
	char *v = value ? titan_strdup(value) : NULL;
	if (!n || (value && !v)) {
		free(n);
		free(v);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	memcpy(n, name, namelen);
	n[namelen] = '\0';
	ov->names[ov->n] = n;
	ov->values[ov->n] = v;
	ov->n++;
	return 0;
}

int titan_config_extract_overrides(int *argc, char **argv,
				   struct titan_config_overrides *ov)
{
	size_t cap = 0, namelen;
	int out = 1, i = 1;
	int n = *argc;

	ov->n = 0;
	ov->names = NULL;
	ov->values = NULL;
	for (; i < n; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			break; /* "--" and everything after stay for getopt */
		if (!is_override(a, &namelen)) {
			argv[out++] = argv[i];
			continue;
		}
		const char *name = a + 2;
		const char *value = NULL;
		if (name[namelen] == '=') {
			value = name + namelen + 1;
		} else if (i + 1 < n) {
			const char *next = argv[i + 1];
			char full[CFG_NAME_MAX];
			snprintf(full, sizeof full, "%.*s", (int)namelen, name);
			const struct titan_config_key *k =
				namelen < sizeof full ? titan_config_find(full) : NULL;
			size_t nl;
			bool b;
			bool take;
			if (!strcmp(next, "--") || is_override(next, &nl))
				take = false;
			else if (k && k->type == TITAN_CFG_BOOL)
				take = cfg_parse_bool(next, &b);
			else if (!k)
				take = strncmp(next, "--", 2) != 0;
			else
				take = true;
			if (take)
				value = argv[++i];
		}
		if (push(ov, &cap, name, namelen, value) < 0) {
			titan_config_overrides_release(ov);
			return TITAN_E_NOMEM;
		}
	}
	for (; i < n; i++)
		argv[out++] = argv[i];
	if (n > 0) {
		*argc = out;
		argv[out] = NULL;
	}
	return (int)ov->n;
}

void titan_config_overrides_release(struct titan_config_overrides *ov)
{
	if (!ov)
		return;
	for (size_t i = 0; i < ov->n; i++) {
		free(ov->names[i]);
		free(ov->values[i]);
	}
	free(ov->names);
	free(ov->values);
	ov->names = NULL;
	ov->values = NULL;
	ov->n = 0;
}

int titan_config_resolve(struct titan_config *c, const char *path,
			 const struct titan_config_overrides *ov)
{
	return titan_config_resolve_format(c, path, TITAN_CONFIG_AUTO, ov);
}

int titan_config_resolve_format(struct titan_config *c, const char *path,
				enum titan_config_format format,
				const struct titan_config_overrides *ov)
{
	int rc = titan_config_init(c);
	if (rc < 0)
		return rc;
	if (path)
		rc = titan_config_load_file_format(c, path, format);
	for (size_t i = 0; rc == 0 && ov && i < ov->n; i++)
		rc = titan_config_set(c, ov->names[i], ov->values[i], "command line");
	if (rc == 0)
		rc = titan_config_validate(c);
	if (rc < 0)
		titan_config_release(c);
	return rc;
}
