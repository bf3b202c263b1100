/*
 * cli.c — the shared command-line contract of the titan-* tools: global
 * options, config overrides, error lines and exit codes, stdout checks.
 */
#include "titan/cli.h"
#include "titan/ops.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* titan_cli_stdin_file's copy goes at exit too: a tool may return early
 * after making it */
static char *stdin_copy_at_exit;

int titan_cli_init(struct titan_cli *cli, const char *prog, int *argc, char **argv,
		   bool with_config)
{
	memset(cli, 0, sizeof(*cli));
	cli->prog = prog;
	/* Ctrl-C or SLURM's SIGTERM removes the outputs being written
	 * (titan-train replaces this with its finish-the-step handler) */
	titan_tmp_catch_signals();
	cli->progress = isatty(STDERR_FILENO);
	if (with_config && titan_config_extract_overrides(argc, argv, &cli->overrides) < 0)
		return titan_cli_fail(cli, TITAN_E_NOMEM);
	if (titan_log_get_level() >= TITAN_LOG_DEBUG) {
		char line[2048];
		size_t n = 0;

		for (int i = 0; i < *argc && n < sizeof(line) - 1; i++)
			n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s", i ? " " : "", argv[i]);
		titan_log_debug("%s %s (%s): %s", prog, titan_version(), titan_git_revision(), line);
	}
	return 0;
}

/* Did the launcher confine this process to some of the machine's CPUs
 * (mpiexec -bind-to core, srun --cpu-bind=cores, taskset)? */
static bool cpus_confined(void)
{
	cpu_set_t set;
	long online = sysconf(_SC_NPROCESSORS_ONLN);

	if (sched_getaffinity(0, sizeof(set), &set) != 0 || online < 1)
		return false;
	return CPU_COUNT(&set) < online;
}

void titan_cli_thread_defaults(char **argv)
{
	static const char *const vars[][2] = {
		{"OMP_WAIT_POLICY", "PASSIVE"},
		{"OPENBLAS_THREAD_TIMEOUT", "4"},
	};
	const char *off = getenv("TITAN_THREAD_DEFAULTS");
	bool changed = false;

	if (off && !strcmp(off, "0"))
		return;
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (!getenv(vars[i][0]) && setenv(vars[i][0], vars[i][1], 0) == 0)
			changed = true;
	/* Threads one per core of the CPUs the launcher gave this rank: only
	 * inside such a mask — on a whole machine every rank's first thread
	 * would go to the same first core. */
	if (!getenv("OMP_PROC_BIND") && !getenv("OMP_PLACES") && cpus_confined() &&
	    setenv("OMP_PROC_BIND", "close", 0) == 0 && setenv("OMP_PLACES", "cores", 0) == 0)
		changed = true;
	if (changed)
		execv("/proc/self/exe", argv);
}

void titan_cli_release(struct titan_cli *cli)
{
	if (!cli)
		return;
	titan_config_overrides_release(&cli->overrides);
	if (cli->stdin_copy) {
		unlink(cli->stdin_copy);
		titan_tmp_forget(cli->stdin_copy);
		if (stdin_copy_at_exit == cli->stdin_copy)
			stdin_copy_at_exit = NULL;
		free(cli->stdin_copy);
		cli->stdin_copy = NULL;
	}
}

int titan_cli_no_dash(const struct titan_cli *cli, const char *what, const char *arg,
		      const char *why)
{
	if (!arg || strcmp(arg, "-"))
		return 0;
	fprintf(stderr, "%s: error: %s: '-' (standard input/output) cannot be used: %s "
		"(a file named '-' is ./-)\nTry '%s --help' for more information.\n",
		cli->prog, what, why, cli->prog);
	return 2;
}

int titan_cli_claim_stdin(struct titan_cli *cli, const char *what)
{
	if (cli->stdin_user)
		return titan_cli_usage_error(cli, "%s and %s both read standard input ('-'): give "
					     "one of them a file", cli->stdin_user, what);
	cli->stdin_user = what;
	return 0;
}

static void remove_stdin_copy(void)
{
	if (stdin_copy_at_exit)
		unlink(stdin_copy_at_exit);
}

int titan_cli_stdin_file(struct titan_cli *cli, const char *what, const char **path)
{
	const char *dir = getenv("TMPDIR");
	char buf[1 << 16];
	size_t n;
	int fd, rc;

	if (strcmp(*path, "-"))
		return 0;
	if ((rc = titan_cli_claim_stdin(cli, what)) != 0)
		return rc;
	if (isatty(STDIN_FILENO))
		return titan_cli_usage_error(cli, "%s: '-' reads standard input, which is a "
					     "terminal", what);
	if (!(cli->stdin_copy = malloc(4096)))
		return titan_cli_fail(cli, titan_error(TITAN_E_NOMEM, "out of memory"));
	snprintf(cli->stdin_copy, 4096, "%s/titan-stdin.XXXXXX", dir && *dir ? dir : "/tmp");
	if ((fd = titan_tmp_mkstemp(cli->stdin_copy, 0, NULL)) < 0) {
		titan_error(TITAN_E_IO, "%s: cannot create a temporary copy of standard input "
			    "'%s': %s", what, cli->stdin_copy, strerror(errno));
		free(cli->stdin_copy);
		cli->stdin_copy = NULL;
		return titan_cli_fail(cli, TITAN_E_IO);
	}
	if (!stdin_copy_at_exit)
		atexit(remove_stdin_copy);
	stdin_copy_at_exit = cli->stdin_copy;
	while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0)
		if (write(fd, buf, n) != (ssize_t)n) {
			titan_error(TITAN_E_IO, "%s: cannot copy standard input to '%s': %s", what,
				    cli->stdin_copy, strerror(errno ? errno : ENOSPC));
			close(fd);
			return titan_cli_fail(cli, TITAN_E_IO);
		}
	if (ferror(stdin) || close(fd) != 0) {
		titan_error(TITAN_E_IO, "%s: cannot read standard input: %s", what, strerror(errno));
		return titan_cli_fail(cli, TITAN_E_IO);
	}
	*path = cli->stdin_copy;
	return 0;
}

int titan_cli_option(struct titan_cli *cli, int opt, const char *arg)
{
	int64_t v;

	switch (opt) {
	case TITAN_OPT_VERSION:
		titan_cli_version(stdout, cli->prog);
		return titan_cli_finish(cli, 0);
	case TITAN_OPT_HELP_CONFIG:
		titan_config_help(stdout);
		return titan_cli_finish(cli, 0);
	case 'v':
		cli->verbosity = cli->verbosity < 0 ? 1 : cli->verbosity + 1;
		titan_log_set_level(cli->verbosity >= 2 ? TITAN_LOG_TRACE : TITAN_LOG_DEBUG);
		return TITAN_CLI_HANDLED;
	case 'q':
		cli->verbosity = -1;
		titan_log_set_level(TITAN_LOG_ERROR);
		return TITAN_CLI_HANDLED;
	case 'c':
		cli->config_path = arg;
		return TITAN_CLI_HANDLED;
	case TITAN_OPT_THREADS:
		if (titan_parse_i64(arg, &v) < 0 || v < 0 || v > 4096)
			return titan_cli_usage_error(cli, "--threads: expected a count from 0 to 4096, got '%s'", arg);
		cli->threads = (int)v;
		return TITAN_CLI_HANDLED;
	case TITAN_OPT_PROGRESS:
		cli->progress = true;
		return TITAN_CLI_HANDLED;
	case '?':
		/* getopt_long printed "unrecognized option" already */
		fprintf(stderr, "Try '%s --help' for more information.\n", cli->prog);
		return 2;
	case ':':
		fprintf(stderr, "Try '%s --help' for more information.\n", cli->prog);
		return 2;
	}
	return TITAN_CLI_UNKNOWN;
}

int titan_cli_usage_error(const struct titan_cli *cli, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: error: ", cli->prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", cli->prog);
	return 2;
}

int titan_cli_fail(const struct titan_cli *cli, int code)
{
	const char *m = titan_errmsg();

	if (titan_get_rank() >= 0)
		fprintf(stderr, "[rank%d]: ", titan_get_rank());
	fprintf(stderr, "%s: error: %s\n", cli->prog, *m ? m : titan_strerr(code));
	return titan_error_exit_status(code);
}

int titan_cli_fail_work(const struct titan_cli *cli, int code)
{
	titan_cli_fail(cli, code);
	return 1;
}

void titan_cli_version(FILE *fp, const char *prog)
{
	char blas[512];

	fprintf(fp, "%s (titan) %s\n", prog, titan_version());
	fprintf(fp, "revision: %s\n", titan_git_revision());
	fprintf(fp, "features: %s\n", titan_features());
	fprintf(fp, "gemm:     %s\n", titan_blas_describe(blas, sizeof(blas)));
	/* what is built in and what uses it (issue 15) */
	if (!strcmp(prog, "titan-train") && titan_has_feature("cuda"))
		fprintf(fp, "trains on: cpu, or one GPU per rank (training.device: cuda; auto picks "
			"it on one rank); multi-rank cuda runs talk over MPI staged through the "
			"host (NCCL is built in, not yet used)\n");
}

int titan_cli_load_config(const struct titan_cli *cli, struct titan_config *cfg)
{
	int rc = titan_config_resolve(cfg, cli->config_path, &cli->overrides);

	if (rc < 0) {
		titan_cli_fail(cli, rc);
		return rc == TITAN_E_NOMEM ? 1 : 2;
	}
	return 0;
}

int titan_cli_finish(const struct titan_cli *cli, int status)
{
	/* fflush + ferror catches buffered write errors; fclose the rest
	 * (an error recorded earlier leaves errno stale: never "Success") */
	errno = 0;
	if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0) {
		if (errno != EPIPE)
			fprintf(stderr, "%s: error: cannot write to standard output: %s\n",
				cli->prog, strerror(errno ? errno : EIO));
		return 1;
	}
	return status;
}
