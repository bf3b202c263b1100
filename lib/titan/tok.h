/*
 * titan/tok.h — byte-level BPE tokenization, exact against tiktoken and
 * HuggingFace tokenizers.
 *
 * Three layers:
 *  1. UTF-8 sanitising: invalid input bytes are replaced by U+FFFD using the
 *     WHATWG "maximal subpart" rule (what JavaScript's TextDecoder and
 *     Python's bytes.decode(errors="replace") do), so ids match a peer that
 *     reads the same file as text.  Nothing is dropped silently.
 *  2. Pre-tokenizer: splits text into pieces with the encoding's regex
 *     (cl100k/Llama 3, o200k, GPT-2, or any PCRE2 pattern from a
 *     tokenizer.json).  The known patterns have hand-written scanners over
 *     Unicode tables; PCRE2 (JIT, UTF, UCP) runs any pattern and is the
 *     scanners' reference in the tests.
 *  3. BPE over each piece's bytes: tiktoken semantics (merge the adjacent
 *     pair whose concatenation has the lowest rank) for .tiktoken files, HF
 *     semantics (merge the pair with the lowest merge rank; `ignore_merges`)
 *     for tokenizer.json.
 *
 * A struct titan_tokenizer is immutable after loading: any number of
 * threads may encode with it at once, each with its own scratch.
 */
#ifndef TITAN_TOK_H
#define TITAN_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "titan/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ utf-8 */

/* Growable byte and id buffers (host allocator, tag "data"). */
struct titan_bytes {
	uint8_t *p;
	size_t n, cap;
};
struct titan_ids {
	uint32_t *p;
	size_t n, cap;
};
int titan_bytes_reserve(struct titan_bytes *b, size_t cap);
int titan_bytes_append(struct titan_bytes *b, const void *data, size_t n);
void titan_bytes_release(struct titan_bytes *b);
int titan_ids_reserve(struct titan_ids *v, size_t cap);
int titan_ids_push(struct titan_ids *v, uint32_t id);
void titan_ids_release(struct titan_ids *v);

/* Length of the valid UTF-8 prefix of s[0..n). */
size_t titan_utf8_valid_prefix(const uint8_t *s, size_t n);
/* Append s[0..n) to out with each maximal invalid subpart replaced by
 * U+FFFD (EF BF BD); returns the number of replacements or TITAN_E_NOMEM. */
int64_t titan_utf8_sanitize(const uint8_t *s, size_t n, struct titan_bytes *out);

/* ----------------------------------------------------- pre-tokenizer */

enum titan_pretok_kind {
	TITAN_PRETOK_CL100K, /* cl100k_base and Llama 3 (same regex) */
	TITAN_PRETOK_O200K,  /* o200k_base */
	TITAN_PRETOK_GPT2,   /* GPT-2 / HF ByteLevel(use_regex=true) */
	TITAN_PRETOK_REGEX,  /* any PCRE2 pattern (tokenizer.json Split) */
};

/* The regex text of a known kind, in the syntax tiktoken uses. */
const char *titan_pretok_pattern(enum titan_pretok_kind kind);

struct titan_pretok;
/* A pre-tokenizer.  For TITAN_PRETOK_REGEX `regex` is required; for the
 * known kinds it must be NULL.  With `use_pcre2`, known kinds run through
 * PCRE2 on their pattern instead of the scanner (the test oracle).
 * NULL + TITAN_E_INVALID (bad regex, with PCRE2's message and offset) or
 * TITAN_E_NOMEM. */
struct titan_pretok *titan_pretok_new(enum titan_pretok_kind kind, const char *regex,
				      bool use_pcre2);
void titan_pretok_free(struct titan_pretok *p);
enum titan_pretok_kind titan_pretok_get_kind(const struct titan_pretok *p);

/* Per-thread matching state (PCRE2 match data); NULL-safe free. */
struct titan_pretok_state;
struct titan_pretok_state *titan_pretok_state_new(const struct titan_pretok *p);
void titan_pretok_state_free(struct titan_pretok_state *s);

/* Split valid UTF-8 text[0..n) into pieces: calls fn(start, len, arg) for
 * each piece in order (pieces are non-empty and cover the text exactly the
 * way the regex's find-iter does; text the regex does not match is skipped,
 * as tiktoken skips it).  Stops early and returns fn's non-zero value. */
typedef int (*titan_pretok_fn)(const uint8_t *piece, size_t len, void *arg);
int titan_pretok_split(const struct titan_pretok *p, struct titan_pretok_state *s,
		       const uint8_t *text, size_t n, titan_pretok_fn fn, void *arg);

/* --------------------------------------------------------------- BPE */

enum titan_tok_format {
	TITAN_TOK_TIKTOKEN,   /* lines "base64(bytes) rank" */
	TITAN_TOK_HF_JSON,    /* HuggingFace tokenizer.json, byte-level BPE */
};

/* Encodings for tiktoken files (the file holds only the ranks; the
 * pattern and the special tokens come from the encoding, as in tiktoken):
 *  CL100K: 100256 ranks; <|endoftext|> 100257, <|fim_prefix|> 100258,
 *          <|fim_middle|> 100259, <|fim_suffix|> 100260, <|endofprompt|> 100276
 *  O200K:  199998 ranks; <|endoftext|> 199999, <|endofprompt|> 200018
 *  LLAMA3: cl100k's pattern; 256 specials right after the N ranks, Meta's
 *          names: N+0 <|begin_of_text|> (BOS), N+1 <|end_of_text|> (EOS),
 *          N+2 <|reserved_special_token_0|>, N+3 <|reserved_special_token_1|>,
 *          N+4 <|finetune_right_pad_id|>, N+5 <|step_id|>, N+6 <|start_header_id|>,
 *          N+7 <|end_header_id|>, N+8 <|eom_id|>, N+9 <|eot_id|>, N+10 <|python_tag|>,
 *          then <|reserved_special_token_K|> for K = 2.. up to N+255.
 *          For Llama 3 N = 128000; files made by `titan-tokenize train` use
 *          the same convention with their own N.
 * AUTO detects: 100256 ranks -> CL100K, 199998 -> O200K, else LLAMA3. */
enum titan_tok_encoding {
	TITAN_ENC_AUTO = 0,
	TITAN_ENC_CL100K,
	TITAN_ENC_O200K,
	TITAN_ENC_LLAMA3,
};
int titan_tok_encoding_parse(const char *name, enum titan_tok_encoding *out);
const char *titan_tok_encoding_name(enum titan_tok_encoding e);

struct titan_tokenizer;

/* Load a tokenizer file; the format is detected from the content (a JSON
 * object = tokenizer.json).  Errors name the file and line/key:
 *   "tok.model:17: bad base64", "tokenizer.json: model.type 'Unigram' is not
 *   supported (byte-level BPE only)".  */
int titan_tokenizer_load(const char *path, enum titan_tok_encoding enc,
			 struct titan_tokenizer **out);
void titan_tokenizer_free(struct titan_tokenizer *t);

enum titan_tok_format titan_tokenizer_format(const struct titan_tokenizer *t);
enum titan_tok_encoding titan_tokenizer_encoding(const struct titan_tokenizer *t);
/* The kind of pre-tokenizer the tokenizer runs (TITAN_PRETOK_REGEX for a
 * tokenizer.json Split pattern that is not a known one, and also when the
 * pieces are not the known pattern's alone: no pre-tokenizer at all, or
 * ByteLevel's add_prefix_space adding a space to each text segment). */
enum titan_pretok_kind titan_tokenizer_pretok_kind(const struct titan_tokenizer *t);
/* Number of ids (max id + 1, special tokens included). */
uint32_t titan_tokenizer_vocab_size(const struct titan_tokenizer *t);
/* BOS/EOS ids, or -1 when the tokenizer has none. */
int64_t titan_tokenizer_bos(const struct titan_tokenizer *t);
int64_t titan_tokenizer_eos(const struct titan_tokenizer *t);
/* Id of a special (added) token given its text, or -1. */
int64_t titan_tokenizer_special(const struct titan_tokenizer *t, const char *text);
/* 64-bit fingerprint of the vocabulary (ids, bytes, specials, pattern):
 * shards record it so data and tokenizer can be matched. */
uint64_t titan_tokenizer_fingerprint(const struct titan_tokenizer *t);
/* The bytes of one id (special tokens: their text); NULL for an unused id. */
const uint8_t *titan_tokenizer_token(const struct titan_tokenizer *t, uint32_t id, size_t *len);

/* Per-thread scratch for encoding. */
struct titan_tok_scratch;
struct titan_tok_scratch *titan_tok_scratch_new(const struct titan_tokenizer *t);
void titan_tok_scratch_free(struct titan_tok_scratch *s);

/* Encode text[0..n) (any bytes: sanitised first), appending ids to *out.
 * With allow_special, special-token text in the input becomes its id (as
 * tiktoken's allowed_special="all"); without, it is ordinary text (as
 * tiktoken's encode_ordinary).  Linear in n apart from BPE within pieces;
 * pieces longer than 1 MiB are handled without quadratic cost. */
int titan_tokenizer_encode(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
			   const uint8_t *text, size_t n, bool allow_special,
			   struct titan_ids *out);
/* Append the bytes of ids to *out (special tokens as their text).
 * TITAN_E_INVALID naming the id when one is out of range. */
int titan_tokenizer_decode(const struct titan_tokenizer *t, const uint32_t *ids, size_t n,
			   struct titan_bytes *out);

/* ---------------------------------------------------- document input */

/* Documents from corpus files, as segments small enough to encode in
 * parallel: a long document is cut only where every supported
 * pre-tokenizer is guaranteed to have a piece boundary (right after a
 * '\n' that is followed by an ASCII letter), so encoding the segments one
 * by one gives exactly the ids of the whole document. */
enum titan_doc_format {
	TITAN_DOC_JSONL, /* one JSON object per line; the document is a string field */
	TITAN_DOC_TEXT,  /* each file is one document */
	TITAN_DOC_LINES, /* each line is one document (its '\n' / "\r\n" is not part of it) */
};
int titan_doc_format_parse(const char *name, enum titan_doc_format *out);

struct titan_doc_reader_opts {
	enum titan_doc_format format;
	const char *field;        /* JSONL field, "text" */
	size_t segment_bytes;     /* target segment size, 0 = 1 MiB */
	bool cut_documents;       /* allow cutting long documents (known pre-tokenizers only) */
};

struct titan_doc_reader;
/* Open `path` ("-" = stdin); gzip and zstd input is decompressed (told by
 * its first bytes, see titan_instream_open).  NULL + TITAN_E_IO naming the
 * file, or TITAN_E_UNSUPPORTED for compressed input in a build without
 * zlib / libzstd. */
struct titan_doc_reader *titan_doc_reader_open(const char *path,
					       const struct titan_doc_reader_opts *o);
void titan_doc_reader_close(struct titan_doc_reader *r);

struct titan_doc_segment {
	const uint8_t *data;  /* valid until the next call */
	size_t len;
	bool doc_start;       /* first segment of a document */
	bool doc_end;         /* last segment of a document */
};
/* 1 and a segment, 0 at end of input, or a negative error naming the file
 * and line ("corpus.jsonl:17: field 'text' is missing") or, for corrupt
 * compressed input, the byte offset (TITAN_E_INVALID). */
int titan_doc_reader_next(struct titan_doc_reader *r, struct titan_doc_segment *seg);
/* Input bytes consumed so far (uncompressed). */
uint64_t titan_doc_reader_bytes(const struct titan_doc_reader *r);
/* The file's size (compressed, for compressed input) or -1 when unknown
 * (a pipe), and the file bytes read so far: progress percentages. */
int64_t titan_doc_reader_file_size(const struct titan_doc_reader *r);
uint64_t titan_doc_reader_file_bytes(const struct titan_doc_reader *r);
enum titan_compression titan_doc_reader_compression(const struct titan_doc_reader *r);
/* Largest safe cut p in (0, n), or 0: s[p-1] == '\n', s[p] an ASCII
 * letter and s[p-2] a visible ASCII character ("x\nY"). */
size_t titan_doc_safe_cut(const uint8_t *s, size_t n);

/* ---------------------------------------------------------- training */

/* Byte-level BPE training (the standard algorithm with incremental pair
 * counts): pre-tokenize the inputs with `pattern`, count distinct pieces,
 * then repeatedly merge the most frequent adjacent pair until
 * vocab_size - nspecials ranks exist.  Ranks 0..255 are the 256 single
 * bytes in byte order; ties between equally frequent pairs go to the pair
 * whose concatenated bytes sort first (memcmp; a proper prefix first), so
 * a run is deterministic (independent of threads and input order).
 * Training stops early, with a warning, when no pair occurs twice: the
 * file then has fewer ranks and the specials follow them.
 * Writes the ranks as a tiktoken file ("base64(bytes) rank" per line, rank
 * order, every byte string distinct) that tiktoken loads as
 * mergeable_ranks; the special tokens follow the LLAMA3 convention above
 * (nspecials of them after the ranks). */
struct titan_bpe_train_opts {
	uint32_t vocab_size;               /* ranks + nspecials; >= 256 + nspecials */
	uint32_t nspecials;                /* 256 (Llama 3 convention) */
	enum titan_pretok_kind pattern;    /* CL100K (llama3), O200K, GPT2 */
	int threads;                       /* counting pieces; 0 = all cores */
	bool progress;                     /* merges done, on stderr */
};
struct titan_bpe_trainer;
/* NULL + TITAN_E_INVALID (vocab_size < 256 + nspecials, another pattern
 * kind, threads < 0) or TITAN_E_NOMEM. */
struct titan_bpe_trainer *titan_bpe_trainer_new(const struct titan_bpe_train_opts *o);
/* Feed one document's text (any bytes; sanitised), or a segment of one cut
 * where titan_doc_reader cuts. */
int titan_bpe_trainer_add(struct titan_bpe_trainer *tr, const uint8_t *text, size_t n);
/* Run the merges and write the tiktoken file to `out` (flushed, not
 * closed); call once.  0, or TITAN_E_INVALID when the input gave no
 * pieces, TITAN_E_IO, TITAN_E_NOMEM.  The number of ranks is logged (INFO
 * with `progress`, WARN when it falls short). */
int titan_bpe_trainer_finish(struct titan_bpe_trainer *tr, FILE *out);
void titan_bpe_trainer_free(struct titan_bpe_trainer *tr);

#ifdef __cplusplus
}
#endif
#endif
