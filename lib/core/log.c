/*
 * log.c — leveled logging to stderr in torchtitan's line format:
 *   [rank0]:[titan] 2026-11-21 23:01:02,123 - root - INFO - message
 */
#include "titan/core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static enum titan_log_level log_level = TITAN_LOG_INFO;
static int log_time = 1;
static FILE *log_stream;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"ERROR", "WARNING", "INFO", "DEBUG", "TRACE"};

static void log_init_env(void)
{
	const char *s = getenv("TITAN_LOG_LEVEL");
	enum titan_log_level l;

	if (s && titan_log_parse_level(s, &l) == 0)
		log_level = l;
	s = getenv("TITAN_LOG_TIME");
	if (s && strcmp(s, "0") == 0)
		log_time = 0;
}

int titan_log_parse_level(const char *s, enum titan_log_level *out)
{
	static const char *const names[] = {"error", "warn", "info", "debug", "trace"};

	for (int i = 0; i < 5; i++) {
		if (strcasecmp(s, names[i]) == 0 || strcasecmp(s, level_names[i]) == 0) {
			*out = (enum titan_log_level)i;
			return 0;
		}
	}
	return TITAN_E_INVALID;
}

void titan_log_set_level(enum titan_log_level level)
{
	pthread_once(&log_once, log_init_env);
	log_level = level;
}

enum titan_log_level titan_log_get_level(void)
{
	pthread_once(&log_once, log_init_env);
	return log_level;
}

void titan_log_set_stream(FILE *fp)
{
	log_stream = fp;
}

size_t titan_log_head(char *buf, size_t size, enum titan_log_level level)
{
	char when[48] = "";
	int n;

	pthread_once(&log_once, log_init_env);
	if (size == 0)
		return 0;
	if (log_time) {
		struct timespec ts;
		struct tm tm;
		size_t w;

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		w = strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
		snprintf(when + w, sizeof(when) - w, ",%03ld ", ts.tv_nsec / 1000000);
	}
	/* torchtitan's %(name)s: its logger is the root logger */
	n = snprintf(buf, size, "[titan] %s- root - %s - ", when, level_names[level]);
	return (size_t)n < size ? (size_t)n : size - 1;
}

void titan_vlog(enum titan_log_level level, const char *fmt, va_list ap)
{
	char head[128], body[4096], safe[8192];
	size_t h = 0;
	int rank = titan_get_rank();
	FILE *fp;

	pthread_once(&log_once, log_init_env);
	if (level > log_level)
		return;
	if (rank >= 0)
		h += (size_t)snprintf(head + h, sizeof(head) - h, "[rank%d]:", rank);
	titan_log_head(head + h, sizeof(head) - h, level);
	vsnprintf(body, sizeof(body), fmt, ap);
	/* log lines quote names from files (a flavor, a tensor, a key): no
	 * terminal escape gets through */
	titan_str_escapen(safe, sizeof(safe), body, strlen(body), TITAN_ESC_KEEP_LINES);
	fp = log_stream ? log_stream : stderr;
	pthread_mutex_lock(&log_lock);
	fprintf(fp, "%s%s\n", head, safe);
	fflush(fp);
	pthread_mutex_unlock(&log_lock);
}

void titan_log(enum titan_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	titan_vlog(level, fmt, ap);
	va_end(ap);
}
