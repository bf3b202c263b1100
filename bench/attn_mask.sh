#!/usr/bin/env bash
# bench/attn_mask.sh — the speed cost of training.attn_mask_type
# block_causal against causal, at the 25M model's shapes (bench/train_cpu.sh:
# dim 512, 8 layers, 8 heads, 4 kv heads of 64, vocab 8192).
#
#   bench/attn_mask.sh [--threads N] [--seq T] [--batch B] [--docs "2048 512 128"]
#                      [--steps N] [--warmup W] [--rounds R] [--kernels-only]
#
# First the kernels alone (a C program built here against build/libtitan.a,
# as bench/cpu_kernels.sh does): attention_fwd + attention_bwd on batch B x
# seq T, causal and with documents of each length D, interleaved round by
# round, best of R rounds (--rounds, default 9: robust to a shared
# machine's noise).
# block_causal skips the key blocks of other documents (64-token blocks),
# so its attention costs about (D + 64)/T of the causal one when D < T.
#
# Then whole training steps: for each D, random ids with an EOS every D
# tokens, cut by titan-shard; titan-train for W + N steps with causal and
# with block_causal (same data, same weights); a time is the median
# step_time_s of the N counted steps (metrics.jsonl).  Tables: D, causal,
# block_causal (seconds), ratio.  --kernels-only skips the training runs.
# TITAN_BIN=DIR runs another build's tools, TITAN_BUILD=DIR links another
# libtitan.a.
set -euo pipefail

prog=attn_mask.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=2 seq=2048 batch=1 docs="2048 512 128" steps=4 warmup=1 rounds=9 kernels_only=0
while [ $# -gt 0 ]; do
	case "$1" in
	--threads) threads=$2; shift ;;
	--seq) seq=$2; shift ;;
	--batch) batch=$2; shift ;;
	--docs) docs=$2; shift ;;
	--steps) steps=$2; shift ;;
	--warmup) warmup=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	--kernels-only) kernels_only=1 ;;
	-h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1'" ;;
	esac
	shift
done
bin=${TITAN_BIN:-$root/bin}
build=${TITAN_BUILD:-$root/build}
py=/usr/bin/python3
[ -f "$build/libtitan.a" ] && [ -f "$build/config.mk" ] || die "build titan first (make)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

cat > "$tmp/k.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "titan/core.h"
#include "titan/ops.h"
static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
int main(int argc, char **argv)
{
	const int64_t B = atoll(argv[1]), T = atoll(argv[2]), H = 8, HK = 4, D = 64;
	const int nd = argc - 4;
	struct titan_backend be;
	float *f[9];
	int32_t *doc = malloc(sizeof(int32_t) * B * T);
	double best[64];
	const int64_t n[9] = {B * T * H * D, B * T * HK * D, B * T * HK * D, B * T * H * D,
			      B * H * T, B * T * H * D, B * T * HK * D, B * T * HK * D,
			      B * T * H * D};
	if (nd > 63 || titan_backend_cpu_init(&be, atoi(argv[3])) < 0)
		return 1;
	for (int i = 0; i < 9; i++) {
		f[i] = malloc(sizeof(float) * n[i]);
		for (int64_t j = 0; j < n[i]; j++)
			f[i][j] = (float)((int)(j * 2654435761u % 2001) - 1000) / 1000.0f;
	}
	for (int i = 0; i <= nd; i++)
		best[i] = 1e30;
	for (int r = 0; r < atoi(getenv("ROUNDS")); r++)
		for (int i = 0; i <= nd; i++) { /* 0: causal, then each length */
			struct titan_attn_dims d = {B, T, H, HK, D, NULL};
			if (i > 0) {
				const int64_t len = atoll(argv[3 + i]);
				for (int64_t t = 0; t < B * T; t++)
					doc[t] = (int32_t)((t % T) / len);
				d.doc = doc;
			}
			double t0 = now();
			if (be.ops->attention_fwd(&be, f[3], f[4], f[0], f[1], f[2], &d) < 0 ||
			    be.ops->attention_bwd(&be, f[5], f[6], f[7], f[8], f[0], f[1], f[2], f[3],
						  f[4], &d) < 0)
				return 1;
			if (now() - t0 < best[i])
				best[i] = now() - t0;
		}
	for (int i = 1; i <= nd; i++)
		printf("%8s %12.4f %14.4f %7.3f\n", argv[3 + i], best[0], best[i], best[i] / best[0]);
	return 0;
}
EOF
libs=$(sed -n 's/^\(HDF5_LIBS\|MPI_LIBS\|YAML_LIBS\|JANSSON_LIBS\|PCRE2_LIBS\|BLAS_LIBS\) := //p' \
	"$build/config.mk" | tr '\n' ' ')
# shellcheck disable=SC2086
cc -std=c17 -D_GNU_SOURCE -O2 -fopenmp -I"$root/lib" -I"$build" "$tmp/k.c" "$build/libtitan.a" \
	$libs -lm -o "$tmp/k" || die "cannot build the kernel timer"
printf "# attention_fwd + attention_bwd alone: %s threads, batch %s x seq %s, best of %s\n" \
	"$threads" "$batch" "$seq" "$rounds"
printf "%8s %12s %14s %7s\n" doc_len causal_s block_causal_s ratio
# shellcheck disable=SC2086
ROUNDS=$rounds "$tmp/k" "$batch" "$seq" "$threads" $docs || die "the kernel timer failed"
[ "$kernels_only" = 1 ] && exit 0

model="--model.flavor=debugmodel --model.dim=512 --model.n_layers=8 --model.n_heads=8 \
--model.n_kv_heads=4 --model.vocab_size=8192"
median() { $py -c '
import json, statistics, sys
t = [json.loads(l)["step_time_s"] for l in open(sys.argv[1])]
print("%.4f" % statistics.median(t[int(sys.argv[2]):]))' "$1" "$warmup"; }

printf "# training steps: %s threads, seq %s, batch %s, %s steps after %s warm-up\n" "$threads" \
	"$seq" "$batch" "$steps" "$warmup"
printf "%8s %12s %14s %7s\n" doc_len causal_s block_causal_s ratio
for d in $docs; do
	n=$(((warmup + steps) * batch * (seq + 1) + seq + 1))
	$py - "$n" "$d" <<'PY' | "$bin/titan-shard" -q --vocab-size 8192 --eos-id 8191 --out "$tmp/d$d"
import random, struct, sys
n, d = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(1)
ids = [8191 if i % d == d - 1 else r.randrange(8191) for i in range(n)]
sys.stdout.buffer.write(struct.pack("<%dI" % n, *ids))
PY
	for m in causal block_causal; do
		rm -rf "$tmp/run"
		"$bin/titan-train" -q --config configs/llama3_debug.yaml $model --threads "$threads" \
			--training.seq_len="$seq" --training.local_batch_size="$batch" \
			--activation_checkpoint.mode=none --training.attn_mask_type=$m \
			--training.dataset_path="$tmp/d$d" --training.steps=$((warmup + steps)) \
			--metrics.log_freq=1 --job.dump_folder="$tmp/run" > "$tmp/log" 2>&1 ||
			{ cat "$tmp/log" >&2; die "titan-train failed"; }
		eval "t_$m=\$(median \"\$tmp/run/metrics.jsonl\")"
	done
	printf "%8s %12s %14s %7.3f\n" "$d" "$t_causal" "$t_block_causal" \
		"$($py -c "print($t_block_causal / $t_causal)")"
done
