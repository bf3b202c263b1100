/*
 * tfevents.c — TensorBoard event files (titan/trace.h): TFRecord framing of
 * tensorflow.Event protocol buffers, encoded by hand (the few fields a
 * scalar needs; no protobuf library).  torchtitan's TensorBoardLogger
 * (components/metrics.py) writes the same through torch's SummaryWriter.
 */
#include "titan/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct titan_tfevents {
	char *path;
	int fd;
	off_t end;            /* the end of the last complete record */
	unsigned char *buf;   /* the pending Summary's values, protobuf-encoded */
	size_t len, cap;
	unsigned char *rec;   /* one framed record */
	size_t rec_cap;
	bool oom;
};

/* torch's writer numbers the files a process opens; so do we (two writers
 * opened in one second in one folder get different names) */
static atomic_uint file_uid;

/* ------------------------------------------------------------ encoding */

static bool reserve(unsigned char **p, size_t *cap, size_t need)
{
	unsigned char *q;
	size_t c = *cap ? *cap : 256;

	if (need <= *cap)
		return true;
	while (c < need)
		c *= 2;
	if (!(q = realloc(*p, c)))
		return false;
	*p = q;
	*cap = c;
	return true;
}

static size_t put_varint(unsigned char *p, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		p[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (unsigned char)v;
	return n;
}

static size_t varint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static size_t put_le(unsigned char *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v >> (8 * i));
	return (size_t)bytes;
}

/* TFRecord's masked CRC32C (tensorflow/core/lib/hash/crc32c.h: Mask). */
static uint32_t masked_crc(const void *data, size_t n)
{
	uint32_t c = titan_crc32c(0, data, n);

	return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* The record of one Event: u64 length, masked CRC of the length, the
 * Event (wall_time = 1, double; step = 2, varint, left out when 0 as
 * proto3 does; then file_version = 3 or summary = 5, length-delimited),
 * masked CRC of the Event. */
static int frame(struct titan_tfevents *w, double wall_time, int64_t step, int field,
		 const void *body, size_t body_len, size_t *out_len)
{
	size_t ev = 9 + (step ? 1 + varint_len((uint64_t)step) : 0) + 1 + varint_len(body_len) +
		    body_len;
	unsigned char *p;
	uint64_t bits;
	size_t k = 12;

	if (!reserve(&w->rec, &w->rec_cap, ev + 16))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	p = w->rec;
	put_le(p, ev, 8);
	put_le(p + 8, masked_crc(p, 8), 4);
	memcpy(&bits, &wall_time, 8);
	p[k++] = 0x09;
	k += put_le(p + k, bits, 8);
	if (step) {
		p[k++] = 0x10;
		k += put_varint(p + k, (uint64_t)step);
	}
	p[k++] = (unsigned char)(field << 3 | 2);
	k += put_varint(p + k, body_len);
	memcpy(p + k, body, body_len);
	k += body_len;
	TITAN_ASSERT(k == 12 + ev);
	k += put_le(p + k, masked_crc(p + 12, ev), 4);
	*out_len = k;
	return 0;
}

/* One record on disk, or the file cut back to its last complete record. */
static int emit(struct titan_tfevents *w, size_t n)
{
	size_t done = 0;
	int err;

	while (done < n) {
		ssize_t k = write(w->fd, w->rec + done, n - done);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			goto fail;
		done += (size_t)k;
	}
	w->end += (off_t)n;
	return 0;
fail:
	err = errno ? errno : EIO;
	if (ftruncate(w->fd, w->end) != 0 || lseek(w->fd, w->end, SEEK_SET) < 0)
		titan_log_warn("cannot cut the partial record off '%s': %s", w->path,
			       strerror(errno));
	return titan_error(TITAN_E_IO, "cannot write TensorBoard events to '%s': %s (the file "
			   "ends at the last complete event)", w->path, strerror(err));
}

/* ------------------------------------------------------------ the API */

int titan_tfevents_open(struct titan_tfevents **out, const char *dir, double wall_time)
{
	static const char version[] = "brain.Event:2";
	struct titan_tfevents *w;
	char host[HOST_NAME_MAX + 1] = "localhost";
	size_t n, len;
	int rc;

	*out = NULL;
	if (!(w = calloc(1, sizeof(*w))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	w->fd = -1;
	if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
		snprintf(host, sizeof(host), "localhost");
	for (char *c = host; *c; c++) /* a name, not a path */
		if (*c == '/')
			*c = '_';
	/* torch's SummaryWriter: events.out.tfevents.<%010d seconds>.<host>.<pid>.<n> */
	n = strlen(dir) + strlen(host) + 96;
	if (!(w->path = malloc(n))) {
		free(w);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	snprintf(w->path, n, "%s/events.out.tfevents.%010lld.%s.%lld.%u", dir, (long long)wall_time,
		 host, (long long)getpid(), atomic_fetch_add(&file_uid, 1));
	if ((w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)) < 0) {
		rc = titan_error(TITAN_E_IO, "cannot create '%s': %s", w->path, strerror(errno));
		goto fail;
	}
	/* the first event names the format version (TensorBoard reads no
	 * file without it) */
	if ((rc = frame(w, wall_time, 0, 3, version, sizeof(version) - 1, &len)) < 0 ||
	    (rc = emit(w, len)) < 0)
		goto fail;
	*out = w;
	return 0;
fail:
	if (w->fd >= 0)
		unlink(w->path); /* nothing half-made is left */
	titan_tfevents_close(w);
	return rc;
}

const char *titan_tfevents_path(const struct titan_tfevents *w)
{
	return w ? w->path : NULL;
}

void titan_tfevents_scalar(struct titan_tfevents *w, const char *tag, double value)
{
	size_t tl = strlen(tag), vl = 1 + varint_len(tl) + tl + 5;
	float f = (float)value;
	uint32_t bits;
	unsigned char *p;

	if (!w || w->oom)
		return;
	if (!reserve(&w->buf, &w->cap, w->len + 1 + varint_len(vl) + vl)) {
		w->oom = true;
		return;
	}
	/* Summary.value = 1: Value { tag = 1; simple_value = 2 (float) } */
	p = w->buf + w->len;
	*p++ = 0x0a;
	p += put_varint(p, vl);
	*p++ = 0x0a;
	p += put_varint(p, tl);
	memcpy(p, tag, tl);
	p += tl;
	*p++ = 0x15;
	memcpy(&bits, &f, 4);
	p += put_le(p, bits, 4);
	w->len = (size_t)(p - w->buf);
}

int titan_tfevents_write(struct titan_tfevents *w, int64_t step, double wall_time)
{
	size_t len;
	int rc;

	if (w->oom) {
		w->oom = false;
		w->len = 0;
		return titan_error(TITAN_E_NOMEM, "out of memory for the TensorBoard event of "
				   "step %lld", (long long)step);
	}
	if (w->len == 0)
		return 0;
	TITAN_ASSERT(step >= 0);
	rc = frame(w, wall_time, step, 5, w->buf, w->len, &len);
	w->len = 0;
	return rc < 0 ? rc : emit(w, len);
}

int titan_tfevents_close(struct titan_tfevents *w)
{
	int rc = 0;

	if (!w)
		return 0;
	if (w->fd >= 0 && close(w->fd) != 0)
		rc = titan_error(TITAN_E_IO, "cannot write TensorBoard events to '%s': %s", w->path,
				 strerror(errno));
	free(w->path);
	free(w->buf);
	free(w->rec);
	free(w);
	return rc;
}
