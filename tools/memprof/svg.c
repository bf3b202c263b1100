/*
 * svg.c — titan-memprof timeline: bytes live per tag over time as stacked
 * areas, one panel per rank, with step starts and the peak marked; SVG,
 * and PNG through rsvg-convert or ImageMagick when one is installed.
 * Each pixel column shows the state at the highest total the replay saw
 * in it, so a spike is never averaged away and the file stays small
 * whatever the number of events.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memprof.h"

#define PANEL_H 380
#define ML 84   /* margins: left (y labels) */
#define MR 200  /* right (legend) */
#define MT 56   /* top (title, step labels) */
#define MB 50   /* bottom (x labels) */

/* bottom to top: what stays put first, what comes and goes on top */
static const int order[TITAN_MEM_NTAGS] = {
	TITAN_MEM_PARAMS, TITAN_MEM_GRADS, TITAN_MEM_OPTIM, TITAN_MEM_DATA, TITAN_MEM_OTHER,
	TITAN_MEM_COMM, TITAN_MEM_WORKSPACE, TITAN_MEM_ACTIVATIONS,
};
static const char *const color[TITAN_MEM_NTAGS] = { /* by tag: Tableau 10 */
	"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f",
};

static void esc(FILE *fp, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", fp); break;
		case '<': fputs("&lt;", fp); break;
		case '>': fputs("&gt;", fp); break;
		case '"': fputs("&quot;", fp); break;
		default:
			if ((unsigned char)*s >= 0x20 || *s == '\t')
				fputc(*s, fp);
		}
	}
}

/* A "nice" step (1, 2, 5 x 10^k) giving about `n` ticks up to `max`. */
static double nice_step(double max, int n)
{
	double raw = max / n, p = pow(10, floor(log10(raw))), f = raw / p;

	return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

struct unit {
	const char *name;
	double scale;
};

static struct unit bytes_unit(double max)
{
	if (max >= 1024.0 * 1024 * 1024)
		return (struct unit){"GiB", 1024.0 * 1024 * 1024};
	if (max >= 1024.0 * 1024)
		return (struct unit){"MiB", 1024.0 * 1024};
	if (max >= 1024.0)
		return (struct unit){"KiB", 1024.0};
	return (struct unit){"B", 1};
}

static struct unit time_unit(double max_ns)
{
	if (max_ns >= 600e9)
		return (struct unit){"min", 60e9};
	if (max_ns >= 2e9)
		return (struct unit){"s", 1e9};
	if (max_ns >= 2e6)
		return (struct unit){"ms", 1e6};
	return (struct unit){"µs", 1e3};
}

static void label_num(char *buf, size_t n, double v)
{
	if (fabs(v - round(v)) < 1e-9)
		snprintf(buf, n, "%.0f", v);
	else
		snprintf(buf, n, "%g", v);
}

/* The pixel columns of one rank: state per tag at each column's peak. */
static int columns(const struct titan_memreplay_result *m, int pw, double t_axis, int64_t (*v)[TITAN_MEM_NTAGS])
{
	int64_t state[TITAN_MEM_NTAGS] = {0};

	for (int px = 0; px < pw; px++) {
		double t0 = t_axis * px / pw, t1 = t_axis * (px + 1) / pw;
		int64_t a = (int64_t)(t0 / (double)m->col_ns), b = (int64_t)ceil(t1 / (double)m->col_ns) - 1;
		const struct titan_memcol *best = NULL, *lastc = NULL;

		if (b < a)
			b = a;
		for (int64_t k = a; k <= b && k < m->n_cols; k++) {
			const struct titan_memcol *c = &m->cols[k];

			if (!c->used)
				continue;
			if (!best || c->max_total > best->max_total)
				best = c;
			lastc = c;
		}
		memcpy(v[px], best ? best->at_max : state, sizeof(v[px]));
		if (lastc)
			memcpy(state, lastc->last, sizeof(state));
	}
	return 0;
}

static void panel(FILE *fp, const struct mp_rank *r, const struct titan_memreplay_result *m,
		  int width, int y0)
{
	const int pw = width - ML - MR, ph = PANEL_H - MT - MB;
	int64_t (*v)[TITAN_MEM_NTAGS] = calloc((size_t)pw, sizeof(*v));
	double t_axis = m->t_end_ns > 0 ? (double)m->t_end_ns : 1;
	double ymax = m->total_peak > 0 ? (double)m->total_peak * 1.08 : 1, ystep;
	struct unit bu, tu;
	uint64_t step_every = 1;
	double cum[2][4096 * 4];
	char a[48], b[48];
	const char *base = strrchr(r->memtrace, '/');

	base = base ? base + 1 : r->memtrace;
	fprintf(fp, "<g transform=\"translate(0,%d)\">\n", y0);
	fprintf(fp, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">rank %d (", ML, r->rank);
	esc(fp, m->header.device);
	fprintf(fp, "): peak %s at %s</text>\n", mp_bytes(a, sizeof(a), (double)m->total_peak),
		mp_where(b, sizeof(b), m->at_peak.step, m->at_peak.phase));
	fprintf(fp, "<text x=\"%d\" y=\"40\" font-size=\"11\" fill=\"#555\">", ML);
	esc(fp, base);
	fprintf(fp, ", %llu events", (unsigned long long)m->n_records);
	if (m->truncated)
		fprintf(fp, "</text>\n<text x=\"%d\" y=\"40\" font-size=\"11\" fill=\"#c00\" "
			"text-anchor=\"end\">truncated at byte %llu: shown up to the cut", width - MR,
			(unsigned long long)m->stop_offset);
	else if (m->corrupt)
		fprintf(fp, "</text>\n<text x=\"%d\" y=\"40\" font-size=\"11\" fill=\"#c00\" "
			"text-anchor=\"end\">corrupt record at byte %llu: shown up to it", width - MR,
			(unsigned long long)m->stop_offset);
	fprintf(fp, "</text>\n");
	if (!v || pw > 4096 * 4 || m->n_records == 0) {
		fprintf(fp, "<text x=\"%d\" y=\"%d\">no memory events</text>\n</g>\n", ML + 10, MT + ph / 2);
		free(v);
		return;
	}
	columns(m, pw, t_axis, v);
	/* axes and grid */
	bu = bytes_unit(ymax);
	ystep = nice_step(ymax / bu.scale, 6) * bu.scale;
	fprintf(fp, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#999\"/>\n",
		ML, MT, pw, ph);
	for (double y = 0; y <= ymax * 1.0001; y += ystep) {
		double py = MT + ph - y / ymax * ph;

		label_num(a, sizeof(a), y / bu.scale);
		fprintf(fp, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
			"<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s %s</text>\n",
			ML, py, ML + pw, py, ML - 6, py + 4, a, bu.name);
	}
	tu = time_unit(t_axis);
	{
		double xs = nice_step(t_axis / tu.scale, 8) * tu.scale;

		for (double t = 0; t <= t_axis * 1.0001; t += xs) {
			double px = ML + t / t_axis * pw;

			label_num(a, sizeof(a), t / tu.scale);
			fprintf(fp, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#999\"/>"
				"<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
				px, MT + ph, px, MT + ph + 5, px, MT + ph + 18, a);
		}
	}
	fprintf(fp, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">time since the "
		"trace started (%s)</text>\n", ML + pw / 2, MT + ph + 38, tu.name);
	fprintf(fp, "<text x=\"16\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" "
		"transform=\"rotate(-90 16 %d)\">bytes live (%s)</text>\n", MT + ph / 2, MT + ph / 2, bu.name);
	/* stacked bands */
	for (int px = 0; px < pw; px++)
		cum[0][px] = 0;
	for (int k = 0, cur = 0; k < TITAN_MEM_NTAGS; k++) {
		int t = order[k];
		bool any = false;
		double *lo = cum[cur], *hi = cum[!cur], last = NAN;

		for (int px = 0; px < pw; px++) {
			hi[px] = lo[px] + (double)v[px][t];
			any |= v[px][t] != 0;
		}
		if (any) {
			fprintf(fp, "<path fill=\"%s\" fill-opacity=\"0.9\" stroke=\"none\" d=\"", color[t]);
			for (int px = 0; px < pw; px++) { /* along the top, left to right */
				double y = MT + ph - hi[px] / ymax * ph;

				if (px == 0)
					fprintf(fp, "M%d %.1f", ML, y);
				else if (fabs(y - last) > 0.05)
					fprintf(fp, "H%d V%.1f", ML + px, y);
				last = y;
			}
			fprintf(fp, "H%d", ML + pw);
			for (int px = pw - 1; px >= 0; px--) { /* back along the bottom */
				double y = MT + ph - lo[px] / ymax * ph;

				if (px == pw - 1)
					fprintf(fp, "V%.1f", y);
				else if (fabs(y - last) > 0.05)
					fprintf(fp, "H%d V%.1f", ML + px + 1, y);
				last = y;
			}
			fprintf(fp, "H%d Z\"/>\n", ML);
		}
		cur = !cur;
	}
	/* step starts: every k-th step (k = 1, 2, 5, 10, ...) so that lines are
	 * at least 8 px apart, labels on multiples of k that leave room */
	{
		uint64_t k = 1, kl;
		double span = 0, per = 0, last_label = -1e9;
		size_t n = 0, first = m->n_steps;
		uint32_t last_step = 0;

		for (size_t i = 0; i < m->n_steps; i++)
			if (m->steps[i].step > 0) {
				if (first == m->n_steps)
					first = i;
				n++;
				last_step = m->steps[i].step;
			}
		if (n > 1) {
			span = (double)(m->steps[m->n_steps - 1].t_first_ns - m->steps[first].t_first_ns) / t_axis * pw;
			per = span / (double)(last_step - m->steps[first].step);
		}
		/* k stops past the largest step (2^32): more steps apart than
		 * that is no line at all, and p10 would wrap around to 0 (steps
		 * far apart in a tiny part of the time axis looped forever) */
		for (uint64_t p10 = 1; per > 0 && per * (double)k < 8 && p10 <= UINT32_MAX; p10 *= 10)
			for (int f = 0; f < 3 && per * (double)k < 8; f++)
				k = p10 * (uint64_t)(f == 0 ? 1 : f == 1 ? 2 : 5);
		kl = k;
		{
			double lw = 6.5 * (double)(6 + snprintf(NULL, 0, "%u", last_step)) + 10;

			for (uint64_t p10 = 1; per > 0 && per * (double)kl < lw && p10 <= UINT32_MAX;
			     p10 *= 10)
				for (int f = 0; f < 3 && per * (double)kl < lw; f++)
					kl = p10 * (uint64_t)(f == 0 ? 1 : f == 1 ? 2 : 5);
			if (kl % k)
				kl = (kl / k + 1) * k;
		}
		for (size_t i = 0; i < m->n_steps; i++) {
			const struct titan_memstep *st = &m->steps[i];
			double px = ML + (double)st->t_first_ns / t_axis * pw;

			if (st->step == 0 || st->step % k)
				continue;
			fprintf(fp, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\" "
				"stroke-width=\"0.6\" stroke-dasharray=\"3,3\"/>\n", px, MT, px, MT + ph);
			if (st->step % kl == 0 && px - last_label >= 40 && px < ML + pw - 30) {
				last_label = px;
				fprintf(fp, "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" fill=\"#333\">step %u</text>\n",
					px + 2, MT - 4, st->step);
			}
		}
		step_every = k;
	}
	/* the peak */
	{
		double px = ML + (double)m->at_peak.t_ns / t_axis * pw;
		double py = MT + ph - (double)m->total_peak / ymax * ph;
		bool right = px < ML + pw * 0.6;

		fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c00\" "
			"stroke-width=\"1\"/>\n", px, py, px, MT + ph);
		fprintf(fp, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"#c00\" stroke=\"white\"/>\n", px, py);
		fprintf(fp, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#c00\" font-weight=\"bold\" "
			"text-anchor=\"%s\">peak %s (%s)</text>\n", right ? px + 8 : px - 8, py - 6,
			right ? "start" : "end", mp_bytes(a, sizeof(a), (double)m->total_peak),
			mp_where(b, sizeof(b), m->at_peak.step, m->at_peak.phase));
	}
	/* legend: top band first, with its bytes at the peak */
	{
		int ly = MT + 4;

		fprintf(fp, "<text x=\"%d\" y=\"%d\" font-size=\"12\" font-weight=\"bold\">at the peak</text>\n",
			ML + pw + 16, ly + 8);
		ly += 22;
		for (int k = TITAN_MEM_NTAGS - 1; k >= 0; k--) {
			int t = order[k];

			if (!m->peak[t])
				continue;
			fprintf(fp, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
				"<text x=\"%d\" y=\"%d\" font-size=\"12\">%s %s</text>\n", ML + pw + 16, ly,
				color[t], ML + pw + 34, ly + 10, titan_mem_tag_name((enum titan_mem_tag)t),
				mp_bytes(b, sizeof(b), (double)m->peak_at_total[t]));
			ly += 20;
		}
		fprintf(fp, "<text x=\"%d\" y=\"%d\" font-size=\"12\">total %s</text>\n", ML + pw + 16, ly + 10,
			mp_bytes(a, sizeof(a), (double)m->total_peak));
		fprintf(fp, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\" "
			"stroke-dasharray=\"3,3\"/><text x=\"%d\" y=\"%d\" font-size=\"11\">", ML + pw + 16,
			ly + 32, ML + pw + 28, ly + 32, ML + pw + 34, ly + 36);
		if (step_every > 1)
			fprintf(fp, "start of every %llu%s step</text>\n", (unsigned long long)step_every,
				step_every == 2 ? "nd" : "th");
		else
			fprintf(fp, "step start</text>\n");
	}
	fprintf(fp, "</g>\n");
	free(v);
}

static int write_svg(FILE *fp, const struct mp_inputs *in, int width)
{
	int n = 0, y = 0;

	for (size_t i = 0; i < in->n; i++)
		n += in->ranks[i].mem != NULL;
	fprintf(fp, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
		"font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
		"<title>titan-memprof timeline</title>\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
		width, n * PANEL_H + 24, width, n * PANEL_H + 24);
	for (size_t i = 0; i < in->n; i++) {
		if (!in->ranks[i].mem)
			continue;
		panel(fp, &in->ranks[i], titan_memreplay_get(in->ranks[i].mem), width, y);
		y += PANEL_H;
	}
	fprintf(fp, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#555\">titan-memprof timeline: bytes "
		"live per tag, stacked (each pixel column shows its highest total)</text>\n</svg>\n",
		ML, y + 16);
	return ferror(fp) ? titan_error(TITAN_E_IO, "cannot write the SVG: %s",
					strerror(errno ? errno : EIO)) : 0;
}

static bool on_path(const char *name)
{
	const char *p = getenv("PATH");
	char buf[4096];

	while (p && *p) {
		size_t n = strcspn(p, ":");

		if (n && snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, name) < (int)sizeof(buf) &&
		    access(buf, X_OK) == 0)
			return true;
		p += n + (p[n] == ':');
	}
	return false;
}

/* SVG -> PNG with rsvg-convert, else ImageMagick (magick, convert). */
static int to_png(const char *svg, const char *png)
{
	char tmp[4200];
	const char *tool = on_path("rsvg-convert") ? "rsvg-convert" : on_path("magick") ? "magick" :
			   on_path("convert") ? "convert" : NULL;
	pid_t pid;
	int st;

	if (!tool)
		return titan_error(TITAN_E_UNSUPPORTED, "--png needs rsvg-convert (Debian: librsvg2-bin) or "
				   "ImageMagick on PATH; --svg writes the SVG without them");
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.png", png, (long)getpid());
	fflush(NULL);
	if ((pid = fork()) < 0)
		return titan_error(TITAN_E_IO, "cannot run %s: %s", tool, strerror(errno));
	if (pid == 0) {
		if (!strcmp(tool, "rsvg-convert"))
			execlp(tool, tool, "-b", "white", "-o", tmp, svg, (char *)NULL);
		else
			execlp(tool, tool, svg, tmp, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || access(tmp, R_OK) != 0) {
		unlink(tmp);
		return titan_error(TITAN_E_IO, "%s could not convert '%s' to PNG (exit status %d)", tool,
				   svg, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	if (rename(tmp, png) != 0) {
		int e = errno;

		unlink(tmp);
		return titan_error(TITAN_E_IO, "cannot rename '%s' to '%s': %s", tmp, png, strerror(e));
	}
	return 0;
}

int mp_timeline(struct mp_inputs *in, const struct mp_opts *o)
{
	const int pw = o->width - ML - MR;
	char tmp_svg[] = "/tmp/titan-memprof-XXXXXX.svg";
	struct titan_afile f;
	bool have = false;
	int status, rc;

	for (size_t i = 0; i < in->n; i++)
		have |= in->ranks[i].memtrace != NULL;
	if (!have) {
		titan_error(TITAN_E_INVALID, "no memory trace (*.memtrace) among the inputs: titan-train "
			    "writes DUMP/memory_snapshot/rankR.memtrace with "
			    "--profiling.enable_memory_snapshot=true");
		return mp_fail();
	}
	if ((status = mp_inputs_replay(in, o, 2 * pw)) < 0)
		return mp_fail();
	if (o->svg) {
		if ((rc = titan_afile_open(&f, o->svg)) < 0)
			return mp_fail();
		rc = write_svg(f.fp, in, o->width);
		if ((rc = titan_afile_close(&f, rc)) < 0)
			return mp_fail();
	}
	if (o->png) {
		const char *svg = o->svg;
		int fd = -1;

		if (!svg || !strcmp(svg, "-")) {
			FILE *fp;

			if ((fd = mkstemps(tmp_svg, 4)) < 0 || !(fp = fdopen(fd, "w"))) {
				titan_error(TITAN_E_IO, "cannot create a temporary SVG: %s", strerror(errno));
				if (fd >= 0)
					close(fd);
				return mp_fail();
			}
			rc = write_svg(fp, in, o->width);
			if (fclose(fp) != 0 && rc == 0)
				rc = titan_error(TITAN_E_IO, "cannot write '%s': %s", tmp_svg, strerror(errno));
			svg = tmp_svg;
		} else {
			rc = 0;
		}
		if (rc == 0)
			rc = to_png(svg, o->png);
		if (svg == tmp_svg)
			unlink(tmp_svg);
		if (rc < 0)
			return mp_fail();
	}
	if (o->json) {
		struct titan_json j;

		titan_json_init(&j);
		titan_json_object_begin(&j);
		titan_json_key(&j, "format"); titan_json_string(&j, "titan-memprof");
		titan_json_key(&j, "version"); titan_json_int(&j, 1);
		titan_json_key(&j, "command"); titan_json_string(&j, "timeline");
		titan_json_key(&j, "svg");
		if (o->svg) titan_json_string(&j, o->svg); else titan_json_null(&j);
		titan_json_key(&j, "png");
		if (o->png) titan_json_string(&j, o->png); else titan_json_null(&j);
		titan_json_key(&j, "ranks");
		titan_json_array_begin(&j);
		for (size_t i = 0; i < in->n; i++) {
			const struct titan_memreplay_result *m;
			int64_t state[TITAN_MEM_NTAGS] = {0};

			if (!in->ranks[i].mem)
				continue;
			m = titan_memreplay_get(in->ranks[i].mem);
			titan_json_object_begin(&j);
			titan_json_key(&j, "rank"); titan_json_int(&j, in->ranks[i].rank);
			titan_json_key(&j, "peak_bytes"); titan_json_int(&j, m->total_peak);
			titan_json_key(&j, "peak_time_s"); titan_json_double(&j, (double)m->at_peak.t_ns * 1e-9);
			titan_json_key(&j, "column_s"); titan_json_double(&j, (double)m->col_ns * 1e-9);
			titan_json_key(&j, "tags");
			titan_json_array_begin(&j);
			for (int t = 0; t < TITAN_MEM_NTAGS; t++)
				titan_json_string(&j, titan_mem_tag_name((enum titan_mem_tag)t));
			titan_json_array_end(&j);
			titan_json_key(&j, "series"); /* [t_s, bytes per tag...] at each column's peak */
			titan_json_array_begin(&j);
			for (int k = 0; k < m->n_cols && (uint64_t)k * m->col_ns <= m->t_end_ns; k++) {
				const struct titan_memcol *c = &m->cols[k];

				titan_json_array_begin(&j);
				titan_json_double(&j, (double)((uint64_t)k * m->col_ns) * 1e-9);
				for (int t = 0; t < TITAN_MEM_NTAGS; t++)
					titan_json_int(&j, c->used ? c->at_max[t] : state[t]);
				titan_json_array_end(&j);
				if (c->used)
					memcpy(state, c->last, sizeof(state));
			}
			titan_json_array_end(&j);
			titan_json_object_end(&j);
		}
		titan_json_array_end(&j);
		titan_json_object_end(&j);
		if ((rc = mp_json_print(&j)) != 0)
			status = rc;
		titan_json_release(&j);
	}
	return status;
}
