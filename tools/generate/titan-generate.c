/*
 * titan-generate — continue a prompt with a trained model: a titan
 * checkpoint (step-N.h5, a checkpoint folder) or its HF export, the
 * tokenizer it was trained with, greedy or sampled decoding with a KV
 * cache (lib/generate; torchtitan's scripts/generate/test_generate.py).
 * The continuation goes to standard output as it is generated; logs go to
 * standard error.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "titan/cli.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/generate.h"
#include "titan/ops.h"
#include "titan/tok.h"

enum {
	OPT_TEMPERATURE = TITAN_OPT_TOOL_BASE,
	OPT_TOP_K,
	OPT_TOP_P,
	OPT_SEED,
	OPT_CONTEXT,
	OPT_NO_BOS,
	OPT_ALLOW_SPECIAL,
};

#define DEFAULT_MAX_NEW 256

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: titan-generate [OPTIONS] MODEL [PROMPT]\n"
"Continue PROMPT with a trained Llama 3 and print the continuation (the new\n"
"text only) on standard output as it is generated; logs go to standard error.\n"
"MODEL is a titan checkpoint (step-N.h5), a checkpoint folder (its newest\n"
"complete step) or an HF folder (config.json + model.safetensors, as\n"
"titan-ckpt-convert --to hf writes it).  PROMPT '-' or no PROMPT reads the\n"
"prompt from standard input (its bytes as they are, a final newline too).\n"
"Decoding is greedy unless --temperature is above 0; it stops at the\n"
"tokenizer's end-of-text token, after --max-new-tokens, or when prompt and\n"
"continuation fill the context.\n"
"\n"
"Options:\n"
"  -t, --tokenizer FILE      tiktoken file or tokenizer.json (default: the HF\n"
"                            folder's tokenizer file, or the checkpoint config's\n"
"                            model.tokenizer_path)\n"
"  -e, --encoding NAME       llama3, cl100k_base or o200k_base (default: detect)\n"
"  -n, --max-new-tokens N    at most N new tokens (default %d)\n"
"      --temperature T       sample from softmax(logits / T); 0: greedy (default)\n"
"      --top-k K             sample among the K most likely tokens (0: all, default)\n"
"      --top-p P             sample among the most likely tokens holding\n"
"                            probability P, in (0, 1] (default 1: all)\n"
"      --seed N              sampling seed: the same seed, model and prompt give\n"
"                            the same text (default: a random seed, logged)\n"
"      --context N           tokens prompt and continuation may fill (default:\n"
"                            training.seq_len the model was trained with, an HF\n"
"                            folder's max_position_embeddings); a prompt that\n"
"                            fills it is an error\n"
"      --no-bos              do not put the tokenizer's BOS before the prompt\n"
"      --allow-special       special-token text in the prompt becomes its id\n"
"  -c, --config FILE         model dims and training.seq_len from a titan config\n"
"                            instead of those stored with the model\n"
"      --section.key=V       override a key of --config\n"
"      --help-config         every config key with its type, default and meaning\n"
"      --threads N           CPU threads (default: all cores)\n"
"  -v, --verbose; -q, --quiet; -h, --help; --version\n"
"\n"
"Exit status: 0 ok, 1 a missing or bad model or tokenizer, 2 usage or a\n"
"prompt that does not fit.\n"
"\n"
"Examples:\n"
"  titan-generate -t kjv.tiktoken outputs/checkpoint 'In the beginning'\n"
"  echo 'And God said' | titan-generate -t kjv.tiktoken --temperature 0.8 \\\n"
"      --top-p 0.95 --seed 7 -n 64 export/\n"
"\n"
"See also: titan-train(1), titan-ckpt-convert(1), titan-tokenize(1)\n",
		DEFAULT_MAX_NEW);
}

struct opts {
	const char *tokenizer;
	enum titan_tok_encoding encoding;
	int64_t max_new, context;
	struct titan_sampler_opts sampling;
	bool seed_set, no_bos, allow_special;
};

/* ----------------------------------------------------------- prompt */

static int read_stdin(struct titan_bytes *b)
{
	char buf[65536];
	size_t n;

	while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0)
		if (titan_bytes_append(b, buf, n) < 0)
			return TITAN_E_NOMEM;
	if (ferror(stdin))
		return titan_error(TITAN_E_IO, "cannot read the prompt from standard input: %s",
				   strerror(errno ? errno : EIO));
	return 0;
}

/* ----------------------------------------------------------- output */

struct out {
	const struct titan_tokenizer *tok;
	struct titan_bytes text;
	bool warned;
};

/* Each token's bytes as soon as it exists (a UTF-8 character split over
 * tokens is completed by the next ones). */
static int emit(void *ctx, int32_t id)
{
	struct out *o = ctx;
	size_t len;
	int rc;

	if (!titan_tokenizer_token(o->tok, (uint32_t)id, &len)) {
		if (!o->warned)
			titan_log_warn("the model produced id %d, which the tokenizer does not have "
				       "(skipped; more may follow)", id);
		o->warned = true;
		return 0;
	}
	o->text.n = 0;
	if ((rc = titan_tokenizer_decode(o->tok, (const uint32_t *)&id, 1, &o->text)) < 0)
		return rc;
	errno = 0;
	if ((o->text.n && fwrite(o->text.p, 1, o->text.n, stdout) != o->text.n) ||
	    fflush(stdout) != 0)
		return titan_error(TITAN_E_IO, "cannot write to standard output: %s",
				   strerror(errno ? errno : EIO));
	return 0;
}

/* ------------------------------------------------------------- main */

static uint64_t random_seed(void)
{
	uint64_t s;

	if (getrandom(&s, sizeof(s), 0) != (ssize_t)sizeof(s))
		s = titan_unix_time_ns() ^ (uint64_t)getpid() << 32;
	return s;
}

/* Tokens of the prompt: BOS (unless --no-bos) and the encoded text. */
static int encode_prompt(const struct titan_tokenizer *tok, const struct opts *o,
			 const struct titan_bytes *text, struct titan_ids *ids)
{
	struct titan_tok_scratch *s = titan_tok_scratch_new(tok);
	int64_t bos = titan_tokenizer_bos(tok);
	int rc = 0;

	if (!s)
		return TITAN_E_NOMEM;
	if (!o->no_bos && bos >= 0)
		rc = titan_ids_push(ids, (uint32_t)bos);
	if (rc == 0)
		rc = titan_tokenizer_encode(tok, s, text->p, text->n, o->allow_special, ids);
	titan_tok_scratch_free(s);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		TITAN_CLI_GLOBAL_OPTIONS,
		TITAN_CLI_CONFIG_OPTIONS,
		{"tokenizer", required_argument, NULL, 't'},
		{"encoding", required_argument, NULL, 'e'},
		{"max-new-tokens", required_argument, NULL, 'n'},
		{"temperature", required_argument, NULL, OPT_TEMPERATURE},
		{"top-k", required_argument, NULL, OPT_TOP_K},
		{"top-p", required_argument, NULL, OPT_TOP_P},
		{"seed", required_argument, NULL, OPT_SEED},
		{"context", required_argument, NULL, OPT_CONTEXT},
		{"no-bos", no_argument, NULL, OPT_NO_BOS},
		{"allow-special", no_argument, NULL, OPT_ALLOW_SPECIAL},
		{0},
	};
	struct titan_cli cli;
	struct opts o = {.max_new = DEFAULT_MAX_NEW};
	struct titan_config cfg;
	bool have_cfg = false;
	struct titan_gen_model *model = NULL;
	struct titan_tokenizer *tok = NULL;
	struct titan_generator *gen = NULL;
	struct titan_backend be = {0};
	struct titan_bytes prompt = {0};
	struct titan_ids ids = {0};
	struct out out = {0};
	struct titan_gen_opts go;
	struct titan_gen_result res = {0};
	const char *model_path, *tok_path, *ctx_from;
	int64_t ctx, v, n_prompt;
	double x;
	int opt, rc;
	bool blas;

	/* OpenBLAS's kernel (lib/cpu/select.c) and the threading defaults are
	 * read when the libraries load: set what is missing, re-execute once */
	blas = titan_blas_select_env();
	titan_cli_thread_defaults(argv);
	if (blas)
		titan_blas_reexec(argv);
	if ((rc = titan_cli_init(&cli, "titan-generate", &argc, argv, true)) != 0)
		return rc;
	titan_sampler_opts_default(&o.sampling);
	while ((opt = getopt_long(argc, argv, TITAN_CLI_GLOBAL_SHORT TITAN_CLI_CONFIG_SHORT "t:e:n:",
				  longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			usage(stdout);
			rc = titan_cli_finish(&cli, 0);
			goto done;
		case 't': o.tokenizer = optarg; break;
		case 'e':
			if (titan_tok_encoding_parse(optarg, &o.encoding) < 0) {
				rc = titan_cli_usage_error(&cli, "--encoding: '%s' is not one of llama3, "
							   "cl100k_base, o200k_base", optarg);
				goto done;
			}
			break;
		case 'n':
			if (titan_parse_i64(optarg, &v) < 0 || v < 0 || v > INT32_MAX) {
				rc = titan_cli_usage_error(&cli, "--max-new-tokens: expected a count "
							   "from 0 to %d, got '%s'", INT32_MAX, optarg);
				goto done;
			}
			o.max_new = v;
			break;
		case OPT_TEMPERATURE:
			if (titan_parse_double(optarg, &x) < 0 || !isfinite(x) || x < 0) {
				rc = titan_cli_usage_error(&cli, "--temperature: expected a number >= 0 "
							   "(0: greedy), got '%s'", optarg);
				goto done;
			}
			o.sampling.temperature = x;
			break;
		case OPT_TOP_K:
			if (titan_parse_i64(optarg, &v) < 0 || v < 0) {
				rc = titan_cli_usage_error(&cli, "--top-k: expected a count >= 0 (0: all), "
							   "got '%s'", optarg);
				goto done;
			}
			o.sampling.top_k = v;
			break;
		case OPT_TOP_P:
			if (titan_parse_double(optarg, &x) < 0 || !(x > 0 && x <= 1)) {
				rc = titan_cli_usage_error(&cli, "--top-p: expected a probability in "
							   "(0, 1], got '%s'", optarg);
				goto done;
			}
			o.sampling.top_p = x;
			break;
		case OPT_SEED:
			if (titan_parse_u64(optarg, &o.sampling.seed) < 0) {
				rc = titan_cli_usage_error(&cli, "--seed: expected an integer from 0 to "
							   "%" PRIu64 ", got '%s'", UINT64_MAX, optarg);
				goto done;
			}
			o.seed_set = true;
			break;
		case OPT_CONTEXT:
			if (titan_parse_i64(optarg, &v) < 0 || v < 1 || v > INT32_MAX) {
				rc = titan_cli_usage_error(&cli, "--context: expected a token count from "
							   "1 to %d, got '%s'", INT32_MAX, optarg);
				goto done;
			}
			o.context = v;
			break;
		case OPT_NO_BOS: o.no_bos = true; break;
		case OPT_ALLOW_SPECIAL: o.allow_special = true; break;
		default:
			rc = titan_cli_option(&cli, opt, optarg);
			if (rc == TITAN_CLI_HANDLED)
				break;
			if (rc == TITAN_CLI_UNKNOWN)
				rc = titan_cli_usage_error(&cli, "unhandled option");
			goto done;
		}
	}
	if (optind >= argc) {
		rc = titan_cli_usage_error(&cli, "MODEL is required (a step-N.h5, a checkpoint "
					   "folder or an HF folder)");
		goto done;
	}
	if (argc - optind > 2) {
		rc = titan_cli_usage_error(&cli, "one PROMPT argument expected, got %d (quote the "
					   "prompt)", argc - optind - 1);
		goto done;
	}
	if (cli.overrides.n && !cli.config_path) {
		rc = titan_cli_usage_error(&cli, "--%s: config overrides apply to --config FILE",
					   cli.overrides.names[0]);
		goto done;
	}
	if (o.sampling.temperature == 0 && (o.sampling.top_k || o.sampling.top_p < 1))
		titan_log_warn("--top-k/--top-p apply to sampling: greedy decoding (temperature 0) "
			       "ignores them");
	model_path = argv[optind];
	/* '-': a model is a checkpoint read with seeks or a folder; standard
	 * input goes to one of --config, the prompt and --tokenizer */
	if ((rc = titan_cli_no_dash(&cli, "MODEL", model_path, "a checkpoint (HDF5) is read "
				    "with seeks and an HF model is a folder")) ||
	    (cli.config_path && !strcmp(cli.config_path, "-") &&
	     (rc = titan_cli_claim_stdin(&cli, "--config"))) ||
	    ((optind + 1 == argc || !strcmp(argv[optind + 1], "-")) &&
	     (rc = titan_cli_claim_stdin(&cli, "the prompt"))) ||
	    (o.tokenizer && (rc = titan_cli_stdin_file(&cli, "--tokenizer", &o.tokenizer))))
		goto done;

	/* the prompt first: reading stdin must not wait behind a big load */
	if (optind + 1 < argc && strcmp(argv[optind + 1], "-") != 0)
		rc = titan_bytes_append(&prompt, argv[optind + 1], strlen(argv[optind + 1]));
	else
		rc = read_stdin(&prompt);
	if (rc < 0) {
		rc = titan_cli_fail_work(&cli, rc);
		goto done;
	}
	if (cli.config_path) {
		if ((rc = titan_cli_load_config(&cli, &cfg)) != 0)
			goto done;
		have_cfg = true;
	}
	if ((rc = titan_gen_model_load(model_path, have_cfg ? &cfg : NULL, &model)) < 0) {
		/* dims of --config that disagree with the tensors: configuration
		 * (2); without --config every failure is the model file's (1) */
		rc = have_cfg ? titan_cli_fail(&cli, rc) : titan_cli_fail_work(&cli, rc);
		goto done;
	}
	tok_path = o.tokenizer ? o.tokenizer : model->tokenizer;
	if (!tok_path) {
		rc = titan_cli_usage_error(&cli, "--tokenizer FILE is required: '%s' names no "
					   "tokenizer", model->path);
		goto done;
	}
	if ((rc = titan_tokenizer_load(tok_path, o.encoding, &tok)) < 0) {
		if (!o.tokenizer)
			titan_error_prefix("the tokenizer %s names (--tokenizer to give another)",
					   model->hf ? "the HF folder" : "the checkpoint's config");
		rc = titan_cli_fail_work(&cli, rc);
		goto done;
	}
	{
		char step[48] = "", line[512];

		if (model->step >= 0)
			snprintf(step, sizeof(step), ", step %" PRId64, model->step);
		titan_log_info("%s %s: %s%s (%s, dim %" PRId64 ", %" PRId64 " layers, vocab %" PRId64
			       "%s), tokenizer %s; %s", cli.prog, titan_version(), model->path,
			       model->hf ? " (HF)" : "", model->dims.flavor, model->dims.dim,
			       model->dims.n_layers, model->dims.vocab_size, step, tok_path,
			       titan_blas_describe(line, sizeof(line)));
		if (titan_blas_warning(line, sizeof(line)))
			titan_log_warn("%s", line);
	}
	if ((int64_t)titan_tokenizer_vocab_size(tok) > model->dims.vocab_size) {
		titan_error(TITAN_E_INVALID, "the tokenizer '%s' has %u ids, the model's vocabulary "
			    "%" PRId64 ": not the model's tokenizer", tok_path,
			    titan_tokenizer_vocab_size(tok), model->dims.vocab_size);
		rc = titan_cli_fail_work(&cli, TITAN_E_INVALID);
		goto done;
	}

	/* the context: --context, else what the model was trained for */
	ctx = o.context ? o.context : model->seq_len;
	ctx_from = o.context ? "--context" : model->hf ? "max_position_embeddings in its "
		   "config.json" : have_cfg ? "training.seq_len of --config" :
		   "training.seq_len of the config stored in it";
	if (!ctx) {
		ctx = model->dims.rope_original_max_position > 0 ?
		      model->dims.rope_original_max_position : 2048;
		ctx_from = "a default: the model does not say";
		titan_log_warn("'%s' does not say its context length: using %" PRId64 " tokens "
			       "(--context N to set it)", model->path, ctx);
	} else if (o.context && model->seq_len && o.context > model->seq_len) {
		titan_log_warn("--context %" PRId64 " is beyond the %" PRId64 " tokens '%s' was "
			       "trained for: expect worse text past them", o.context,
			       model->seq_len, model->path);
	}
	if ((rc = encode_prompt(tok, &o, &prompt, &ids)) < 0) {
		rc = titan_cli_fail_work(&cli, rc);
		goto done;
	}
	n_prompt = (int64_t)ids.n;
	if (n_prompt == 0) {
		rc = titan_cli_usage_error(&cli, "the prompt is empty and --no-bos leaves no token "
					   "to continue");
		goto done;
	}
	if (n_prompt >= ctx) {
		rc = titan_cli_usage_error(&cli, "the prompt is %" PRId64 " tokens, the context of "
					   "'%s' is %" PRId64 " (%s) and needs room for new ones: "
					   "shorten the prompt or raise --context", n_prompt,
					   model->path, ctx, ctx_from);
		goto done;
	}

	if (!o.seed_set)
		o.sampling.seed = random_seed();
	if (o.sampling.temperature > 0)
		titan_log_info("sampling: temperature %g, top-k %" PRId64 ", top-p %g, seed %" PRIu64
			       "%s", o.sampling.temperature, o.sampling.top_k, o.sampling.top_p,
			       o.sampling.seed, o.seed_set ? "" : " (--seed repeats this text)");
	if ((rc = titan_backend_cpu_init(&be, cli.threads)) < 0) {
		rc = titan_cli_fail_work(&cli, rc);
		goto done;
	}
	{
		struct titan_generator_opts gopts = {
			.capacity = n_prompt + o.max_new < ctx ? n_prompt + o.max_new : ctx,
			.block_causal = model->block_causal,
			.doc_eos = titan_tokenizer_eos(tok),
		};

		if (model->block_causal)
			titan_log_info("training.attn_mask_type block_causal: attention stays within "
				       "a document (documents end at id %" PRId64 ")", gopts.doc_eos);

		if ((rc = titan_generator_new(&model->table, model->params.data, &gopts, &be, NULL,
					      &gen)) < 0) {
			rc = titan_cli_fail_work(&cli, rc);
			goto done;
		}
	}
	go.max_new_tokens = o.max_new;
	go.eos_id = titan_tokenizer_eos(tok);
	go.sampling = o.sampling;
	out.tok = tok;
	rc = titan_generate(gen, (const int32_t *)ids.p, n_prompt, &go, emit, &out, &res);
	if (rc < 0) {
		rc = titan_cli_fail_work(&cli, rc);
		goto done;
	}
	titan_log_info("%" PRId64 " new tokens after a prompt of %" PRId64 ", stopped by %s; "
		       "prompt %.3f s (%.1f tokens/s), generation %.3f s (%.1f tokens/s)",
		       res.n_new, res.n_prompt, titan_gen_stop_name(res.stop), res.prefill_s,
		       res.prefill_s > 0 ? (double)res.n_prompt / res.prefill_s : 0.0, res.decode_s,
		       res.decode_s > 0 ? (double)res.n_new / res.decode_s : 0.0);
	if (res.n_new)
		titan_log_info("log-probability of the new tokens: %.6f (%.6f per token)",
			       res.logprob, res.logprob / (double)res.n_new);
	if (res.stop == TITAN_GEN_STOP_CONTEXT)
		titan_log_warn("stopped at the context of %" PRId64 " tokens (%s; --context N "
			       "to change it)", ctx, ctx_from);
	rc = titan_cli_finish(&cli, 0);
done:
	titan_generator_free(gen);
	if (be.ops)
		titan_backend_release(&be);
	titan_tokenizer_free(tok);
	titan_gen_model_free(model);
	titan_bytes_release(&out.text);
	titan_bytes_release(&prompt);
	titan_ids_release(&ids);
	if (have_cfg)
		titan_config_release(&cfg);
	titan_cli_release(&cli);
	return rc;
}
