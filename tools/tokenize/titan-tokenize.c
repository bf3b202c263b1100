/*
 * titan-tokenize — corpus text to a token stream (uint32 LE, BOS ids EOS per
 * document) with the exact ids of tiktoken / HF tokenizers, in parallel with
 * output in input order; --decode turns a stream back into text; `train`
 * learns a byte-level BPE vocabulary (tiktoken format).  The pipeline of
 * llm.c's / torchtitan's Python data preparation, as one streaming tool.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/cli.h"
#include "titan/core.h"
#include "titan/data.h"
#include "titan/tok.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "titan-tokenize writes host-order uint32: port the output path for big-endian hosts"
#endif

enum {
	OPT_FIELD = TITAN_OPT_TOOL_BASE,
	OPT_DOC_PER_LINE,
	OPT_ALLOW_SPECIAL,
	OPT_NO_BOS,
	OPT_NO_EOS,
	OPT_KEEP_SPECIAL,
	OPT_VOCAB_SIZE,
	OPT_PATTERN,
	OPT_SPECIALS,
	OPT_SEGMENT,
};

struct opts {
	const char *tokenizer;
	enum titan_tok_encoding encoding;
	struct titan_doc_reader_opts reader;
	bool allow_special, no_bos, no_eos, decode, keep_special;
	bool format_set;         /* -f or --doc-per-line given */
	const char *output;
	/* train */
	uint32_t vocab_size, nspecials;
	enum titan_pretok_kind pattern;
};

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: titan-tokenize -t TOKENIZER [OPTIONS] [FILE ...]          text -> token stream\n"
"       titan-tokenize -t TOKENIZER --decode [OPTIONS] [FILE ...] tokens -> JSONL/text\n"
"       titan-tokenize train --vocab-size N [OPTIONS] FILE ...    learn a BPE vocabulary\n"
"\n"
"Encodes documents into the token stream titan-shard reads: little-endian\n"
"uint32 ids, each document as BOS ids EOS.  Ids are those of tiktoken (for\n"
".tiktoken / tokenizer.model files) and of HF tokenizers (tokenizer.json).\n"
"FILE '-' or no FILE reads standard input; the stream goes to standard output.\n"
"Inputs may be gzip- or zstd-compressed (x.jsonl.gz, x.jsonl.zst, or a pipe):\n"
"the format is told by the first bytes.\n"
"\n"
"Options:\n"
"  -t, --tokenizer FILE   tiktoken file (Llama 3 tokenizer.model, *.tiktoken) or tokenizer.json\n"
"  -e, --encoding NAME    llama3, cl100k_base or o200k_base (default: detect)\n"
"  -f, --format FMT       input: jsonl (default; one object per line), text (a file is\n"
"                         one document) or lines (a line is one document)\n"
"      --field NAME       JSONL field holding the text (default: text)\n"
"      --doc-per-line     same as --format lines\n"
"      --allow-special    special-token text in documents becomes its id\n"
"                         (default: it is ordinary text)\n"
"      --no-bos, --no-eos do not add BOS / EOS around documents\n"
"  -d, --decode           read a token stream (or a titan-shard *.tok shard), write the\n"
"                         documents (BOS dropped, EOS ends one) in --format: JSONL by\n"
"                         default, one {\"text\": ...} object per document (--field\n"
"                         names the key); --format text for the plain text, --format\n"
"                         lines for one document per line\n"
"      --keep-special     with --decode: write BOS/EOS and other specials as their text\n"
"  -o, --output FILE      write FILE (atomically) instead of standard output\n"
"      --threads N        encoding threads (default: all cores)\n"
"      --progress         input read (of the total, %%, ETA), documents, tokens and MB/s\n"
"                         on stderr even when it is not a terminal\n"
"  -v, --verbose; -q, --quiet; -h, --help; --version\n"
"\n"
"train options:\n"
"      --vocab-size N     ids in the result, specials included (N - specials ranks)\n"
"      --encoding-pattern NAME  pre-tokenizer: llama3 (= cl100k, default), o200k, gpt2\n"
"      --specials N       reserved special tokens after the ranks (default 256, Llama 3's)\n"
"\n"
"Invalid UTF-8 in the input is replaced by U+FFFD (WHATWG rule, as JavaScript's\n"
"TextDecoder and Python's errors='replace') before encoding.\n"
"\n"
"Examples:\n"
"  titan-tokenize -t tokenizer.model corpus/*.jsonl | titan-shard -t tokenizer.model --out data/\n"
"  titan-tokenize -t tokenizer.model --format text book.txt |\n"
"      titan-tokenize -t tokenizer.model -d --format text\n"
"  titan-shard cat --split val data/ | titan-tokenize -t tokenizer.model -d\n"
"  titan-tokenize train --vocab-size 8192 --format text kjv.txt -o kjv.tiktoken\n"
"\n"
"See also: titan-shard(1), docs/formats.md\n");
}

/* ------------------------------------------------------------- output */

static int write_all(struct titan_afile *o, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, o->fp) != n)
		return titan_error(TITAN_E_IO, "cannot write %s%s%s: %s", o->path ? "'" : "",
				   o->path ? o->path : "to standard output", o->path ? "'" : "",
				   strerror(errno));
	return 0;
}

/* ----------------------------------------------------------- progress */

/* bytes: of the input files as read (compressed bytes for .gz/.zst, so the
 * percentage follows the file sizes); text: uncompressed bytes */
struct progress {
	struct titan_progress p;
	uint64_t bytes, text, docs, tokens;
	bool docs_known;  /* not with --decode */
	bool compressed;  /* an input was compressed: show the text bytes too */
};

static void progress_show(struct progress *pr, bool final)
{
	char extra[128], a[32], b[32], c[32];
	int n = 0;

	if (!pr->p.on)
		return;
	if (pr->compressed)
		n = snprintf(extra, sizeof(extra), "%s text, ",
			     titan_format_bytes(c, sizeof(c), (double)pr->text));
	if (pr->docs_known)
		n += snprintf(extra + n, sizeof(extra) - (size_t)n, "%s docs, ",
			      titan_format_grouped(a, sizeof(a), (double)pr->docs));
	snprintf(extra + n, sizeof(extra) - (size_t)n, "%s tokens",
		 titan_format_grouped(b, sizeof(b), (double)pr->tokens));
	if (final)
		titan_progress_finish(&pr->p, pr->bytes, extra);
	else
		titan_progress_update(&pr->p, pr->bytes, extra);
}

/* Total bytes of the inputs when every one is a regular file (stdin
 * redirected from one counts from its offset), else 0 (unknown). */
static uint64_t inputs_size(char **files, int nfiles)
{
	uint64_t total = 0;

	for (int i = 0; i < nfiles; i++) {
		struct stat st;
		bool in = !strcmp(files[i], "-");
		off_t at = 0;

		if ((in ? fstat(STDIN_FILENO, &st) : stat(files[i], &st)) != 0 || !S_ISREG(st.st_mode))
			return 0;
		if (in && (at = lseek(STDIN_FILENO, 0, SEEK_CUR)) < 0)
			at = 0;
		total += (uint64_t)(st.st_size - (at < st.st_size ? at : st.st_size));
	}
	return total;
}

/* ------------------------------------------------------- encode pool */

struct seg {
	size_t off, len;
	bool start, end;
};

enum { JOB_FREE, JOB_FILLED, JOB_BUSY, JOB_DONE };

struct job {
	int state;
	struct titan_bytes text;
	struct seg *segs;
	size_t nseg, capseg;
	struct titan_ids ids;
	uint64_t docs;
	int rc;
	char err[1024];
};

struct pool {
	const struct titan_tokenizer *tok;
	const struct opts *o;
	int64_t bos, eos;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *jobs;
	size_t njobs;
	uint64_t next_fill, next_encode, next_write;
	bool closing;
};

#define JOB_TARGET (1u << 20)

static void encode_job(struct pool *p, struct titan_tok_scratch *s, struct job *j)
{
	j->ids.n = 0;
	j->docs = 0;
	j->rc = 0;
	for (size_t i = 0; i < j->nseg && j->rc == 0; i++) {
		const struct seg *g = &j->segs[i];

		if (g->start && p->bos >= 0 && (j->rc = titan_ids_push(&j->ids, (uint32_t)p->bos)) < 0)
			break;
		j->rc = titan_tokenizer_encode(p->tok, s, j->text.p + g->off, g->len,
					       p->o->allow_special, &j->ids);
		if (j->rc == 0 && g->end) {
			j->docs++;
			if (p->eos >= 0)
				j->rc = titan_ids_push(&j->ids, (uint32_t)p->eos);
		}
	}
	if (j->rc < 0)
		snprintf(j->err, sizeof(j->err), "%s", titan_errmsg());
}

static void *worker(void *arg)
{
	struct pool *p = arg;
	struct titan_tok_scratch *s = titan_tok_scratch_new(p->tok);

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->closing && p->next_encode == p->next_fill)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->next_encode == p->next_fill)
			break; /* closing and nothing left */
		struct job *j = &p->jobs[p->next_encode++ % p->njobs];

		j->state = JOB_BUSY;
		pthread_mutex_unlock(&p->mu);
		if (s)
			encode_job(p, s, j);
		else {
			j->rc = TITAN_E_NOMEM;
			snprintf(j->err, sizeof(j->err), "out of memory for encoder scratch");
		}
		pthread_mutex_lock(&p->mu);
		j->state = JOB_DONE;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	titan_tok_scratch_free(s);
	return NULL;
}

static int job_add(struct job *j, const struct titan_doc_segment *g)
{
	if (j->nseg == j->capseg) {
		size_t cap = j->capseg ? 2 * j->capseg : 64;
		struct seg *n = realloc(j->segs, cap * sizeof(*n));

		if (!n)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		j->segs = n;
		j->capseg = cap;
	}
	j->segs[j->nseg++] = (struct seg){j->text.n, g->len, g->doc_start, g->doc_end};
	return titan_bytes_append(&j->text, g->data, g->len);
}

/* Writes job j (DONE) and frees its slot. */
static int job_write(struct job *j, struct titan_afile *out, struct progress *pr)
{
	if (j->rc < 0) {
		titan_error(j->rc, "%s", j->err);
		return j->rc;
	}
	pr->tokens += j->ids.n;
	pr->docs += j->docs;
	return write_all(out, j->ids.p, j->ids.n * sizeof(uint32_t));
}

static int run_encode(const struct titan_tokenizer *tok, const struct opts *o, int threads,
		      char **files, int nfiles, struct titan_afile *out, struct progress *pr)
{
	struct pool p = {.tok = tok, .o = o};
	pthread_t *tids = NULL;
	struct titan_tok_scratch *s = NULL;
	struct titan_doc_reader *r = NULL;
	int nworkers = threads > 1 ? threads : 0, started = 0, rc = 0, fi = 0;
	uint64_t closed_bytes = 0, closed_text = 0;
	bool eof = false;

	p.bos = o->no_bos ? -1 : titan_tokenizer_bos(tok);
	p.eos = o->no_eos ? -1 : titan_tokenizer_eos(tok);
	p.njobs = nworkers ? (size_t)(2 * nworkers + 2) : 1;
	p.jobs = calloc(p.njobs, sizeof(*p.jobs));
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv, NULL);
	if (!p.jobs) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	if (!nworkers && !(s = titan_tok_scratch_new(tok))) {
		rc = TITAN_E_NOMEM;
		goto done;
	}
	if (nworkers && !(tids = calloc((size_t)nworkers, sizeof(*tids)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	for (; started < nworkers; started++)
		if (pthread_create(&tids[started], NULL, worker, &p) != 0) {
			rc = titan_error(TITAN_E_INTERNAL, "cannot start encoding threads");
			goto done;
		}

	while (rc == 0) {
		struct job *j = &p.jobs[p.next_fill % p.njobs];

		/* Write finished jobs in order until the next slot is free. */
		pthread_mutex_lock(&p.mu);
		while (p.next_write < p.next_fill) {
			struct job *w = &p.jobs[p.next_write % p.njobs];

			if (w->state != JOB_DONE) {
				if (w != j && !eof)
					break; /* room to fill meanwhile */
				pthread_cond_wait(&p.cv, &p.mu);
				continue;
			}
			pthread_mutex_unlock(&p.mu);
			rc = job_write(w, out, pr);
			progress_show(pr, false);
			pthread_mutex_lock(&p.mu);
			w->state = JOB_FREE;
			p.next_write++;
			if (rc)
				break;
		}
		pthread_mutex_unlock(&p.mu);
		if (rc || (eof && p.next_write == p.next_fill))
			break;
		if (eof)
			continue;

		/* Fill the next job with ~1 MiB of segments. */
		j->text.n = 0;
		j->nseg = 0;
		while (j->text.n < JOB_TARGET) {
			struct titan_doc_segment g;
			int n;

			if (!r) {
				if (fi == nfiles) {
					eof = true;
					break;
				}
				if (!(r = titan_doc_reader_open(files[fi++], &o->reader))) {
					rc = TITAN_E_IO;
					break;
				}
			}
			if ((n = titan_doc_reader_next(r, &g)) < 0) {
				rc = n;
				break;
			}
			if (n == 0) {
				closed_bytes += titan_doc_reader_file_bytes(r);
				closed_text += titan_doc_reader_bytes(r);
				titan_doc_reader_close(r);
				r = NULL;
				continue;
			}
			pr->compressed |= titan_doc_reader_compression(r) != TITAN_COMPRESSION_NONE;
			if ((rc = job_add(j, &g)) < 0)
				break;
		}
		pr->bytes = closed_bytes + (r ? titan_doc_reader_file_bytes(r) : 0);
		pr->text = closed_text + (r ? titan_doc_reader_bytes(r) : 0);
		if (rc)
			break;
		if (j->nseg == 0)
			continue; /* eof with nothing left */
		if (!nworkers) {
			encode_job(&p, s, j);
			j->state = JOB_DONE;
			p.next_fill++;
			p.next_encode++;
		} else {
			pthread_mutex_lock(&p.mu);
			j->state = JOB_FILLED;
			p.next_fill++;
			pthread_cond_broadcast(&p.cv);
			pthread_mutex_unlock(&p.mu);
		}
	}
done:
	pthread_mutex_lock(&p.mu);
	p.closing = true;
	pthread_cond_broadcast(&p.cv);
	pthread_mutex_unlock(&p.mu);
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	titan_doc_reader_close(r);
	titan_tok_scratch_free(s);
	for (size_t i = 0; p.jobs && i < p.njobs; i++) {
		titan_bytes_release(&p.jobs[i].text);
		titan_ids_release(&p.jobs[i].ids);
		free(p.jobs[i].segs);
	}
	free(p.jobs);
	free(tids);
	pthread_mutex_destroy(&p.mu);
	pthread_cond_destroy(&p.cv);
	return rc;
}

/* ------------------------------------------------------------- decode */

struct decoder {
	const struct titan_tokenizer *tok;
	const struct opts *o;
	int64_t bos, eos;
	struct titan_bytes doc;
	bool in_doc;
	struct titan_json json;
};

static int decode_end_doc(struct decoder *d, struct titan_afile *out)
{
	int rc = 0;

	switch (d->o->reader.format) {
	case TITAN_DOC_TEXT:
		rc = write_all(out, d->doc.p, d->doc.n);
		break;
	case TITAN_DOC_LINES:
		if ((rc = write_all(out, d->doc.p, d->doc.n)) == 0)
			rc = write_all(out, "\n", 1);
		break;
	case TITAN_DOC_JSONL:
		titan_json_reset(&d->json);
		titan_json_object_begin(&d->json);
		titan_json_key(&d->json, d->o->reader.field);
		titan_json_stringn(&d->json, (const char *)d->doc.p, d->doc.n);
		titan_json_object_end(&d->json);
		if (!titan_json_str(&d->json))
			return titan_error(TITAN_E_NOMEM, "out of memory");
		rc = write_all(out, titan_json_str(&d->json), d->json.len);
		if (rc == 0)
			rc = write_all(out, "\n", 1);
		break;
	}
	d->doc.n = 0;
	d->in_doc = false;
	return rc;
}

/* `ids` are tokens first.. of `name`; `off0` is the byte offset of token 0
 * in the file and `tb` the bytes per id there (4 in a stream; a shard's
 * payload starts after its header and may hold u16 ids), for messages. */
static int decode_ids(struct decoder *d, const uint32_t *ids, size_t n, const char *name,
		      uint64_t first, uint64_t off0, unsigned tb, struct titan_afile *out)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t id = ids[i];
		int rc;

		if (id >= titan_tokenizer_vocab_size(d->tok) || !titan_tokenizer_token(d->tok, id, &(size_t){0}))
			return titan_error(TITAN_E_INVALID,
					   "%s: token %llu (byte offset %llu) is id %u, not in the vocabulary (size %u)",
					   name, (unsigned long long)(first + i),
					   (unsigned long long)(off0 + (first + i) * tb), id,
					   titan_tokenizer_vocab_size(d->tok));
		d->in_doc = true;
		if (!d->o->keep_special && (int64_t)id == d->bos)
			continue;
		if ((int64_t)id == d->eos && !d->o->keep_special) {
			if ((rc = decode_end_doc(d, out)) < 0)
				return rc;
			continue;
		}
		if ((rc = titan_tokenizer_decode(d->tok, &id, 1, &d->doc)) < 0)
			return rc;
		if ((int64_t)id == d->eos && (rc = decode_end_doc(d, out)) < 0)
			return rc;
		/* text output streams: flush big documents as they grow */
		if (d->o->reader.format == TITAN_DOC_TEXT && d->doc.n >= (1u << 20)) {
			if ((rc = write_all(out, d->doc.p, d->doc.n)) < 0)
				return rc;
			d->doc.n = 0;
		}
	}
	return 0;
}

/* A shard (titan-shard's *.tok) met by --decode: its header is checked and
 * skipped, and its payload (u16 or u32 ids) decoded, so that
 * `titan-tokenize -d data/train-00000.tok` gives the text, not the header
 * bytes read as ids.  The payload length and CRC32C are checked as the
 * shard is read (a stream may be a pipe: nothing is seeked). */
struct shard_in {
	bool on;
	struct titan_shard_header h;
	uint64_t bytes;   /* payload bytes read */
	uint32_t crc;
};

/* Sniff the first bytes of an input (already in buf, `have` of them, the
 * stream read up to 4096 bytes or its end).  Returns 0, or an error. */
static int shard_sniff(struct shard_in *si, const uint8_t *buf, size_t have, const char *name,
		       struct titan_instream *in, const struct titan_tokenizer *tok)
{
	const bool plain = titan_instream_compression(in) == TITAN_COMPRESSION_NONE;
	int64_t size = titan_instream_size(in);
	int rc;

	memset(si, 0, sizeof(*si));
	if (have < 8 || memcmp(buf, TITAN_SHARD_MAGIC, 8) != 0) {
		/* a token stream: a regular file can be checked before anything is written */
		if (plain && size > 0 && size % 4)
			return titan_error(TITAN_E_INVALID, "%s: %lld bytes is not a whole number of "
					   "uint32 token ids (truncated stream?)", name, (long long)size);
		return 0;
	}
	if ((rc = titan_shard_header_decode(buf, have, name, &si->h)) < 0)
		return rc;
	si->on = true;
	if (plain && size >= 0 &&
	    (uint64_t)size != si->h.header_bytes + si->h.n_tokens * si->h.token_bytes)
		return titan_error(TITAN_E_FORMAT, "'%s': expected %llu bytes (header %u + %llu "
				   "tokens of %u bytes), found %lld: truncated?", name,
				   (unsigned long long)(si->h.header_bytes +
							si->h.n_tokens * si->h.token_bytes),
				   si->h.header_bytes, (unsigned long long)si->h.n_tokens,
				   si->h.token_bytes, (long long)size);
	if (si->h.fingerprint && si->h.fingerprint != titan_tokenizer_fingerprint(tok))
		titan_log_warn("%s: the shard was written with another tokenizer (fingerprint "
			       "0x%016llx, --tokenizer's 0x%016llx): the text may be wrong", name,
			       (unsigned long long)si->h.fingerprint,
			       (unsigned long long)titan_tokenizer_fingerprint(tok));
	titan_log_debug("%s: a '%s' shard, %llu tokens of u%u", name, si->h.split,
			(unsigned long long)si->h.n_tokens, 8 * si->h.token_bytes);
	return 0;
}

static int run_decode(const struct titan_tokenizer *tok, const struct opts *o, char **files,
		      int nfiles, struct titan_afile *out, struct progress *pr)
{
	struct decoder d = {.tok = tok, .o = o};
	enum { CHUNK = 1 << 18 };
	uint32_t *buf = malloc(CHUNK * sizeof(uint32_t) + 4);
	uint32_t *wide = malloc(2 * CHUNK * sizeof(uint32_t)); /* u16 shard ids widened */
	int rc = 0;

	d.bos = titan_tokenizer_bos(tok);
	d.eos = titan_tokenizer_eos(tok);
	titan_json_init(&d.json);
	if (!buf || !wide) {
		free(buf);
		free(wide);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	for (int f = 0; f < nfiles && rc == 0; f++) {
		struct titan_instream *in;
		struct shard_in si;
		const char *name;
		uint64_t ntok = 0, bytes0 = pr->bytes, off0 = 0;
		size_t have = 0; /* bytes in buf */
		unsigned tb = 4;
		bool plain, eof = false;

		if ((rc = titan_instream_open(files[f], NULL, &in)) < 0)
			break;
		name = titan_instream_name(in);
		plain = titan_instream_compression(in) == TITAN_COMPRESSION_NONE;
		pr->compressed |= !plain;
		/* the first 4096 bytes (or all): a shard header or token ids */
		while (have < TITAN_SHARD_HEADER_BYTES) {
			int64_t got = titan_instream_read(in, (char *)buf + have,
							  TITAN_SHARD_HEADER_BYTES - have);

			if (got <= 0) {
				rc = (int)got;
				eof = true;
				break;
			}
			have += (size_t)got;
		}
		if (rc == 0)
			rc = shard_sniff(&si, (const uint8_t *)buf, have, name, in, tok);
		if (rc == 0 && si.on) {
			tb = si.h.token_bytes;
			off0 = si.h.header_bytes; /* 4096: checked by the header decode */
			have -= si.h.header_bytes;
			memmove(buf, (char *)buf + si.h.header_bytes, have);
		}
		while (rc == 0) {
			int64_t got = 0;

			if (!eof) {
				got = titan_instream_read(in, (char *)buf + have,
							  CHUNK * sizeof(uint32_t) - have);
				if (got < 0) {
					rc = (int)got;
					break;
				}
				have += (size_t)got;
				eof = got == 0;
			}
			size_t whole = have / tb;
			const uint32_t *ids = buf;

			if (si.on) {
				if (si.bytes + whole * tb > si.h.n_tokens * tb) {
					rc = titan_error(TITAN_E_FORMAT, "'%s': more bytes than the header's "
							 "%llu tokens: not a shard titan-shard wrote",
							 name, (unsigned long long)si.h.n_tokens);
					break;
				}
				si.crc = titan_crc32c(si.crc, buf, whole * tb);
				si.bytes += whole * tb;
				if (tb == 2) {
					const uint16_t *q = (const uint16_t *)(void *)buf;

					for (size_t i = 0; i < whole; i++)
						wide[i] = q[i];
					ids = wide;
				}
			}
			if ((rc = decode_ids(&d, ids, whole, name, ntok, off0, tb, out)) < 0)
				break;
			ntok += whole;
			pr->tokens += whole;
			pr->bytes = bytes0 + titan_instream_consumed(in);
			pr->text = pr->tokens * 4;
			memmove(buf, (char *)buf + whole * tb, have - whole * tb);
			have -= whole * tb;
			progress_show(pr, false);
			if (eof) {
				if (si.on && (have || ntok != si.h.n_tokens))
					rc = titan_error(TITAN_E_FORMAT, "'%s': the header says %llu tokens "
							 "(%llu bytes), the payload holds %llu bytes: "
							 "truncated?", name,
							 (unsigned long long)si.h.n_tokens,
							 (unsigned long long)si.h.n_tokens * tb,
							 (unsigned long long)(si.bytes + have));
				else if (si.on && si.crc != si.h.payload_crc32c)
					rc = titan_error(TITAN_E_FORMAT, "'%s': payload checksum mismatch "
							 "(header 0x%08x, data 0x%08x): the shard is corrupt",
							 name, si.h.payload_crc32c, si.crc);
				else if (have)
					rc = titan_error(TITAN_E_INVALID,
							 "%s: %llu bytes%s is not a whole number of uint32 "
							 "token ids (truncated stream?)", name,
							 (unsigned long long)(ntok * 4 + have),
							 plain ? "" : " (uncompressed)");
				break;
			}
		}
		titan_instream_close(in);
	}
	/* A last document without EOS (e.g. --no-eos streams) still counts. */
	if (rc == 0 && (d.in_doc || d.doc.n))
		rc = decode_end_doc(&d, out);
	titan_bytes_release(&d.doc);
	titan_json_release(&d.json);
	free(buf);
	free(wide);
	return rc;
}

/* -------------------------------------------------------------- train */

static int run_train(const struct opts *o, int threads, bool progress, char **files, int nfiles,
		     struct titan_afile *out, struct progress *pr)
{
	struct titan_bpe_train_opts to = {
		.vocab_size = o->vocab_size, .nspecials = o->nspecials, .pattern = o->pattern,
		.threads = threads, .progress = progress,
	};
	struct titan_bpe_trainer *tr = titan_bpe_trainer_new(&to);
	int rc = 0;

	if (!tr)
		return titan_error_last()->code ? titan_error_last()->code : TITAN_E_NOMEM;
	for (int f = 0; f < nfiles && rc == 0; f++) {
		struct titan_doc_reader *r = titan_doc_reader_open(files[f], &o->reader);
		struct titan_doc_segment g;
		int n;

		if (!r) {
			rc = TITAN_E_IO;
			break;
		}
		uint64_t bytes0 = pr->bytes, text0 = pr->text;

		pr->compressed |= titan_doc_reader_compression(r) != TITAN_COMPRESSION_NONE;
		while ((n = titan_doc_reader_next(r, &g)) > 0) {
			if ((rc = titan_bpe_trainer_add(tr, g.data, g.len)) < 0)
				break;
			pr->docs += g.doc_end;
			pr->bytes = bytes0 + titan_doc_reader_file_bytes(r);
			pr->text = text0 + titan_doc_reader_bytes(r);
			progress_show(pr, false);
		}
		if (n < 0)
			rc = n;
		titan_doc_reader_close(r);
	}
	if (rc == 0)
		rc = titan_bpe_trainer_finish(tr, out->fp);
	titan_bpe_trainer_free(tr);
	return rc;
}

/* --------------------------------------------------------------- main */

static int parse_pattern(const char *s, enum titan_pretok_kind *k)
{
	if (!strcmp(s, "llama3") || !strcmp(s, "cl100k") || !strcmp(s, "cl100k_base"))
		*k = TITAN_PRETOK_CL100K;
	else if (!strcmp(s, "o200k") || !strcmp(s, "o200k_base"))
		*k = TITAN_PRETOK_O200K;
	else if (!strcmp(s, "gpt2"))
		*k = TITAN_PRETOK_GPT2;
	else
		return TITAN_E_INVALID;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		TITAN_CLI_GLOBAL_OPTIONS,
		{"tokenizer", required_argument, NULL, 't'},
		{"encoding", required_argument, NULL, 'e'},
		{"format", required_argument, NULL, 'f'},
		{"field", required_argument, NULL, OPT_FIELD},
		{"doc-per-line", no_argument, NULL, OPT_DOC_PER_LINE},
		{"allow-special", no_argument, NULL, OPT_ALLOW_SPECIAL},
		{"no-bos", no_argument, NULL, OPT_NO_BOS},
		{"no-eos", no_argument, NULL, OPT_NO_EOS},
		{"decode", no_argument, NULL, 'd'},
		{"keep-special", no_argument, NULL, OPT_KEEP_SPECIAL},
		{"output", required_argument, NULL, 'o'},
		{"vocab-size", required_argument, NULL, OPT_VOCAB_SIZE},
		{"encoding-pattern", required_argument, NULL, OPT_PATTERN},
		{"pattern", required_argument, NULL, OPT_PATTERN},
		{"specials", required_argument, NULL, OPT_SPECIALS},
		{"segment-bytes", required_argument, NULL, OPT_SEGMENT},
		{0},
	};
	struct titan_cli cli;
	struct opts o = {
		.reader = {.format = TITAN_DOC_JSONL, .field = "text", .cut_documents = true},
		.nspecials = 256, .pattern = TITAN_PRETOK_CL100K,
	};
	struct titan_tokenizer *tok = NULL;
	struct titan_afile out = {0};
	struct progress pr = {0};
	bool train = argc > 1 && !strcmp(argv[1], "train");
	char *stdin_only[] = {"-"};
	char **files;
	int nfiles, opt, rc, threads;
	int64_t v;
	uint64_t u;

	if ((rc = titan_cli_init(&cli, "titan-tokenize", &argc, argv, false)) != 0)
		return rc;
	if (train) { /* options after the subcommand */
		argv[1] = argv[0];
		argv++;
		argc--;
	}
	while ((opt = getopt_long(argc, argv, TITAN_CLI_GLOBAL_SHORT "t:e:f:do:", longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			usage(stdout);
			return titan_cli_finish(&cli, 0);
		case 't': o.tokenizer = optarg; break;
		case 'e':
			if (titan_tok_encoding_parse(optarg, &o.encoding) < 0)
				return titan_cli_usage_error(&cli, "--encoding: '%s' is not one of llama3, "
							     "cl100k_base, o200k_base", optarg);
			break;
		case 'f':
			if (titan_doc_format_parse(optarg, &o.reader.format) < 0)
				return titan_cli_usage_error(&cli, "--format: '%s' is not one of jsonl, "
							     "text, lines", optarg);
			o.format_set = true;
			break;
		case OPT_FIELD: o.reader.field = optarg; break;
		case OPT_DOC_PER_LINE:
			o.reader.format = TITAN_DOC_LINES;
			o.format_set = true;
			break;
		case OPT_ALLOW_SPECIAL: o.allow_special = true; break;
		case OPT_NO_BOS: o.no_bos = true; break;
		case OPT_NO_EOS: o.no_eos = true; break;
		case 'd': o.decode = true; break;
		case OPT_KEEP_SPECIAL: o.keep_special = true; break;
		case 'o': o.output = optarg; break;
		case OPT_VOCAB_SIZE:
			if (titan_parse_i64(optarg, &v) < 0 || v < 257 || v > 1 << 24)
				return titan_cli_usage_error(&cli, "--vocab-size: expected a count from "
							     "257 to 16777216, got '%s'", optarg);
			o.vocab_size = (uint32_t)v;
			break;
		case OPT_PATTERN:
			if (parse_pattern(optarg, &o.pattern) < 0)
				return titan_cli_usage_error(&cli, "--encoding-pattern: '%s' is not one of "
							     "llama3, cl100k, o200k, gpt2", optarg);
			break;
		case OPT_SPECIALS:
			if (titan_parse_i64(optarg, &v) < 0 || v < 0 || v > 65536)
				return titan_cli_usage_error(&cli, "--specials: expected a count from 0 "
							     "to 65536, got '%s'", optarg);
			o.nspecials = (uint32_t)v;
			break;
		case OPT_SEGMENT:
			if (titan_parse_size(optarg, &u) < 0 || u < 64 || u > (1ull << 32))
				return titan_cli_usage_error(&cli, "--segment-bytes: expected a size "
							     "from 64 to 4G, got '%s'", optarg);
			o.reader.segment_bytes = (size_t)u;
			break;
		default:
			rc = titan_cli_option(&cli, opt, optarg);
			if (rc == TITAN_CLI_HANDLED)
				break;
			return rc == TITAN_CLI_UNKNOWN ? titan_cli_usage_error(&cli, "unhandled option") : rc;
		}
	}
	if (train) {
		if (!o.vocab_size)
			return titan_cli_usage_error(&cli, "train: --vocab-size is required");
		if (o.vocab_size < 256 + o.nspecials + 1)
			return titan_cli_usage_error(&cli, "train: --vocab-size %u leaves no room for "
						     "merges (256 bytes + %u specials)", o.vocab_size, o.nspecials);
		if (o.tokenizer || o.decode)
			return titan_cli_usage_error(&cli, "train: --tokenizer and --decode do not apply");
	} else if (!o.tokenizer) {
		return titan_cli_usage_error(&cli, "--tokenizer FILE is required");
	}
	if (o.keep_special && !o.decode)
		return titan_cli_usage_error(&cli, "--keep-special applies to --decode");
	files = optind < argc ? argv + optind : stdin_only;
	nfiles = optind < argc ? argc - optind : 1;
	/* '-' (or no FILE) reads the input from standard input: then the
	 * tokenizer cannot come from there too */
	for (int i = 0; i < nfiles; i++)
		if (!strcmp(files[i], "-")) {
			if ((rc = titan_cli_claim_stdin(&cli, "the input")))
				goto done;
			break;
		}
	if (!train && (rc = titan_cli_stdin_file(&cli, "--tokenizer", &o.tokenizer)))
		goto done;
	/* Fail before writing anything when an input cannot be read. */
	for (int i = 0; i < nfiles; i++)
		if (strcmp(files[i], "-") && access(files[i], R_OK) != 0) {
			titan_error(TITAN_E_IO, "cannot open '%s': %s", files[i], strerror(errno));
			rc = titan_cli_fail_work(&cli, TITAN_E_IO);
			goto done;
		}
	/* a folder of shards is what titan-shard cat reads */
	for (int i = 0; o.decode && i < nfiles; i++) {
		struct stat st;

		if (strcmp(files[i], "-") && stat(files[i], &st) == 0 && S_ISDIR(st.st_mode)) {
			titan_error(TITAN_E_IO, "'%s' is a directory: for a folder of shards, "
				    "titan-shard cat '%s' | titan-tokenize -d ...", files[i], files[i]);
			rc = titan_cli_fail_work(&cli, TITAN_E_IO);
			goto done;
		}
	}
	threads = cli.threads > 0 ? cli.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (threads < 1)
		threads = 1;
	if (!train && (rc = titan_tokenizer_load(o.tokenizer, o.encoding, &tok)) < 0) {
		rc = titan_cli_fail_work(&cli, rc);
		goto done;
	}
	if (tok) {
		/* cutting long documents relies on a known pre-tokenizer */
		o.reader.cut_documents = titan_tokenizer_pretok_kind(tok) != TITAN_PRETOK_REGEX;
		titan_log_debug("tokenizer %s: %s, vocab %u, bos %lld, eos %lld", o.tokenizer,
				titan_tok_encoding_name(titan_tokenizer_encoding(tok)),
				titan_tokenizer_vocab_size(tok), (long long)titan_tokenizer_bos(tok),
				(long long)titan_tokenizer_eos(tok));
	}
	if ((rc = titan_afile_open(&out, o.output)) < 0) {
		rc = titan_cli_fail_work(&cli, rc);
		goto done;
	}
	titan_progress_init(&pr.p, cli.progress, "titan-tokenize", "bytes", inputs_size(files, nfiles));
	pr.docs_known = !o.decode;
	if (train)
		rc = run_train(&o, threads, cli.progress, files, nfiles, &out, &pr);
	else if (o.decode) {
		/* someone reading the output expected text: say what it is */
		if (!o.format_set && !out.path && isatty(STDOUT_FILENO))
			titan_log_info("--decode writes JSONL (one {\"%s\": ...} object per "
				       "document); --format text writes the plain text",
				       o.reader.field);
		rc = run_decode(tok, &o, files, nfiles, &out, &pr);
	}
	else
		rc = run_encode(tok, &o, threads, files, nfiles, &out, &pr);
	progress_show(&pr, true);
	rc = titan_afile_close(&out, rc);
	if (rc < 0) {
		rc = titan_cli_fail_work(&cli, rc);
		goto done;
	}
	rc = titan_cli_finish(&cli, 0);
done:
	titan_tokenizer_free(tok);
	titan_cli_release(&cli);
	return rc;
}
