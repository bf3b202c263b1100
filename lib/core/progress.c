/*
 * progress.c — the progress line the titan-* tools print on stderr (only
 * when stderr is a terminal or with --progress, DESIGN.md): done / total,
 * percentage, rate and ETA, rewritten in place on a terminal, one line per
 * update otherwise (a log file or a CI console reads them in order).
 */
#include "titan/core.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void titan_progress_init(struct titan_progress *p, bool on, const char *prog, const char *unit,
			 uint64_t total)
{
	const char *env = getenv("TITAN_PROGRESS_INTERVAL_MS");
	int64_t ms;

	memset(p, 0, sizeof(*p));
	p->on = on;
	p->fp = stderr;
	p->tty = isatty(STDERR_FILENO);
	p->prog = prog;
	p->unit = unit ? unit : "bytes";
	p->bytes = !strcmp(p->unit, "bytes");
	p->total = total;
	p->t0 = p->last = titan_time_ns();
	p->interval_ns = p->tty ? 250000000ull : 1000000000ull;
	if (env && titan_parse_i64(env, &ms) == 0 && ms >= 0)
		p->interval_ns = (uint64_t)ms * 1000000ull;
}

/* "1:02:03" or "2:03" */
static void hms(char *b, size_t n, double s)
{
	unsigned long long t = s < 0 ? 0 : s > 3.6e8 ? 360000000ull : (unsigned long long)(s + 0.5);

	if (t >= 3600)
		snprintf(b, n, "%llu:%02llu:%02llu", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(b, n, "%llu:%02llu", t / 60, t % 60);
}

static void amount(const struct titan_progress *p, char *b, size_t n, uint64_t v)
{
	if (p->bytes)
		titan_format_bytes(b, n, (double)v);
	else
		titan_format_grouped(b, n, (double)v);
}

static void show(struct titan_progress *p, uint64_t now, bool final, const char *extra)
{
	double s = (double)(now - p->t0) * 1e-9, rate = s > 0 ? (double)p->done / s : 0;
	char line[512], a[32], b[32], t[32];
	int len;

	amount(p, a, sizeof(a), p->done);
	len = snprintf(line, sizeof(line), "%s: %s", p->prog, a);
	if (p->total) {
		amount(p, b, sizeof(b), p->total);
		len += snprintf(line + len, sizeof(line) - (size_t)len, " / %s", b);
	}
	if (!p->bytes)
		len += snprintf(line + len, sizeof(line) - (size_t)len, " %s", p->unit);
	if (p->total) {
		uint64_t done = p->done < p->total ? p->done : p->total;

		len += snprintf(line + len, sizeof(line) - (size_t)len, " (%d%%)",
				(int)(done * 100.0 / (double)p->total));
	}
	if (extra && *extra && len < (int)sizeof(line))
		len += snprintf(line + len, sizeof(line) - (size_t)len, ", %s", extra);
	if (len < (int)sizeof(line)) {
		if (p->bytes)
			len += snprintf(line + len, sizeof(line) - (size_t)len, ", %.1f MB/s", rate / 1e6);
		else
			len += snprintf(line + len, sizeof(line) - (size_t)len, ", %s %s/s",
					titan_format_grouped(b, sizeof(b), rate), p->unit);
	}
	if (len < (int)sizeof(line)) {
		if (final) {
			hms(t, sizeof(t), s);
			len += snprintf(line + len, sizeof(line) - (size_t)len, ", %s elapsed", t);
		} else if (p->total && rate > 0 && p->done < p->total) {
			hms(t, sizeof(t), (double)(p->total - p->done) / rate);
			len += snprintf(line + len, sizeof(line) - (size_t)len, ", ETA %s", t);
		}
	}
	if (len >= (int)sizeof(line))
		len = (int)sizeof(line) - 1;
	if (p->tty) {
		/* blank what a longer previous line left */
		fprintf(p->fp, "\r%s%*s%s", line, p->width > len ? p->width - len : 0, "",
			final ? "\n" : "");
		p->width = len;
	} else {
		fprintf(p->fp, "%s\n", line);
	}
	fflush(p->fp);
	p->last = now;
}

void titan_progress_update(struct titan_progress *p, uint64_t done, const char *extra)
{
	uint64_t now;

	p->done = done;
	if (!p->on)
		return;
	now = titan_time_ns();
	if (now - p->last < p->interval_ns)
		return;
	show(p, now, false, extra);
}

void titan_progress_finish(struct titan_progress *p, uint64_t done, const char *extra)
{
	p->done = done;
	if (!p->on)
		return;
	show(p, titan_time_ns(), true, extra);
}
