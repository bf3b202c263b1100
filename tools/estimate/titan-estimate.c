/*
 * titan-estimate — memory and throughput per rank of a titan/torchtitan
 * job before it is submitted: does it fit, how fast will it go, and which
 * layout is best (--search).  The model is lib/estimate (titan/estimate.h);
 * this is its command line.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/cli.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/estimate.h"
#include "titan/model.h"

enum {
	OPT_NGPU = TITAN_OPT_TOOL_BASE,
	OPT_DEVICE,
	OPT_DEVICE_MEMORY,
	OPT_PEAK_FLOPS,
	OPT_MFU,
	OPT_LINK_BANDWIDTH,
	OPT_GPUS_PER_NODE,
	OPT_ALLOC_OVERHEAD,
	OPT_PARAM_DTYPE,
	OPT_MASTER_DTYPE,
	OPT_OPTIM_DTYPE,
	OPT_FLOAT8,
	OPT_LOSS,
	OPT_SEARCH,
	OPT_TOP,
	OPT_JSON,
	OPT_CHECK,
	OPT_RANK,
	OPT_MODEL_OF,
};

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: titan-estimate --config FILE [--section.key=VALUE ...] [OPTIONS]\n"
"Predict memory per rank (per pipeline stage), whether the job fits, and its\n"
"step time and tokens/s per device; or search the best layout for N GPUs.\n"
"\n"
"Options:\n"
"  -c, --config FILE        YAML job config (see configs/, titan-config(1))\n"
"      --section.key=V      override a config key (parallelism.*, training.*, ...)\n"
"      --ngpu N             world size (default: product of the config's degrees);\n"
"                           data_parallel_shard_degree -1 takes what is left\n"
"      --device NAME        h100-80g (default), a100-80g, h200, b200, or cpu:\n"
"                           titan-train's CPU path, byte-exact\n"
"      --model-of WHOSE     GPU devices' memory model: titan (default: titan-train's\n"
"                           CUDA path on one GPU, the caching allocator's reserved\n"
"                           bytes as its `memory:` prints them) or torchtitan\n"
"                           (bf16 compute, FSDP2; always for several GPUs)\n"
"      --device-memory GIB  memory per device instead of the table's\n"
"      --peak-flops F       dense peak FLOP/s instead of the table's (cpu: the\n"
"                           OpenBLAS kernel titan-train runs, and its rates)\n"
"      --mfu F              fraction of peak achieved on executed FLOPs (0.40)\n"
"      --link-bandwidth INTRA[,INTER]\n"
"                           GB/s per GPU inside a node and between nodes\n"
"      --gpus-per-node N    GPUs per node (8)\n"
"      --alloc-overhead F   caching-allocator overhead fraction (0.10; cpu 0)\n"
"      --param-dtype T      compute copy of weights and activations: bf16, fp32\n"
"                           (default training.mixed_precision_param)\n"
"      --master-dtype T     master weights and gradients: fp32, bf16 (training.dtype)\n"
"      --optim-dtype T      AdamW moments: fp32, bf16 (default: as master)\n"
"      --float8             float8 linears (also model.converters: [float8])\n"
"      --loss KIND          chunked (fused classifier + CE, default) or eager\n"
"                           (bf16 logits, fp32 copy, log-softmax: torchtitan 2024)\n"
"      --search             rank every valid layout for --ngpu GPUs\n"
"      --top K              layouts --search prints (5)\n"
"      --json               one JSON object on standard output\n"
"      --check              exit 1 when the job does not fit\n"
"      --threads N          cpu: titan-train's thread count (default: all cores)\n"
"      --rank R             cpu: the rank of a DDP/FSDP/HSDP x TP x PP x CP job to\n"
"                           model (0: the largest shard, writes metrics.jsonl)\n"
"      --help-config        every config key with its type, default and meaning\n"
"  -v, --verbose; -q, --quiet; -h, --help; --version\n"
"\n"
"Examples:\n"
"  titan-estimate --config configs/llama3_8b.yaml --ngpu 64\n"
"  titan-estimate --config configs/llama3_70b.yaml --ngpu 256 --search --top 3\n"
"  titan-estimate --config configs/llama3_debug.yaml --device cpu --json\n"
"\n"
"See also: titan-train(1), titan-config(1), docs/estimate.md\n");
}

struct args {
	int64_t ngpu, top, rank;
	const char *device, *param_dtype, *master_dtype, *optim_dtype, *loss;
	double device_memory, peak_flops, mfu, bw_intra, bw_inter, overhead;
	int64_t gpus_per_node;
	bool float8, search, json, check, torchtitan;
};

static int dtype_bytes(const struct titan_cli *cli, const char *opt, const char *v, int *out)
{
	if (!strcmp(v, "fp32") || !strcmp(v, "float32")) {
		*out = 4;
	} else if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) {
		*out = 2;
	} else {
		titan_cli_usage_error(cli, "%s: expected fp32 or bf16, got '%s'", opt, v);
		return 2;
	}
	return 0;
}

static int number(const struct titan_cli *cli, const char *opt, const char *v, double lo,
		  double hi, double *out)
{
	if (titan_parse_double(v, out) < 0 || !(*out >= lo && *out <= hi))
		return titan_cli_usage_error(cli, "%s: expected a number from %g to %g, got '%s'",
					     opt, lo, hi, v);
	return 0;
}

static int count(const struct titan_cli *cli, const char *opt, const char *v, int64_t lo,
		 int64_t hi, int64_t *out)
{
	if (titan_parse_i64(v, out) < 0 || *out < lo || *out > hi)
		return titan_cli_usage_error(cli, "%s: expected a count from %lld to %lld, got '%s'",
					     opt, (long long)lo, (long long)hi, v);
	return 0;
}

static int link_bandwidth(const struct titan_cli *cli, const char *v, struct args *a)
{
	char buf[128], *comma;

	snprintf(buf, sizeof(buf), "%s", v);
	comma = strchr(buf, ',');
	if (comma)
		*comma++ = '\0';
	if (number(cli, "--link-bandwidth", buf, 1e-3, 1e6, &a->bw_intra))
		return 2;
	if (comma && number(cli, "--link-bandwidth", comma, 1e-3, 1e6, &a->bw_inter))
		return 2;
	return 0;
}

static int parse(struct titan_cli *cli, int argc, char **argv, struct args *a)
{
	static const struct option longopts[] = {
		TITAN_CLI_GLOBAL_OPTIONS,
		TITAN_CLI_CONFIG_OPTIONS,
		{"ngpu", required_argument, NULL, OPT_NGPU},
		{"device", required_argument, NULL, OPT_DEVICE},
		{"device-memory", required_argument, NULL, OPT_DEVICE_MEMORY},
		{"peak-flops", required_argument, NULL, OPT_PEAK_FLOPS},
		{"mfu", required_argument, NULL, OPT_MFU},
		{"link-bandwidth", required_argument, NULL, OPT_LINK_BANDWIDTH},
		{"gpus-per-node", required_argument, NULL, OPT_GPUS_PER_NODE},
		{"alloc-overhead", required_argument, NULL, OPT_ALLOC_OVERHEAD},
		{"param-dtype", required_argument, NULL, OPT_PARAM_DTYPE},
		{"master-dtype", required_argument, NULL, OPT_MASTER_DTYPE},
		{"optim-dtype", required_argument, NULL, OPT_OPTIM_DTYPE},
		{"float8", no_argument, NULL, OPT_FLOAT8},
		{"loss", required_argument, NULL, OPT_LOSS},
		{"search", no_argument, NULL, OPT_SEARCH},
		{"top", required_argument, NULL, OPT_TOP},
		{"json", no_argument, NULL, OPT_JSON},
		{"check", no_argument, NULL, OPT_CHECK},
		{"rank", required_argument, NULL, OPT_RANK},
		{"model-of", required_argument, NULL, OPT_MODEL_OF},
		{0},
	};
	int opt, rc;

	while ((opt = getopt_long(argc, argv, TITAN_CLI_GLOBAL_SHORT TITAN_CLI_CONFIG_SHORT,
				  longopts, NULL)) != -1) {
		rc = 0;
		switch (opt) {
		case 'h':
			usage(stdout);
			return titan_cli_finish(cli, 0) == 0 ? -1 : 1;
		case OPT_NGPU:
			rc = count(cli, "--ngpu", optarg, 1, 1 << 24, &a->ngpu);
			break;
		case OPT_DEVICE:
			a->device = optarg;
			break;
		case OPT_DEVICE_MEMORY:
			rc = number(cli, "--device-memory", optarg, 1e-3, 1e9, &a->device_memory);
			break;
		case OPT_PEAK_FLOPS:
			rc = number(cli, "--peak-flops", optarg, 1, 1e21, &a->peak_flops);
			break;
		case OPT_MFU:
			rc = number(cli, "--mfu", optarg, 1e-4, 1, &a->mfu);
			break;
		case OPT_LINK_BANDWIDTH:
			rc = link_bandwidth(cli, optarg, a);
			break;
		case OPT_GPUS_PER_NODE:
			rc = count(cli, "--gpus-per-node", optarg, 1, 1024, &a->gpus_per_node);
			break;
		case OPT_ALLOC_OVERHEAD:
			rc = number(cli, "--alloc-overhead", optarg, 0, 10, &a->overhead);
			break;
		case OPT_PARAM_DTYPE:
			a->param_dtype = optarg;
			break;
		case OPT_MASTER_DTYPE:
			a->master_dtype = optarg;
			break;
		case OPT_OPTIM_DTYPE:
			a->optim_dtype = optarg;
			break;
		case OPT_FLOAT8:
			a->float8 = true;
			break;
		case OPT_LOSS:
			if (strcmp(optarg, "chunked") && strcmp(optarg, "eager"))
				return titan_cli_usage_error(cli, "--loss: expected chunked or eager, "
							     "got '%s'", optarg);
			a->loss = optarg;
			break;
		case OPT_SEARCH:
			a->search = true;
			break;
		case OPT_TOP:
			rc = count(cli, "--top", optarg, 1, 10000, &a->top);
			break;
		case OPT_JSON:
			a->json = true;
			break;
		case OPT_RANK:
			rc = count(cli, "--rank", optarg, 0, (1 << 24) - 1, &a->rank);
			break;
		case OPT_CHECK:
			a->check = true;
			break;
		case OPT_MODEL_OF:
			if (strcmp(optarg, "titan") && strcmp(optarg, "torchtitan"))
				return titan_cli_usage_error(cli, "--model-of: expected titan or "
							     "torchtitan, got '%s'", optarg);
			a->torchtitan = !strcmp(optarg, "torchtitan");
			break;
		default:
			rc = titan_cli_option(cli, opt, optarg);
			if (rc == TITAN_CLI_HANDLED)
				continue;
			return rc == TITAN_CLI_UNKNOWN ? titan_cli_usage_error(cli, "unhandled option")
						       : (rc == 0 ? -1 : rc);
		}
		if (rc)
			return rc;
	}
	if (optind < argc)
		return titan_cli_usage_error(cli, "unexpected argument '%s'", argv[optind]);
	if (!cli->config_path && cli->overrides.n == 0)
		return titan_cli_usage_error(cli, "--config FILE is required");
	return 0;
}

/* The options: config first, then this command line. */
static int make_opts(const struct titan_cli *cli, const struct args *a,
		     const struct titan_config *cfg, struct titan_est_opts *o)
{
	struct titan_est_device dev;
	int rc;

	if ((rc = titan_est_device_lookup(a->device, &dev)) < 0)
		return rc;
	if (a->device_memory > 0)
		dev.memory = a->device_memory * 1073741824.0;
	if (a->peak_flops > 0)
		dev.peak_flops = a->peak_flops;
	else if (dev.cpu && !isnan(cfg->metrics.peak_flops))
		dev.peak_flops = cfg->metrics.peak_flops;
	if (a->bw_intra > 0)
		dev.bw_intra = a->bw_intra * 1e9;
	if (a->bw_inter > 0)
		dev.bw_inter = a->bw_inter * 1e9;
	if (a->overhead >= 0)
		dev.alloc_overhead = a->overhead;
	if ((rc = titan_est_opts_from_config(o, cfg, &dev, a->ngpu)) < 0)
		return rc;
	o->threads = cli->threads;
	o->rank = a->rank;
	if (a->gpus_per_node > 0)
		o->gpus_per_node = (int)a->gpus_per_node;
	if (a->mfu > 0)
		o->mfu = a->mfu;
	/* cpu: an explicit peak or MFU asks for the peak x mfu model */
	if (a->mfu > 0 || a->peak_flops > 0)
		o->cpu_kernel_rates = false;
	if (!dev.cpu) {
		if (a->param_dtype && dtype_bytes(cli, "--param-dtype", a->param_dtype,
						  &o->param_bytes))
			return 2;
		if (a->master_dtype) {
			if (dtype_bytes(cli, "--master-dtype", a->master_dtype, &o->master_bytes))
				return 2;
			o->optim_bytes = o->master_bytes;
		}
		if (a->optim_dtype && dtype_bytes(cli, "--optim-dtype", a->optim_dtype,
						  &o->optim_bytes))
			return 2;
		if (a->float8)
			o->float8 = true;
	} else if (a->param_dtype || a->master_dtype || a->optim_dtype || a->float8 || a->loss) {
		return titan_error(TITAN_E_INVALID, "--device cpu models titan-train's CPU path, "
				   "which is fp32 with its own fused loss: precision and --loss "
				   "options apply to GPU devices");
	}
	if (a->loss && !strcmp(a->loss, "eager"))
		o->loss = TITAN_EST_LOSS_EAGER;
	o->model_of = a->torchtitan ? TITAN_EST_MODEL_TORCHTITAN : TITAN_EST_MODEL_TITAN;
	/* titan-train's choice of attention (lib/cuda/cudnn_attn.cu) */
	o->cuda_attn_titan = getenv("TITAN_CUDA_ATTN") && !strcmp(getenv("TITAN_CUDA_ATTN"), "titan");
	/* titan-train's CUDA path on one GPU is modelled as it runs: the
	 * knobs of torchtitan's model do not apply to it */
	if (!dev.cpu && !a->torchtitan && !a->search && o->ngpu == 1) {
		const char *k = a->master_dtype ? "--master-dtype" : a->optim_dtype ?
				"--optim-dtype" : a->float8 ? "--float8" : a->loss ? "--loss" :
				a->overhead >= 0 ? "--alloc-overhead" : NULL;

		if (k)
			return titan_error(TITAN_E_INVALID, "%s: an option of torchtitan's GPU model "
					   "(add --model-of torchtitan); on one GPU the default is "
					   "titan-train's CUDA path as it runs", k);
	}
	return 0;
}

static int emit_json(void (*fn)(struct titan_json *, const void *), const void *arg)
{
	struct titan_json j;
	int rc;

	titan_json_init(&j);
	fn(&j, arg);
	rc = titan_json_write_line(&j, stdout);
	titan_json_release(&j);
	return rc;
}

static void est_json(struct titan_json *j, const void *arg)
{
	titan_estimate_json(arg, j);
}

struct search_arg {
	const struct titan_est_search *s;
	const struct titan_model_dims *d;
	const struct titan_est_opts *o;
};

static void search_json(struct titan_json *j, const void *arg)
{
	const struct search_arg *sa = arg;

	titan_est_search_json(sa->s, sa->d, sa->o, j);
}

int main(int argc, char **argv)
{
	struct titan_cli cli;
	struct args a = {.device = "h100-80g", .top = 5, .overhead = -1};
	struct titan_config cfg = {0};
	struct titan_model_dims dims;
	struct titan_est_opts o;
	struct titan_estimate e = {0};
	struct titan_est_search s = {0};
	int rc;

	if ((rc = titan_cli_init(&cli, "titan-estimate", &argc, argv, true)) != 0)
		return rc;
	if ((rc = parse(&cli, argc, argv, &a)) != 0) {
		titan_cli_release(&cli);
		return rc < 0 ? 0 : rc;
	}
	if ((rc = titan_cli_load_config(&cli, &cfg)) != 0)
		goto done;
	if ((rc = titan_model_dims_from_config(&cfg, &dims)) < 0 ||
	    (rc = make_opts(&cli, &a, &cfg, &o)) < 0) {
		rc = titan_cli_fail(&cli, rc);
		goto done;
	}
	if (rc > 0)
		goto done;
	if (a.search) {
		struct search_arg sa = {&s, &dims, &o};

		if ((rc = titan_est_search_run(&dims, &o, cfg.training.global_batch_size, (int)a.top,
					       &s)) < 0) {
			rc = titan_cli_fail(&cli, rc);
			goto done;
		}
		rc = a.json ? emit_json(search_json, &sa) : titan_est_search_print(&s, &dims, &o, stdout);
		if (rc < 0) {
			rc = titan_cli_fail(&cli, rc);
			goto done;
		}
		rc = titan_cli_finish(&cli, a.check && s.n == 0 ? 1 : 0);
		goto done;
	}
	if ((rc = titan_estimate_run(&dims, &o, &e)) < 0) {
		rc = titan_cli_fail(&cli, rc);
		goto done;
	}
	rc = a.json ? emit_json(est_json, &e) : titan_estimate_print(&e, stdout);
	if (rc < 0) {
		rc = titan_cli_fail(&cli, rc);
		goto done;
	}
	rc = titan_cli_finish(&cli, a.check && !e.fits ? 1 : 0);
done:
	titan_estimate_release(&e);
	titan_est_search_release(&s);
	titan_config_release(&cfg);
	titan_cli_release(&cli);
	return rc;
}
