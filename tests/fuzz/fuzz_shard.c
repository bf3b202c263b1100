/*
 * fuzz_shard.c — token shards (lib/data/shard.c) and the data loader that
 * reads a folder of them (lib/data/loader.c).
 *
 * Input: a control byte, a byte of loader knobs, a loader state to restore
 * (u8 epoch, u64 position), then up to 3 shard files split at
 * FUZZ_SEPARATOR.  Control bits: 0x01 a shard is given as its first 128
 * header bytes (the other 3968 header bytes are zero, as the writer leaves
 * them) followed by the payload, else as the whole file; 0x02 fix n_tokens
 * from the file size; 0x04 fix n_docs; 0x08 fix the payload CRC; 0x10 fix
 * the header CRC (so that mutations reach the checks behind the CRCs);
 * 0x20 shuffle; 0x40 infinite; 0x80 the state also sets n_windows (to
 * the position).  The knobs pick the loader's seq_len, batch and DP rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "titan/core.h"
#include "titan/data.h"

#define HDR TITAN_SHARD_HEADER_BYTES
#define COMPACT 128
#define MAX_SHARDS 3

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* The file bytes of one part, patched as the control byte says. */
static uint8_t *make_file(const struct fuzz_part *part, unsigned ctl, size_t *len)
{
	size_t n = part->n, hdr = ctl & 0x01 ? (n < COMPACT ? n : COMPACT) : 0;
	size_t size = ctl & 0x01 ? HDR + (n - hdr) : n;
	uint8_t *f = calloc(1, size ? size : 1);

	if (!f)
		abort();
	if (ctl & 0x01) {
		memcpy(f, part->p, hdr);
		memcpy(f + HDR, part->p + hdr, n - hdr);
	} else {
		memcpy(f, part->p, n);
	}
	if (size >= HDR) {
		uint32_t tb = get32(f + 12), crc;
		int64_t doc = (int64_t)get64(f + 48) >= 0 ? (int64_t)get64(f + 48) : (int64_t)get64(f + 40);
		uint64_t nt = tb == 2 || tb == 4 ? (size - HDR) / tb : 0, docs = 0;

		if (ctl & 0x02 && nt) {
			size = HDR + nt * tb; /* drop a partial id */
			put64(f + 24, nt);
		}
		if (ctl & 0x04 && nt && doc >= 0) {
			for (uint64_t i = 0; i < nt; i++)
				docs += (tb == 2 ? (uint32_t)(f[HDR + 2 * i] | f[HDR + 2 * i + 1] << 8) :
					 get32(f + HDR + 4 * i)) == (uint64_t)doc;
			put64(f + 32, docs);
		}
		if (ctl & 0x08)
			put32(f + 64, titan_crc32c(0, f + HDR, size - HDR));
		if (ctl & 0x10) {
			put32(f + 68, 0);
			crc = titan_crc32c(0, f, HDR);
			put32(f + 68, crc);
		}
	}
	*len = size;
	return f;
}

static void check_shard(const char *path, const uint8_t *f, size_t n)
{
	struct titan_shard_header h, h2;
	struct titan_shard *s = NULL;
	uint32_t max_id;
	int rc;

	fuzz_check_error(titan_shard_header_decode(f, n < HDR ? n : HDR, path, &h));
	rc = titan_shard_open(path, &s);
	fuzz_check_error(rc);
	if (rc < 0)
		return;
	rc = titan_shard_verify(s, &max_id);
	fuzz_check_error(rc);
	if (rc == 0 && s->h.n_tokens && max_id >= s->h.vocab_size)
		abort();
	for (uint64_t i = 0; rc == 0 && i < s->h.n_tokens && i < 64; i++)
		if (titan_shard_token(s, i) >= s->h.vocab_size)
			abort(); /* verified, yet an id past the vocabulary */
	h2 = s->h;
	h2.shard_index++;
	h2.first_token_offset += h2.n_tokens;
	if (titan_shard_check_next(&s->h, path, &h2, path) < 0)
		abort();
	titan_shard_close(s);
}

static void check_loader(const char *dir, unsigned ctl, uint8_t knobs, uint8_t epoch,
			 uint64_t position)
{
	struct titan_loader_opts o;
	struct titan_loader *l = NULL;
	struct titan_loader_info info;
	struct titan_loader_state st;
	int32_t *x, *y;
	int rc;

	titan_loader_opts_default(&o);
	o.dir = dir;
	o.seq_len = 1 + (knobs & 15);
	o.local_batch_size = 1 + (knobs >> 4 & 3);
	o.dp_degree = 1 + (knobs >> 6);
	o.dp_rank = o.dp_degree - 1;
	o.shuffle = ctl & 0x20;
	o.infinite = ctl & 0x40;
	o.seed = 7;
	o.verify = true;
	rc = titan_loader_open(&o, &l);
	fuzz_check_error(rc);
	if (rc < 0)
		return;
	titan_loader_get_info(l, &info);
	if (info.n_windows == 0 || info.n_tokens < info.n_windows * (uint64_t)(o.seq_len + 1))
		abort();
	x = malloc((size_t)(o.seq_len * o.local_batch_size) * sizeof(*x));
	y = malloc((size_t)(o.seq_len * o.local_batch_size) * sizeof(*y));
	if (!x || !y)
		abort();
	for (int k = 0; k < 3 && (rc = titan_loader_next(l, x, y, NULL)) > 0; k++)
		;
	fuzz_check_error(rc);
	titan_loader_get_state(l, &st);
	if (titan_loader_set_state(l, &st) < 0) /* its own state restores */
		abort();
	/* a state from the input: refused or used */
	st.epoch = epoch;
	st.position = position;
	if (ctl & 0x80)
		st.n_windows = position;
	if ((rc = titan_loader_set_state(l, &st)) == 0)
		rc = titan_loader_next(l, x, y, NULL);
	fuzz_check_error(rc);
	(void)titan_loader_window_at(l, 1, info.n_windows - 1);
	titan_loader_window(l, info.n_windows - 1, x, y);
	free(x);
	free(y);
	titan_loader_close(l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = {data, size};
	struct fuzz_part parts[MAX_SHARDS];
	unsigned ctl = fuzz_u8(&in);
	uint8_t knobs = fuzz_u8(&in), epoch = fuzz_u8(&in);
	uint64_t position = fuzz_u64(&in);
	size_t np = fuzz_split(in.p, in.n, parts, MAX_SHARDS);
	char dir[1024];

	snprintf(dir, sizeof(dir), "%s", fuzz_path("shards"));
	fuzz_clean();
	if (mkdir(dir, 0755) < 0)
		abort();
	for (size_t i = 0; i < np; i++) {
		char name[64];
		const char *path;
		size_t n;
		uint8_t *f = make_file(&parts[i], ctl, &n);

		snprintf(name, sizeof(name), "shards/train-%05zu.tok", i);
		path = fuzz_path(name);
		fuzz_write(path, f, n);
		check_shard(path, f, n);
		free(f);
	}
	check_loader(dir, ctl, knobs, epoch, position);
	return 0;
}
