/*
 * fuzz_docs.c — titan-tokenize's input (lib/tok/reader.c): JSONL, whole
 * text files and one document per line.  The first 4 bytes choose the
 * format, the segment size and cutting; the rest is the corpus file.
 * Oracle: the segments of a document concatenate to the document, and
 * (with cutting) encoding them one by one gives the ids of the whole
 * document, which is what makes titan-tokenize's parallel encoding exact.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "titan/core.h"
#include "titan/tok.h"

static struct titan_tokenizer *tok;
static struct titan_tok_scratch *scratch;

/* A byte-level tiktoken file: the 256 bytes and a few merges (Llama 3's
 * conventions: cl100k's pattern, the specials after the ranks). */
static void make_tokenizer(void)
{
	static const char *const merges[] = {"th", "he", "in", "er", "an", " t", " a", "the",
					     " the", "\n\n", "  ", "ing", "or", "en", "\n "};
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *path = fuzz_path("docs.tiktoken");
	FILE *fp = fopen(path, "w");
	unsigned rank = 0;

	if (!fp)
		abort();
	for (unsigned i = 0; i < 256 + sizeof(merges) / sizeof(merges[0]); i++) {
		uint8_t b[8];
		size_t n = i < 256 ? 1 : strlen(merges[i - 256]);

		if (i < 256)
			b[0] = (uint8_t)i;
		else
			memcpy(b, merges[i - 256], n);
		for (size_t k = 0; k < n; k += 3) {
			uint32_t v = (uint32_t)b[k] << 16 | (k + 1 < n ? (uint32_t)b[k + 1] << 8 : 0) |
				     (k + 2 < n ? b[k + 2] : 0);

			fprintf(fp, "%c%c%c%c", b64[v >> 18], b64[(v >> 12) & 63],
				k + 1 < n ? b64[(v >> 6) & 63] : '=', k + 2 < n ? b64[v & 63] : '=');
		}
		fprintf(fp, " %u\n", rank++);
	}
	fclose(fp);
	if (titan_tokenizer_load(path, TITAN_ENC_AUTO, &tok) < 0 || !(scratch = titan_tok_scratch_new(tok))) {
		fprintf(stderr, "fuzz: %s\n", titan_errmsg());
		abort();
	}
}

static void check_doc(const struct titan_bytes *doc, const struct titan_ids *by_segment)
{
	struct titan_ids whole = {0};

	if (titan_tokenizer_encode(tok, scratch, doc->p, doc->n, false, &whole) < 0)
		abort();
	if (whole.n != by_segment->n ||
	    (whole.n && memcmp(whole.p, by_segment->p, whole.n * sizeof(*whole.p)))) {
		fprintf(stderr, "fuzz: a document of %zu bytes encodes to %zu ids whole, %zu ids by "
			"segments\n", doc->n, whole.n, by_segment->n);
		abort();
	}
	titan_ids_release(&whole);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum titan_doc_format formats[] = {TITAN_DOC_JSONL, TITAN_DOC_TEXT, TITAN_DOC_LINES};
	const char *path = fuzz_path("corpus");
	struct fuzz_in in = {data, size};
	struct titan_doc_reader_opts o = {0};
	struct titan_doc_reader *r;
	struct titan_doc_segment seg;
	struct titan_bytes doc = {0};
	struct titan_ids ids = {0};
	uint8_t flags;
	bool in_doc = false;
	int rc;

	if (!tok)
		make_tokenizer();
	o.format = formats[fuzz_u8(&in) % 3];
	o.segment_bytes = 1 + fuzz_u16(&in) % 512;
	flags = fuzz_u8(&in);
	o.cut_documents = flags & 1;
	o.field = flags & 2 ? "content" : "text";
	fuzz_write(path, in.p, in.n);
	if (!(r = titan_doc_reader_open(path, &o)))
		abort();
	while ((rc = titan_doc_reader_next(r, &seg)) > 0) {
		if (seg.doc_start != !in_doc)
			abort(); /* a document starts right after the previous ended */
		if (seg.doc_start) {
			doc.n = 0;
			ids.n = 0;
		}
		if (titan_bytes_append(&doc, seg.data, seg.len) < 0 ||
		    titan_tokenizer_encode(tok, scratch, seg.data, seg.len, false, &ids) < 0)
			abort();
		in_doc = !seg.doc_end;
		if (seg.doc_end)
			check_doc(&doc, &ids);
		if (titan_doc_reader_bytes(r) > in.n)
			abort();
	}
	fuzz_check_error(rc);
	if (rc == 0 && in_doc)
		abort(); /* the input ended inside a document */
	titan_doc_reader_close(r);
	titan_bytes_release(&doc);
	titan_ids_release(&ids);
	return 0;
}
