/*
 * fuzz_config.c — the YAML job configuration (lib/config): the input is a
 * config file, loaded over the defaults, validated, printed and read back.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "titan/config.h"
#include "titan/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct titan_config c, back;
	char *yaml = NULL;
	size_t len = 0;
	FILE *fp;
	int rc;

	if (titan_config_init(&c) < 0)
		abort();
	rc = titan_config_load_string(&c, (const char *)data, size, "fuzz.yaml");
	fuzz_check_error(rc);
	if (rc == 0) {
		fuzz_check_error(titan_config_validate(&c));
		/* what the printer writes, the parser reads back to equal values */
		if (!(fp = open_memstream(&yaml, &len)))
			abort();
		if (titan_config_write_yaml(&c, fp) < 0)
			abort();
		fclose(fp);
		if (titan_config_init(&back) < 0)
			abort();
		if ((rc = titan_config_load_string(&back, yaml, len, "printed.yaml")) < 0) {
			fprintf(stderr, "fuzz: the printed config does not load: %s\n%s", titan_errmsg(),
				yaml);
			abort();
		}
		if (titan_config_diff(&c, &back)) {
			fprintf(stderr, "fuzz: %s differs after printing and reading back\n%s",
				titan_config_diff(&c, &back), yaml);
			abort();
		}
		titan_config_release(&back);
		free(yaml);
	}
	titan_config_release(&c);
	return 0;
}
