/*
 * titan-shard — cut a uint32 token stream into training shards (*.tok, see
 * lib/titan/data.h), with an optional validation split and a deterministic
 * document shuffle; `info` and `verify` read shards back, `cat` turns them
 * back into the token stream.  The stage
 * between titan-tokenize and titan-train (llm.c's fineweb.py writes such
 * shards; torchtitan tokenizes on the fly instead).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/cli.h"
#include "titan/core.h"
#include "titan/data.h"
#include "titan/tok.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "titan-shard cat writes host-order uint32: port it for big-endian hosts"
#endif

enum {
	OPT_VOCAB_SIZE = TITAN_OPT_TOOL_BASE,
	OPT_EOS_ID,
	OPT_BOS_ID,
	OPT_SHARD_TOKENS,
	OPT_VAL_TOKENS,
	OPT_VAL_DOCS,
	OPT_SHUFFLE_DOCS,
	OPT_SEED,
	OPT_JSON,
	OPT_VERIFY,
	OPT_SPLIT,
};

#define READ_BYTES ((size_t)4 << 20)

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: titan-shard [write] --out DIR (-t TOKENIZER | --vocab-size N --eos-id E)\n"
"                   [OPTIONS] [FILE ...]\n"
"       titan-shard info [--json] [--verify] PATH ...\n"
"       titan-shard verify [--json] PATH ...\n"
"       titan-shard cat [--split NAME] [--verify] [-o FILE] PATH ...\n"
"Cut a token stream (uint32 little-endian ids, from FILEs or standard input;\n"
"gzip/zstd-compressed streams are read too) into shards DIR/train-00000.tok,\n"
"... and an optional validation split\n"
"DIR/val-00000.tok, ...; `info` prints shard headers and totals, `verify`\n"
"checks payload checksums and ids; `cat` writes the ids of shards back as the\n"
"token stream (uint32 little-endian, u16 shards widened) on standard output,\n"
"for `| titan-tokenize -d`.  PATHs are shard files or directories.\n"
"\n"
"Write options:\n"
"  -o, --out DIR          output directory (created if missing)\n"
"  -t, --tokenizer FILE   take vocab size, BOS/EOS and fingerprint from a tokenizer\n"
"                         (tiktoken file or tokenizer.json, as titan-tokenize)\n"
"  -e, --encoding NAME    with -t: llama3, cl100k_base or o200k_base (default: detect)\n"
"      --vocab-size N     vocabulary size (ids must be < N) when there is no tokenizer\n"
"      --eos-id E         end-of-document id (-1: none); required with --vocab-size\n"
"      --bos-id B         beginning-of-document id (default: none / the tokenizer's)\n"
"      --shard-tokens N   tokens per shard (default 100M)\n"
"      --val-tokens N     validation split: the first documents totalling >= N tokens\n"
"      --val-docs N       validation split: the first N documents\n"
"      --shuffle-docs     shuffle documents first (spools the input to DIR)\n"
"      --seed S           shuffle seed (default 0)\n"
"  -f, --force            replace the shards in DIR (stale ones removed after success)\n"
"Counts take decimal suffixes: K = 10^3, M = 10^6, G = 10^9, T = 10^12.\n"
"\n"
"Info options:\n"
"      --json             one JSON object instead of the table\n"
"      --verify           also check payload checksums and ids (as `verify`)\n"
"\n"
"Cat options:\n"
"      --split NAME       a directory's shards of this split only (default: every\n"
"                         split in stream order: val, then train, then others)\n"
"      --verify           check payload checksums and ids before writing anything\n"
"  -o, --out FILE         write FILE (atomically) instead of standard output\n"
"\n"
"Common options:\n"
"      --progress         input read of the total (%%, MB/s, ETA), tokens and documents\n"
"                         on stderr even when it is not a terminal\n"
"  -v, --verbose          more log output; -q, --quiet: errors only\n"
"  -h, --help             show this help;  --version: version and features\n"
"\n"
"Example:\n"
"  titan-tokenize --tokenizer tok.model corpus.jsonl |\n"
"      titan-shard -t tok.model --val-docs 1000 --out data/\n"
"  titan-shard verify data/\n"
"  titan-shard cat --split val data/ | titan-tokenize -t tok.model -d --format text\n"
"\n"
"See also: titan-tokenize(1), titan-train(1), docs/formats.md\n");
}

/* A count with an optional decimal suffix (tokens and documents are not bytes). */
static int parse_count(const char *s, uint64_t *out)
{
	char buf[32];
	size_t n = strlen(s);
	uint64_t v, mul = 1;

	if (n == 0 || n >= sizeof(buf))
		return TITAN_E_INVALID;
	memcpy(buf, s, n + 1);
	switch (buf[n - 1]) {
	case 'k': case 'K': mul = 1000ull; break;
	case 'm': case 'M': mul = 1000000ull; break;
	case 'g': case 'G': mul = 1000000000ull; break;
	case 't': case 'T': mul = 1000000000000ull; break;
	}
	if (mul > 1)
		buf[n - 1] = '\0';
	if (titan_parse_u64(buf, &v) < 0 || v > UINT64_MAX / mul)
		return TITAN_E_INVALID;
	*out = v * mul;
	return 0;
}

/* ------------------------------------------------------------- write */

struct job {
	struct titan_cli cli;
	const char *out;
	uint32_t vocab;
	int64_t bos, eos;
	uint64_t fingerprint, shard_tokens, val_tokens, val_docs, seed;
	bool shuffle, force;
	struct titan_shard_writer *val, *train;
	bool in_val;
	uint64_t v_docs, v_toks;   /* validation split so far */
	uint64_t tokens, docs;
	uint64_t bytes_in;         /* input file bytes read (compressed ones as stored) */
	uint32_t last_id;
	struct titan_progress pr;  /* reading: bytes of the inputs; shuffled writing: docs */
	int spool;                 /* --shuffle-docs: the input, -1 otherwise */
};

/* The progress line: input bytes read of their total while reading, then
 * (--shuffle-docs) documents written of their number. */
static void progress(struct job *j, uint64_t done, bool final)
{
	char extra[96], a[32], b[32];

	if (!j->pr.on)
		return;
	if (j->pr.bytes)
		snprintf(extra, sizeof(extra), "%s tokens, %s docs",
			 titan_format_grouped(a, sizeof(a), (double)j->tokens),
			 titan_format_grouped(b, sizeof(b), (double)j->docs));
	else /* shuffled writing: the documents are the count */
		snprintf(extra, sizeof(extra), "%s tokens",
			 titan_format_grouped(a, sizeof(a), (double)j->tokens));
	if (final)
		titan_progress_finish(&j->pr, done, extra);
	else
		titan_progress_update(&j->pr, done, extra);
}

/* Total bytes of the inputs when every one is a regular file, else 0. */
static uint64_t inputs_size(int nfiles, char **files)
{
	uint64_t total = 0;

	for (int i = 0; i < (nfiles ? nfiles : 1); i++) {
		const char *f = nfiles ? files[i] : "-";
		struct stat st;
		off_t at = 0;

		if ((strcmp(f, "-") ? stat(f, &st) : fstat(STDIN_FILENO, &st)) != 0 ||
		    !S_ISREG(st.st_mode))
			return 0;
		if (!strcmp(f, "-") && (at = lseek(STDIN_FILENO, 0, SEEK_CUR)) < 0)
			at = 0;
		total += (uint64_t)(st.st_size - (at < st.st_size ? at : st.st_size));
	}
	return total;
}

/* The validation split is full: its last document has ended. */
static bool val_full(const struct job *j)
{
	return j->val_docs ? j->v_docs >= j->val_docs : j->v_toks >= j->val_tokens;
}

/* One whole document (shuffled order). */
static int route_doc(struct job *j, const uint32_t *ids, size_t n)
{
	if (!j->in_val)
		return titan_shard_writer_write(j->train, ids, n);
	j->v_docs++;
	j->v_toks += n;
	if (val_full(j))
		j->in_val = false;
	return titan_shard_writer_write(j->val, ids, n);
}

/* Any piece of the stream (stream order): documents end at EOS. */
static int route_stream(struct job *j, const uint32_t *ids, size_t n)
{
	const uint32_t eos = (uint32_t)j->eos;
	size_t start = 0;
	int rc;

	for (size_t i = 0; j->in_val && i < n; i++) {
		if (ids[i] != eos)
			continue;
		j->v_docs++;
		j->v_toks += i + 1 - start;
		start = i + 1;
		if (val_full(j)) {
			j->in_val = false;
			if ((rc = titan_shard_writer_write(j->val, ids, start)) < 0)
				return rc;
			ids += start;
			n -= start;
			start = 0;
		}
	}
	if (j->in_val) {
		j->v_toks += n - start;
		return titan_shard_writer_write(j->val, ids, n);
	}
	return titan_shard_writer_write(j->train, ids, n);
}

/* Checks ids (naming the file and position) and counts documents. */
static int check_ids(struct job *j, const uint32_t *ids, size_t n, const char *name,
		     uint64_t pos)
{
	const uint32_t vocab = j->vocab, eos = (uint32_t)j->eos;
	uint32_t bad = 0;
	uint64_t docs = 0;

	for (size_t i = 0; i < n; i++) {
		bad |= ids[i] >= vocab;
		docs += ids[i] == eos;
	}
	if (bad) {
		size_t i = 0;

		while (ids[i] < vocab)
			i++;
		return titan_error(TITAN_E_FORMAT, "%s: token id %" PRIu32 " at position %" PRIu64
				   " is >= the vocab size %" PRIu32 " (wrong --tokenizer/--vocab-size?)",
				   name, ids[i], pos + i, vocab);
	}
	if (j->eos >= 0)
		j->docs += docs;
	j->tokens += n;
	if (n)
		j->last_id = ids[n - 1];
	return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t k = write(fd, c, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Read one input (path or "-"; gzip/zstd decompressed) block by block into
 * the router or spool. */
static int read_input(struct job *j, const char *path, uint8_t *buf)
{
	const bool is_stdin = strcmp(path, "-") == 0;
	const char *name = is_stdin ? "standard input" : path;
	const uint64_t bytes0 = j->bytes_in;
	uint64_t pos = 0, total = 0;
	size_t have = 0;
	struct titan_instream *in;
	int rc = titan_instream_open(path, name, &in);

	if (rc < 0)
		return rc;
	/* an uncompressed file's length is known: say so before reading a byte */
	if (titan_instream_compression(in) == TITAN_COMPRESSION_NONE &&
	    titan_instream_size(in) >= 0 && titan_instream_size(in) % 4 != 0)
		rc = titan_error(TITAN_E_FORMAT, "%s: %jd bytes is not a whole number of uint32 "
				 "token ids (truncated stream?)", name, (intmax_t)titan_instream_size(in));
	while (rc == 0) {
		int64_t k = titan_instream_read(in, buf + have, READ_BYTES - have);
		size_t whole;

		if (k < 0) {
			rc = (int)k;
			break;
		}
		if (k == 0) {
			if (have)
				rc = titan_error(TITAN_E_FORMAT, "%s: %" PRIu64 " bytes%s is not a whole "
						 "number of uint32 token ids (truncated stream?)",
						 name, total,
						 titan_instream_compression(in) == TITAN_COMPRESSION_NONE ?
						 "" : " (uncompressed)");
			break;
		}
		have += (size_t)k;
		total += (uint64_t)k;
		j->bytes_in = bytes0 + titan_instream_consumed(in);
		whole = have / 4;
		if ((rc = check_ids(j, (const uint32_t *)(void *)buf, whole, name, pos)) < 0)
			break;
		if (j->spool >= 0) {
			if (write_all(j->spool, buf, whole * 4) < 0) {
				rc = titan_error(TITAN_E_IO, "cannot write the shuffle spool in '%s': %s",
						 j->out, strerror(errno));
				break;
			}
		} else if ((rc = route_stream(j, (const uint32_t *)(void *)buf, whole)) < 0) {
			break;
		}
		pos += whole;
		memmove(buf, buf + whole * 4, have - whole * 4);
		have -= whole * 4;
		progress(j, j->bytes_in, false);
	}
	titan_instream_close(in);
	return rc;
}

/* --shuffle-docs: index the spooled documents, Fisher-Yates with Philox. */
static int write_shuffled(struct job *j)
{
	const uint32_t eos = (uint32_t)j->eos;
	uint64_t n = j->tokens, nd = 0, *start = NULL, *perm = NULL;
	const uint32_t *ids = NULL;
	struct titan_rng rng;
	int rc = 0;

	if (n == 0)
		return 0;
	ids = mmap(NULL, n * 4, PROT_READ, MAP_SHARED, j->spool, 0);
	if (ids == MAP_FAILED)
		return titan_error(TITAN_E_IO, "cannot map the shuffle spool: %s", strerror(errno));
	nd = j->docs + (ids[n - 1] != eos); /* a last document without EOS counts */
	start = titan_malloc((nd + 1) * sizeof(*start), TITAN_MEM_DATA);
	perm = titan_malloc(nd * sizeof(*perm), TITAN_MEM_DATA);
	if (!start || !perm) {
		rc = TITAN_E_NOMEM;
		goto done;
	}
	start[0] = 0;
	for (uint64_t i = 0, d = 1; i < n; i++)
		if (ids[i] == eos)
			start[d++] = i + 1;
	start[nd] = n;
	for (uint64_t i = 0; i < nd; i++)
		perm[i] = i;
	titan_rng_init(&rng, j->seed, titan_rng_stream_id("titan-shard/shuffle-docs", 0));
	for (uint64_t i = nd - 1; i > 0; i--) {
		uint64_t k = titan_rng_below(&rng, i + 1), t = perm[i];

		perm[i] = perm[k];
		perm[k] = t;
	}
	progress(j, j->bytes_in, true); /* reading done */
	titan_progress_init(&j->pr, j->pr.on, "titan-shard: writing shuffled", "docs", nd);
	for (uint64_t i = 0; i < nd && rc == 0; i++) {
		uint64_t d = perm[i];

		rc = route_doc(j, ids + start[d], (size_t)(start[d + 1] - start[d]));
		if ((i & 1023) == 0)
			progress(j, i, false);
	}
	if (rc == 0)
		progress(j, nd, true);
done:
	titan_free(start);
	titan_free(perm);
	munmap((void *)ids, n * 4);
	return rc;
}

static bool is_shard_name(const char *name)
{
	size_t n = strlen(name);

	return name[0] != '.' && n > 4 && strcmp(name + n - 4, ".tok") == 0;
}

/* mkdir -p; then refuse a directory holding shards unless --force. */
static int prepare_dir(struct job *j)
{
	char *p = titan_strdup(j->out);
	struct dirent *d;
	DIR *dp;
	int rc = 0;

	if (!p)
		return TITAN_E_NOMEM;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;

		*s = '\0';
		if (mkdir(p, 0777) != 0 && errno != EEXIST) {
			rc = titan_error(TITAN_E_IO, "cannot create directory '%s': %s", p, strerror(errno));
			break;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	free(p);
	if (rc < 0)
		return rc;
	if (!(dp = opendir(j->out)))
		return titan_error(TITAN_E_IO, "cannot open directory '%s': %s", j->out, strerror(errno));
	while (!j->force && (d = readdir(dp)))
		if (is_shard_name(d->d_name)) {
			rc = titan_error(TITAN_E_IO, "output directory '%s' already holds shards ('%s'); "
					 "use --force to replace them", j->out, d->d_name);
			break;
		}
	closedir(dp);
	return rc;
}

/* Is `name` shard i < n of `split` written by this run? */
static bool ours(const char *name, const char *split, uint64_t n)
{
	size_t k = strlen(split);
	char want[64];
	uint64_t i;

	if (strncmp(name, split, k) != 0 || name[k] != '-' || name[k + 1] < '0' || name[k + 1] > '9')
		return false;
	i = strtoull(name + k + 1, NULL, 10);
	snprintf(want, sizeof(want), "%s-%05" PRIu64 ".tok", split, i);
	return i < n && strcmp(want, name) == 0;
}

/* --force: remove shards (and leftover temporaries) this run did not write. */
static void remove_stale(struct job *j, uint64_t n_train, uint64_t n_val)
{
	struct dirent *d;
	DIR *dp = opendir(j->out);

	if (!dp)
		return;
	while ((d = readdir(dp))) {
		const char *s = d->d_name;
		bool stale_tmp = s[0] == '.' && strstr(s, ".tok.tmp-");
		char path[4096];

		if (!stale_tmp && (!is_shard_name(s) || ours(s, "train", n_train) || ours(s, "val", n_val)))
			continue;
		snprintf(path, sizeof(path), "%s/%s", j->out, s);
		if (unlink(path) == 0)
			titan_log_info("removed stale '%s'", path);
		else
			titan_log_warn("cannot remove stale '%s': %s", path, strerror(errno));
	}
	closedir(dp);
}

static int run_write(struct job *j, int nfiles, char **files)
{
	struct titan_shard_writer_opts o = {
		.shard_tokens = j->shard_tokens, .vocab_size = j->vocab,
		.bos_id = j->bos, .eos_id = j->eos, .fingerprint = j->fingerprint,
	};
	struct titan_shard_writer_stats tr = {0}, va = {0};
	uint8_t *buf = NULL;
	int rc;

	for (int i = 0; i < nfiles; i++) {
		struct stat st;

		if (strcmp(files[i], "-") != 0 && stat(files[i], &st) != 0)
			return titan_error(TITAN_E_IO, "cannot open '%s': %s", files[i], strerror(errno));
	}
	if ((rc = prepare_dir(j)) < 0)
		return rc;
	if ((j->val_docs || j->val_tokens) &&
	    (rc = titan_shard_writer_open(j->out, "val", &o, &j->val)) < 0)
		return rc;
	j->in_val = j->val != NULL;
	if ((rc = titan_shard_writer_open(j->out, "train", &o, &j->train)) < 0)
		return rc;
	if (!(buf = titan_malloc(READ_BYTES, TITAN_MEM_DATA)))
		return TITAN_E_NOMEM;
	if (j->shuffle) {
		char spool[4096];

		snprintf(spool, sizeof(spool), "%s/.titan-shard-spool-XXXXXX", j->out);
		if ((j->spool = mkostemp(spool, O_CLOEXEC)) < 0) {
			rc = titan_error(TITAN_E_IO, "cannot create '%s': %s", spool, strerror(errno));
			goto done;
		}
		unlink(spool); /* gone with the process, whatever happens */
	}
	titan_progress_init(&j->pr, j->cli.progress, "titan-shard", "bytes",
			    inputs_size(nfiles, files));
	for (int i = 0; i < (nfiles ? nfiles : 1) && rc == 0; i++)
		rc = read_input(j, nfiles ? files[i] : "-", buf);
	if (rc == 0 && j->tokens == 0)
		rc = titan_error(TITAN_E_FORMAT, "no input tokens (empty input)");
	/* not one end of document: the stream was made with another tokenizer
	 * or encoding than -t/-e say (a 768-id tokenizer read as cl100k_base
	 * made shards of 0 documents) */
	if (rc == 0 && j->eos >= 0 && j->docs == 0 && j->tokens > 1)
		rc = titan_error(TITAN_E_INVALID, "the input's %" PRIu64 " tokens hold no "
				 "end-of-document id %" PRId64 ": it was made with another tokenizer "
				 "or encoding than this one (titan-tokenize's -t and -e)",
				 j->tokens, j->eos);
	if (rc == 0 && j->eos >= 0 && j->last_id != (uint32_t)j->eos)
		titan_log_warn("the input does not end with EOS (id %" PRId64 "): its last document "
			       "is incomplete (truncated stream?)", j->eos);
	if (rc == 0 && j->shuffle)
		rc = write_shuffled(j);
	if (rc == 0 && j->val && (rc = titan_shard_writer_finish(j->val)) == 0)
		titan_shard_writer_get_stats(j->val, &va);
	if (rc == 0 && (rc = titan_shard_writer_finish(j->train)) == 0)
		titan_shard_writer_get_stats(j->train, &tr);
	if (rc == 0 && tr.n_tokens == 0)
		rc = titan_error(TITAN_E_FORMAT, "the validation split took the whole input (%" PRIu64
				 " documents, %" PRIu64 " tokens): nothing is left for training",
				 j->v_docs, j->v_toks);
	/* all splits complete under temporary names: now rename them into place */
	if (rc == 0 && j->val)
		rc = titan_shard_writer_commit(j->val);
	if (rc == 0)
		rc = titan_shard_writer_commit(j->train);
	if (!j->shuffle)
		progress(j, j->bytes_in, true);
	if (rc == 0) {
		if (j->force)
			remove_stale(j, tr.n_shards, va.n_shards);
		titan_log_info("%s: %" PRIu64 " train shards (%" PRIu64 " tokens, %" PRIu64 " docs), %"
			       PRIu64 " val shards (%" PRIu64 " tokens, %" PRIu64 " docs), %s ids",
			       j->out, tr.n_shards, tr.n_tokens, tr.n_docs, va.n_shards, va.n_tokens,
			       va.n_docs, titan_shard_token_bytes_for(j->vocab) == 2 ? "u16" : "u32");
	}
done:
	if (j->spool >= 0)
		close(j->spool);
	titan_free(buf);
	return rc;
}

/* ------------------------------------------------------- info, verify */

struct totals {
	char split[TITAN_SHARD_SPLIT_MAX + 1];
	uint64_t shards, tokens, docs, bytes;
};

struct report {
	bool json, verify, verify_cmd;
	bool header;           /* the table's header line is out */
	struct titan_json js;
	struct totals t[17]; /* per split, [0] = all */
	int nt;
	int bad;
};

static void add_totals(struct report *r, const struct titan_shard *s)
{
	int k;

	for (k = 1; k < r->nt && strcmp(r->t[k].split, s->h.split) != 0; k++)
		;
	if (k == r->nt && r->nt < 17)
		strcpy(r->t[r->nt++].split, s->h.split);
	for (int i = 0; i < 2; i++) {
		struct totals *t = &r->t[i ? k : 0];

		if (i && k >= r->nt) /* more than 16 splits: only the overall totals */
			break;
		t->shards++;
		t->tokens += s->h.n_tokens;
		t->docs += s->h.n_docs;
		t->bytes += s->file_bytes;
	}
}

static void juint(struct titan_json *j, const char *key, uint64_t v)
{
	titan_json_key(j, key);
	titan_json_uint(j, v);
}

static void jstr(struct titan_json *j, const char *key, const char *v)
{
	titan_json_key(j, key);
	titan_json_string(j, v);
}

static void report_error(struct report *r, const struct titan_cli *cli, const char *path, int code)
{
	r->bad++;
	titan_cli_fail(cli, code);
	if (r->json) {
		titan_json_object_begin(&r->js);
		jstr(&r->js, "path", path);
		jstr(&r->js, "error", titan_errmsg());
		titan_json_object_end(&r->js);
	}
}

static void report_shard(struct report *r, const struct titan_shard *s, const uint32_t *max_id)
{
	const struct titan_shard_header *h = &s->h;

	add_totals(r, s);
	if (r->json) {
		struct titan_json *j = &r->js;
		char fp[32], crc[16];

		snprintf(fp, sizeof(fp), "0x%016" PRIx64, h->fingerprint);
		snprintf(crc, sizeof(crc), "0x%08" PRIx32, h->payload_crc32c);
		titan_json_object_begin(j);
		jstr(j, "path", s->path);
		jstr(j, "split", h->split);
		juint(j, "index", h->shard_index);
		juint(j, "version", h->version);
		juint(j, "token_bytes", h->token_bytes);
		juint(j, "vocab_size", h->vocab_size);
		titan_json_key(j, "bos_id"); titan_json_int(j, h->bos_id);
		titan_json_key(j, "eos_id"); titan_json_int(j, h->eos_id);
		jstr(j, "fingerprint", fp);
		juint(j, "n_tokens", h->n_tokens);
		juint(j, "n_docs", h->n_docs);
		juint(j, "first_token_offset", h->first_token_offset);
		jstr(j, "payload_crc32c", crc);
		juint(j, "bytes", s->file_bytes);
		if (max_id) {
			titan_json_key(j, "verified"); titan_json_bool(j, true);
			juint(j, "max_id", *max_id);
		}
		titan_json_object_end(j);
	} else if (r->verify_cmd) {
		printf("%s: ok (%" PRIu64 " tokens, max id %" PRIu32 " < vocab %" PRIu32 ")\n",
		       s->path, h->n_tokens, *max_id, h->vocab_size);
	} else {
		/* the header comes with the first row: a bad path alone prints
		 * only its error */
		if (!r->header)
			printf("#path\tsplit\tindex\tversion\tdtype\tvocab_size\tbos_id\teos_id\t"
			       "fingerprint\tn_tokens\tn_docs\tfirst_token_offset\tpayload_crc32c\t"
			       "bytes%s\n", r->verify ? "\tmax_id\tverify" : "");
		r->header = true;
		printf("%s\t%s\t%" PRIu64 "\t%" PRIu32 "\tu%" PRIu32 "\t%" PRIu32 "\t%" PRId64 "\t%"
		       PRId64 "\t0x%016" PRIx64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t0x%08" PRIx32
		       "\t%zu", s->path, h->split, h->shard_index, h->version, 8 * h->token_bytes,
		       h->vocab_size, h->bos_id, h->eos_id, h->fingerprint, h->n_tokens, h->n_docs,
		       h->first_token_offset, h->payload_crc32c, s->file_bytes);
		if (max_id)
			printf("\t%" PRIu32 "\tok", *max_id);
		printf("\n");
	}
}

/* One shard file; `prev` (when it comes from the same directory listing)
 * is checked to be followed by this one.  Keeps this header in *prev. */
static void one_shard(struct report *r, const struct titan_cli *cli, const char *path,
		      struct titan_shard_header *prev, char *prev_path, bool *have_prev)
{
	struct titan_shard *s = NULL;
	uint32_t max_id;
	int rc = titan_shard_open(path, &s);

	if (rc == 0 && *have_prev && strcmp(prev->split, s->h.split) == 0)
		rc = titan_shard_check_next(prev, prev_path, &s->h, path);
	if (rc == 0 && r->verify)
		rc = titan_shard_verify(s, &max_id);
	if (rc == 0 && r->verify) {
		/* the loader finds a split by file name: train-00000.tok holds "train" */
		const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
		const size_t sl = strlen(s->h.split);

		if (strncmp(base, s->h.split, sl) != 0 || base[sl] != '-')
			rc = titan_error(TITAN_E_FORMAT, "'%s': the header's split is '%s' but the "
					 "file name is not '%s-NNNNN.tok' (renamed?)", path,
					 s->h.split, s->h.split);
	}
	*have_prev = false;
	if (s) {
		*prev = s->h;
		snprintf(prev_path, 4096, "%s", path);
		*have_prev = true;
	}
	if (rc < 0)
		report_error(r, cli, path, rc);
	else
		report_shard(r, s, r->verify ? &max_id : NULL);
	titan_shard_close(s);
}

static int run_info(struct titan_cli *cli, struct report *r, int npaths, char **paths)
{
	if (r->json) {
		titan_json_init(&r->js);
		titan_json_object_begin(&r->js);
		titan_json_key(&r->js, "shards");
		titan_json_array_begin(&r->js);
	}
	r->nt = 1;
	strcpy(r->t[0].split, "all");
	for (int i = 0; i < npaths; i++) {
		struct titan_shard_header prev;
		char prev_path[4096];
		bool have_prev = false;
		struct stat st;
		char **list = NULL;
		size_t n = 0;

		if (stat(paths[i], &st) != 0) {
			titan_error(TITAN_E_IO, "cannot open '%s': %s", paths[i], strerror(errno));
			report_error(r, cli, paths[i], TITAN_E_IO);
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			one_shard(r, cli, paths[i], &prev, prev_path, &have_prev);
			continue;
		}
		if (titan_shard_list(paths[i], NULL, &list, &n) < 0) {
			report_error(r, cli, paths[i], TITAN_E_FORMAT);
			continue;
		}
		if (n == 0) {
			titan_error(TITAN_E_FORMAT, "'%s' holds no shards (*-NNNNN.tok)", paths[i]);
			report_error(r, cli, paths[i], TITAN_E_FORMAT);
		}
		for (size_t k = 0; k < n; k++)
			one_shard(r, cli, list[k], &prev, prev_path, &have_prev);
		titan_shard_list_free(list, n);
	}
	if (r->json) {
		titan_json_array_end(&r->js);
		titan_json_key(&r->js, "totals");
		titan_json_object_begin(&r->js);
		for (int k = 0; k < r->nt; k++) {
			titan_json_key(&r->js, r->t[k].split);
			titan_json_object_begin(&r->js);
			juint(&r->js, "shards", r->t[k].shards);
			juint(&r->js, "tokens", r->t[k].tokens);
			juint(&r->js, "docs", r->t[k].docs);
			juint(&r->js, "bytes", r->t[k].bytes);
			titan_json_object_end(&r->js);
		}
		titan_json_object_end(&r->js);
		juint(&r->js, "bad", (uint64_t)r->bad);
		titan_json_object_end(&r->js);
		titan_json_write_line(&r->js, stdout);
		titan_json_release(&r->js);
	} else if (r->verify_cmd) {
		printf("%" PRIu64 " shards ok, %d bad\n", r->t[0].shards, r->bad);
	} else if (r->header) {
		for (int k = 1; k <= r->nt; k++) {
			const struct totals *t = &r->t[k == r->nt ? 0 : k];

			printf("# total%s%s: %" PRIu64 " shards, %" PRIu64 " tokens, %" PRIu64
			       " docs, %" PRIu64 " bytes\n", k == r->nt ? "" : " ",
			       k == r->nt ? "" : t->split, t->shards, t->tokens, t->docs, t->bytes);
		}
	}
	return r->bad ? 1 : 0;
}

/* ---------------------------------------------------------------- cat */

/* `cat`: shards back to the token stream they were cut from (uint32 LE ids,
 * the format titan-tokenize writes), for `| titan-tokenize -d`, od or a
 * second titan-shard run.  Every shard is opened and checked (header,
 * size; a folder's shards must continue each other; --verify: payload CRC
 * and ids) before the first id is written, so a bad shard leaves no
 * partial stream behind. */
struct cat_list {
	struct titan_shard **s;
	size_t n, cap;
};

static int cat_add(struct cat_list *c, struct titan_shard *s)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		struct titan_shard **t = realloc(c->s, cap * sizeof(*t));

		if (!t) {
			titan_shard_close(s);
			return titan_error(TITAN_E_NOMEM, "out of memory");
		}
		c->s = t;
		c->cap = cap;
	}
	c->s[c->n++] = s;
	return 0;
}

/* Rank of a split in a folder's stream order: titan-shard write takes the
 * validation documents from the start of the stream, so "val" comes first,
 * then "train", then any other split by name. */
static int split_rank(const char *split)
{
	return !strcmp(split, "val") ? 0 : !strcmp(split, "train") ? 1 : 2;
}

static int cat_open(struct cat_list *c, const char *path, const char *split, bool verify)
{
	struct titan_shard *s;
	int rc = titan_shard_open(path, &s);

	if (rc < 0)
		return rc;
	if (split && strcmp(s->h.split, split) != 0) {
		rc = titan_error(TITAN_E_INVALID, "'%s' is a '%s' shard, not '%s' (--split)", path,
				 s->h.split, split);
		titan_shard_close(s);
		return rc;
	}
	if (verify && (rc = titan_shard_verify(s, NULL)) < 0) {
		titan_shard_close(s);
		return rc;
	}
	return cat_add(c, s);
}

/* The shards of a folder: one split, or all of them in stream order. */
static int cat_dir(struct cat_list *c, const char *dir, const char *split, bool verify)
{
	char **list = NULL;
	size_t n = 0, first = c->n;
	int rc = titan_shard_list(dir, split, &list, &n);

	if (rc < 0)
		return rc;
	if (n == 0)
		rc = split ? titan_error(TITAN_E_INVALID, "no '%s' shards in '%s' (%s-NNNNN.tok)", split,
					 dir, split)
			   : titan_error(TITAN_E_INVALID, "'%s' holds no shards (*-NNNNN.tok)", dir);
	for (int rank = 0; rank < 3 && rc == 0; rank++)
		for (size_t k = 0; k < n && rc == 0; k++) {
			const char *base = strrchr(list[k], '/') ? strrchr(list[k], '/') + 1 : list[k];
			char name[TITAN_SHARD_SPLIT_MAX + 1];
			size_t len = strcspn(base, "-");

			snprintf(name, sizeof(name), "%.*s", (int)len, base);
			if (split_rank(name) != rank)
				continue;
			/* the file name says the split: the header must agree */
			if ((rc = cat_open(c, list[k], name, verify)) < 0)
				break;
			if (c->n - 1 > first && !strcmp(c->s[c->n - 2]->h.split, name))
				rc = titan_shard_check_next(&c->s[c->n - 2]->h, c->s[c->n - 2]->path,
							    &c->s[c->n - 1]->h, c->s[c->n - 1]->path);
		}
	titan_shard_list_free(list, n);
	return rc;
}

/* One shard's payload as uint32 LE ids. */
static int cat_write(const struct titan_shard *s, uint32_t *buf, size_t cap,
		     struct titan_afile *out)
{
	uint32_t tb;
	uint64_t n;
	const void *p = titan_shard_tokens(s, &tb, &n);

	for (uint64_t i = 0; i < n;) {
		size_t k = (size_t)(n - i < cap ? n - i : cap);
		const void *w = (const uint32_t *)p + i;

		if (tb == 2) {
			const uint16_t *q = (const uint16_t *)p + i;

			for (size_t t = 0; t < k; t++)
				buf[t] = q[t];
			w = buf;
		}
		if (fwrite(w, 4, k, out->fp) != k)
			return titan_error(TITAN_E_IO, "cannot write %s%s%s: %s",
					   out->path ? "'" : "", out->path ? out->path : "to standard output",
					   out->path ? "'" : "", strerror(errno));
		i += k;
	}
	return 0;
}

static int run_cat(const char *output, const char *split, bool verify, int npaths, char **paths)
{
	enum { CAP = 1 << 18 };
	struct cat_list c = {0};
	struct titan_afile out = {0};
	uint32_t *buf = NULL;
	uint64_t tokens = 0;
	int rc = 0;

	for (int i = 0; i < npaths && rc == 0; i++) {
		struct stat st;

		if (stat(paths[i], &st) != 0)
			rc = titan_error(TITAN_E_IO, "cannot open '%s': %s", paths[i], strerror(errno));
		else if (S_ISDIR(st.st_mode))
			rc = cat_dir(&c, paths[i], split, verify);
		else
			rc = cat_open(&c, paths[i], split, verify);
	}
	if (rc == 0 && !(buf = titan_malloc(CAP * sizeof(*buf), TITAN_MEM_DATA)))
		rc = TITAN_E_NOMEM;
	if (rc == 0 && (rc = titan_afile_open(&out, output)) == 0) {
		for (size_t i = 0; i < c.n && rc == 0; i++) {
			rc = cat_write(c.s[i], buf, CAP, &out);
			tokens += c.s[i]->h.n_tokens;
		}
		rc = titan_afile_close(&out, rc);
	}
	if (rc == 0)
		titan_log_debug("cat: %zu shards, %" PRIu64 " tokens", c.n, tokens);
	for (size_t i = 0; i < c.n; i++)
		titan_shard_close(c.s[i]);
	free(c.s);
	titan_free(buf);
	return rc;
}

/* ------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		TITAN_CLI_GLOBAL_OPTIONS,
		{"out", required_argument, NULL, 'o'},
		{"tokenizer", required_argument, NULL, 't'},
		{"encoding", required_argument, NULL, 'e'},
		{"vocab-size", required_argument, NULL, OPT_VOCAB_SIZE},
		{"eos-id", required_argument, NULL, OPT_EOS_ID},
		{"bos-id", required_argument, NULL, OPT_BOS_ID},
		{"shard-tokens", required_argument, NULL, OPT_SHARD_TOKENS},
		{"val-tokens", required_argument, NULL, OPT_VAL_TOKENS},
		{"val-docs", required_argument, NULL, OPT_VAL_DOCS},
		{"shuffle-docs", no_argument, NULL, OPT_SHUFFLE_DOCS},
		{"seed", required_argument, NULL, OPT_SEED},
		{"force", no_argument, NULL, 'f'},
		{"json", no_argument, NULL, OPT_JSON},
		{"verify", no_argument, NULL, OPT_VERIFY},
		{"split", required_argument, NULL, OPT_SPLIT},
		{0},
	};
	struct job j = {.bos = -1, .eos = -1, .shard_tokens = 100000000ull, .spool = -1};
	struct report r = {0};
	const char *tokenizer = NULL, *mode = "write", *bad = NULL;
	const char *vocab_arg = NULL, *eos_arg = NULL, *bos_arg = NULL, *split = NULL;
	enum titan_tok_encoding enc = TITAN_ENC_AUTO;
	bool seed_set = false;
	int opt, rc;

	if ((rc = titan_cli_init(&j.cli, "titan-shard", &argc, argv, false)) != 0)
		return rc;
	if (argc > 1 && (!strcmp(argv[1], "write") || !strcmp(argv[1], "info") ||
			 !strcmp(argv[1], "verify") || !strcmp(argv[1], "cat"))) {
		mode = argv[1];
		argv[1] = argv[0];
		argv++;
		argc--;
	}
	while ((opt = getopt_long(argc, argv, TITAN_CLI_GLOBAL_SHORT "o:ft:e:", longopts, NULL)) != -1) {
		uint64_t v;

		switch (opt) {
		case 'h':
			usage(stdout);
			return titan_cli_finish(&j.cli, 0);
		case 'o': j.out = optarg; break;
		case 'f': j.force = true; break;
		case 't': tokenizer = optarg; break;
		case 'e':
			if (titan_tok_encoding_parse(optarg, &enc) < 0)
				return titan_cli_usage_error(&j.cli, "--encoding: expected llama3, "
							     "cl100k_base or o200k_base, got '%s'", optarg);
			break;
		case OPT_VOCAB_SIZE: vocab_arg = optarg; break;
		case OPT_EOS_ID: eos_arg = optarg; break;
		case OPT_BOS_ID: bos_arg = optarg; break;
		case OPT_SHUFFLE_DOCS: j.shuffle = true; break;
		case OPT_JSON: r.json = true; break;
		case OPT_VERIFY: r.verify = true; break;
		case OPT_SPLIT:
			if (!titan_shard_split_valid(optarg))
				return titan_cli_usage_error(&j.cli, "--split: expected a split name "
							     "(train, val: 1 to %d of A-Z a-z 0-9 _), "
							     "got '%s'", TITAN_SHARD_SPLIT_MAX, optarg);
			split = optarg;
			break;
		case OPT_SEED:
			if (titan_parse_u64(optarg, &j.seed) < 0)
				return titan_cli_usage_error(&j.cli, "--seed: expected an unsigned "
							     "integer, got '%s'", optarg);
			seed_set = true;
			break;
		case OPT_SHARD_TOKENS: case OPT_VAL_TOKENS: case OPT_VAL_DOCS:
			if (parse_count(optarg, &v) < 0 || v == 0)
				return titan_cli_usage_error(&j.cli, "--%s: expected a positive count "
							     "(e.g. 100M), got '%s'",
							     opt == OPT_SHARD_TOKENS ? "shard-tokens" :
							     opt == OPT_VAL_TOKENS ? "val-tokens" :
							     "val-docs", optarg);
			*(opt == OPT_SHARD_TOKENS ? &j.shard_tokens :
			  opt == OPT_VAL_TOKENS ? &j.val_tokens : &j.val_docs) = v;
			break;
		default:
			rc = titan_cli_option(&j.cli, opt, optarg);
			if (rc == TITAN_CLI_HANDLED)
				break;
			return rc == TITAN_CLI_UNKNOWN ? titan_cli_usage_error(&j.cli, "unhandled option") : rc;
		}
	}

	if (strcmp(mode, "cat") == 0) {
		if (tokenizer || enc || vocab_arg || eos_arg || bos_arg || j.shuffle || seed_set ||
		    j.force || j.val_docs || j.val_tokens || r.json)
			return titan_cli_usage_error(&j.cli, "'cat' takes only --split, --verify, "
						     "-o FILE and paths");
		if (optind >= argc)
			return titan_cli_usage_error(&j.cli, "cat: no shard file or directory given");
		for (int i = optind; i < argc; i++)
			if ((rc = titan_cli_no_dash(&j.cli, mode, argv[i], "a shard is mapped and read "
						    "in place, not as a stream")))
				return rc;
		if ((!j.out || !strcmp(j.out, "-")) && isatty(STDOUT_FILENO))
			return titan_cli_usage_error(&j.cli, "cat: standard output is a terminal: pipe "
						     "the binary ids (| titan-tokenize -d, | od -An -tu4) "
						     "or give -o FILE");
		rc = run_cat(j.out, split, r.verify, argc - optind, argv + optind);
		return titan_cli_finish(&j.cli, rc < 0 ? titan_cli_fail_work(&j.cli, rc) : 0);
	}
	if (split)
		return titan_cli_usage_error(&j.cli, "--split belongs to 'cat'");
	if (strcmp(mode, "write") != 0) {
		if (j.out || tokenizer || enc || vocab_arg || eos_arg || bos_arg || j.shuffle ||
		    seed_set || j.force || j.val_docs || j.val_tokens)
			return titan_cli_usage_error(&j.cli, "'%s' takes only --json%s and paths", mode,
						     strcmp(mode, "info") == 0 ? ", --verify" : "");
		if (optind >= argc)
			return titan_cli_usage_error(&j.cli, "%s: no shard file or directory given", mode);
		r.verify_cmd = strcmp(mode, "verify") == 0;
		if (r.verify_cmd && r.verify)
			return titan_cli_usage_error(&j.cli, "--verify is for 'info' ('verify' always verifies)");
		r.verify |= r.verify_cmd;
		for (int i = optind; i < argc; i++)
			if ((rc = titan_cli_no_dash(&j.cli, mode, argv[i], "a shard is mapped and read "
						    "in place, not as a stream")))
				return rc;
		rc = run_info(&j.cli, &r, argc - optind, argv + optind);
		return titan_cli_finish(&j.cli, rc);
	}

	/* write: check the combination before touching anything */
	if (r.json || r.verify)
		bad = "--json and --verify belong to 'info'";
	else if (!j.out || !*j.out)
		bad = "--out DIR is required";
	else if (tokenizer && vocab_arg)
		bad = "--tokenizer and --vocab-size are exclusive";
	else if (!tokenizer && !vocab_arg)
		bad = "give --tokenizer FILE, or --vocab-size N with --eos-id E (the vocabulary "
		      "is needed to check ids and to choose u16 or u32)";
	else if (vocab_arg && !eos_arg)
		bad = "--vocab-size needs --eos-id (-1 for a stream without documents)";
	else if (j.val_docs && j.val_tokens)
		bad = "--val-tokens and --val-docs are exclusive";
	else if (seed_set && !j.shuffle)
		bad = "--seed has no effect without --shuffle-docs";
	if (bad)
		return titan_cli_usage_error(&j.cli, "%s", bad);
	if ((rc = titan_cli_no_dash(&j.cli, "--out", j.out, "it is a folder of shards")))
		return rc;
	/* '-' or no FILE: the stream is standard input, so the tokenizer cannot be */
	{
		bool from_stdin = optind == argc;

		for (int i = optind; i < argc; i++)
			from_stdin |= !strcmp(argv[i], "-");
		if (from_stdin && (rc = titan_cli_claim_stdin(&j.cli, "the token stream")))
			return rc;
	}
	if (tokenizer && (rc = titan_cli_stdin_file(&j.cli, "--tokenizer", &tokenizer)))
		return rc;
	for (size_t n = strlen(j.out); n > 1 && j.out[n - 1] == '/'; n--)
		((char *)j.out)[n - 1] = '\0'; /* "data/" -> "data": shard paths read well */
	if (vocab_arg) {
		uint64_t v;

		if (parse_count(vocab_arg, &v) < 0 || v == 0 || v > UINT32_MAX)
			return titan_cli_usage_error(&j.cli, "--vocab-size: expected a count from 1 to "
						     "%" PRIu32 ", got '%s'", UINT32_MAX, vocab_arg);
		j.vocab = (uint32_t)v;
	} else {
		struct titan_tokenizer *t;

		if ((rc = titan_tokenizer_load(tokenizer, enc, &t)) < 0)
			return titan_cli_fail_work(&j.cli, rc);
		j.vocab = titan_tokenizer_vocab_size(t);
		j.bos = titan_tokenizer_bos(t);
		j.eos = titan_tokenizer_eos(t);
		j.fingerprint = titan_tokenizer_fingerprint(t);
		titan_tokenizer_free(t);
	}
	for (int k = 0; k < 2; k++) {
		const char *a = k ? bos_arg : eos_arg;
		int64_t id;

		if (a && (titan_parse_i64(a, &id) < 0 || id < -1 || id >= (int64_t)j.vocab))
			return titan_cli_usage_error(&j.cli, "--%s-id: expected an id from -1 (none) to "
						     "%" PRIu32 " (vocab size - 1), got '%s'",
						     k ? "bos" : "eos", j.vocab - 1, a);
		if (a)
			*(k ? &j.bos : &j.eos) = id;
	}
	if (j.eos < 0 && (j.shuffle || j.val_docs || j.val_tokens))
		return titan_cli_usage_error(&j.cli, "--shuffle-docs and --val-* need document "
					     "boundaries: %s has no EOS id (give --eos-id)",
					     tokenizer ? "the tokenizer" : "--eos-id -1");
	if (optind == argc && isatty(STDIN_FILENO))
		return titan_cli_usage_error(&j.cli, "no input files, and standard input is a terminal");

	rc = run_write(&j, argc - optind, argv + optind);
	if (rc < 0) {
		/* the writer's own checks (TITAN_E_INVALID): bad data, not usage */
		rc = titan_cli_fail_work(&j.cli, rc);
	}
	titan_shard_writer_discard(j.val);
	titan_shard_writer_discard(j.train);
	titan_cli_release(&j.cli);
	return titan_cli_finish(&j.cli, rc);
}
