/*
 * memprof_gen.c — writes a synthetic memory trace (docs/formats.md,
 * *.memtrace) shaped like a training run, for bench/memprof.sh and tests:
 *
 *   memprof_gen OUT EVENTS [RANK] [LAYERS] [LEAK_BYTES]
 *
 * Set-up allocates params, grads and two optimizer moments (step 0); then
 * each step allocates a data buffer, LAYERS x 4 activation blocks in
 * forward, a loss workspace, frees the activations in reverse during
 * backward with a workspace block per layer, and a small optimizer
 * temporary; LEAK_BYTES (default 0) of "other" per step are never freed.
 * Steps run until EVENTS records are written (the last step may be cut).
 * The peak is the end of forward + the loss workspace of any step (all
 * equal without a leak, the last complete one with it).  Prints the
 * expected peak and per-tag breakdown as one JSON line on stdout.
 * No titan library: a stand-alone writer of the format.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P, G, O, A, C, W, D, X, NT };

static FILE *fp;
static uint64_t n_left, t_ns, next_addr = 0x10000;
static uint32_t cur_step;
static uint16_t cur_phase;
static int64_t cur[NT], total, peak, at_peak[NT];

static void put(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++, v >>= 8)
		p[i] = (unsigned char)v;
}

static int rec(int kind, int tag, uint64_t bytes, uint64_t addr)
{
	unsigned char r[32];

	if (n_left == 0)
		return -1;
	n_left--;
	t_ns += 150 + (addr * 2654435761u) % 100;
	r[0] = (unsigned char)kind;
	r[1] = (unsigned char)tag;
	put(r + 2, cur_phase, 2);
	put(r + 4, cur_step, 4);
	put(r + 8, t_ns, 8);
	put(r + 16, bytes, 8);
	put(r + 24, addr, 8);
	fwrite(r, 32, 1, fp);
	if (kind == 1) {
		cur[tag] += (int64_t)bytes;
		total += (int64_t)bytes;
		if (total > peak) {
			peak = total;
			memcpy(at_peak, cur, sizeof(cur));
		}
	} else {
		cur[tag] -= (int64_t)bytes;
		total -= (int64_t)bytes;
	}
	return 0;
}

static uint64_t alloc(int tag, uint64_t bytes)
{
	uint64_t a = next_addr;

	next_addr += (bytes + 63) / 64 * 64 + 64;
	return rec(1, tag, bytes, a) < 0 ? 0 : a;
}

#define ALLOC(v, tag, bytes) do { if (!((v) = alloc((tag), (bytes)))) goto done; } while (0)
#define FREE(tag, bytes, a) do { if (rec(2, (tag), (bytes), (a)) < 0) goto done; } while (0)

int main(int argc, char **argv)
{
	static const char *const names[NT] = {"params", "grads", "optim", "activations", "comm",
					      "workspace", "data", "other"};
	unsigned char h[64] = "TTNMEM\0\1";
	int layers, rank;
	uint64_t leak, a, *acts;
	const uint64_t act = 1 << 20, ws = 3 << 18;

	if (argc < 3 || argc > 6) {
		fprintf(stderr, "usage: memprof_gen OUT EVENTS [RANK] [LAYERS] [LEAK_BYTES]\n");
		return 2;
	}
	n_left = strtoull(argv[2], NULL, 10);
	rank = argc > 3 ? atoi(argv[3]) : 0;
	layers = argc > 4 ? atoi(argv[4]) : 16;
	leak = argc > 5 ? strtoull(argv[5], NULL, 10) : 0;
	if (layers < 1 || !(acts = calloc((size_t)layers * 4, sizeof(*acts))) ||
	    !(fp = fopen(argv[1], "wb"))) {
		fprintf(stderr, "memprof_gen: bad arguments or cannot write '%s'\n", argv[1]);
		return 1;
	}
	put(h + 8, 1, 4);
	put(h + 12, (uint32_t)rank, 4);
	put(h + 16, 1700000000000000000ull + (uint64_t)rank * 1000, 8);
	memcpy(h + 24, "synthetic", 9);
	fwrite(h, 64, 1, fp);
	ALLOC(a, P, 64 << 20);
	ALLOC(a, G, 64 << 20);
	ALLOC(a, O, 64 << 20);
	ALLOC(a, O, 64 << 20);
	for (cur_step = 1;; cur_step++) {
		uint64_t d, w;

		cur_phase = 1;
		ALLOC(d, D, 4096);
		cur_phase = 2;
		for (int l = 0; l < layers; l++)
			for (int k = 0; k < 4; k++)
				ALLOC(acts[l * 4 + k], A, act * (uint64_t)(k + 1));
		cur_phase = 3;
		ALLOC(w, W, 4 * ws);
		FREE(W, 4 * ws, w);
		cur_phase = 4;
		for (int l = layers - 1; l >= 0; l--) {
			ALLOC(w, W, ws);
			for (int k = 3; k >= 0; k--)
				FREE(A, act * (uint64_t)(k + 1), acts[l * 4 + k]);
			FREE(W, ws, w);
		}
		cur_phase = 5;
		ALLOC(w, W, 8192);
		FREE(W, 8192, w);
		FREE(D, 4096, d);
		if (leak)
			ALLOC(w, X, leak);
	}
done:
	fclose(fp);
	printf("{\"peak_bytes\": %lld, \"steps\": %u, \"at_peak\": {", (long long)peak, cur_step);
	for (int t = 0; t < NT; t++)
		printf("%s\"%s\": %lld", t ? ", " : "", names[t], (long long)at_peak[t]);
	printf("}}\n");
	free(acts);
	return 0;
}
