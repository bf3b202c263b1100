#!/usr/bin/env bash
# bench/train_cpu.sh — titan-train against the PyTorch reference model
# (tests/ref/llama_ref.py, timed by bench/train_ref.py) on identical
# configurations, in the same run, with the same thread count.
#
#   bench/train_cpu.sh [--threads "1 2"] [--models "debug 25m"] [--steps N]
#                      [--warmup W] [--repeat R] [--bind cores|none] [--no-perf]
#                      [--dry-run]
#
# Models (fp32, activation checkpointing none, local batch 4, seq 512):
#   debug  torchtitan's debugmodel: dim 256, 6 layers, 16 heads, vocab 2048
#   25m    dim 512, 8 layers, 8 heads, 4 kv heads, vocab 8192
# For each thread count and model, R rounds (default 3): titan-train for
# W + N steps on KJV shards (built here with titan-tokenize/titan-shard from
# Debian's bible-kjv) and train_ref.py for W + N steps on random tokens of
# the same shape, alternating which goes first (odd rounds titan, even
# rounds PyTorch), so a slow minute of a shared machine hits both sides.
# The first W steps (default 2) are warm-up and not counted; a round's time
# is the median of its N (default 6) steps; the table shows each side's
# median over the R rounds and its spread (the slowest and fastest round,
# in tokens/s).  titan's step time is step_time_s from its metrics.jsonl
# (forward, loss, backward, clipping, AdamW); PyTorch's covers the same
# work (llama_ref.Trainer.step).
#
# GFLOP/s = tokens/s x FLOPs/token, with FLOPs/token from `titan-config
# --summary` (6·(N − N_embedding) + 12·L·H·head_dim·seq, torchtitan's MFU
# formula); "% peak" divides by the machine's sgemm peak measured here at the
# same thread count: OpenBLAS cblas_sgemm, 2048x2048x2048 (A·Bᵀ, fp32), best
# of 5, from a tiny C program linked with the same OpenBLAS both sides use.
#
# Environment, the same for both sides: OPENBLAS_CORETYPE is passed through
# (unset = OpenBLAS picks the kernel for the CPU; printed either way);
# OMP_WAIT_POLICY defaults to PASSIVE and OPENBLAS_THREAD_TIMEOUT to 4 (idle
# threads sleep instead of spinning: PyTorch on 2 threads needs the first,
# see docs/platform.md; titan-train sets both itself when they are unset);
# OMP_NUM_THREADS/OPENBLAS_NUM_THREADS are set to the thread count.
# --bind cores (the default) pins the OpenMP threads of both sides one to a
# core (OMP_PROC_BIND=close, OMP_PLACES=cores, unless set): a thread that
# the scheduler moves loses its caches, and the two sides get the same
# placement; --bind none leaves placement to the kernel.  --dry-run prints
# the plan (environment, the commands of each round in order) and runs
# nothing.  "titan outside GEMMs": after the rounds, one more titan run
# under `perf record` and the share of its CPU samples outside
# libopenblas (RMSNorm, SwiGLU, attention, AdamW, copies, the kernel; the
# start-up is in it too); "-" without perf or with --no-perf.
# TITAN_BIN=DIR runs another build's tools.
set -euo pipefail

prog=train_cpu.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() {
	sed -n '6,8p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

threads_list="1 2" models="debug 25m" steps=6 warmup=2 repeat=3 bind=cores dry=0 use_perf=1
while [ $# -gt 0 ]; do
	case "$1" in
	--bind) [ $# -ge 2 ] || usage; bind=$2; shift ;;
	--dry-run) dry=1 ;;
	--no-perf) use_perf=0 ;;
	--threads) [ $# -ge 2 ] || usage; threads_list=$2; shift ;;
	--models) [ $# -ge 2 ] || usage; models=$2; shift ;;
	--steps) [ $# -ge 2 ] || usage; steps=$2; shift ;;
	--warmup) [ $# -ge 2 ] || usage; warmup=$2; shift ;;
	--repeat) [ $# -ge 2 ] || usage; repeat=$2; shift ;;
	-h | --help) sed -n '2,50p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: error: unknown argument '$1'" >&2; usage ;;
	esac
	shift
done
for v in "$steps" "$repeat"; do
	case "$v" in '' | *[!0-9]* | 0) die "--steps and --repeat need positive integers" ;; esac
done
case "$warmup" in '' | *[!0-9]*) die "--warmup needs an integer >= 0" ;; esac
case "$bind" in cores | none) ;; *) echo "$prog: error: --bind: expected cores or none, got '$bind'" >&2; exit 2 ;; esac
for m in $models; do
	case "$m" in debug | 25m) ;; *) die "unknown model '$m' (debug, 25m)" ;; esac
done
for t in $threads_list; do
	case "$t" in '' | *[!0-9]* | 0) die "--threads needs positive integers" ;; esac
done

bin=${TITAN_BIN:-$root/bin}
py=/usr/bin/python3
# the placement of both sides' OpenMP threads (a value the user set wins)
bindenv=()
[ "$bind" = none ] || bindenv=(OMP_PROC_BIND="${OMP_PROC_BIND:-close}" OMP_PLACES="${OMP_PLACES:-cores}")
# median, order (round R's order of the sides), metrics_median
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
if [ "$dry" -eq 1 ]; then
	echo "bind: $bind${bindenv[*]:+ (${bindenv[*]})}"
	echo "rounds: $repeat; warm-up $warmup + median of $steps steps per run"
	for t in $threads_list; do
		for m in $models; do
			for r in $(seq "$repeat"); do
				for side in $(order "$r"); do
					case $side in
					titan) echo "round $r: $m $t thread(s): titan: ${bindenv[*]:+${bindenv[*]} }OMP_NUM_THREADS=$t titan-train --threads $t" ;;
					ref) echo "round $r: $m $t thread(s): PyTorch: ${bindenv[*]:+${bindenv[*]} }OMP_NUM_THREADS=$t train_ref.py --threads $t" ;;
					esac
				done
			done
		done
	done
	exit 0
fi
for t in titan-train titan-config titan-tokenize titan-shard; do
	[ -x "$bin/$t" ] || die "$bin/$t is not built: run make"
done
command -v bible >/dev/null || die "bible (Debian package bible-kjv) is needed for the shards"
$py -c 'import torch' 2>/dev/null || die "$py cannot import torch (Debian package python3-torch)"
blas_flags=$(pkg-config --cflags --libs openblas 2>/dev/null) || die "pkg-config cannot find openblas"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-4}

# ---- sgemm peak: the same OpenBLAS, the same thread count
cat > "$tmp/peak.c" <<'EOF'
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
char *openblas_get_corename(void);
int main(int argc, char **argv)
{
	int nt = atoi(argv[1]), n = 2048;
	float *a = malloc(sizeof(float) * n * n * 3);
	double best = 0;
	openblas_set_num_threads(nt);
	for (long i = 0; i < 3L * n * n; i++)
		a[i] = (float)(i % 7) * 0.1f;
	for (int r = 0; r < 6; r++) {
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n,
			    a + (long)n * n, n, 0.0f, a + 2L * n * n, n);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
		if (r > 0 && 2.0 * n * n * (double)n / s > best) /* r 0: warm-up */
			best = 2.0 * n * n * (double)n / s;
	}
	printf("%.6e %s\n", best, openblas_get_corename());
	return 0;
}
EOF
# shellcheck disable=SC2086
${CC:-cc} -O2 -o "$tmp/peak" "$tmp/peak.c" $blas_flags || die "cannot build the sgemm peak program"
# the sgemm peak with the kernel titan-train runs: with OPENBLAS_CORETYPE
# unset, titan chooses it from the CPU flags (lib/cpu/select.c; `gemm:` of
# --version), which OpenBLAS alone may not (0.3.21: Prescott on new Intel)
titan_core=$("$bin/titan-train" --version 2>/dev/null |
	sed -n 's/^gemm: *OpenBLAS \([A-Za-z0-9_]*\) kernel.*/\1/p')
peak() {
	if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -n "$titan_core" ]; then
		OPENBLAS_CORETYPE=$titan_core "$tmp/peak" "$@"
	else
		"$tmp/peak" "$@"
	fi
}

# ---- data: KJV shards for vocab 2048 and 8192
"$root/bench/kjv_shards.sh" "$tmp" 2048 8192 || die "cannot build the KJV shards"

# model name -> titan-config overrides, train_ref.py arguments, vocab
model_titan() {
	case "$1" in
	debug) echo "--model.flavor=debugmodel" ;;
	25m) echo "--model.flavor=debugmodel --model.dim=512 --model.n_layers=8 --model.n_heads=8 --model.n_kv_heads=4 --model.vocab_size=8192" ;;
	esac
}
model_ref() {
	case "$1" in
	debug) echo "--dim 256 --layers 6 --heads 16 --vocab 2048" ;;
	25m) echo "--dim 512 --layers 8 --heads 8 --kv-heads 4 --vocab 8192" ;;
	esac
}
model_vocab() { case "$1" in debug) echo 2048 ;; 25m) echo 8192 ;; esac; }
batch=4 seq=512
common=(--training.seq_len="$seq" --training.local_batch_size="$batch" --activation_checkpoint.mode=none)

# titan_run MODEL THREADS PEAK -> median step seconds (under ${prefix[@]})
prefix=()
titan_run() {
	local out="$tmp/run" v
	v=$(model_vocab "$1")
	rm -rf "$out"
	# shellcheck disable=SC2046
	env "${bindenv[@]}" OMP_NUM_THREADS="$2" OPENBLAS_NUM_THREADS="$2" "${prefix[@]}" "$bin/titan-train" \
		--config configs/llama3_debug.yaml $(model_titan "$1") "${common[@]}" \
		--training.dataset_path="$tmp/data$v" --training.steps=$((warmup + steps)) \
		--lr_scheduler.warmup_steps=2 --metrics.log_freq=1 --metrics.peak_flops="$3" \
		--job.dump_folder="$out" --threads "$2" -q > "$tmp/titan.log" 2>&1 ||
		{ cat "$tmp/titan.log" >&2; die "titan-train failed"; }
	metrics_median "$out/metrics.jsonl" "$warmup"
}

# outside_gemm MODEL THREADS PEAK -> the share of a titan run's CPU samples
# outside OpenBLAS (perf record over the whole run, start-up included), or -
outside_gemm() {
	[ "$perf_ok" -eq 1 ] || { echo -; return; }
	prefix=(perf record -q -F 499 -o "$tmp/perf.data" --)
	titan_run "$@" > /dev/null
	prefix=()
	perf report -i "$tmp/perf.data" --sort dso --stdio -q 2>/dev/null |
		awk '{gsub("%", "", $1); t += $1; if ($2 ~ /^libopenblas/) g += $1}
			END {if (t > 0) printf "%.1f%%\n", 100 * (t - g) / t; else print "-"}'
}

# ref_run MODEL THREADS -> median step seconds
ref_run() {
	# shellcheck disable=SC2046
	env "${bindenv[@]}" OMP_NUM_THREADS="$2" OPENBLAS_NUM_THREADS="$2" $py bench/train_ref.py $(model_ref "$1") \
		--seq $seq --batch $batch --threads "$2" --steps "$steps" --warmup "$warmup" \
		> "$tmp/ref.json" 2> "$tmp/ref.log" || { cat "$tmp/ref.log" >&2; die "train_ref.py failed"; }
	$py -c 'import json, sys; print(json.load(open(sys.argv[1]))["median_step_s"])' "$tmp/ref.json"
}

# perf, for the share of titan's run outside OpenBLAS's GEMMs (--no-perf: not)
perf_ok=0
if [ "$use_perf" -eq 1 ] && command -v perf >/dev/null &&
	perf record -q -o "$tmp/perf.test" -- true > /dev/null 2>&1; then
	perf_ok=1
fi

# ---- environment
echo "== environment"
echo "date:              $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu:               $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($(nproc) online)"
echo "titan:             $("$bin/titan-train" --version 2>&1 | head -1)"
echo "titan gemm:        $("$bin/titan-train" --version 2>&1 | sed -n 's/^gemm: *//p')"
echo "torch:             $($py -c 'import torch; print(torch.__version__)') ($py)"
echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-unset}  (kernel in use: $(peak 1 | cut -d' ' -f2))"
echo "OMP_WAIT_POLICY:   $OMP_WAIT_POLICY; OPENBLAS_THREAD_TIMEOUT: $OPENBLAS_THREAD_TIMEOUT"
echo "binding:           --bind $bind: ${bindenv[*]:-OMP_PROC_BIND ${OMP_PROC_BIND:-unset}, OMP_PLACES ${OMP_PLACES:-unset}} (both sides)"
echo "threads:           OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = titan --threads = torch.set_num_threads"
echo "shape:             batch $batch x seq $seq, fp32, activation checkpointing none, warm-up $warmup + median of $steps steps per run"
echo "rounds:            $repeat, titan and PyTorch alternating (titan first in odd rounds); median and (slowest-fastest) round"
echo "outside GEMMs:     $([ "$perf_ok" -eq 1 ] && echo "perf record of one more titan run: the share of its CPU samples outside libopenblas (start-up included)" || echo "- (no perf here, or --no-perf)")"
echo

printf '| threads | model | FLOPs/token | sgemm peak GFLOP/s | titan tok/s | PyTorch tok/s | titan / PyTorch | titan GFLOP/s | titan %% peak | PyTorch %% peak | titan outside GEMMs |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
for t in $threads_list; do
	peak=$(peak "$t" | cut -d' ' -f1)
	for m in $models; do
		# shellcheck disable=SC2046
		fpt=$("$bin/titan-config" --config configs/llama3_debug.yaml $(model_titan "$m") "${common[@]}" \
			--summary | sed -n 's/^flops\/token: *\([0-9.e+]*\).*/\1/p')
		: > "$tmp/t.txt"
		: > "$tmp/r.txt"
		for r in $(seq "$repeat"); do
			for side in $(order "$r"); do
				case $side in
				titan) titan_run "$m" "$t" "$peak" >> "$tmp/t.txt" ;;
				ref) ref_run "$m" "$t" >> "$tmp/r.txt" ;;
				esac
			done
		done
		ts=$(median < "$tmp/t.txt")
		rs=$(median < "$tmp/r.txt")
		og=$(outside_gemm "$m" "$t" "$peak")
		awk -v t="$t" -v m="$m" -v fpt="$fpt" -v peak="$peak" -v ts="$ts" -v rs="$rs" -v og="$og" \
			-v tmin="$(sort -g "$tmp/t.txt" | head -1)" -v tmax="$(sort -g "$tmp/t.txt" | tail -1)" \
			-v rmin="$(sort -g "$tmp/r.txt" | head -1)" -v rmax="$(sort -g "$tmp/r.txt" | tail -1)" \
			-v tok=$((batch * seq)) 'BEGIN {
			tt = tok / ts; rt = tok / rs
			printf "| %d | %s | %.3e | %.1f | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2fx | %.1f | %.1f%% | %.1f%% | %s |\n",
				t, m, fpt, peak / 1e9, tt, tok / tmax, tok / tmin, rt, tok / rmax, tok / rmin,
				tt / rt, tt * fpt / 1e9, 100 * tt * fpt / peak, 100 * rt * fpt / peak, og }'
	done
done
