/*
 * titan/cli.h — the command-line contract shared by every titan-* tool
 * (samtools' global options, git's exit codes):
 *
 *   --help            usage on stdout, exit 0
 *   --version         version, git revision and features built in, exit 0
 *   -c, --config F    YAML job config (tools that take one)
 *   --help-config     every config key with type, default and doc, exit 0
 *   --section.key=V   config override (any tool that takes --config)
 *   -v, --verbose     more log output (repeatable); -q, --quiet: errors only
 *   --threads N       worker threads (default: all cores)
 *   --progress        progress on stderr even when it is not a terminal
 *
 * Exit status (the EXIT STATUS section of every man page, docs/conventions.md):
 *   0  success
 *   1  runtime failure: the invocation was valid but the work failed: a data
 *      file (input text, token stream, tokenizer, shard, checkpoint, trace,
 *      estimate) missing, unreadable or malformed; an output that cannot be
 *      written; a numeric, device or MPI failure
 *   2  usage or configuration: a bad option, argument or option value, or
 *      the config (--config FILE missing, not YAML, an unknown key, a bad
 *      value, settings that cannot be combined), found before the work starts
 * Which of 1 and 2 follows from the role of the file, not from the error
 * code: a tool calls titan_cli_fail for configuration checks and
 * titan_cli_fail_work once it works on its data.  Errors are one line on
 * stderr: "titan-NAME: error: <what>: <why>".  stdout carries data only and
 * is checked on close, so a full disk or a closed pipe fails.
 */
#ifndef TITAN_CLI_H
#define TITAN_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "titan/config.h"
#include "titan/core.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
	TITAN_OPT_VERSION = 0x1000,
	TITAN_OPT_HELP_CONFIG,
	TITAN_OPT_THREADS,
	TITAN_OPT_PROGRESS,
	TITAN_OPT_TOOL_BASE = 0x1100 /* tools number their long-only options from here */
};

/* Entries for a getopt_long table; end the table with {0}. */
#define TITAN_CLI_GLOBAL_OPTIONS \
	{"help", no_argument, NULL, 'h'}, \
	{"version", no_argument, NULL, TITAN_OPT_VERSION}, \
	{"verbose", no_argument, NULL, 'v'}, \
	{"quiet", no_argument, NULL, 'q'}, \
	{"threads", required_argument, NULL, TITAN_OPT_THREADS}, \
	{"progress", no_argument, NULL, TITAN_OPT_PROGRESS}
#define TITAN_CLI_CONFIG_OPTIONS \
	{"config", required_argument, NULL, 'c'}, \
	{"help-config", no_argument, NULL, TITAN_OPT_HELP_CONFIG}
#define TITAN_CLI_GLOBAL_SHORT "hvq"
#define TITAN_CLI_CONFIG_SHORT "c:"

struct titan_cli {
	const char *prog;         /* "titan-config" */
	int verbosity;            /* 0 default, -1 quiet, 1.. verbose */
	int threads;              /* 0 = all cores */
	bool progress;            /* --progress given, or stderr is a terminal */
	const char *config_path;  /* --config, or NULL */
	struct titan_config_overrides overrides;
	const char *stdin_user;   /* the argument that reads standard input, or NULL */
	char *stdin_copy;         /* titan_cli_stdin_file's temporary file */
};

/* Threading defaults for tools that alternate OpenBLAS sgemm with OpenMP
 * regions (titan-train, titan-generate): idle threads that spin steal the
 * cores the working ones need (libgomp spins between parallel regions,
 * OpenBLAS's workers for 2^28 cycles after every sgemm).  Unless the
 * environment sets them, OMP_WAIT_POLICY=PASSIVE and
 * OPENBLAS_THREAD_TIMEOUT=4; both libraries read them when loaded, so the
 * process re-executes itself once (/proc/self/exe; on failure it goes on
 * with the libraries' defaults).  When the launcher confined the process
 * to some of the machine's CPUs (mpiexec -bind-to core, srun
 * --cpu-bind=cores, taskset) and neither OMP_PROC_BIND nor OMP_PLACES is
 * set, also OMP_PROC_BIND=close and OMP_PLACES=cores: the OpenMP threads
 * one per core of that mask, where the scheduler would otherwise move
 * them between its cores (and their caches).  TITAN_THREAD_DEFAULTS=0
 * turns all of this off.  Call first in main, with the untouched argv. */
void titan_cli_thread_defaults(char **argv);

/* Set up logging from the environment and record the program name.  With
 * `with_config`, removes `--section.key[=value]` overrides from argv (so
 * call it before getopt_long).  Returns 0, or an exit status (1) after
 * printing an error. */
int titan_cli_init(struct titan_cli *cli, const char *prog, int *argc, char **argv,
		   bool with_config);
void titan_cli_release(struct titan_cli *cli);

/* Handle a global option returned by getopt_long.  Returns
 * TITAN_CLI_UNKNOWN when `opt` is not a global option (--help is the tool's:
 * it has the usage text), TITAN_CLI_HANDLED when the tool goes on, or an exit
 * status >= 0 when it must stop now (0 after --version / --help-config, 2
 * after a bad value or getopt's '?'). */
#define TITAN_CLI_UNKNOWN (-1)
#define TITAN_CLI_HANDLED (-2)
int titan_cli_option(struct titan_cli *cli, int opt, const char *arg);

/* "titan-X: error: ..." on stderr; returns 2 (usage) with a pointer to --help. */
int titan_cli_usage_error(const struct titan_cli *cli, const char *fmt, ...) TITAN_PRINTF(2, 3);
/* "titan-X: error: <titan_errmsg()>" on stderr; returns the exit status for
 * `code` (2 for TITAN_E_INVALID: a configuration check; else 1). */
int titan_cli_fail(const struct titan_cli *cli, int code);
/* The same line; returns 1 whatever the code: a failure while working on the
 * data, where a reader's TITAN_E_INVALID means a malformed file, not misuse. */
int titan_cli_fail_work(const struct titan_cli *cli, int code);
/* Prints the version block (what --version shows). */
void titan_cli_version(FILE *fp, const char *prog);
/* Resolve the config from --config and the overrides; on error prints it
 * and returns 2 (a missing or unreadable config file too: it is the
 * configuration; 1 only when out of memory), else 0. */
int titan_cli_load_config(const struct titan_cli *cli, struct titan_config *cfg);
/* '-' (standard input/output), docs/conventions.md.  Every file argument
 * takes it where it can work; where it cannot (a folder, an HDF5 file that
 * is read with seeks), the tool says so:
 *
 * titan_cli_no_dash: when `arg` is "-", prints "WHAT: '-' (standard
 * input/output) cannot be used: WHY" with the ./- hint and returns 2; else 0.
 *
 * titan_cli_claim_stdin: records that `what` reads standard input; returns 0,
 * or 2 after a usage error when another argument (named) reads it already.
 *
 * titan_cli_stdin_file: for a reader that needs a named file (a tokenizer):
 * when *path is "-", claims standard input, copies it to a temporary file
 * (removed by titan_cli_release or on SIGINT/SIGTERM) and points *path at
 * it.  Returns 0, 2 (stdin taken, or a terminal) or 1 after printing. */
int titan_cli_no_dash(const struct titan_cli *cli, const char *what, const char *arg,
		      const char *why);
int titan_cli_claim_stdin(struct titan_cli *cli, const char *what);
int titan_cli_stdin_file(struct titan_cli *cli, const char *what, const char **path);
/* Close stdout and report a write error (ENOSPC, EPIPE): returns `status`
 * or 1.  Call last, with the status the tool would exit with. */
int titan_cli_finish(const struct titan_cli *cli, int status);

#ifdef __cplusplus
}
#endif
#endif
