/*
 * util.c — strict number parsing, byte and float formatting, edit distance,
 * path joining, and atomic whole-file writes (temporary name, fsync, rename).
 */
#include "titan/core.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int titan_parse_i64(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (!s || !*s || isspace((unsigned char)*s))
		return TITAN_E_INVALID;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end)
		return TITAN_E_INVALID;
	*out = v;
	return 0;
}

int titan_parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !isdigit((unsigned char)*s))
		return TITAN_E_INVALID;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return TITAN_E_INVALID;
	*out = v;
	return 0;
}

int titan_parse_double(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s || isspace((unsigned char)*s))
		return TITAN_E_INVALID;
	errno = 0;
	v = strtod(s, &end);
	if (*end || (errno == ERANGE && isinf(v)))
		return TITAN_E_INVALID;
	*out = v;
	return 0;
}

int titan_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!s || !isdigit((unsigned char)*s))
		return TITAN_E_INVALID;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return TITAN_E_INVALID;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: return TITAN_E_INVALID;
	}
	if (*end == 'i' && shift)
		end++;
	if (*end == 'B' || (*end == 'b' && shift))
		end++;
	if (*end || (shift && v > (ULLONG_MAX >> shift)))
		return TITAN_E_INVALID;
	*out = (uint64_t)v << shift;
	return 0;
}

const char *titan_format_bytes(char *buf, size_t n, double bytes)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	int u = 0;
	double v = bytes;

	while (fabs(v) >= 1024.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, n, "%.0f B", v);
	else
		snprintf(buf, n, "%.2f %s", v, units[u]);
	return buf;
}

const char *titan_format_grouped(char *buf, size_t n, double v)
{
	char raw[400];
	int len, o = 0;

	if (n == 0)
		return buf;
	snprintf(raw, sizeof(raw), "%.0f", v);
	len = (int)strlen(raw);
	for (int i = 0; i < len && o < (int)n - 2; i++) {
		buf[o++] = raw[i];
		if (raw[i] != '-' && (len - i - 1) % 3 == 0 && i < len - 1)
			buf[o++] = ',';
	}
	buf[o] = '\0';
	return buf;
}

const char *titan_format_double(char *buf, size_t n, double v)
{
	if (isnan(v)) {
		snprintf(buf, n, "nan");
		return buf;
	}
	if (isinf(v)) {
		snprintf(buf, n, v > 0 ? "inf" : "-inf");
		return buf;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, n, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	return buf;
}

int titan_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	int *d, r;

	if (la > 256 || lb > 256)
		return (int)(la > lb ? la : lb);
	d = malloc((la + 1) * (lb + 1) * sizeof(*d));
	if (!d)
		return (int)(la > lb ? la : lb);
#define D(i, j) d[(i) * (lb + 1) + (j)]
	for (size_t i = 0; i <= la; i++)
		D(i, 0) = (int)i;
	for (size_t j = 0; j <= lb; j++)
		D(0, j) = (int)j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			int cost = a[i - 1] != b[j - 1];
			int v = D(i - 1, j) + 1;

			if (D(i, j - 1) + 1 < v)
				v = D(i, j - 1) + 1;
			if (D(i - 1, j - 1) + cost < v)
				v = D(i - 1, j - 1) + cost;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    D(i - 2, j - 2) + 1 < v)
				v = D(i - 2, j - 2) + 1;
			D(i, j) = v;
		}
	}
	r = D(la, lb);
#undef D
	free(d);
	return r;
}

char *titan_strdup(const char *s)
{
	char *p = strdup(s ? s : "");

	if (!p)
		titan_error(TITAN_E_NOMEM, "out of memory copying a string");
	return p;
}

int titan_path_join(char *out, size_t n, const char *base, const char *rel)
{
	size_t lb, lr;
	int w;

	base = base ? base : "";
	rel = rel ? rel : "";
	if (*rel == '/' || !*base) {
		base = rel;
		rel = "";
	}
	/* the parts without their trailing slashes, and rel without its
	 * leading ./ (a path of slashes only is "/") */
	lb = strlen(base);
	while (lb > 1 && base[lb - 1] == '/')
		lb--;
	while (rel[0] == '.' && rel[1] == '/') {
		rel += 2;
		while (*rel == '/')
			rel++;
	}
	lr = strlen(rel);
	while (lr > 0 && rel[lr - 1] == '/')
		lr--;
	w = snprintf(out, n, "%.*s%s%.*s", (int)lb, base,
		     lr && !(lb == 1 && base[0] == '/') ? "/" : "", (int)lr, rel);
	if (w < 0 || (size_t)w >= n)
		return titan_error(TITAN_E_INVALID, "path too long: '%s' under '%s'", rel, base);
	return 0;
}

int titan_afile_open(struct titan_afile *f, const char *path)
{
	size_t n;
	int fd;

	memset(f, 0, sizeof(*f));
	if (!path || !strcmp(path, "-")) {
		f->fp = stdout;
		return 0;
	}
	n = strlen(path) + 16;
	f->path = titan_strdup(path);
	f->tmp = malloc(n);
	if (!f->path || !f->tmp) {
		free(f->path);
		free(f->tmp);
		f->path = f->tmp = NULL;
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	snprintf(f->tmp, n, "%s.tmp.XXXXXX", path);
	fd = titan_tmp_mkstemp(f->tmp, 0, &f->track);
	if (fd < 0 || !(f->fp = fdopen(fd, "wb"))) {
		int e = errno;

		if (fd >= 0) {
			close(fd);
			unlink(f->tmp);
			titan_tmp_untrack(f->track);
			f->track = NULL;
		}
		free(f->tmp);
		f->tmp = NULL;
		titan_error(TITAN_E_IO, "cannot create '%s': %s", path, strerror(e));
		free(f->path);
		f->path = NULL;
		return TITAN_E_IO;
	}
	return 0;
}

int titan_afile_close(struct titan_afile *f, int rc)
{
	if (!f->tmp) { /* standard output: the caller checks it at exit */
		f->fp = NULL;
		return rc;
	}
	if (rc == 0) {
		/* mkstemp makes 0600; give the file the mode open(2) would have given */
		mode_t mask = umask(0);

		umask(mask);
		errno = 0;
		if (fflush(f->fp) != 0 || ferror(f->fp) || fchmod(fileno(f->fp), 0666 & ~mask) != 0 ||
		    fsync(fileno(f->fp)) != 0)
			rc = titan_error(TITAN_E_IO, "cannot write '%s': %s", f->path,
					 strerror(errno ? errno : EIO));
	}
	if (fclose(f->fp) != 0 && rc == 0)
		rc = titan_error(TITAN_E_IO, "cannot write '%s': %s", f->path, strerror(errno));
	if (rc == 0 && rename(f->tmp, f->path) != 0)
		rc = titan_error(TITAN_E_IO, "cannot rename '%s' to '%s': %s", f->tmp, f->path,
				 strerror(errno));
	if (rc != 0)
		unlink(f->tmp);
	titan_tmp_untrack(f->track);
	free(f->tmp);
	free(f->path);
	memset(f, 0, sizeof(*f));
	return rc;
}

int titan_write_file_atomic(const char *path, const void *data, size_t n)
{
	struct titan_afile f;
	int rc;

	if (!path || !strcmp(path, "-"))
		return titan_error(TITAN_E_INVALID, "titan_write_file_atomic needs a file name");
	if ((rc = titan_afile_open(&f, path)) < 0)
		return rc;
	if (n && fwrite(data, 1, n, f.fp) != n)
		rc = titan_error(TITAN_E_IO, "cannot write '%s': %s", path, strerror(errno));
	return titan_afile_close(&f, rc);
}

int titan_map_file(const char *path, const void **map, size_t *size)
{
	struct stat sb;
	void *p = NULL;
	int fd;

	*map = NULL;
	*size = 0;
	/* a FIFO would block the open (issue 21): refused without waiting */
	if (titan_open_regular(path, O_RDONLY, &fd, &sb) < 0)
		return TITAN_E_IO;
	if (sb.st_size > 0) {
		p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			int e = errno;

			close(fd);
			return titan_error(TITAN_E_IO, "cannot map '%s': %s", path, strerror(e));
		}
	}
	close(fd);
	*map = p;
	*size = (size_t)sb.st_size;
	return 0;
}

void titan_unmap_file(const void *map, size_t size)
{
	if (map)
		munmap((void *)map, size);
}
