/*
 * loader.c — the stateful data loader: a split's shards as one token
 * sequence cut into seq_len+1 windows (torchtitan's packing in
 * hf_datasets/text_datasets.py, HuggingFaceDataset.__iter__), optionally
 * shuffled per epoch, dealt to data-parallel ranks by global row, with a
 * position that the checkpoint saves.  See the loader section of
 * lib/titan/data.h for the exact contract.
 */
#include "titan/data.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "titan/core.h"

#define FEISTEL_ROUNDS 6

struct titan_loader {
	struct titan_loader_opts o;
	char *dir, *split;            /* owned copies of o.dir, o.split */
	struct titan_shard **shards;
	size_t n_shards;
	uint64_t *starts;             /* n_shards + 1 token offsets */
	bool *verified;               /* o.verify: shard checked (CRC, ids) */
	uint64_t n_tokens, n_windows;
	uint64_t epoch, position;
	unsigned half_bits;           /* Feistel half width (shuffle) */
};

void titan_loader_opts_default(struct titan_loader_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->split = "train";
	o->seq_len = 2048;
	o->local_batch_size = 8;
	o->dp_rank = 0;
	o->dp_degree = 1;
	o->infinite = true;
}

static int check_opts(const struct titan_loader_opts *o)
{
	if (!o->dir || !*o->dir)
		return titan_error(TITAN_E_INVALID, "data loader: no shard folder given");
	if (!o->split || !titan_shard_split_valid(o->split))
		return titan_error(TITAN_E_INVALID, "data loader: bad split name '%s'",
				   o->split ? o->split : "(null)");
	if (o->seq_len < 1 || o->seq_len > INT32_MAX - 1)
		return titan_error(TITAN_E_INVALID, "data loader: seq_len %lld out of range",
				   (long long)o->seq_len);
	if (o->local_batch_size < 1 || o->local_batch_size > INT32_MAX)
		return titan_error(TITAN_E_INVALID,
				   "data loader: local_batch_size %lld out of range",
				   (long long)o->local_batch_size);
	if (o->dp_degree < 1 || o->dp_rank < 0 || o->dp_rank >= o->dp_degree)
		return titan_error(TITAN_E_INVALID, "data loader: dp rank %d of %d is not a rank",
				   o->dp_rank, o->dp_degree);
	return 0;
}

/* Open, check and chain the shards of the split. */
static int open_shards(struct titan_loader *l)
{
	char **paths = NULL;
	size_t n = 0;
	int rc;

	if ((rc = titan_shard_list(l->dir, l->split, &paths, &n)) < 0)
		return rc;
	if (n == 0) {
		rc = titan_error(TITAN_E_FORMAT, "no '%s' shards in '%s' (expected %s/%s-00000.tok "
				 "and following, as titan-shard writes them)",
				 l->split, l->dir, l->dir, l->split);
		goto out;
	}
	l->shards = calloc(n, sizeof(*l->shards));
	l->starts = calloc(n + 1, sizeof(*l->starts));
	if (!l->shards || !l->starts) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory for %zu shards", n);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct titan_shard *s;

		if ((rc = titan_shard_open(paths[i], &s)) < 0)
			goto out;
		l->shards[l->n_shards++] = s;
		if (strcmp(s->h.split, l->split) != 0) {
			rc = titan_error(TITAN_E_FORMAT, "'%s': the header says split '%s', the file "
					 "name '%s' (renamed file?)", s->path, s->h.split, l->split);
			goto out;
		}
		if (i == 0 && s->h.first_token_offset != 0) {
			rc = titan_error(TITAN_E_FORMAT, "'%s': first_token_offset is %" PRIu64
					 ", not 0: the split does not start here", s->path,
					 s->h.first_token_offset);
			goto out;
		}
		if (i > 0 && (rc = titan_shard_check_next(&l->shards[i - 1]->h,
							  l->shards[i - 1]->path, &s->h,
							  s->path)) < 0)
			goto out;
		if (s->h.vocab_size > (uint32_t)INT32_MAX + 1u) {
			rc = titan_error(TITAN_E_FORMAT, "'%s': vocab size %" PRIu32 " does not fit "
					 "int32 token ids", s->path, s->h.vocab_size);
			goto out;
		}
		if (l->o.vocab_size && s->h.vocab_size > l->o.vocab_size) {
			/* name the fix: the tokenizer that made the shards
			 * decides the vocabulary, the model must cover it */
			rc = titan_error(TITAN_E_INVALID, "'%s': the shard header's vocab_size is %"
					 PRIu32 " but the model has %" PRIu32 " ids (model.vocab_size "
					 "%" PRIu32 "): set --model.vocab_size=%" PRIu32 " (or more) "
					 "to train on these shards", s->path, s->h.vocab_size,
					 l->o.vocab_size, l->o.vocab_size, s->h.vocab_size);
			goto out;
		}
		l->starts[i] = s->h.first_token_offset;
		l->starts[i + 1] = s->h.first_token_offset + s->h.n_tokens;
	}
	l->n_tokens = l->starts[n];
	rc = 0;
out:
	titan_shard_list_free(paths, n);
	return rc;
}

int titan_loader_open(const struct titan_loader_opts *opts, struct titan_loader **out)
{
	struct titan_loader *l;
	int rc;

	*out = NULL;
	if ((rc = check_opts(opts)) < 0)
		return rc;
	if (!(l = calloc(1, sizeof(*l))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	l->o = *opts;
	if (!(l->dir = titan_strdup(opts->dir)) || !(l->split = titan_strdup(opts->split))) {
		rc = TITAN_E_NOMEM;
		goto fail;
	}
	l->o.dir = l->dir;
	l->o.split = l->split;
	if ((rc = open_shards(l)) < 0)
		goto fail;
	if (!(l->verified = calloc(l->n_shards, sizeof(*l->verified)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto fail;
	}
	l->n_windows = l->n_tokens / (uint64_t)(opts->seq_len + 1);
	if (l->n_windows == 0) {
		rc = titan_error(TITAN_E_INVALID, "'%s': the '%s' split has %" PRIu64 " tokens, "
				 "fewer than seq_len + 1 = %lld: not one sequence", l->dir,
				 l->split, l->n_tokens, (long long)opts->seq_len + 1);
		goto fail;
	}
	/* Feistel domain 2^(2·half) >= n_windows. */
	l->half_bits = 1;
	while (l->half_bits < 32 && (l->n_windows - 1) >> (2 * l->half_bits) != 0)
		l->half_bits++;
	*out = l;
	return 0;
fail:
	titan_loader_close(l);
	return rc;
}

void titan_loader_close(struct titan_loader *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n_shards; i++)
		titan_shard_close(l->shards[i]);
	free(l->shards);
	free(l->starts);
	free(l->verified);
	free(l->dir);
	free(l->split);
	free(l);
}

/* ------------------------------------------------------------- reading */

/* Largest i with starts[i] <= pos (pos < n_tokens): the shard holding pos
 * (empty shards share their start with the next and are skipped). */
static size_t shard_of(const struct titan_loader *l, uint64_t pos)
{
	size_t lo = 0, hi = l->n_shards; /* answer in [lo, hi) */

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (l->starts[mid] <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Tokens [pos, pos + n) of the split into out, widened to int32. */
static void read_tokens(const struct titan_loader *l, uint64_t pos, size_t n, int32_t *out)
{
	size_t i = shard_of(l, pos);

	TITAN_ASSERT(pos + n <= l->n_tokens);
	while (n > 0) {
		const struct titan_shard *s = l->shards[i];
		uint32_t tb;
		uint64_t have;
		const void *p = titan_shard_tokens(s, &tb, &have);
		uint64_t at = pos - l->starts[i];
		size_t k = (size_t)(have - at < n ? have - at : n);

		if (tb == 2) {
			const uint16_t *q = (const uint16_t *)p + at;
			for (size_t j = 0; j < k; j++)
				out[j] = (int32_t)q[j];
		} else {
			const uint32_t *q = (const uint32_t *)p + at;
			for (size_t j = 0; j < k; j++)
				out[j] = (int32_t)q[j];
		}
		out += k;
		pos += k;
		n -= k;
		i++;
	}
}

void titan_loader_window(const struct titan_loader *l, uint64_t w, int32_t *inputs,
			 int32_t *labels)
{
	const size_t S = (size_t)l->o.seq_len;
	const uint64_t start = w * (uint64_t)(S + 1);

	TITAN_ASSERT(w < l->n_windows);
	read_tokens(l, start, S, inputs);
	memcpy(labels, inputs + 1, (S - 1) * sizeof(*labels));
	read_tokens(l, start + S, 1, labels + S - 1);
}

/* ------------------------------------------------------------- shuffle */

/* A bijection of [0, 4^half) keyed by (seed, epoch): a balanced Feistel
 * network with Philox as the round function. */
static uint64_t feistel(uint64_t x, unsigned half, uint64_t seed, uint64_t stream)
{
	const uint64_t mask = (half >= 64) ? UINT64_MAX : ((uint64_t)1 << half) - 1;
	uint64_t left = x >> half, right = x & mask;

	for (uint64_t r = 0; r < FEISTEL_ROUNDS; r++) {
		uint32_t w[4];
		uint64_t f, t;

		titan_philox4x32(seed, stream, r << 32 | right, w);
		f = ((uint64_t)w[0] | (uint64_t)w[1] << 32) & mask;
		t = left ^ f;
		left = right;
		right = t;
	}
	return left << half | right;
}

uint64_t titan_loader_window_at(const struct titan_loader *l, uint64_t epoch, uint64_t position)
{
	TITAN_ASSERT(position < l->n_windows);
	if (!l->o.shuffle || l->n_windows < 2)
		return position;
	const uint64_t stream = titan_rng_stream_id("loader.shuffle", epoch);
	uint64_t x = position;

	/* Cycle walking: the walk from an index in [0, W) returns to [0, W)
	 * (a permutation's cycle through x meets [0, W) again at the latest at
	 * x), and maps [0, W) one-to-one onto itself.  The domain is < 4·W,
	 * so a few steps on average. */
	do
		x = feistel(x, l->half_bits, l->o.seed, stream);
	while (x >= l->n_windows);
	return x;
}

/* ------------------------------------------------------------- batches */

/* o.verify: the shards window w reads, checked the first time (a rank
 * reads only the shards its windows fall in, at the CRC's GB/s). */
static int verify_window(struct titan_loader *l, uint64_t w)
{
	const uint64_t start = w * (uint64_t)(l->o.seq_len + 1);
	const size_t last = shard_of(l, start + (uint64_t)l->o.seq_len);
	int rc;

	for (size_t i = shard_of(l, start); i <= last; i++) {
		if (l->verified[i])
			continue;
		if ((rc = titan_shard_verify(l->shards[i], NULL)) < 0)
			return rc;
		l->verified[i] = true;
	}
	return 0;
}

static void warn_reloop(const struct titan_loader *l, uint64_t new_epoch)
{
	titan_log_warn("data loader: reached the end of the '%s' split in '%s' (%" PRIu64
		       " sequences of %lld tokens); re-looping: epoch %" PRIu64,
		       l->split, l->dir, l->n_windows, (long long)l->o.seq_len + 1, new_epoch);
}

static int next_batch(struct titan_loader *l, int32_t *inputs, int32_t *labels,
		      struct titan_batch_info *info)
{
	const int64_t S = l->o.seq_len, L = l->o.local_batch_size;
	const uint64_t W = l->n_windows;
	const uint64_t G = (uint64_t)L * (uint64_t)l->o.dp_degree;
	const uint64_t r0 = (uint64_t)L * (uint64_t)l->o.dp_rank; /* this rank's first row */
	uint64_t global_rows = G;

	if (l->position >= W) {
		if (!l->o.infinite)
			return 0;
		l->epoch++;
		l->position -= W;
		warn_reloop(l, l->epoch);
	}
	if (!l->o.infinite && W - l->position < G)
		global_rows = W - l->position;

	int64_t rows = 0;
	for (int64_t b = 0; b < L; b++) {
		int32_t *in = inputs + b * S, *lab = labels + b * S;
		uint64_t g = r0 + (uint64_t)b;

		if (g >= global_rows) { /* padding (end of a validation split) */
			memset(in, 0, (size_t)S * sizeof(*in));
			for (int64_t t = 0; t < S; t++)
				lab[t] = TITAN_LABEL_IGNORE;
			continue;
		}
		uint64_t p = l->position + g;
		uint64_t w = titan_loader_window_at(l, l->epoch + p / W, p % W);
		int rc;

		if (l->o.verify && (rc = verify_window(l, w)) < 0)
			return rc;
		titan_loader_window(l, w, in, lab);
		rows++;
	}
	if (info) {
		info->rows = rows;
		info->global_rows = (int64_t)global_rows;
		info->valid_tokens = rows * S;
		info->global_valid_tokens = (int64_t)global_rows * S;
		info->epoch = l->epoch;
		info->position = l->position;
	}
	/* Advance; epochs entered inside this batch were read: say so.  An end
	 * exactly at W wraps lazily, at the next call. */
	uint64_t end = l->position + global_rows;
	while (end > W) {
		end -= W;
		l->epoch++;
		warn_reloop(l, l->epoch);
	}
	l->position = end;
	return 1;
}

struct next_args {
	struct titan_loader *l;
	int32_t *inputs, *labels;
	struct titan_batch_info *info;
};

static int next_cb(void *p)
{
	struct next_args *a = p;

	return next_batch(a->l, a->inputs, a->labels, a->info);
}

/* The shards are mapped: one truncated in place after it was opened (a
 * re-run of titan-shard writes new files, but `truncate`, a copy over it
 * or a full disk's fallocate do not) makes the page touch beyond its new
 * end a SIGBUS.  Caught, it becomes an error naming the shard and the
 * offset, and the trainer stops as on any data error (issue 21). */
int titan_loader_next(struct titan_loader *l, int32_t *inputs, int32_t *labels,
		      struct titan_batch_info *info)
{
	struct next_args a = {l, inputs, labels, info};
	const void *fault;
	int rc = titan_guard_sigbus(next_cb, &a, &fault);

	if (rc >= 0 || !fault)
		return rc;
	for (size_t i = 0; i < l->n_shards; i++) {
		const struct titan_shard *s = l->shards[i];
		const uint8_t *at = fault;
		struct stat st;

		if (!s->map || at < s->map || at >= s->map + s->file_bytes)
			continue;
		if (stat(s->path, &st) == 0)
			return titan_error(TITAN_E_IO, "'%s': cannot read byte offset %zu: the file "
					   "is %jd bytes now, %zu when it was opened (truncated "
					   "or rewritten in place while training read it)",
					   s->path, (size_t)(at - s->map), (intmax_t)st.st_size,
					   s->file_bytes);
		return titan_error(TITAN_E_IO, "'%s': cannot read byte offset %zu: %s (the file "
				   "was %zu bytes when it was opened)", s->path,
				   (size_t)(at - s->map), strerror(errno), s->file_bytes);
	}
	return rc; /* not in a shard: the guard's message */
}

/* --------------------------------------------------------------- state */

void titan_loader_get_state(const struct titan_loader *l, struct titan_loader_state *st)
{
	memset(st, 0, sizeof(*st));
	st->epoch = l->epoch;
	st->position = l->position;
	st->n_windows = l->n_windows;
	st->seq_len = (uint64_t)l->o.seq_len;
	st->shuffle = l->o.shuffle;
	st->seed = l->o.seed;
}

int titan_loader_set_state(struct titan_loader *l, const struct titan_loader_state *st)
{
	const char *what = NULL;

	if (st->seq_len != (uint64_t)l->o.seq_len)
		what = "seq_len";
	else if (st->n_windows != l->n_windows)
		what = "number of sequences (different data?)";
	else if (st->shuffle != (uint64_t)l->o.shuffle)
		what = "shuffle";
	else if (l->o.shuffle && st->seed != l->o.seed)
		what = "shuffle seed";
	else if (st->position > l->n_windows)
		what = "position";
	if (what)
		return titan_error(TITAN_E_INVALID, "data loader state for '%s' in '%s' does not "
				   "match the data: %s differs (saved: seq_len %" PRIu64 ", %" PRIu64
				   " sequences, shuffle %" PRIu64 ", seed %" PRIu64 ", position %"
				   PRIu64 "; now: seq_len %lld, %" PRIu64 " sequences, shuffle %d, "
				   "seed %" PRIu64 ")", l->split, l->dir, what, st->seq_len,
				   st->n_windows, st->shuffle, st->seed, st->position,
				   (long long)l->o.seq_len, l->n_windows, (int)l->o.shuffle,
				   l->o.seed);
	l->epoch = st->epoch;
	l->position = st->position;
	return 0;
}

void titan_loader_reset(struct titan_loader *l)
{
	l->epoch = 0;
	l->position = 0;
}

void titan_loader_get_info(const struct titan_loader *l, struct titan_loader_info *out)
{
	const struct titan_shard_header *h = &l->shards[0]->h;

	memset(out, 0, sizeof(*out));
	out->n_shards = l->n_shards;
	out->n_tokens = l->n_tokens;
	out->n_windows = l->n_windows;
	out->vocab_size = h->vocab_size;
	out->token_bytes = h->token_bytes;
	out->bos_id = h->bos_id;
	out->eos_id = h->eos_id;
	out->fingerprint = h->fingerprint;
}
