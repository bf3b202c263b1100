/*
 * titan-config — resolve, check and print a titan job config: the YAML file
 * plus --section.key=value overrides over the schema defaults, as every
 * tool that takes --config sees it (torchtitan: `python -m
 * torchtitan.config.manager` / job.print_config).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/cli.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/model.h"
#include "titan/ops.h"

enum {
	OPT_CHECK = TITAN_OPT_TOOL_BASE,
	OPT_GET,
	OPT_JSON,
	OPT_SUMMARY,
	OPT_NON_DEFAULT,
	OPT_DOC,
	OPT_FROM,
};

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: titan-config [OPTIONS] [--section.key=VALUE ...]\n"
"       titan-config --from yaml|toml FILE [OPTIONS] [--section.key=VALUE ...]\n"
"Resolve a titan job config (schema defaults < --config FILE < overrides),\n"
"check it, and print it.\n"
"\n"
"Options:\n"
"  -c, --config FILE     YAML job config, or torchtitan's TOML for a name ending\n"
"                        in .toml (default: the schema defaults)\n"
"      --from FORMAT     read the config file (FILE or --config) as yaml or toml\n"
"                        whatever its name: 'titan-config --from toml FILE'\n"
"                        prints a torchtitan job file as titan's YAML\n"
"      --check           validate only: print nothing, exit 0 if valid, 2 if not\n"
"      --get KEY         print the value of one key (section.key)\n"
"      --json            print the resolved config as one JSON object\n"
"      --non-default     print only the keys that differ from the defaults\n"
"      --summary         print the model and run summary (parameters, FLOPs/token)\n"
"  -o, --output FILE     write to FILE (atomically; '-': standard output)\n"
"      --help-config     list every key with its type, default, range and meaning\n"
"      --doc FORMAT      the key reference for the docs: markdown or man\n"
"  -v, --verbose         more log output; -q, --quiet: errors only\n"
"  -h, --help            show this help;  --version: version and features\n"
"\n"
"Overrides: --section.key=VALUE, --section.key VALUE, or --section.key for true.\n"
"\n"
"Example:\n"
"  titan-config --config configs/llama3_8b.yaml --training.steps=100 --summary\n"
"\n"
"See also: titan-train(1), titan-estimate(1), docs/config.md\n");
}

/* A value of the config by schema entry, as JSON. */
static void json_value(struct titan_json *j, const struct titan_config *c,
		       const struct titan_config_key *k)
{
	const char *p = (const char *)c + k->offset;

	switch (k->type) {
	case TITAN_CFG_BOOL:
		titan_json_bool(j, *(const bool *)p);
		break;
	case TITAN_CFG_INT: {
		int64_t v = *(const int64_t *)p;

		if (v == TITAN_CFG_NONE_INT && (k->flags & TITAN_CFG_NULLABLE))
			titan_json_null(j);
		else
			titan_json_int(j, v);
		break;
	}
	case TITAN_CFG_FLOAT:
		titan_json_double(j, *(const double *)p); /* NAN -> null */
		break;
	case TITAN_CFG_STRING:
	case TITAN_CFG_ENUM:
		titan_json_string(j, *(char *const *)p);
		break;
	case TITAN_CFG_STRLIST: {
		const struct titan_strlist *l = (const struct titan_strlist *)p;

		titan_json_array_begin(j);
		for (size_t i = 0; i < l->n; i++)
			titan_json_string(j, l->items[i]);
		titan_json_array_end(j);
		break;
	}
	}
}

static int write_json(FILE *fp, const struct titan_config *c, const struct titan_config *defaults)
{
	struct titan_json j;
	const char *section = NULL;
	int rc;

	titan_json_init(&j);
	titan_json_object_begin(&j);
	for (size_t i = 0; i < titan_config_nkeys(); i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		char a[512], b[512], name[128];

		snprintf(name, sizeof(name), "%s.%s", k->section, k->key);
		if (defaults) {
			titan_config_format_value(c, name, a, sizeof(a));
			titan_config_format_value(defaults, name, b, sizeof(b));
			if (strcmp(a, b) == 0)
				continue;
		}
		if (!section || strcmp(section, k->section) != 0) {
			if (section)
				titan_json_object_end(&j);
			section = k->section;
			titan_json_key(&j, section);
			titan_json_object_begin(&j);
		}
		titan_json_key(&j, k->key);
		json_value(&j, c, k);
	}
	if (section)
		titan_json_object_end(&j);
	titan_json_object_end(&j);
	rc = titan_json_write_line(&j, fp);
	titan_json_release(&j);
	return rc;
}

static int write_non_default_yaml(FILE *fp, const struct titan_config *c,
				  const struct titan_config *defaults)
{
	const char *section = NULL;

	/* Only keys that differ, as a YAML file that titan-config reads back:
	 * the values are re-quoted through a tiny config holding just them. */
	for (size_t i = 0; i < titan_config_nkeys(); i++) {
		const struct titan_config_key *k = titan_config_key_at(i);
		char a[4096], b[4096], name[128];
		struct titan_json q;

		snprintf(name, sizeof(name), "%s.%s", k->section, k->key);
		titan_config_format_value(c, name, a, sizeof(a));
		titan_config_format_value(defaults, name, b, sizeof(b));
		if (strcmp(a, b) == 0)
			continue;
		if (!section || strcmp(section, k->section) != 0) {
			section = k->section;
			fprintf(fp, "%s:\n", section);
		}
		/* JSON scalars and arrays are valid YAML flow values. */
		titan_json_init(&q);
		json_value(&q, c, k);
		fprintf(fp, "  %s: %s\n", k->key, titan_json_str(&q) ? titan_json_str(&q) : "null");
		titan_json_release(&q);
	}
	return ferror(fp) ? TITAN_E_IO : 0;
}

static void print_summary(FILE *fp, const struct titan_config *c, const struct titan_model_dims *d)
{
	struct titan_model_params p;
	char g[64], blas[512];
	const int64_t seq = c->training.seq_len;
	const double fpt = titan_model_flops_per_token(d, seq);

	titan_model_count_params(d, &p);
	fprintf(fp, "model:        %s %s%s%s\n", c->model.name, d->flavor,
		d->tied ? " (tied embeddings)" : "", d->qk_norm ? " (QK-norm)" : "");
	fprintf(fp, "dims:         dim %lld, layers %lld, heads %lld, kv heads %lld, head_dim %lld, "
		"ffn hidden %lld, vocab %lld\n",
		(long long)d->dim, (long long)d->n_layers, (long long)d->n_heads,
		(long long)d->n_kv_heads, (long long)d->head_dim, (long long)d->ffn_hidden,
		(long long)d->vocab_size);
	fprintf(fp, "rope:         theta %g%s\n", d->rope_theta,
		d->rope_scaling ? ", Llama 3.1 scaling" : "");
	fprintf(fp, "parameters:   %lld total (%.3f B), embedding %lld, output %lld, per layer %lld\n",
		(long long)p.total, (double)p.total / 1e9, (long long)p.embedding,
		(long long)p.output, (long long)p.per_layer);
	fprintf(fp, "fp32 weights: %s\n", titan_format_bytes(g, sizeof(g), 4.0 * (double)p.total));
	fprintf(fp, "flops/token:  %.4g at seq_len %lld (6N + 12*L*H*hd*S)\n", fpt, (long long)seq);
	fprintf(fp, "training:     %lld steps, local batch %lld x seq %lld, global batch %lld, lr %g "
		"(warmup %lld, %s decay)\n",
		(long long)c->training.steps, (long long)c->training.local_batch_size, (long long)seq,
		(long long)c->training.global_batch_size, c->optimizer.lr,
		(long long)c->lr_scheduler.warmup_steps, c->lr_scheduler.decay_type);
	fprintf(fp, "parallelism:  dp_replicate %lld, dp_shard %lld, tp %lld, pp %lld, cp %lld\n",
		(long long)c->parallelism.data_parallel_replicate_degree,
		(long long)c->parallelism.data_parallel_shard_degree,
		(long long)c->parallelism.tensor_parallel_degree,
		(long long)c->parallelism.pipeline_parallel_degree,
		(long long)c->parallelism.context_parallel_degree);
	fprintf(fp, "activation checkpointing: %s%s%s\n", c->activation_checkpoint.mode,
		c->activation_checkpoint.mode_e == TITAN_ACT_CKPT_SELECTIVE ? " " : "",
		c->activation_checkpoint.mode_e == TITAN_ACT_CKPT_SELECTIVE ?
			c->activation_checkpoint.selective_ac_option : "");
	/* what titan-train's CPU path runs its GEMMs with (lib/cpu/select.c) */
	fprintf(fp, "cpu gemm:     %s\n", titan_blas_describe(blas, sizeof(blas)));
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		TITAN_CLI_GLOBAL_OPTIONS,
		TITAN_CLI_CONFIG_OPTIONS,
		{"check", no_argument, NULL, OPT_CHECK},
		{"get", required_argument, NULL, OPT_GET},
		{"json", no_argument, NULL, OPT_JSON},
		{"summary", no_argument, NULL, OPT_SUMMARY},
		{"non-default", no_argument, NULL, OPT_NON_DEFAULT},
		{"output", required_argument, NULL, 'o'},
		{"doc", required_argument, NULL, OPT_DOC},
		{"from", required_argument, NULL, OPT_FROM},
		{0},
	};
	struct titan_cli cli;
	struct titan_config cfg = {0}, defaults = {0};
	bool check = false, json = false, summary = false, non_default = false;
	const char *get = NULL, *output = NULL, *doc = NULL, *from = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *out = stdout;
	int opt, rc;

	if ((rc = titan_cli_init(&cli, "titan-config", &argc, argv, true)) != 0)
		return rc;
	while ((opt = getopt_long(argc, argv, TITAN_CLI_GLOBAL_SHORT TITAN_CLI_CONFIG_SHORT "o:",
				  longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			usage(stdout);
			return titan_cli_finish(&cli, 0);
		case OPT_CHECK: check = true; break;
		case OPT_GET: get = optarg; break;
		case OPT_JSON: json = true; break;
		case OPT_SUMMARY: summary = true; break;
		case OPT_NON_DEFAULT: non_default = true; break;
		case OPT_DOC: doc = optarg; break;
		case OPT_FROM: from = optarg; break;
		case 'o': output = strcmp(optarg, "-") ? optarg : NULL; break; /* '-': stdout */
		default:
			rc = titan_cli_option(&cli, opt, optarg);
			if (rc == TITAN_CLI_HANDLED)
				break;
			if (rc == TITAN_CLI_UNKNOWN)
				rc = titan_cli_usage_error(&cli, "unhandled option");
			goto done_early;
		}
	}
	if (from && strcmp(from, "yaml") && strcmp(from, "toml")) {
		rc = titan_cli_usage_error(&cli, "--from: '%s' is not a format (yaml, toml)", from);
		goto done_early;
	}
	if (from && optind < argc && !cli.config_path)
		cli.config_path = argv[optind++]; /* titan-config --from toml FILE */
	if (from && !cli.config_path) {
		rc = titan_cli_usage_error(&cli, "--from %s: which file? (--from %s FILE)", from, from);
		goto done_early;
	}
	if (optind < argc) {
		rc = titan_cli_usage_error(&cli, "unexpected argument '%s' (config files go after --config)",
					   argv[optind]);
		goto done_early;
	}
	if (check + json + summary + (get != NULL) + non_default > 1 &&
	    !(json && non_default)) {
		rc = titan_cli_usage_error(&cli, "--check, --get, --json, --summary and --non-default "
					   "are exclusive (--json --non-default combine)");
		goto done_early;
	}
	if (doc && (check || json || summary || get || non_default)) {
		rc = titan_cli_usage_error(&cli, "--doc prints the schema's reference: not with "
					   "--check, --get, --json, --summary or --non-default");
		goto done_early;
	}
	if (doc && strcmp(doc, "markdown") && strcmp(doc, "man")) {
		rc = titan_cli_usage_error(&cli, "--doc: '%s' is not a format (markdown, man)", doc);
		goto done_early;
	}

	if (from) {
		rc = titan_config_resolve_format(&cfg, cli.config_path, !strcmp(from, "toml") ?
						 TITAN_CONFIG_TOML : TITAN_CONFIG_YAML,
						 &cli.overrides);
		if (rc < 0) {
			titan_cli_fail(&cli, rc);
			rc = rc == TITAN_E_NOMEM ? 1 : 2;
			goto done;
		}
	} else if ((rc = titan_cli_load_config(&cli, &cfg)) != 0) {
		goto done;
	}
	if (check) {
		struct titan_model_dims d;

		if (titan_model_dims_from_config(&cfg, &d) < 0) {
			rc = titan_cli_fail(&cli, TITAN_E_INVALID);
			goto done;
		}
		titan_log_debug("%s: valid", cli.config_path ? cli.config_path : "(defaults)");
		rc = titan_cli_finish(&cli, 0);
		goto done;
	}
	if (get) {
		char v[4096];

		if (!titan_config_find(get)) {
			char s[128];

			if (titan_config_suggest(get, s, sizeof(s)))
				rc = titan_cli_usage_error(&cli, "--get: unknown key '%s' (did you mean '%s'?)", get, s);
			else
				rc = titan_cli_usage_error(&cli, "--get: unknown key '%s'", get);
			goto done;
		}
		titan_config_format_value(&cfg, get, v, sizeof(v));
		printf("%s\n", v);
		rc = titan_cli_finish(&cli, 0);
		goto done;
	}

	/* Render into memory, then write stdout or the output file atomically. */
	if (!(out = open_memstream(&buf, &len))) {
		rc = titan_cli_fail(&cli, titan_error(TITAN_E_NOMEM, "out of memory"));
		goto done;
	}
	if (non_default && titan_config_init(&defaults) < 0) {
		rc = titan_cli_fail(&cli, TITAN_E_NOMEM);
		goto done;
	}
	if (doc) {
		rc = titan_config_doc(out, strcmp(doc, "man") ? TITAN_CONFIG_DOC_MARKDOWN
							: TITAN_CONFIG_DOC_MAN);
	} else if (json) {
		rc = write_json(out, &cfg, non_default ? &defaults : NULL);
	} else if (non_default) {
		rc = write_non_default_yaml(out, &cfg, &defaults);
	} else if (summary) {
		struct titan_model_dims d;

		rc = titan_model_dims_from_config(&cfg, &d);
		if (rc == 0)
			print_summary(out, &cfg, &d);
	} else {
		rc = titan_config_write_yaml(&cfg, out);
	}
	fclose(out);
	out = NULL;
	if (rc < 0) {
		rc = titan_cli_fail(&cli, rc);
		goto done;
	}
	if (output) {
		if ((rc = titan_write_file_atomic(output, buf, len)) < 0) {
			rc = titan_cli_fail(&cli, rc);
			goto done;
		}
	} else {
		fwrite(buf, 1, len, stdout);
	}
	rc = titan_cli_finish(&cli, 0);
done:
	free(buf);
	titan_config_release(&cfg);
	titan_config_release(&defaults);
done_early:
	titan_cli_release(&cli);
	return rc;
}
