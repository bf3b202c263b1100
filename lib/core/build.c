/*
 * build.c — what this build is: version, git revision and the optional
 * features compiled in (from build/config.h and build/version.h, written by
 * mk/configure and the Makefile).
 */
#include "titan/core.h"

#include <string.h>

#include "config.h"
#include "version.h"

const char *titan_version(void)
{
	return TITAN_VERSION_STRING;
}

const char *titan_git_revision(void)
{
	return TITAN_GIT_REVISION;
}

const char *titan_features(void)
{
	return TITAN_FEATURES;
}

bool titan_has_feature(const char *name)
{
	static const char features[] = TITAN_FEATURES;
	const char *f = features;
	size_t n = strlen(name);

	while ((f = strstr(f, name)) != NULL) {
		if (f > features && f[-1] == '+' && (f[n] == ' ' || f[n] == '\0'))
			return true;
		f += n;
	}
	return false;
}
