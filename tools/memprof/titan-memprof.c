/*
 * titan-memprof — where a run's memory and time went, from the traces
 * titan-train writes (the tagged allocator's memory trace and Chrome
 * timing traces, one set per rank): a summary per rank, a timeline
 * picture, per-phase time and stragglers, one merged Perfetto trace, and
 * titan-estimate's prediction against the measurement.  torchtitan gives
 * its users a pickle snapshot for a web viewer and a trace per rank; this
 * answers in the terminal.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memprof.h"
#include "titan/cli.h"

extern int mp_verbosity;

enum {
	OPT_JSON = TITAN_OPT_TOOL_BASE,
	OPT_SVG,
	OPT_PNG,
	OPT_PERFETTO,
	OPT_ESTIMATE,
	OPT_METRICS,
	OPT_RANK,
	OPT_THRESHOLD,
	OPT_TOP,
	OPT_MAX_LIVE,
	OPT_FLOPS,
	OPT_PEAK,
	OPT_WIDTH,
};

enum cmd { SUMMARY = 1, TIMELINE = 2, TIME = 4, EXPORT = 8, COMPARE = 16, ALL = 31 };

static const struct { const char *name; enum cmd cmd; } commands[] = {
	{"summary", SUMMARY}, {"timeline", TIMELINE}, {"time", TIME}, {"export", EXPORT},
	{"compare", COMPARE},
};

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: titan-memprof summary [--json] [--top K] TRACE_DIR|FILE...\n"
"       titan-memprof timeline --svg OUT.svg [--png OUT.png] TRACE_DIR|FILE...\n"
"       titan-memprof time [--json] [--threshold PCT] TRACE_DIR|FILE...\n"
"       titan-memprof export --perfetto OUT.json TRACE_DIR|FILE...\n"
"       titan-memprof compare --estimate EST.json TRACE_DIR|FILE...\n"
"Where the memory and the time of a titan-train run went, per rank, from the\n"
"traces it writes with --profiling.enable_memory_snapshot=true (memory_snapshot/\n"
"rankR.memtrace) and --profiling.enable_profiling=true (profile_traces/\n"
"iteration_N/rankR_trace.json).  A folder is searched for *.memtrace,\n"
"*trace*.json and metrics*.jsonl; files are recognised by their content.\n"
"\n"
"Commands:\n"
"  summary    peak memory and the step/phase where it happens, the breakdown by\n"
"             tag at the peak, the largest blocks live at the peak, fragmentation,\n"
"             a leak check (live bytes at the end of step N vs N+k)\n"
"  timeline   stacked memory by tag over time, step starts and the peak (SVG/PNG)\n"
"  time       time per phase of each profiled step (data, forward, loss, backward,\n"
"             optimizer, exposed and overlapped communication), MFU per step,\n"
"             ranks over the median (stragglers)\n"
"  export     one Chrome trace-event JSON of every rank's spans and memory, for\n"
"             Perfetto (ui.perfetto.dev) or chrome://tracing\n"
"  compare    titan-estimate --json's prediction per tag against the measured peak\n"
"\n"
"Options:\n"
"      --json               one JSON object on stdout (every command)\n"
"      --rank R             only rank R\n"
"      --top K              summary: largest live blocks shown (default 10)\n"
"      --max-live N         live blocks a replay may hold (default 16777216)\n"
"      --svg FILE           timeline: write the SVG ('-': stdout)\n"
"      --png FILE           timeline: write a PNG (needs rsvg-convert or ImageMagick)\n"
"      --width PX           timeline: picture width (default 1000)\n"
"      --threshold PCT      time: straggler threshold over the median (default 10)\n"
"      --metrics FILE       time: metrics.jsonl for MFU (found in a dump folder)\n"
"      --flops-per-step F   time: FLOPs of one step (default: from metrics.jsonl)\n"
"      --peak-flops F       time: peak FLOP/s for MFU (default: from metrics.jsonl)\n"
"      --perfetto FILE      export: the output ('-': stdout)\n"
"      --estimate FILE      compare: titan-estimate --json output\n"
"  -v, --verbose; -q, --quiet (no warnings); -h, --help; --version\n"
"\n"
"Exit status: 0 ok (a truncated trace is analysed up to the cut, with a\n"
"warning), 1 a missing, unreadable, corrupt or too-new trace, 2 usage.\n"
"\n"
"Example:\n"
"  titan-memprof summary outputs/\n"
"  titan-memprof timeline --svg mem.svg --png mem.png outputs/memory_snapshot\n"
"\n"
"See also: titan-train(1), titan-estimate(1), docs/memprof.md, docs/formats.md\n");
}

/* Options and the commands they go with. */
static const struct { int opt; const char *name; unsigned cmds; } opt_cmds[] = {
	{OPT_SVG, "--svg", TIMELINE}, {OPT_PNG, "--png", TIMELINE}, {OPT_WIDTH, "--width", TIMELINE},
	{OPT_PERFETTO, "--perfetto", EXPORT}, {OPT_ESTIMATE, "--estimate", COMPARE},
	{OPT_METRICS, "--metrics", TIME}, {OPT_THRESHOLD, "--threshold", TIME},
	{OPT_FLOPS, "--flops-per-step", TIME}, {OPT_PEAK, "--peak-flops", TIME},
	{OPT_TOP, "--top", SUMMARY}, {OPT_MAX_LIVE, "--max-live", SUMMARY | TIMELINE | EXPORT | COMPARE},
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		TITAN_CLI_GLOBAL_OPTIONS,
		{"json", no_argument, NULL, OPT_JSON},
		{"svg", required_argument, NULL, OPT_SVG},
		{"png", required_argument, NULL, OPT_PNG},
		{"perfetto", required_argument, NULL, OPT_PERFETTO},
		{"estimate", required_argument, NULL, OPT_ESTIMATE},
		{"metrics", required_argument, NULL, OPT_METRICS},
		{"rank", required_argument, NULL, OPT_RANK},
		{"threshold", required_argument, NULL, OPT_THRESHOLD},
		{"top", required_argument, NULL, OPT_TOP},
		{"max-live", required_argument, NULL, OPT_MAX_LIVE},
		{"flops-per-step", required_argument, NULL, OPT_FLOPS},
		{"peak-flops", required_argument, NULL, OPT_PEAK},
		{"width", required_argument, NULL, OPT_WIDTH},
		{0},
	};
	struct mp_opts o = {.rank = -1, .threshold_pct = 10, .top_k = 10, .flops_per_step = NAN,
			    .peak_flops = NAN, .width = 1000};
	struct mp_inputs in = {0};
	struct titan_cli cli;
	unsigned given = 0; /* bit i: opt_cmds[i] was given */
	enum cmd cmd = 0;
	int opt, rc;

	if ((rc = titan_cli_init(&cli, "titan-memprof", &argc, argv, false)) != 0)
		return rc;
	while ((opt = getopt_long(argc, argv, TITAN_CLI_GLOBAL_SHORT, longopts, NULL)) != -1) {
		int64_t v;
		double d;

		for (size_t i = 0; i < sizeof(opt_cmds) / sizeof(opt_cmds[0]); i++)
			if (opt_cmds[i].opt == opt)
				given |= 1u << i;
		switch (opt) {
		case 'h':
			usage(stdout);
			rc = titan_cli_finish(&cli, 0);
			goto out;
		case OPT_JSON: o.json = true; break;
		case OPT_SVG: o.svg = optarg; break;
		case OPT_PNG: o.png = optarg; break;
		case OPT_PERFETTO: o.perfetto = optarg; break;
		case OPT_ESTIMATE: o.estimate = optarg; break;
		case OPT_METRICS: o.metrics = optarg; break;
		case OPT_RANK:
			if (titan_parse_i64(optarg, &v) < 0 || v < 0 || v >= 1 << 24) {
				rc = titan_cli_usage_error(&cli, "--rank: expected a rank >= 0, got '%s'", optarg);
				goto out;
			}
			o.rank = (int)v;
			break;
		case OPT_THRESHOLD:
			if (titan_parse_double(optarg, &d) < 0 || !(d >= 0 && d < 1e6)) {
				rc = titan_cli_usage_error(&cli, "--threshold: expected a percentage >= 0, "
							   "got '%s'", optarg);
				goto out;
			}
			o.threshold_pct = d;
			break;
		case OPT_TOP:
			if (titan_parse_i64(optarg, &v) < 0 || v < 0 || v > 100000) {
				rc = titan_cli_usage_error(&cli, "--top: expected a count from 0 to 100000, "
							   "got '%s'", optarg);
				goto out;
			}
			o.top_k = (int)v;
			break;
		case OPT_MAX_LIVE:
			if (titan_parse_i64(optarg, &v) < 0 || v < 1 || v > (int64_t)1 << 40) {
				rc = titan_cli_usage_error(&cli, "--max-live: expected a count >= 1, got '%s'",
							   optarg);
				goto out;
			}
			o.max_live = (uint64_t)v;
			break;
		case OPT_FLOPS:
		case OPT_PEAK:
			if (titan_parse_double(optarg, &d) < 0 || !(d > 0) || !isfinite(d)) {
				rc = titan_cli_usage_error(&cli, "%s: expected a positive number, got '%s'",
							   opt == OPT_FLOPS ? "--flops-per-step" : "--peak-flops",
							   optarg);
				goto out;
			}
			*(opt == OPT_FLOPS ? &o.flops_per_step : &o.peak_flops) = d;
			break;
		case OPT_WIDTH:
			if (titan_parse_i64(optarg, &v) < 0 || v < 400 || v > 10000) {
				rc = titan_cli_usage_error(&cli, "--width: expected 400 to 10000 pixels, got '%s'",
							   optarg);
				goto out;
			}
			o.width = (int)v;
			break;
		default:
			rc = titan_cli_option(&cli, opt, optarg);
			if (rc == TITAN_CLI_HANDLED)
				break;
			if (rc == TITAN_CLI_UNKNOWN)
				rc = titan_cli_usage_error(&cli, "unhandled option");
			goto out;
		}
	}
	mp_verbosity = o.verbosity = cli.verbosity;
	if (optind >= argc) {
		rc = titan_cli_usage_error(&cli, "no command: give summary, timeline, time, export or "
					   "compare");
		goto out;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[optind], commands[i].name))
			cmd = commands[i].cmd;
	if (!cmd) {
		rc = titan_cli_usage_error(&cli, "unknown command '%s' (summary, timeline, time, export, "
					   "compare)", argv[optind]);
		goto out;
	}
	for (size_t i = 0; i < sizeof(opt_cmds) / sizeof(opt_cmds[0]); i++)
		if ((given & (1u << i)) && !(opt_cmds[i].cmds & cmd)) {
			rc = titan_cli_usage_error(&cli, "%s does not go with %s", opt_cmds[i].name,
						   argv[optind]);
			goto out;
		}
	if (cmd == TIMELINE && !o.svg && !o.png) {
		rc = titan_cli_usage_error(&cli, "timeline: give --svg FILE and/or --png FILE");
		goto out;
	}
	if (cmd == TIMELINE && o.svg && !strcmp(o.svg, "-") && o.json) {
		rc = titan_cli_usage_error(&cli, "timeline: --svg - and --json both want stdout");
		goto out;
	}
	if (cmd == EXPORT && !o.perfetto) {
		rc = titan_cli_usage_error(&cli, "export: give --perfetto FILE");
		goto out;
	}
	if (cmd == COMPARE && !o.estimate) {
		rc = titan_cli_usage_error(&cli, "compare: give --estimate EST.json (titan-estimate --json)");
		goto out;
	}
	if (optind + 1 >= argc) {
		rc = titan_cli_usage_error(&cli, "%s: no trace given (a dump folder, a "
					   "memory_snapshot folder, or trace files)", argv[optind]);
		goto out;
	}
	/* '-' reads standard input once: a memory trace, --estimate or --metrics */
	for (int i = optind + 1; i < argc; i++)
		if (!strcmp(argv[i], "-") && (rc = titan_cli_claim_stdin(&cli, "a trace ('-')")))
			goto out;
	if ((o.estimate && !strcmp(o.estimate, "-") &&
	     (rc = titan_cli_claim_stdin(&cli, "--estimate"))) ||
	    (o.metrics && !strcmp(o.metrics, "-") && (rc = titan_cli_claim_stdin(&cli, "--metrics"))) ||
	    (rc = titan_cli_no_dash(&cli, "--png", o.png, "the converter writes a file (pipe "
				    "--svg - into rsvg-convert for a PNG on standard output)")))
		goto out;
	if (mp_inputs_find(&in, argv + optind + 1, argc - optind - 1, &o,
			   cmd == TIME || cmd == EXPORT) < 0) {
		rc = mp_fail();
		goto out;
	}
	switch (cmd) {
	case SUMMARY: rc = mp_summary(&in, &o); break;
	case TIMELINE: rc = mp_timeline(&in, &o); break;
	case TIME: rc = mp_time(&in, &o); break;
	case EXPORT: rc = mp_export(&in, &o); break;
	case COMPARE: rc = mp_compare(&in, &o); break;
	default: rc = 2; break;
	}
	rc = titan_cli_finish(&cli, rc);
out:
	mp_inputs_release(&in);
	titan_cli_release(&cli);
	return rc;
}
