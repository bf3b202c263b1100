/*
 * titan-train — Llama 3 pre-training from titan-shard shards on the CPU, in
 * one process or on N ranks under mpiexec / srun (DDP, FSDP, HSDP).  The
 * main parses the command line, starts the ranks and runs lib/train's
 * trainer (torchtitan's train.py).
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/cli.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/dist.h"
#include "titan/ops.h"
#include "titan/train.h"

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: titan-train --config FILE [--section.key=VALUE ...] [OPTIONS]\n"
"       mpiexec -n N titan-train --config FILE [...]\n"
"Train a Llama 3 model on the CPU from titan-shard shards\n"
"(training.dataset_path), as torchtitan's train.py does: on one process, or\n"
"on N ranks with data parallelism (parallelism.data_parallel_shard_degree:\n"
"FSDP, the default for -1; data_parallel_replicate_degree: DDP; both: HSDP).\n"
"\n"
"Options:\n"
"  -c, --config FILE     YAML job config (see configs/, titan-config(1))\n"
"      --section.key=V   override a config key (e.g. --training.steps=100)\n"
"      --help-config     every config key with its type, default and meaning\n"
"      --threads N       CPU threads per rank (default: the rank's share of the\n"
"                        node's cores, or OMP_NUM_THREADS)\n"
"      --log-rank LIST   ranks that log: 0 (default), a list such as 0,3, or all\n"
"                        (torchtitan's --local-ranks-filter; the others log\n"
"                        warnings and errors only)\n"
"      --plain-steps     step and validation lines without the logger head\n"
"                        ('step:  1  loss: ...', titan 0.1's lines)\n"
"  -v, --verbose; -q, --quiet (no per-step lines); -h, --help; --version\n"
"\n"
"Each logged step prints torchtitan's line on standard output, with its\n"
"logger's head, so torchtitan's log parsers read it:\n"
"  [titan] 2026-11-27 10:01:02,123 - root - INFO - step:  1  loss:  7.66051  grad_norm:  1.3702  memory:  0.29GiB(1.22%%)  tps: 5,212  tflops: 0.37  mfu: 29.76%%\n"
"and appends a JSON object to job.dump_folder/metrics.save_jsonl_file (rank 0);\n"
"metrics.enable_tensorboard writes the same to TensorBoard event files under\n"
"job.dump_folder/metrics.save_tb_folder.\n"
"SIGTERM/SIGINT/SIGUSR1: every rank finishes the step, a checkpoint is saved\n"
"if checkpointing is on, and the exit status is 128 + the signal number.\n"
"Exit status: 0 done, 1 runtime failure, 2 bad usage or config, 3 a rank\n"
"stopped answering (comm timeout), 128+N stopped by signal N.\n"
"\n"
"Example:\n"
"  titan-train --config configs/llama3_debug.yaml --training.dataset_path=data/ \\\n"
"              --training.steps=100 --training.seq_len=256\n"
"  mpiexec -n 4 titan-train --config configs/llama3_debug.yaml \\\n"
"              --parallelism.data_parallel_replicate_degree=2  # HSDP 2 x 2\n"
"\n"
"See also: titan-tokenize(1), titan-shard(1), titan-config(1)\n");
}

/* Threading defaults (titan_cli_thread_defaults, titan/cli.h).  On a few
 * cores, threads that spin while idle steal the cores the working threads
 * need: libgomp's default wait policy spins between parallel regions, and
 * OpenBLAS's pthread workers spin (with sched_yield) for 2^28 cycles after
 * every sgemm, while titan alternates sgemm with OpenMP regions all the
 * time.  So titan-train runs with OMP_WAIT_POLICY=PASSIVE and
 * OPENBLAS_THREAD_TIMEOUT=4 unless the environment sets them (measured:
 * debugmodel at seq 512 on 2 threads, 1.5-1.7x the tokens/s of the
 * libraries' defaults; no change on 1 thread), and binds its OpenMP threads
 * to the cores of a rank the launcher bound.  Both libraries read their
 * environment when they are loaded, before main, so the first run sets the
 * missing ones and re-executes itself once (/proc/self/exe).
 * TITAN_THREAD_DEFAULTS=0 turns this off. */

/* --log-rank LIST: does `rank` log? */
static int log_rank_parse(const char *s, int rank, bool *on)
{
	char *end;

	*on = false;
	if (!strcmp(s, "all")) {
		*on = true;
		return 0;
	}
	while (*s) {
		long v = strtol(s, &end, 10);

		if (end == s || v < 0 || (*end && *end != ','))
			return -1;
		if (v == rank)
			*on = true;
		s = *end ? end + 1 : end;
	}
	return 0;
}

/* Threads per rank when neither --threads nor OMP_NUM_THREADS says: the
 * node's cores shared by the ranks on it (at least 1). */
static int default_threads(const struct titan_dist *d)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (getenv("OMP_NUM_THREADS") || d->local_size <= 1)
		return 0;
	n /= d->local_size;
	return n < 1 ? 1 : (int)n;
}

enum { OPT_LOG_RANK = TITAN_OPT_TOOL_BASE, OPT_PLAIN_STEPS };

/* `--config -` under a launcher: standard input reaches rank 0 only (on
 * the other ranks it is empty or never ends).  Rank 0 reads it and sends
 * it to every rank, each of which reads a temporary copy (path in `tmp`,
 * removed by the caller). */
static int share_stdin_config(struct titan_dist *dist, char tmp[4200])
{
	struct titan_comm *w = dist->comm[TITAN_DIM_WORLD];
	const size_t max = (size_t)4 << 20; /* the config parser's own limit */
	const char *dir = getenv("TMPDIR");
	char *buf = NULL;
	int64_t len = 0;
	int rc = 0, fd;

	if (dist->rank == 0) {
		size_t got;

		if (!(buf = malloc(max + 1)))
			return titan_error(TITAN_E_NOMEM, "out of memory");
		while ((size_t)len <= max && (got = fread(buf + len, 1, max + 1 - (size_t)len,
							     stdin)) > 0)
			len += (int64_t)got;
		if (ferror(stdin))
			rc = titan_error(TITAN_E_INVALID, "--config -: cannot read standard input: %s",
					 strerror(errno));
		else if ((size_t)len > max)
			rc = titan_error(TITAN_E_INVALID, "--config -: more than %zu bytes", max);
		if (rc < 0)
			len = -1;
	}
	if (titan_comm_broadcast(w, &len, 1, TITAN_DTYPE_I64, 0, "config size") < 0 ||
	    len < 0) {
		free(buf);
		return rc < 0 ? rc : titan_error(TITAN_E_INVALID, "--config -: rank 0 could not "
						 "read standard input");
	}
	if (dist->rank != 0 && !(buf = malloc((size_t)len + 1)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if ((rc = titan_comm_broadcast(w, buf, (size_t)len, TITAN_DTYPE_U8, 0, "config")) < 0) {
		free(buf);
		return rc;
	}
	snprintf(tmp, 4200, "%s/titan-train-config.XXXXXX", dir && *dir ? dir : "/tmp");
	if ((fd = titan_tmp_mkstemp(tmp, O_CLOEXEC, NULL)) < 0) {
		rc = titan_error(TITAN_E_IO, "--config -: cannot create '%s': %s", tmp,
				 strerror(errno));
		*tmp = '\0';
	} else {
		if (write(fd, buf, (size_t)len) != (ssize_t)len)
			rc = titan_error(TITAN_E_IO, "--config -: cannot write '%s': %s", tmp,
					 strerror(errno));
		close(fd);
	}
	free(buf);
	return rc;
}

/* Ranks started with different configs (an MPMD launch line, per-rank
 * overrides) are refused before
 * they build anything: exit 2 on every rank, naming the first difference. */
static int same_config(struct titan_dist *dist, const struct titan_config *cfg)
{
	char *yaml = NULL;
	size_t n = 0;
	FILE *fp;
	int rc;

	if (dist->size <= 1)
		return 0;
	if (!(fp = open_memstream(&yaml, &n)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	rc = titan_config_write_yaml(cfg, fp);
	if (fclose(fp) != 0 && rc == 0)
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
	if (rc == 0)
		rc = titan_dist_check_same_config(dist, yaml, n);
	free(yaml);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		TITAN_CLI_GLOBAL_OPTIONS,
		TITAN_CLI_CONFIG_OPTIONS,
		{"log-rank", required_argument, NULL, OPT_LOG_RANK},
		{"plain-steps", no_argument, NULL, OPT_PLAIN_STEPS},
		{0},
	};
	struct titan_cli cli;
	struct titan_config cfg;
	struct titan_parallel_dims pd;
	struct titan_dist *dist = NULL;
	struct titan_trainer *tr = NULL;
	const char *log_ranks = getenv("TITAN_LOG_RANKS");
	bool cfg_ready = false, logs = true, plain_steps = false;
	char stdin_copy[4200] = "";
	char prefix[32] = "";
	char device[64], blas_line[512];
	int opt, rc;
	/* OpenBLAS's kernel (lib/cpu/select.c) and the threading defaults are
	 * read when the libraries load: set what is missing, re-execute once */
	bool blas = titan_blas_select_env();

	titan_cli_thread_defaults(argv);
	if (blas)
		titan_blas_reexec(argv);
	/* Per-step buffers (the classifier's logits chunk: 32 MiB at vocab
	 * 8192) sit at glibc's largest mmap threshold: each would be mapped,
	 * page-faulted and unmapped every step.  Keep them in the heap. */
	mallopt(M_MMAP_THRESHOLD, 1 << 30);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	if ((rc = titan_cli_init(&cli, "titan-train", &argc, argv, true)) != 0)
		return rc;
	while ((opt = getopt_long(argc, argv, TITAN_CLI_GLOBAL_SHORT TITAN_CLI_CONFIG_SHORT,
				  longopts, NULL)) != -1) {
		if (opt == 'h') {
			usage(stdout);
			return titan_cli_finish(&cli, 0);
		}
		if (opt == OPT_PLAIN_STEPS) {
			plain_steps = true;
			continue;
		}
		if (opt == OPT_LOG_RANK) {
			log_ranks = optarg;
			if (log_rank_parse(optarg, 0, &logs) < 0) {
				rc = titan_cli_usage_error(&cli, "--log-rank: expected 'all' or rank "
							   "numbers such as 0,3, got '%s'", optarg);
				titan_cli_release(&cli);
				return rc;
			}
			continue;
		}
		rc = titan_cli_option(&cli, opt, optarg);
		if (rc == TITAN_CLI_HANDLED)
			continue;
		titan_cli_release(&cli);
		return rc == TITAN_CLI_UNKNOWN ? titan_cli_usage_error(&cli, "unhandled option") : rc;
	}
	if (optind < argc) {
		rc = titan_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
		titan_cli_release(&cli);
		return rc;
	}
	if (!cli.config_path && cli.overrides.n == 0) {
		rc = titan_cli_usage_error(&cli, "--config FILE is required");
		titan_cli_release(&cli);
		return rc;
	}
	/* the ranks: MPI when started by a launcher, else one process */
	if ((rc = titan_dist_init(&argc, &argv, &dist)) < 0) {
		rc = titan_cli_fail(&cli, rc);
		titan_cli_release(&cli);
		return rc;
	}
	if (log_ranks && log_rank_parse(log_ranks, dist->rank, &logs) < 0)
		logs = dist->rank == 0;
	else if (!log_ranks)
		logs = dist->rank == 0;
	if (!logs && titan_log_get_level() > TITAN_LOG_WARN)
		titan_log_set_level(TITAN_LOG_WARN);
	if (dist->size > 1)
		snprintf(prefix, sizeof(prefix), "[rank%d]:", dist->rank);
	if (dist->size > 1 && cli.config_path && !strcmp(cli.config_path, "-")) {
		if ((rc = share_stdin_config(dist, stdin_copy)) < 0) {
			rc = titan_cli_fail(&cli, rc);
			goto done;
		}
		cli.config_path = stdin_copy;
	}
	rc = titan_cli_load_config(&cli, &cfg);
	if (*stdin_copy) {
		unlink(stdin_copy);
		titan_tmp_forget(stdin_copy);
		cli.config_path = "-";
	}
	if (rc != 0)
		goto done;
	cfg_ready = true;
	if ((rc = titan_cli_no_dash(&cli, "job.dump_folder", cfg.job.dump_folder,
				    "it is the run's folder (checkpoints, metrics, traces)")))
		goto done;
	if ((rc = same_config(dist, &cfg)) < 0) {
		rc = titan_cli_fail(&cli, rc);
		goto done;
	}
	/* runs describe themselves: version, features, the device the run
	 * resolved to ("auto → cpu"), the config they used and the GEMM kernel */
	{
		const char *dev = titan_trainer_device(&cfg, dist->size);

		snprintf(device, sizeof(device), "%s%s%s", cfg.training.device,
			 cfg.training.device_e == TITAN_DEVICE_AUTO ? " → " : "",
			 cfg.training.device_e == TITAN_DEVICE_AUTO ? dev : "");
	}
	titan_log_info("titan-train %s (%s), built with %s; this run: training.device %s, "
		       "%d rank(s)%s, config %s; %s", titan_version(), titan_git_revision(),
		       titan_features(), device, dist->size,
		       dist->size > 1 ? " over MPI" : "",
		       cli.config_path ? cli.config_path : "(defaults)",
		       titan_blas_describe(blas_line, sizeof(blas_line)));
	if (logs && titan_blas_warning(blas_line, sizeof(blas_line)))
		titan_log_warn("%s", blas_line);
	if (cfg.job.print_config && logs)
		titan_config_write_yaml(&cfg, stderr);
	titan_trainer_catch_signals();
	if ((rc = titan_parallel_dims_from_config(&pd, &cfg, dist->size)) < 0 ||
	    (rc = titan_dist_mesh(dist, &pd)) < 0 ||
	    (rc = titan_dist_configure(dist, &cfg)) < 0 ||
	    (rc = titan_trainer_new(&cfg, &(struct titan_trainer_opts){
				    .dist = dist,
				    .threads = cli.threads ? cli.threads : default_threads(dist),
				    .verbosity = cli.verbosity, .print_rank = logs,
				    .line_prefix = prefix, .plain_steps = plain_steps}, &tr)) < 0 ||
	    (rc = titan_trainer_run(tr)) < 0 || (rc = titan_trainer_close(tr)) < 0) {
		rc = titan_cli_fail(&cli, rc);
		goto done;
	}
	rc = titan_cli_finish(&cli, 0);
	if (rc == 0 && titan_trainer_stopped_by(tr))
		rc = 128 + titan_trainer_stopped_by(tr);
done:
	titan_trainer_free(tr);
	if (cfg_ready)
		titan_config_release(&cfg);
	titan_cli_release(&cli);
	/* a failed rank takes the job down rather than leave the others
	 * waiting in a collective */
	titan_dist_finalize(dist, rc == 0 || rc > 128, rc);
	return rc;
}
