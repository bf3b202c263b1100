/*
 * shard.c — the token shard format (*.tok, see lib/titan/data.h): header
 * encoding and checks, the writer that cuts a token stream into shards
 * (temporary file, header last, fsync, rename), the mmap reader, payload
 * verification and the directory listing in training order.  torchtitan
 * reads HF datasets on the fly; this is llm.c's pre-tokenized shard files
 * (fineweb.py's .bin) with a checksummed, self-describing header.
 */
#include "titan/data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/core.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "titan shards are little-endian and mapped as is: a big-endian host needs byte swapping"
#endif

#define HDR TITAN_SHARD_HEADER_BYTES
#define WRITE_BUF_BYTES ((size_t)4 << 20)
#define OFF_HEADER_CRC 68

/* ------------------------------------------------------------- header */

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static uint32_t header_crc(const uint8_t *buf)
{
	static const uint8_t zero[4];
	uint32_t c = titan_crc32c(0, buf, OFF_HEADER_CRC);

	c = titan_crc32c(c, zero, 4);
	return titan_crc32c(c, buf + OFF_HEADER_CRC + 4, HDR - OFF_HEADER_CRC - 4);
}

void titan_shard_header_encode(const struct titan_shard_header *h, uint8_t out[HDR])
{
	memset(out, 0, HDR);
	memcpy(out, TITAN_SHARD_MAGIC, 8);
	put32(out + 8, h->version);
	put32(out + 12, h->token_bytes);
	put32(out + 16, h->vocab_size);
	put32(out + 20, h->header_bytes);
	put64(out + 24, h->n_tokens);
	put64(out + 32, h->n_docs);
	put64(out + 40, (uint64_t)h->bos_id);
	put64(out + 48, (uint64_t)h->eos_id);
	put64(out + 56, h->fingerprint);
	put32(out + 64, h->payload_crc32c);
	put64(out + 72, h->shard_index);
	memcpy(out + 80, h->split, strnlen(h->split, TITAN_SHARD_SPLIT_MAX));
	put64(out + 96, h->first_token_offset);
	put32(out + OFF_HEADER_CRC, header_crc(out));
}

bool titan_shard_split_valid(const char *split)
{
	size_t n = 0;

	for (const char *p = split; *p; p++, n++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_'))
			return false;
	}
	return n >= 1 && n <= TITAN_SHARD_SPLIT_MAX;
}

uint32_t titan_shard_token_bytes_for(uint32_t vocab_size)
{
	return vocab_size <= 65536u ? 2 : 4;
}

char *titan_shard_name(char *buf, size_t n, const char *dir, const char *split,
		       uint64_t index)
{
	int k = snprintf(buf, n, "%s/%s-%05" PRIu64 ".tok", dir, split, index);

	return k < 0 || (size_t)k >= n ? NULL : buf;
}

int titan_shard_header_decode(const uint8_t *buf, size_t n, const char *path,
			      struct titan_shard_header *h)
{
	uint32_t stored, computed;

	memset(h, 0, sizeof(*h));
	if (n < 8 || memcmp(buf, TITAN_SHARD_MAGIC, 8) != 0)
		return titan_error(TITAN_E_FORMAT, "'%s' is not a titan shard (%s)", path,
				   n < 8 ? "too short for the magic" : "no TITANTOK magic");
	if (n >= 12) {
		h->version = get32(buf + 8);
		if (h->version > TITAN_SHARD_VERSION)
			return titan_error(TITAN_E_FORMAT, "'%s': shard format version %" PRIu32
					   " is newer than this titan (%d): upgrade titan",
					   path, h->version, TITAN_SHARD_VERSION);
		if (h->version == 0)
			return titan_error(TITAN_E_FORMAT, "'%s': bad shard format version 0", path);
	}
	if (n < HDR)
		return titan_error(TITAN_E_FORMAT, "'%s': file is %zu bytes, shorter than the "
				   "%d-byte shard header: truncated?", path, n, HDR);
	stored = get32(buf + OFF_HEADER_CRC);
	computed = header_crc(buf);
	if (stored != computed)
		return titan_error(TITAN_E_FORMAT, "'%s': header checksum mismatch (stored "
				   "0x%08" PRIx32 ", computed 0x%08" PRIx32 "): the header is corrupt",
				   path, stored, computed);
	h->token_bytes = get32(buf + 12);
	h->vocab_size = get32(buf + 16);
	h->header_bytes = get32(buf + 20);
	h->n_tokens = get64(buf + 24);
	h->n_docs = get64(buf + 32);
	h->bos_id = (int64_t)get64(buf + 40);
	h->eos_id = (int64_t)get64(buf + 48);
	h->fingerprint = get64(buf + 56);
	h->payload_crc32c = get32(buf + 64);
	h->header_crc32c = stored;
	h->shard_index = get64(buf + 72);
	memcpy(h->split, buf + 80, TITAN_SHARD_SPLIT_MAX);
	h->split[TITAN_SHARD_SPLIT_MAX] = '\0';
	h->first_token_offset = get64(buf + 96);

	/* A valid CRC with bad fields is a writer bug or a forged file. */
	if (h->header_bytes != HDR)
		return titan_error(TITAN_E_FORMAT, "'%s': header_bytes is %" PRIu32 ", expected %d",
				   path, h->header_bytes, HDR);
	if (h->token_bytes != 2 && h->token_bytes != 4)
		return titan_error(TITAN_E_FORMAT, "'%s': token_bytes is %" PRIu32 ", expected 2 or 4",
				   path, h->token_bytes);
	if (h->vocab_size == 0 || (h->token_bytes == 2 && h->vocab_size > 65536u))
		return titan_error(TITAN_E_FORMAT, "'%s': vocab size %" PRIu32 " does not fit "
				   "%" PRIu32 "-byte ids", path, h->vocab_size, h->token_bytes);
	if (h->bos_id < -1 || h->bos_id >= (int64_t)h->vocab_size ||
	    h->eos_id < -1 || h->eos_id >= (int64_t)h->vocab_size)
		return titan_error(TITAN_E_FORMAT, "'%s': BOS/EOS ids %" PRId64 "/%" PRId64
				   " are outside the vocabulary (%" PRIu32 ")",
				   path, h->bos_id, h->eos_id, h->vocab_size);
	if (buf[80 + TITAN_SHARD_SPLIT_MAX] != 0 || !titan_shard_split_valid(h->split))
		return titan_error(TITAN_E_FORMAT, "'%s': bad split name in the header", path);
	return 0;
}

/* ------------------------------------------------------------- writer */

struct titan_shard_writer {
	char *dir;
	char split[TITAN_SHARD_SPLIT_MAX + 1];
	struct titan_shard_writer_opts o;
	uint32_t doc_id;          /* id counted as a document end; UINT32_MAX none */
	uint8_t *buf;             /* converted payload waiting for write(2) */
	size_t buf_len;
	int fd;                   /* the shard being written, -1 between shards */
	char *cur_tmp;
	struct titan_tmp *cur_track;  /* cur_tmp, removed on a stop signal */
	uint64_t cur_tokens, cur_docs, cur_first;
	uint32_t cur_crc;
	char **tmps;              /* finished shards, index i at tmps[i] */
	struct titan_tmp **tracks; /* ... and their titan_tmp_track */
	size_t ntmps, cap;
	struct titan_shard_writer_stats st;
	bool finished, committed, failed;
};

/* Final name of shard `index` into a malloc'd string (for messages too). */
static char *final_name(const struct titan_shard_writer *w, uint64_t index)
{
	size_t n = strlen(w->dir) + strlen(w->split) + 32;
	char *s = malloc(n);

	if (s)
		titan_shard_name(s, n, w->dir, w->split, index);
	return s;
}

static int fail_io(struct titan_shard_writer *w, const char *what, int err)
{
	char *name = final_name(w, w->ntmps); /* the shard being written */

	w->failed = true;
	titan_error(TITAN_E_IO, "cannot %s shard '%s' (temporary '%s'): %s", what,
		    name ? name : w->split, w->cur_tmp ? w->cur_tmp : "?", strerror(err));
	free(name);
	return TITAN_E_IO;
}

int titan_shard_writer_open(const char *dir, const char *split,
			    const struct titan_shard_writer_opts *opts,
			    struct titan_shard_writer **out)
{
	struct titan_shard_writer *w;
	uint32_t tb = opts->token_bytes ? opts->token_bytes
					: titan_shard_token_bytes_for(opts->vocab_size);

	*out = NULL;
	if (!titan_shard_split_valid(split))
		return titan_error(TITAN_E_INVALID, "bad split name '%s' (1-%d of A-Z a-z 0-9 _)",
				   split, TITAN_SHARD_SPLIT_MAX);
	if (opts->shard_tokens == 0 || opts->vocab_size == 0)
		return titan_error(TITAN_E_INVALID, "shard tokens and vocab size must be > 0");
	if ((tb != 2 && tb != 4) || (tb == 2 && opts->vocab_size > 65536u))
		return titan_error(TITAN_E_INVALID, "%" PRIu32 "-byte ids cannot hold a vocabulary "
				   "of %" PRIu32, tb, opts->vocab_size);
	if (opts->shard_tokens > (UINT64_MAX - HDR) / tb)
		return titan_error(TITAN_E_INVALID, "%" PRIu64 " tokens per shard is too many",
				   opts->shard_tokens);
	if (opts->bos_id < -1 || opts->bos_id >= (int64_t)opts->vocab_size ||
	    opts->eos_id < -1 || opts->eos_id >= (int64_t)opts->vocab_size)
		return titan_error(TITAN_E_INVALID, "BOS/EOS ids %" PRId64 "/%" PRId64 " are outside "
				   "the vocabulary (%" PRIu32 ")", opts->bos_id, opts->eos_id,
				   opts->vocab_size);
	if (!(w = calloc(1, sizeof(*w))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	w->fd = -1;
	w->o = *opts;
	w->o.token_bytes = tb;
	strcpy(w->split, split);
	w->doc_id = opts->eos_id >= 0 ? (uint32_t)opts->eos_id
		  : opts->bos_id >= 0 ? (uint32_t)opts->bos_id : UINT32_MAX;
	if (!(w->dir = titan_strdup(dir)) ||
	    !(w->buf = titan_malloc(WRITE_BUF_BYTES, TITAN_MEM_DATA))) {
		titan_shard_writer_discard(w);
		return TITAN_E_NOMEM;
	}
	*out = w;
	return 0;
}

static int start_shard(struct titan_shard_writer *w)
{
	size_t n = strlen(w->dir) + strlen(w->split) + 48;

	if (!(w->cur_tmp = malloc(n)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	snprintf(w->cur_tmp, n, "%s/.%s-%05" PRIu64 ".tok.tmp-XXXXXX", w->dir, w->split,
		 (uint64_t)w->ntmps);
	w->st.n_shards++;
	if ((w->fd = titan_tmp_mkstemp(w->cur_tmp, O_CLOEXEC, &w->cur_track)) < 0) {
		int rc = fail_io(w, "create", errno);

		free(w->cur_tmp);
		w->cur_tmp = NULL;
		return rc;
	}
	if (lseek(w->fd, HDR, SEEK_SET) != HDR)
		return fail_io(w, "seek in", errno);
	w->cur_tokens = w->cur_docs = 0;
	w->cur_crc = 0;
	w->cur_first = w->st.n_tokens;
	w->st.bytes += HDR;
	return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n, off_t at, bool positional)
{
	while (n > 0) {
		ssize_t k = positional ? pwrite(fd, p, n, at) : write(fd, p, n);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (k == 0) {
			errno = ENOSPC;
			return -1;
		}
		p += k;
		n -= (size_t)k;
		at += k;
	}
	return 0;
}

static int flush_buf(struct titan_shard_writer *w)
{
	if (w->buf_len == 0)
		return 0;
	w->cur_crc = titan_crc32c(w->cur_crc, w->buf, w->buf_len);
	if (write_all(w->fd, w->buf, w->buf_len, 0, false) < 0)
		return fail_io(w, "write", errno);
	w->buf_len = 0;
	return 0;
}

static int end_shard(struct titan_shard_writer *w)
{
	struct titan_shard_header h = {0};
	uint8_t hdr[HDR];
	mode_t mask;
	int rc;

	if ((rc = flush_buf(w)) < 0)
		return rc;
	h.version = TITAN_SHARD_VERSION;
	h.token_bytes = w->o.token_bytes;
	h.vocab_size = w->o.vocab_size;
	h.header_bytes = HDR;
	h.n_tokens = w->cur_tokens;
	h.n_docs = w->cur_docs;
	h.bos_id = w->o.bos_id;
	h.eos_id = w->o.eos_id;
	h.fingerprint = w->o.fingerprint;
	h.payload_crc32c = w->cur_crc;
	h.shard_index = w->ntmps;
	strcpy(h.split, w->split);
	h.first_token_offset = w->cur_first;
	titan_shard_header_encode(&h, hdr);
	if (write_all(w->fd, hdr, HDR, 0, true) < 0)
		return fail_io(w, "write the header of", errno);
	/* mkstemp makes 0600; give the mode open(2) would have given */
	mask = umask(0);
	umask(mask);
	if (fchmod(w->fd, 0666 & ~mask) != 0 || fsync(w->fd) != 0)
		return fail_io(w, "sync", errno);
	rc = close(w->fd);
	w->fd = -1;
	if (rc != 0)
		return fail_io(w, "close", errno);
	if (w->ntmps == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 16;
		char **t = realloc(w->tmps, cap * sizeof(*t));
		struct titan_tmp **k;

		if (!t)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		w->tmps = t;
		if (!(k = realloc(w->tracks, cap * sizeof(*k))))
			return titan_error(TITAN_E_NOMEM, "out of memory");
		w->tracks = k;
		w->cap = cap;
	}
	w->tracks[w->ntmps] = w->cur_track;
	w->tmps[w->ntmps++] = w->cur_tmp;
	w->cur_tmp = NULL;
	w->cur_track = NULL;
	return 0;
}

/* Convert n ids into the write buffer; checks ids and counts documents. */
static int convert(struct titan_shard_writer *w, const uint32_t *in, size_t n)
{
	const uint32_t vocab = w->o.vocab_size, doc = w->doc_id;
	uint8_t *dst = w->buf + w->buf_len;
	uint32_t bad = 0;
	uint64_t docs = 0;

	if (w->o.token_bytes == 2) {
		uint16_t *o = (uint16_t *)(void *)dst;

		for (size_t i = 0; i < n; i++) {
			uint32_t v = in[i];
			bad |= v >= vocab;
			docs += v == doc;
			o[i] = (uint16_t)v;
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			uint32_t v = in[i];
			bad |= v >= vocab;
			docs += v == doc;
		}
		memcpy(dst, in, n * 4);
	}
	if (bad) {
		size_t i = 0;

		while (in[i] < vocab)
			i++;
		w->failed = true;
		return titan_error(TITAN_E_INVALID, "split '%s': token id %" PRIu32 " at position "
				   "%" PRIu64 " is >= the vocab size %" PRIu32, w->split, in[i],
				   w->st.n_tokens + i, vocab);
	}
	w->buf_len += n * w->o.token_bytes;
	w->cur_tokens += n;
	w->cur_docs += docs;
	w->st.n_tokens += n;
	w->st.n_docs += docs;
	w->st.bytes += n * w->o.token_bytes;
	return 0;
}

int titan_shard_writer_write(struct titan_shard_writer *w, const uint32_t *ids, size_t n)
{
	const size_t buf_tokens = WRITE_BUF_BYTES / w->o.token_bytes;
	int rc;

	if (w->failed)
		return titan_error(TITAN_E_INVALID, "shard writer for '%s' already failed", w->split);
	TITAN_ASSERT(!w->finished);
	while (n > 0) {
		uint64_t take;

		if (w->fd < 0 && (rc = start_shard(w)) < 0)
			return rc;
		take = w->o.shard_tokens - w->cur_tokens;
		if (take > buf_tokens - w->buf_len / w->o.token_bytes)
			take = buf_tokens - w->buf_len / w->o.token_bytes;
		if (take > n)
			take = n;
		if ((rc = convert(w, ids, (size_t)take)) < 0)
			return rc;
		ids += take;
		n -= (size_t)take;
		if (w->buf_len == WRITE_BUF_BYTES && (rc = flush_buf(w)) < 0)
			return rc;
		if (w->cur_tokens == w->o.shard_tokens && (rc = end_shard(w)) < 0)
			return rc;
	}
	return 0;
}

int titan_shard_writer_finish(struct titan_shard_writer *w)
{
	int rc;

	if (w->failed)
		return titan_error(TITAN_E_INVALID, "shard writer for '%s' already failed", w->split);
	if (w->finished)
		return 0;
	if (w->fd >= 0 && (rc = end_shard(w)) < 0)
		return rc;
	w->finished = true;
	return 0;
}

int titan_shard_writer_commit(struct titan_shard_writer *w)
{
	int rc, dfd;

	if (w->committed)
		return 0;
	if ((rc = titan_shard_writer_finish(w)) < 0)
		return rc;
	for (size_t i = 0; i < w->ntmps; i++) {
		char *name = final_name(w, i);

		if (!name)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		if (rename(w->tmps[i], name) != 0) {
			rc = titan_error(TITAN_E_IO, "cannot rename '%s' to '%s': %s", w->tmps[i],
					 name, strerror(errno));
			free(name);
			w->failed = true;
			return rc;
		}
		free(name);
		titan_tmp_untrack(w->tracks[i]);
		free(w->tmps[i]);
		w->tmps[i] = NULL;
	}
	/* make the renames durable */
	if ((dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(dfd);
		close(dfd);
	}
	w->committed = true;
	return 0;
}

int titan_shard_writer_close(struct titan_shard_writer *w)
{
	int rc;

	if (!w)
		return 0;
	rc = titan_shard_writer_commit(w);
	titan_shard_writer_discard(w);
	return rc;
}

void titan_shard_writer_discard(struct titan_shard_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (w->cur_tmp)
		unlink(w->cur_tmp);
	titan_tmp_untrack(w->cur_track);
	free(w->cur_tmp);
	for (size_t i = 0; i < w->ntmps; i++) {
		if (w->tmps[i])
			unlink(w->tmps[i]);
		titan_tmp_untrack(w->tracks[i]);
		free(w->tmps[i]);
	}
	free(w->tmps);
	free(w->tracks);
	titan_free(w->buf);
	free(w->dir);
	free(w);
}

void titan_shard_writer_get_stats(const struct titan_shard_writer *w,
				  struct titan_shard_writer_stats *out)
{
	*out = w->st;
}

/* ------------------------------------------------------------- reader */

int titan_shard_open(const char *path, struct titan_shard **out)
{
	struct titan_shard *s = NULL;
	uint8_t hdr[HDR];
	struct stat st;
	uint64_t expect;
	ssize_t n = 0;
	int fd, rc = TITAN_E_IO;

	*out = NULL;
	/* not a regular file (a FIFO would block the open): refused */
	if ((rc = titan_open_regular(path, O_RDONLY, &fd, &st)) < 0)
		return rc;
	rc = TITAN_E_IO;
	do /* a regular file reads whole up to its end */
		n = pread(fd, hdr, HDR, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		titan_error(TITAN_E_IO, "cannot read '%s': %s", path, strerror(errno));
		goto fail;
	}
	if (!(s = calloc(1, sizeof(*s))) || !(s->path = titan_strdup(path))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto fail;
	}
	if ((rc = titan_shard_header_decode(hdr, (size_t)n, path, &s->h)) < 0)
		goto fail;
	rc = TITAN_E_FORMAT;
	if (s->h.n_tokens > (UINT64_MAX - HDR) / s->h.token_bytes) {
		titan_error(rc, "'%s': token count %" PRIu64 " is impossible", path, s->h.n_tokens);
		goto fail;
	}
	expect = HDR + s->h.n_tokens * s->h.token_bytes;
	if ((uint64_t)st.st_size != expect) {
		titan_error(rc, "'%s': expected %" PRIu64 " bytes (header + %" PRIu64 " tokens of %"
			    PRIu32 " bytes), found %jd: %s", path, expect, s->h.n_tokens,
			    s->h.token_bytes, (intmax_t)st.st_size,
			    (uint64_t)st.st_size < expect ? "truncated?" : "trailing bytes?");
		goto fail;
	}
	s->file_bytes = (size_t)expect;
	s->map = mmap(NULL, s->file_bytes, PROT_READ, MAP_SHARED, fd, 0);
	if (s->map == MAP_FAILED) {
		s->map = NULL;
		rc = titan_error(TITAN_E_IO, "cannot map '%s': %s", path, strerror(errno));
		goto fail;
	}
	close(fd);
	*out = s;
	return 0;
fail:
	close(fd);
	titan_shard_close(s);
	return rc;
}

void titan_shard_close(struct titan_shard *s)
{
	if (!s)
		return;
	if (s->map)
		munmap((void *)s->map, s->file_bytes);
	free(s->path);
	free(s);
}

const void *titan_shard_tokens(const struct titan_shard *s, uint32_t *token_bytes,
			       uint64_t *n_tokens)
{
	if (token_bytes)
		*token_bytes = s->h.token_bytes;
	if (n_tokens)
		*n_tokens = s->h.n_tokens;
	return s->map + HDR;
}

uint32_t titan_shard_token(const struct titan_shard *s, uint64_t i)
{
	const uint8_t *p = s->map + HDR;

	TITAN_ASSERT(i < s->h.n_tokens);
	if (s->h.token_bytes == 2) {
		uint16_t v;

		memcpy(&v, p + 2 * i, 2);
		return v;
	}
	return get32(p + 4 * i);
}

static uint32_t max_id_of(const void *q, size_t n, uint32_t tb)
{
	const uint16_t *p16 = q;
	const uint32_t *p32 = q;
	uint32_t m = 0;

	for (size_t i = 0; tb == 2 && i < n; i++)
		m = p16[i] > m ? p16[i] : m;
	for (size_t i = 0; tb == 4 && i < n; i++)
		m = p32[i] > m ? p32[i] : m;
	return m;
}

/* Tokens equal to `id` among n (the writer's document count). */
static uint64_t count_id(const void *q, size_t n, uint32_t tb, uint32_t id)
{
	const uint16_t *p16 = q;
	const uint32_t *p32 = q;
	uint64_t c = 0;

	for (size_t i = 0; tb == 2 && i < n; i++)
		c += p16[i] == id;
	for (size_t i = 0; tb == 4 && i < n; i++)
		c += p32[i] == id;
	return c;
}

int titan_shard_verify(const struct titan_shard *s, uint32_t *max_id)
{
	const uint32_t tb = s->h.token_bytes, vocab = s->h.vocab_size;
	const uint64_t n = s->h.n_tokens;
	const size_t chunk = (size_t)1 << 20; /* tokens: CRC and max while in cache */
	/* documents end at EOS (or start at BOS when there is no EOS) */
	const int64_t doc = s->h.eos_id >= 0 ? s->h.eos_id : s->h.bos_id;
	uint64_t bad = UINT64_MAX, docs = 0;
	uint32_t crc = 0, mx = 0;

	for (uint64_t i = 0; i < n; i += chunk) {
		size_t k = (size_t)(n - i < chunk ? n - i : chunk);
		const uint8_t *q = s->map + HDR + i * tb;
		uint32_t m = max_id_of(q, k, tb);

		if (doc >= 0)
			docs += count_id(q, k, tb, (uint32_t)doc);

		crc = titan_crc32c(crc, q, k * tb);
		for (uint64_t j = i; m >= vocab && bad == UINT64_MAX; j++)
			if (titan_shard_token(s, j) >= vocab)
				bad = j;
		mx = m > mx ? m : mx;
	}
	/* a damaged payload is reported as such, before the ids it garbled */
	if (crc != s->h.payload_crc32c)
		return titan_error(TITAN_E_FORMAT, "'%s': payload checksum mismatch (header 0x%08"
				   PRIx32 ", data 0x%08" PRIx32 "): the shard is corrupt",
				   s->path, s->h.payload_crc32c, crc);
	if (bad != UINT64_MAX)
		return titan_error(TITAN_E_FORMAT, "'%s': token id %" PRIu32 " at position %" PRIu64
				   " is >= the vocab size %" PRIu32 " (byte offset %" PRIu64
				   " of the file)", s->path, titan_shard_token(s, bad), bad, vocab,
				   (uint64_t)HDR + bad * tb);
	if (doc >= 0 && docs != s->h.n_docs)
		return titan_error(TITAN_E_FORMAT, "'%s': the header counts %" PRIu64 " documents, "
				   "the payload holds %" PRIu64 " (id %" PRId64 " ends one)", s->path,
				   s->h.n_docs, docs, doc);
	if (max_id)
		*max_id = mx;
	return 0;
}

int titan_shard_check_next(const struct titan_shard_header *a, const char *pa,
			   const struct titan_shard_header *b, const char *pb)
{
	const char *what = NULL;

	if (strcmp(a->split, b->split) != 0)
		what = "split names differ";
	else if (a->vocab_size != b->vocab_size || a->token_bytes != b->token_bytes)
		what = "vocab size or token width differ";
	else if (a->bos_id != b->bos_id || a->eos_id != b->eos_id)
		what = "BOS/EOS ids differ";
	else if (a->fingerprint != b->fingerprint)
		what = "tokenizer fingerprints differ";
	else if (b->shard_index != a->shard_index + 1)
		what = "shard indices are not consecutive";
	else if (b->first_token_offset != a->first_token_offset + a->n_tokens)
		what = "first_token_offset does not continue the previous shard";
	if (what)
		return titan_error(TITAN_E_FORMAT, "'%s' does not follow '%s': %s (mixed datasets?)",
				   pb, pa, what);
	return 0;
}

/* ------------------------------------------------------------- listing */

struct entry {
	char *name;
	size_t split_len;
	uint64_t index;
};

static int cmp_entry(const void *pa, const void *pb)
{
	const struct entry *a = pa, *b = pb;
	size_t n = a->split_len < b->split_len ? a->split_len : b->split_len;
	int c = memcmp(a->name, b->name, n);

	if (c == 0 && a->split_len != b->split_len)
		c = a->split_len < b->split_len ? -1 : 1;
	if (c == 0 && a->index != b->index)
		c = a->index < b->index ? -1 : 1;
	return c;
}

/* "SPLIT-DIGITS.tok" -> split length and index; false for other names. */
static bool parse_name(const char *name, size_t *split_len, uint64_t *index)
{
	size_t len = strlen(name);
	const char *dash, *end = name + len - 4;
	char split[TITAN_SHARD_SPLIT_MAX + 1];

	if (name[0] == '.' || len < 7 || strcmp(end, ".tok") != 0)
		return false;
	for (dash = end - 1; dash > name && *dash >= '0' && *dash <= '9'; dash--)
		;
	if (*dash != '-' || dash == end - 1 || end - dash > 19 ||
	    (size_t)(dash - name) > TITAN_SHARD_SPLIT_MAX || dash == name)
		return false;
	memcpy(split, name, (size_t)(dash - name));
	split[dash - name] = '\0';
	if (!titan_shard_split_valid(split))
		return false;
	*split_len = (size_t)(dash - name);
	*index = strtoull(dash + 1, NULL, 10);
	return true;
}

int titan_shard_list(const char *dir, const char *split, char ***paths, size_t *n)
{
	struct entry *e = NULL;
	size_t ne = 0, cap = 0;
	char **out = NULL;
	struct dirent *d;
	DIR *dp;
	int rc = TITAN_E_NOMEM;

	*paths = NULL;
	*n = 0;
	if (!(dp = opendir(dir)))
		return titan_error(TITAN_E_IO, "cannot open directory '%s': %s", dir, strerror(errno));
	while ((d = readdir(dp))) {
		struct entry x;

		if (!parse_name(d->d_name, &x.split_len, &x.index))
			continue;
		if (split && (strlen(split) != x.split_len ||
			      memcmp(split, d->d_name, x.split_len) != 0))
			continue;
		if (ne == cap) {
			struct entry *t = realloc(e, (cap = cap ? 2 * cap : 64) * sizeof(*e));

			if (!t)
				goto fail;
			e = t;
		}
		if (!(x.name = strdup(d->d_name)))
			goto fail;
		e[ne++] = x;
	}
	if (ne)
		qsort(e, ne, sizeof(*e), cmp_entry);
	rc = TITAN_E_FORMAT;
	for (size_t i = 0; i < ne; i++) {
		bool first = i == 0 || e[i].split_len != e[i - 1].split_len ||
			     memcmp(e[i].name, e[i - 1].name, e[i].split_len) != 0;
		uint64_t want = first ? 0 : e[i - 1].index + 1;

		if (!first && e[i].index == e[i - 1].index) {
			titan_error(rc, "'%s': '%s' and '%s' have the same shard index", dir,
				    e[i - 1].name, e[i].name);
			goto fail;
		}
		if (e[i].index != want) {
			titan_error(rc, "'%s': shard %.*s-%05" PRIu64 ".tok is missing (found '%s')",
				    dir, (int)e[i].split_len, e[i].name, want, e[i].name);
			goto fail;
		}
	}
	rc = TITAN_E_NOMEM;
	if (ne && !(out = calloc(ne, sizeof(*out))))
		goto fail;
	for (size_t i = 0; i < ne; i++) {
		size_t len = strlen(dir) + strlen(e[i].name) + 2;

		if (!(out[i] = malloc(len))) {
			titan_shard_list_free(out, ne);
			out = NULL;
			goto fail;
		}
		snprintf(out[i], len, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e[i].name);
	}
	*paths = out;
	*n = ne;
	rc = 0;
fail:
	if (rc == TITAN_E_NOMEM)
		titan_error(rc, "out of memory");
	closedir(dp);
	for (size_t i = 0; i < ne; i++)
		free(e[i].name);
	free(e);
	return rc;
}

void titan_shard_list_free(char **paths, size_t n)
{
	if (!paths)
		return;
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
}
