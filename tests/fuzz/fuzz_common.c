/*
 * fuzz_common.c — the helpers of fuzz.h: a per-process temporary folder
 * for inputs that readers take by path, splitting multi-file inputs,
 * reading numbers off the front of an input.
 */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/config.h"
#include "titan/core.h"

static char dir[512];
static bool verbose; /* FUZZ_VERBOSE=1: print the errors the readers report */

static void rm_tree(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;

	if (!d) {
		unlink(path);
		return;
	}
	while ((e = readdir(d))) {
		char p[1024];

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		rm_tree(p);
	}
	closedir(d);
	rmdir(path);
}

static void remove_dir(void)
{
	if (dir[0])
		rm_tree(dir);
}

void fuzz_init(void)
{
	const char *base = getenv("FUZZ_TMPDIR");
	struct stat st;

	if (dir[0])
		return;
	if (!base || !*base)
		base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL;
	if (!base)
		base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	mkdir(base, 0755);
	snprintf(dir, sizeof(dir), "%s/titan-fuzz.XXXXXX", base);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "fuzz: cannot make a folder under '%s': %s\n", base, strerror(errno));
		abort();
	}
	atexit(remove_dir);
	verbose = getenv("FUZZ_VERBOSE") && *getenv("FUZZ_VERBOSE") == '1';
	titan_log_set_level(TITAN_LOG_ERROR);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_init();
	return 0;
}

const char *fuzz_path(const char *name)
{
	static char buf[4][1024];
	static unsigned k;
	char *p = buf[k++ % 4];

	snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
	return p;
}

void fuzz_write(const char *path, const void *data, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	const char *c = data;

	if (fd < 0) {
		fprintf(stderr, "fuzz: cannot write '%s': %s\n", path, strerror(errno));
		abort();
	}
	while (n > 0) {
		ssize_t k = write(fd, c, n);

		if (k <= 0) {
			fprintf(stderr, "fuzz: cannot write '%s': %s\n", path, strerror(errno));
			abort();
		}
		c += k;
		n -= (size_t)k;
	}
	close(fd);
}

void fuzz_clean(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			rm_tree(fuzz_path(e->d_name));
	}
	closedir(d);
}

size_t fuzz_split(const uint8_t *data, size_t n, struct fuzz_part *parts, size_t max)
{
	const size_t sl = sizeof(FUZZ_SEPARATOR) - 1;
	size_t k = 0;

	while (k + 1 < max) {
		const uint8_t *s = n >= sl ? memmem(data, n, FUZZ_SEPARATOR, sl) : NULL;

		if (!s)
			break;
		parts[k].p = data;
		parts[k++].n = (size_t)(s - data);
		n -= (size_t)(s - data) + sl;
		data = s + sl;
	}
	parts[k].p = data;
	parts[k++].n = n;
	return k;
}

void fuzz_check_error(int rc)
{
	const char *m = titan_errmsg();

	if (rc < 0 && !*m) {
		fprintf(stderr, "fuzz: error %d (%s) without a message\n", rc, titan_strerr(rc));
		abort();
	}
	if (rc < 0 && verbose)
		fprintf(stderr, "fuzz: %s\n", m);
	titan_error_clear();
}

static uint64_t take(struct fuzz_in *in, size_t k)
{
	uint64_t v = 0;

	for (size_t i = 0; i < k && in->n; i++, in->p++, in->n--)
		v |= (uint64_t)in->p[0] << (8 * i);
	return v;
}

uint8_t fuzz_u8(struct fuzz_in *in) { return (uint8_t)take(in, 1); }
uint16_t fuzz_u16(struct fuzz_in *in) { return (uint16_t)take(in, 2); }
uint32_t fuzz_u32(struct fuzz_in *in) { return (uint32_t)take(in, 4); }
uint64_t fuzz_u64(struct fuzz_in *in) { return take(in, 8); }

void fuzz_config_round_trip(const struct titan_config *c)
{
	struct titan_config back;
	char *yaml = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&yaml, &len);

	if (!fp || titan_config_write_yaml(c, fp) < 0)
		abort();
	fclose(fp);
	if (titan_config_init(&back) < 0)
		abort();
	if (titan_config_load_string(&back, yaml, len, "printed.yaml") < 0) {
		fprintf(stderr, "fuzz: the printed config does not load: %s\n%s", titan_errmsg(),
			yaml);
		abort();
	}
	if (titan_config_diff(c, &back)) {
		fprintf(stderr, "fuzz: %s differs after printing and reading back\n%s",
			titan_config_diff(c, &back), yaml);
		abort();
	}
	titan_config_release(&back);
	free(yaml);
}
