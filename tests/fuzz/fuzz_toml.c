/*
 * fuzz_toml.c — torchtitan's TOML job files (lib/config/toml.c).  Input: a
 * TOML file.  It is loaded over the defaults; a loaded config is validated,
 * printed as YAML and read back, and must equal what was loaded; a refused
 * one leaves the defaults unchanged (a load is all or nothing).
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "titan/config.h"
#include "titan/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct titan_config c, d;
	int rc;

	if (titan_config_init(&c) < 0 || titan_config_init(&d) < 0)
		abort();
	rc = titan_config_load_toml_string(&c, (const char *)data, size, "fuzz.toml");
	fuzz_check_error(rc);
	if (rc < 0 && titan_config_diff(&c, &d)) {
		fprintf(stderr, "fuzz: a refused TOML file changed %s\n", titan_config_diff(&c, &d));
		abort();
	}
	if (rc == 0) {
		fuzz_check_error(titan_config_validate(&c));
		/* what the YAML printer writes, the YAML parser reads back equal */
		fuzz_config_round_trip(&c);
	}
	titan_config_release(&c);
	titan_config_release(&d);
	return 0;
}
