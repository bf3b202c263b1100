/*
 * fuzz_tokenizer.c — tokenizer files (lib/tok): the input is a tiktoken
 * BPE file or an HF tokenizer.json (titan_tokenizer_load tells them apart
 * by content).  A file that loads must encode and decode: a tiktoken
 * tokenizer gives back the (sanitised) text it encoded.  A small one is
 * then exported with a tiny model to GGUF (lib/ckpt/gguf_export.c reads
 * the file again for tokenizer.ggml.*: merges recovered from tiktoken
 * ranks, tokenizer.json's vocab, merges and added tokens), and titan's
 * GGUF reader must read what its writer wrote.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "titan/ckpt.h"
#include "titan/core.h"
#include "titan/model.h"
#include "titan/tok.h"

static int zeros(void *ctx, const struct titan_param *p, float *out)
{
	(void)ctx;
	memset(out, 0, (size_t)p->numel * sizeof(*out));
	return 0;
}

static void export_gguf(const char *tok_path, uint32_t vocab)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_gguf_export_opts o;
	const char *path = fuzz_path("export.gguf");
	struct titan_gguf *f;
	int rc;

	if (titan_model_flavor("debugmodel", &d) < 0)
		abort();
	d.dim = 8;
	d.n_layers = 1;
	d.n_heads = 2;
	d.n_kv_heads = 1;
	d.head_dim = 4;
	d.ffn_hidden = 16;
	d.vocab_size = vocab;
	snprintf(d.flavor, sizeof(d.flavor), "custom");
	if (titan_param_table_init(&t, &d, NULL) < 0)
		abort();
	titan_gguf_export_opts_default(&o);
	o.tokenizer = tok_path;
	rc = titan_gguf_export(path, &t, zeros, NULL, &o);
	fuzz_check_error(rc);
	if (rc == 0) {
		if (!(f = titan_gguf_open(path))) {
			fprintf(stderr, "fuzz: the exported GGUF does not read back: %s\n", titan_errmsg());
			abort();
		}
		if (!titan_gguf_find_kv(f, "tokenizer.ggml.tokens"))
			abort();
		titan_gguf_close(f);
	}
	titan_param_table_release(&t);
}

static const char sample[] =
	"Hello, world! It's 2024: 12345 tokens\n\n  indented\tand <|begin_of_text|> "
	"<|endoftext|> zzz caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x99\x82 \xff\xfe end";

static void roundtrip(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
		      const uint8_t *text, size_t n, bool special)
{
	struct titan_ids ids = {0};
	struct titan_bytes dec = {0}, want = {0};
	int rc = titan_tokenizer_encode(t, s, text, n, special, &ids);

	fuzz_check_error(rc);
	if (rc == 0) {
		for (size_t i = 0; i < ids.n; i++)
			if (ids.p[i] >= titan_tokenizer_vocab_size(t))
				abort(); /* an id the vocabulary does not have */
		if ((rc = titan_tokenizer_decode(t, ids.p, ids.n, &dec)) < 0) {
			fprintf(stderr, "fuzz: decoding encoded ids: %s\n", titan_errmsg());
			abort();
		}
		if (titan_tokenizer_format(t) == TITAN_TOK_TIKTOKEN &&
		    titan_utf8_sanitize(text, n, &want) >= 0 &&
		    (want.n != dec.n || memcmp(want.p, dec.p, dec.n))) {
			fprintf(stderr, "fuzz: decode(encode(text)) differs from the text\n");
			abort();
		}
	}
	titan_ids_release(&ids);
	titan_bytes_release(&dec);
	titan_bytes_release(&want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_path("tokenizer");
	struct titan_tokenizer *t = NULL;
	struct titan_tok_scratch *s;
	uint32_t nv;
	int rc;

	fuzz_write(path, data, size);
	rc = titan_tokenizer_load(path, TITAN_ENC_AUTO, &t);
	fuzz_check_error(rc);
	if (rc < 0)
		return 0;
	nv = titan_tokenizer_vocab_size(t);
	for (uint32_t id = 0; id < nv && id < 4096; id++) {
		size_t len = 0;
		const uint8_t *b = titan_tokenizer_token(t, id, &len);

		if (b && len)
			(void)b[len - 1];
	}
	if (titan_tokenizer_bos(t) >= (int64_t)nv || titan_tokenizer_eos(t) >= (int64_t)nv)
		abort();
	(void)titan_tokenizer_fingerprint(t);
	(void)titan_tokenizer_special(t, "<|end_of_text|>");
	if (!(s = titan_tok_scratch_new(t)))
		abort();
	roundtrip(t, s, (const uint8_t *)sample, sizeof(sample) - 1, false);
	roundtrip(t, s, (const uint8_t *)sample, sizeof(sample) - 1, true);
	roundtrip(t, s, data, size < 512 ? size : 512, true);
	titan_tok_scratch_free(s);
	titan_tokenizer_free(t);
	if (nv <= 4096)
		export_gguf(path, nv);
	return 0;
}
