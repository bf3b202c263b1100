/*
 * error.c — per-thread error records with context (message, library source
 * location, MPI rank) and the assert for broken invariants.
 */
#include "titan/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local struct titan_error_info last_error;
static int process_rank = -1;

/* Messages quote names and bytes from the user's files: control
 * characters (a terminal escape in a corrupt file) and bytes that are not
 * UTF-8 are shown as \xNN instead of reaching the terminal
 * (titan_str_escapen).  Newlines and tabs stay. */
static void escape_controls(char *msg, size_t size)
{
	char buf[sizeof(last_error.msg)];

	titan_str_escapen(buf, sizeof(buf), msg, strnlen(msg, size), TITAN_ESC_KEEP_LINES);
	snprintf(msg, size, "%s", buf);
}

int titan_error_set_(int code, const char *file, int line, const char *func,
		     const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error.msg, sizeof(last_error.msg), fmt, ap);
	va_end(ap);
	escape_controls(last_error.msg, sizeof(last_error.msg));
	last_error.code = code;
	last_error.file = file;
	last_error.line = line;
	last_error.func = func;
	titan_log(TITAN_LOG_DEBUG, "error raised at %s:%d (%s): %s", file, line,
		  func, last_error.msg);
	return code;
}

int titan_error_prefix(const char *fmt, ...)
{
	char buf[sizeof(last_error.msg)];
	size_t n, m;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf) - 2, fmt, ap);
	va_end(ap);
	n = strlen(buf);
	buf[n++] = ':';
	buf[n++] = ' ';
	m = strnlen(last_error.msg, sizeof(last_error.msg));
	if (m > sizeof(buf) - 1 - n)
		m = sizeof(buf) - 1 - n;
	memcpy(buf + n, last_error.msg, m);
	buf[n + m] = '\0';
	memcpy(last_error.msg, buf, sizeof(buf));
	return last_error.code;
}

const struct titan_error_info *titan_error_last(void)
{
	return &last_error;
}

const char *titan_errmsg(void)
{
	return last_error.msg;
}

void titan_error_clear(void)
{
	memset(&last_error, 0, sizeof(last_error));
}

const char *titan_strerr(int code)
{
	switch (code) {
	case TITAN_OK: return "success";
	case TITAN_E_IO: return "input/output error";
	case TITAN_E_NOMEM: return "out of memory";
	case TITAN_E_INVALID: return "invalid input";
	case TITAN_E_FORMAT: return "bad file format";
	case TITAN_E_UNSUPPORTED: return "not supported";
	case TITAN_E_DEVICE: return "device error";
	case TITAN_E_COMM: return "communication error";
	case TITAN_E_INTERNAL: return "internal error";
	case TITAN_E_NUMERIC: return "numerical failure";
	}
	return "unknown error";
}

int titan_error_exit_status(int code)
{
	return code == TITAN_E_INVALID ? 2 : 1;
}

void titan_assert_fail_(const char *expr, const char *file, int line, const char *func)
{
	if (process_rank >= 0)
		fprintf(stderr, "[rank%d]: ", process_rank);
	fprintf(stderr, "titan: %s:%d: %s: assertion '%s' failed (this is a bug in titan)\n",
		file, line, func, expr);
	fflush(stderr);
	abort();
}

void titan_set_rank(int rank)
{
	process_rank = rank;
}

int titan_get_rank(void)
{
	return process_rank;
}
