/* scratch.h — a scratch folder under /tmp for a cmocka test group, shared
 * by the unit tests that write files: scratch_setup("test_x") makes
 * /tmp/test_x-XXXXXX in `dir`, path_of(name) joins a name to it (the last
 * four results stay valid), scratch_teardown() removes it recursively. */
#ifndef TITAN_TEST_SCRATCH_H
#define TITAN_TEST_SCRATCH_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static inline void scratch_rm_rf(const char *p)
{
	DIR *d = opendir(p);
	struct dirent *e;
	char q[512];

	if (!d) {
		unlink(p);
		return;
	}
	while ((e = readdir(d))) {
		size_t a = strlen(p), b = strlen(e->d_name);

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || a + b + 2 > sizeof(q))
			continue;
		memcpy(q, p, a);
		q[a] = '/';
		memcpy(q + a + 1, e->d_name, b + 1);
		scratch_rm_rf(q);
	}
	closedir(d);
	rmdir(p);
}

static inline int scratch_setup(const char *prefix)
{
	snprintf(dir, sizeof(dir), "/tmp/%s-XXXXXX", prefix);
	return mkdtemp(dir) ? 0 : -1;
}

static inline int scratch_teardown(void)
{
	scratch_rm_rf(dir);
	return 0;
}

static inline const char *path_of(const char *name)
{
	static char p[4][512];
	static int k;

	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

#endif
