/*
 * memtrace.c — streaming reader of the tagged allocator's memory event log
 * (see titan/memprof.h and docs/formats.md): the header is checked, then
 * records are decoded from a 1 MiB buffer.
 */
#include "titan/memprof.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BUF_BYTES (1u << 20) /* a multiple of the record size */

struct titan_memtrace_reader {
	FILE *fp;
	bool own;
	char *path;
	struct titan_memtrace_header h;
	unsigned char *buf;
	size_t len, pos;        /* bytes in buf, next unread */
	uint64_t offset;        /* file offset of buf[pos] */
	uint64_t tail;          /* bytes of a partial last record */
	bool eof, failed;
};

static const char *const phase_names[TITAN_MEMPROF_NPHASES] = {
	"none", "data", "forward", "loss", "backward", "optimizer", "validation", "other",
};

const char *titan_memprof_phase_name(unsigned phase)
{
	return phase_names[titan_memprof_phase_slot(phase)];
}

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++, v >>= 8)
		p[i] = (unsigned char)(v & 0xff);
}

void titan_memtrace_encode_header(unsigned char out[TITAN_MEMTRACE_HEADER_BYTES],
				  const struct titan_memtrace_header *h)
{
	memset(out, 0, TITAN_MEMTRACE_HEADER_BYTES);
	memcpy(out, TITAN_MEMTRACE_MAGIC, 8);
	put_le(out + 8, h->version, 4);
	put_le(out + 12, (uint32_t)h->rank, 4);
	put_le(out + 16, h->start_unix_ns, 8);
	memcpy(out + 24, h->device, strnlen(h->device, 40));
}

void titan_memtrace_encode_record(unsigned char out[TITAN_MEMTRACE_RECORD_BYTES],
				  const struct titan_memtrace_record *r)
{
	out[0] = r->kind;
	out[1] = r->tag;
	put_le(out + 2, r->phase, 2);
	put_le(out + 4, r->step, 4);
	put_le(out + 8, r->t_ns, 8);
	put_le(out + 16, r->bytes, 8);
	put_le(out + 24, r->addr, 8);
}

/* Fill the buffer so that at least one record is available, keeping the
 * unread bytes.  Returns the bytes available, or -1 after a read error. */
static long fill(struct titan_memtrace_reader *r)
{
	size_t avail = r->len - r->pos;

	if (avail >= TITAN_MEMTRACE_RECORD_BYTES || r->eof)
		return (long)avail;
	memmove(r->buf, r->buf + r->pos, avail);
	r->len = avail;
	r->pos = 0;
	while (!r->eof && r->len < BUF_BYTES) {
		size_t n = fread(r->buf + r->len, 1, BUF_BYTES - r->len, r->fp);

		r->len += n;
		if (n == 0) {
			if (ferror(r->fp))
				return -1;
			r->eof = true;
		}
	}
	return (long)r->len;
}

int titan_memtrace_open(struct titan_memtrace_reader **out, const char *path)
{
	struct titan_memtrace_reader *r = calloc(1, sizeof(*r));
	unsigned char h[TITAN_MEMTRACE_HEADER_BYTES];
	size_t n;
	int rc;

	*out = NULL;
	if (!r || !(r->buf = malloc(BUF_BYTES)) || !(r->path = titan_strdup(path))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto fail;
	}
	if (!strcmp(path, "-")) {
		r->fp = stdin;
	} else if (!(r->fp = fopen(path, "rb"))) {
		rc = titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
		goto fail;
	} else {
		r->own = true;
	}
	n = fread(h, 1, sizeof(h), r->fp);
	if (n < sizeof(h) && ferror(r->fp)) {
		rc = titan_error(TITAN_E_IO, "cannot read '%s': %s", path, strerror(errno));
		goto fail;
	}
	if (n < 8 || memcmp(h, TITAN_MEMTRACE_MAGIC, 7) != 0) {
		rc = titan_error(TITAN_E_FORMAT, "'%s' is not a titan memory trace (bad magic; "
				 "titan-train writes them with --profiling.enable_memory_snapshot)", path);
		goto fail;
	}
	if (n < sizeof(h)) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': truncated header (%zu of %d bytes)", path, n,
				 TITAN_MEMTRACE_HEADER_BYTES);
		goto fail;
	}
	r->h.version = (uint32_t)get_le(h + 8, 4);
	if (r->h.version > TITAN_MEMTRACE_VERSION) {
		rc = titan_error(TITAN_E_UNSUPPORTED, "'%s': memory trace format version %u is newer "
				 "than this titan reads (%d): upgrade titan", path, r->h.version,
				 TITAN_MEMTRACE_VERSION);
		goto fail;
	}
	if (r->h.version == 0 || h[7] != r->h.version) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': bad memory trace version %u (magic byte %u)",
				 path, r->h.version, h[7]);
		goto fail;
	}
	r->h.rank = (int32_t)(uint32_t)get_le(h + 12, 4);
	r->h.start_unix_ns = get_le(h + 16, 8);
	memcpy(r->h.device, h + 24, 40);
	r->h.device[40] = '\0';
	r->offset = TITAN_MEMTRACE_HEADER_BYTES;
	*out = r;
	return 0;
fail:
	titan_memtrace_close(r);
	return rc;
}

void titan_memtrace_close(struct titan_memtrace_reader *r)
{
	if (!r)
		return;
	if (r->own)
		fclose(r->fp);
	free(r->buf);
	free(r->path);
	free(r);
}

const struct titan_memtrace_header *titan_memtrace_header(const struct titan_memtrace_reader *r)
{
	return &r->h;
}

const char *titan_memtrace_path(const struct titan_memtrace_reader *r)
{
	return r->path;
}

uint64_t titan_memtrace_tail_bytes(const struct titan_memtrace_reader *r)
{
	return r->tail;
}

uint64_t titan_memtrace_offset(const struct titan_memtrace_reader *r)
{
	return r->offset;
}

int titan_memtrace_next(struct titan_memtrace_reader *r, struct titan_memtrace_record *rec,
			uint64_t *offset)
{
	const unsigned char *p;
	long avail;

	if (r->failed)
		return 0;
	if ((avail = fill(r)) < 0) {
		r->failed = true;
		return titan_error(TITAN_E_IO, "cannot read '%s': %s", r->path, strerror(errno));
	}
	if (avail < TITAN_MEMTRACE_RECORD_BYTES) {
		r->tail = (uint64_t)avail;
		return 0;
	}
	p = r->buf + r->pos;
	rec->kind = p[0];
	rec->tag = p[1];
	rec->phase = (uint16_t)get_le(p + 2, 2);
	rec->step = (uint32_t)get_le(p + 4, 4);
	rec->t_ns = get_le(p + 8, 8);
	rec->bytes = get_le(p + 16, 8);
	rec->addr = get_le(p + 24, 8);
	if (offset)
		*offset = r->offset;
	if (rec->kind != TITAN_MEMTRACE_ALLOC && rec->kind != TITAN_MEMTRACE_FREE) {
		r->failed = true;
		return titan_error(TITAN_E_FORMAT, "'%s': corrupt record at byte %llu (record %llu): "
				   "unknown kind %u", r->path, (unsigned long long)r->offset,
				   (unsigned long long)((r->offset - TITAN_MEMTRACE_HEADER_BYTES) /
							TITAN_MEMTRACE_RECORD_BYTES),
				   rec->kind);
	}
	if (rec->tag >= TITAN_MEM_NTAGS) {
		r->failed = true;
		return titan_error(TITAN_E_FORMAT, "'%s': corrupt record at byte %llu (record %llu): "
				   "unknown tag %u", r->path, (unsigned long long)r->offset,
				   (unsigned long long)((r->offset - TITAN_MEMTRACE_HEADER_BYTES) /
							TITAN_MEMTRACE_RECORD_BYTES),
				   rec->tag);
	}
	r->pos += TITAN_MEMTRACE_RECORD_BYTES;
	r->offset += TITAN_MEMTRACE_RECORD_BYTES;
	return 1;
}
