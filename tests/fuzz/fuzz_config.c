/*
 * fuzz_config.c — the YAML job configuration (lib/config).  Input: a
 * config file, optionally followed (after FUZZ_SEPARATOR) by command-line
 * overrides, one "section.key=value" (or a bare "section.key") a line.  The
 * file is loaded over the defaults, the overrides applied, the result
 * validated, turned into model dims, printed and read back: the printed
 * YAML must load to equal values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/model.h"

static void overrides(struct titan_config *c, const struct fuzz_part *p)
{
	char *text = malloc(p->n + 1), *save = NULL;

	if (!text)
		abort();
	memcpy(text, p->p, p->n);
	text[p->n] = '\0';
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');

		if (eq)
			*eq = '\0';
		fuzz_check_error(titan_config_set(c, line, eq ? eq + 1 : NULL, "command line"));
	}
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_part parts[2];
	size_t np = fuzz_split(data, size, parts, 2);
	struct titan_config c;
	struct titan_model_dims dims;
	char name[128], value[256];
	int rc;

	if (titan_config_init(&c) < 0)
		abort();
	rc = titan_config_load_string(&c, (const char *)parts[0].p, parts[0].n, "fuzz.yaml");
	fuzz_check_error(rc);
	if (rc == 0) {
		if (np > 1)
			overrides(&c, &parts[1]);
		fuzz_check_error(titan_config_validate(&c));
		fuzz_check_error(titan_model_dims_from_config(&c, &dims));
		for (size_t i = 0; i < titan_config_nkeys(); i++) {
			const struct titan_config_key *k = titan_config_key_at(i);

			snprintf(name, sizeof(name), "%s.%s", k->section, k->key);
			fuzz_check_error(titan_config_format_value(&c, name, value, sizeof(value)));
		}
		/* what the printer writes, the parser reads back to equal values */
		fuzz_config_round_trip(&c);
	}
	titan_config_release(&c);
	return 0;
}
