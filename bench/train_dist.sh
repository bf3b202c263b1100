#!/usr/bin/env bash
# bench/train_dist.sh — titan-train's parallel layouts on 2 MPI ranks
# against one rank and against PyTorch DDP (bench/train_dist_ref.py), on the
# 25m model, in the same run, with 1 thread per rank.
#
#   bench/train_dist.sh [--layouts "ddp fsdp tp"] [--steps N] [--warmup W]
#                       [--repeat R] [--profile-steps P] [--bind cores|none]
#                       [--dry-run]
#
# Model: 25m (dim 512, 8 layers, 8 heads, 4 kv heads, vocab 8192), fp32,
# activation checkpointing none, seq 512, local batch 4 per rank, no gradient
# accumulation (global batch = 4 x data-parallel ranks).  R rounds (default
# 3) of every run below, each for W + N steps (defaults 2 + 6; the first W
# are warm-up and not counted, a run's time is the median of its N steps);
# odd rounds run them in the order below, even rounds in the reverse order
# (PyTorch first), so that titan and the peer alternate and a slow minute of
# a shared machine does not fall on one side.  The table shows each run's
# median over the R rounds and, in brackets, its fastest and slowest round:
#   titan 1x1        bin/titan-train alone, 1 thread
#   titan DDP 2x1    mpiexec -n 2, dp_replicate 2 x dp_shard 1, 1 thread/rank
#   titan FSDP 2x1   mpiexec -n 2, dp_replicate 1 x dp_shard 2, 1 thread/rank
#   titan TP 2x1     mpiexec -n 2, tensor_parallel 2 (sequence and loss
#                    parallel): both ranks work on one batch of 4, so its
#                    global batch is the 1-rank one's
#   2 x titan 1x1    two independent 1-rank jobs at the same time, no
#                    communication: the machine's own ceiling for 2-rank
#                    scaling (shared memory bandwidth, caches, clocks)
#   PyTorch DDP 2x1  train_dist_ref.py: torch.nn.parallel.DistributedDataParallel,
#                    gloo, 2 processes (torch.multiprocessing.spawn), 1 thread
#                    each, llama_ref.Trainer's step (forward, loss, backward,
#                    clip_grad_norm_, AdamW); it fails unless both replicas'
#                    parameters are bitwise identical at the end (SHA-256).
# titan trains on KJV shards (built here with titan-tokenize/titan-shard from
# Debian's bible-kjv), PyTorch on random tokens of the same shape (its own per
# rank).  titan's step time is step_time_s from the job's metrics.jsonl
# (rank 0's); PyTorch's is the slowest rank's.  tokens/s = global tokens per
# step / step time; scaling efficiency = 2-rank tokens/s / (2 x 1-rank
# tokens/s).  "% peak" is per rank: tokens/s per rank x FLOPs/token (from
# `titan-config --summary`) over the 1-thread sgemm peak measured here
# (OpenBLAS cblas_sgemm 2048^3 A·Bᵀ fp32, best of 5, linked with the same
# OpenBLAS both sides use).
#
# Exposed communication: after the timed runs, each titan 2-rank layout runs
# once more for W + P steps (default P 3) with profiling.enable_profiling on
# every step (a separate run, so the traces cannot distort the timed one);
# `titan-memprof time --json` splits each step's collectives into the parts
# hidden under computation and the rest (exposed).  The table shows, for the
# worst rank, the median over the P profiled steps after warm-up of exposed
# and of overlapped communication as a share of the step.
#
# Environment, the same for both sides: OPENBLAS_CORETYPE is passed through
# (unset = OpenBLAS picks the kernel for the CPU; printed either way);
# OMP_WAIT_POLICY defaults to PASSIVE and OPENBLAS_THREAD_TIMEOUT to 4 (idle
# threads sleep instead of spinning, see docs/platform.md; titan-train sets
# both itself when they are unset); OMP_NUM_THREADS = OPENBLAS_NUM_THREADS =
# titan --threads = torch.set_num_threads = 1.  titan's ranks also run a
# communication progress thread each.
#
# Binding (--bind cores, the default): every rank and its threads stay on
# their own cores, as a launcher does on a cluster — titan's ranks under
# `mpiexec -bind-to core:THREADS` with OMP_PROC_BIND=close and
# OMP_PLACES=cores (unless set), the independent pair under `taskset`, one
# core each, and PyTorch's ranks pinned the same way by train_dist_ref.py
# --bind (sched_setaffinity: rank r on the r-th core).  --bind none leaves
# placement to the kernel (the ranks then migrate between the cores).
# --dry-run prints the plan (environment, each round's runs in order with
# their launch commands) and runs nothing.  TITAN_BIN=DIR runs another
# build's tools.  Goals printed (not enforced): titan >= 1.3x PyTorch DDP, scaling
# efficiency >= 95%.  Every run is under timeout; a failed run stops the
# bench with a message and a non-zero status.
set -euo pipefail

prog=train_dist.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() {
	sed -n '6,8p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

layouts="ddp fsdp tp" steps=6 warmup=2 repeat=3 psteps=3 bind=cores dry=0
while [ $# -gt 0 ]; do
	case "$1" in
	--bind) [ $# -ge 2 ] || usage; bind=$2; shift ;;
	--dry-run) dry=1 ;;
	--layouts) [ $# -ge 2 ] || usage; layouts=$2; shift ;;
	--steps) [ $# -ge 2 ] || usage; steps=$2; shift ;;
	--warmup) [ $# -ge 2 ] || usage; warmup=$2; shift ;;
	--repeat) [ $# -ge 2 ] || usage; repeat=$2; shift ;;
	--profile-steps) [ $# -ge 2 ] || usage; psteps=$2; shift ;;
	-h | --help) sed -n '2,69p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: error: unknown argument '$1'" >&2; usage ;;
	esac
	shift
done
for v in "$steps" "$repeat" "$psteps"; do
	case "$v" in '' | *[!0-9]* | 0) die "--steps, --repeat and --profile-steps need positive integers" ;; esac
done
case "$warmup" in '' | *[!0-9]*) die "--warmup needs an integer >= 0" ;; esac
for l in $layouts; do
	case "$l" in ddp | fsdp | tp) ;; *) die "unknown layout '$l' (ddp, fsdp, tp)" ;; esac
done
case "$bind" in cores | none) ;; *) echo "$prog: error: --bind: expected cores or none, got '$bind'" >&2; exit 2 ;; esac
threads=1 batch=4 seq=512 ranks=2

# placement (--bind): titan's OpenMP threads on their rank's cores, the
# ranks one core block each under mpiexec, the independent pair and
# PyTorch's ranks likewise
bindenv=() mpibind=() refbind=()
if [ "$bind" = cores ]; then
	bindenv=(OMP_PROC_BIND="${OMP_PROC_BIND:-close}" OMP_PLACES="${OMP_PLACES:-cores}")
	mpibind=(-bind-to "core:$threads")
	refbind=(--bind)
fi
# pin I: the command prefix that keeps independent job I on its own cores
# (the I-th block of $threads among the CPUs this shell may use)
read -r -a cpus <<< "$(/usr/bin/python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))' 2>/dev/null)"
pin() {
	local i list=""
	if [ "$bind" = cores ] && command -v taskset >/dev/null && [ "${#cpus[@]}" -gt 0 ]; then
		for ((i = $1 * threads; i < ($1 + 1) * threads; i++)); do
			list=$list${list:+,}${cpus[i % ${#cpus[@]}]}
		done
		echo "taskset -c $list"
	fi
}
# round R: the runs in order (odd rounds titan first, even rounds PyTorch first)
round_runs() {
	local fwd="one $layouts pair ref" out="" x
	if [ $(($1 % 2)) -eq 1 ]; then echo "$fwd"; return; fi
	for x in $fwd; do out="$x $out"; done
	echo "$out"
}
launch_str() {
	case "$1" in
	one) echo "${bindenv[*]:+${bindenv[*]} }titan-train --threads $threads" ;;
	pair) echo "${bindenv[*]:+${bindenv[*]} }$(pin 0 | sed 's/.$/& /')titan-train --threads $threads & $(pin 1 | sed 's/.$/& /')titan-train --threads $threads" ;;
	ref) echo "train_dist_ref.py --world $ranks --threads $threads${refbind[*]:+ ${refbind[*]}}" ;;
	*) echo "${bindenv[*]:+${bindenv[*]} }mpiexec -n $ranks${mpibind[*]:+ ${mpibind[*]}} titan-train --threads $threads ($1)" ;;
	esac
}
if [ "$dry" -eq 1 ]; then
	echo "bind: $bind"
	echo "rounds: $repeat; warm-up $warmup + median of $steps steps per run"
	for r in $(seq "$repeat"); do
		for x in $(round_runs "$r"); do
			echo "round $r: $x: $(launch_str "$x")"
		done
	done
	exit 0
fi

bin=${TITAN_BIN:-$root/bin}
py=/usr/bin/python3
for t in titan-train titan-config titan-tokenize titan-shard titan-memprof; do
	[ -x "$bin/$t" ] || die "$bin/$t is not built: run make"
done
command -v mpiexec >/dev/null || die "mpiexec (MPICH) is needed for the 2-rank runs"
command -v bible >/dev/null || die "bible (Debian package bible-kjv) is needed for the shards"
$py -c 'import torch, torch.distributed as d; assert d.is_available() and d.is_gloo_available()' 2>/dev/null ||
	die "$py cannot import torch with gloo (Debian package python3-torch)"
blas_flags=$(pkg-config --cflags --libs openblas 2>/dev/null) || die "pkg-config cannot find openblas"

ncpu=$(nproc) # before OMP_NUM_THREADS=1, which nproc obeys
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-4}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# time limits: 900 s, more for long runs
total=$((warmup + steps))
titan_to=$((120 + 30 * total)); [ "$titan_to" -ge 900 ] || titan_to=900
ref_to=$((120 + 60 * total)); [ "$ref_to" -ge 900 ] || ref_to=900

# ---- sgemm peak: the same OpenBLAS, 1 thread
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

# ---- data: KJV shards for vocab 8192
"$root/bench/kjv_shards.sh" "$tmp" 8192 || die "cannot build the KJV shards"

model_titan="--model.flavor=debugmodel --model.dim=512 --model.n_layers=8 --model.n_heads=8 --model.n_kv_heads=4 --model.vocab_size=8192"
model_ref="--dim 512 --layers 8 --heads 8 --kv-heads 4 --vocab 8192"
common="--training.seq_len=$seq --training.local_batch_size=$batch --activation_checkpoint.mode=none"

# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh" # median

# layout -> "ranks dp_replicate dp_shard tp"
layout_mesh() { case "$1" in one) echo "1 1 1 1" ;; ddp) echo "$ranks $ranks 1 1" ;; fsdp) echo "$ranks 1 $ranks 1" ;; tp) echo "$ranks 1 1 $ranks" ;; esac; }
layout_name() { case "$1" in one) echo "titan 1x1" ;; ddp) echo "titan DDP ${ranks}x1" ;; fsdp) echo "titan FSDP ${ranks}x1" ;; tp) echo "titan TP ${ranks}x1" ;; esac; }
# layout -> data-parallel degree (batches of $batch sequences per step)
layout_dp() { local np rep shard tpd; read -r np rep shard tpd <<< "$(layout_mesh "$1")"; echo $((rep * shard)); }

# titan_train LAYOUT OUT STEPS [PIN] [ARGS...]: one titan-train job into OUT
# (PIN: a taskset prefix from pin, or "")
titan_train() {
	local lay=$1 out=$2 n=$3 np rep shard tpd launch rc=0
	local -a pinv
	read -r -a pinv <<< "${4:-}"
	shift 4
	read -r np rep shard tpd <<< "$(layout_mesh "$lay")"
	launch=()
	[ "$np" -eq 1 ] || launch=(mpiexec -n "$np" "${mpibind[@]}")
	rm -rf "$out"
	# shellcheck disable=SC2086
	env "${bindenv[@]}" timeout "$titan_to" "${pinv[@]}" "${launch[@]}" "$bin/titan-train" \
		--config configs/llama3_debug.yaml $model_titan $common \
		--training.global_batch_size=$((batch * rep * shard)) \
		--parallelism.data_parallel_replicate_degree="$rep" \
		--parallelism.data_parallel_shard_degree="$shard" \
		--parallelism.tensor_parallel_degree="$tpd" \
		--training.dataset_path="$tmp/data8192" --training.steps="$n" \
		--lr_scheduler.warmup_steps=2 --metrics.log_freq=1 --metrics.peak_flops="$peak" \
		--job.dump_folder="$out" --threads "$threads" -q "$@" > "$out.log" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		tail -n 40 "$out.log" >&2
		[ "$rc" -ne 124 ] || die "$(layout_name "$lay") timed out after $titan_to s"
		die "$(layout_name "$lay") failed (exit status $rc; log above)"
	fi
	[ -s "$out/metrics.jsonl" ] || die "$(layout_name "$lay"): no $out/metrics.jsonl"
}

# titan_run LAYOUT -> median step seconds (rank 0's step_time_s)
titan_run() {
	local out="$tmp/run-$1"
	titan_train "$1" "$out" "$total" ""
	step_median "$out" || die "$(layout_name "$1"): cannot read the step times"
}

# titan_pair -> median step seconds of the slower of two independent
# 1-rank jobs run at the same time (no communication: what two processes
# get from this machine's shared memory bandwidth and caches)
titan_pair() {
	local a b pa pb
	titan_train one "$tmp/pair-a" "$total" "$(pin 0)" & pa=$!
	titan_train one "$tmp/pair-b" "$total" "$(pin 1)" & pb=$!
	wait "$pa" || die "the independent pair failed"
	wait "$pb" || die "the independent pair failed"
	a=$(step_median "$tmp/pair-a") || die "the independent pair: cannot read the step times"
	b=$(step_median "$tmp/pair-b") || die "the independent pair: cannot read the step times"
	awk -v a="$a" -v b="$b" 'BEGIN {print (a > b ? a : b)}'
}

# step_median OUT: the median of rank 0's step_time_s after warm-up
step_median() {
	$py -c '
import json, sys, statistics
w, n = int(sys.argv[2]), int(sys.argv[3])
t = [json.loads(l)["step_time_s"] for l in open(sys.argv[1]) if "step_time_s" in l]
if len(t) != w + n:
    sys.exit("metrics.jsonl has %d steps, expected %d" % (len(t), w + n))
print(statistics.median(t[w:]))' "$1/metrics.jsonl" "$warmup" "$steps"
}

# titan_prof LAYOUT -> "exposed_pct exposed_ms overlapped_pct" of the worst rank
titan_prof() {
	local out="$tmp/prof-$1"
	titan_train "$1" "$out" $((warmup + psteps)) "" --profiling.enable_profiling=true \
		--profiling.save_traces_folder=profile_traces --profiling.profile_freq=1 \
		--profiling.profiler_warmup=0 --profiling.profiler_active=1
	"$bin/titan-memprof" time --json "$out/profile_traces" > "$tmp/time.json" 2> "$tmp/memprof.log" ||
		{ cat "$tmp/memprof.log" >&2; die "titan-memprof time failed on $(layout_name "$1")'s traces"; }
	$py -c '
import json, sys, statistics
w = int(sys.argv[2])
d = json.load(open(sys.argv[1]))
worst = None
for r in d["ranks"]:
    st = [s for s in r["steps"] if s["step"] > w and s["step_ms"]]
    if not st:
        sys.exit("rank %d: no profiled step after warm-up" % r["rank"])
    exp = statistics.median(s["comm_exposed_ms"] / s["step_ms"] for s in st)
    ovl = statistics.median(s["comm_overlapped_ms"] / s["step_ms"] for s in st)
    ms = statistics.median(s["comm_exposed_ms"] for s in st)
    if worst is None or exp > worst[0]:
        worst = (exp, ms, ovl)
if len(d["ranks"]) < 2:
    sys.exit("traces of %d rank(s), expected 2" % len(d["ranks"]))
print("%.6f %.3f %.6f" % (100 * worst[0], worst[1], 100 * worst[2]))' "$tmp/time.json" "$warmup" ||
		die "$(layout_name "$1"): cannot read titan-memprof's answer"
}

# ref_run -> median step seconds (slowest rank)
ref_run() {
	local rc=0
	# shellcheck disable=SC2086
	timeout "$ref_to" $py bench/train_dist_ref.py $model_ref --seq $seq --batch $batch \
		--world $ranks --threads $threads --steps "$steps" --warmup "$warmup" "${refbind[@]}" \
		> "$tmp/ref.json" 2> "$tmp/ref.log" || rc=$?
	if [ "$rc" -ne 0 ]; then
		tail -n 40 "$tmp/ref.log" >&2
		[ "$rc" -ne 124 ] || die "train_dist_ref.py timed out after $ref_to s"
		die "train_dist_ref.py failed (exit status $rc; log above)"
	fi
	$py -c '
import json, sys
d = json.load(open(sys.argv[1]))
if not d["replicas_identical"] or len(set(d["param_sha256"])) != 1:
    sys.exit("PyTorch DDP replicas differ: %s" % d["param_sha256"])
print(d["median_step_s"], d["param_sha256"][0][:16])' "$tmp/ref.json" ||
		die "train_dist_ref.py: bad result"
}

# ---- environment
peak_line=$(peak 1)
peak=${peak_line%% *}
# shellcheck disable=SC2086
fpt=$("$bin/titan-config" --config configs/llama3_debug.yaml $model_titan $common \
	--summary | sed -n 's/^flops\/token: *\([0-9.e+]*\).*/\1/p')
[ -n "$fpt" ] || die "cannot read flops/token from titan-config --summary"
echo "== environment"
echo "date:              $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu:               $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($ncpu online)"
echo "titan:             $("$bin/titan-train" --version 2>&1 | head -1)"
echo "titan gemm:        $("$bin/titan-train" --version 2>&1 | sed -n 's/^gemm: *//p')"
echo "mpi:               $(mpiexec --version 2>&1 | sed -n 's/^ *Version: *//p' | head -1 | sed 's/^/Hydra /')"
echo "torch:             $($py -c 'import torch; print(torch.__version__)') ($py), DDP over gloo"
echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-unset}  (kernel in use: ${peak_line#* })"
echo "OMP_WAIT_POLICY:   $OMP_WAIT_POLICY; OPENBLAS_THREAD_TIMEOUT: $OPENBLAS_THREAD_TIMEOUT"
echo "binding:           --bind $bind: titan ${bindenv[*]:-OMP_PROC_BIND ${OMP_PROC_BIND:-unset}}${mpibind[*]:+, mpiexec ${mpibind[*]}}$([ -z "$(pin 0)" ] || echo ", the pair under taskset")${refbind[*]:+, train_dist_ref.py ${refbind[*]}}"
echo "threads:           1 per rank (OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = titan --threads = torch.set_num_threads)"
echo "model:             25m (dim 512, 8 layers, 8 heads, 4 kv heads, vocab 8192), $(printf '%.3e' "$fpt") FLOPs/token"
echo "shape:             local batch $batch x seq $seq per rank, fp32, activation checkpointing none, no accumulation"
echo "timing:            warm-up $warmup + median of $steps steps per run; $repeat round(s), titan and PyTorch alternating (odd rounds titan first); median (fastest-slowest round); profiled: warm-up $warmup + $psteps steps"
echo "sgemm peak:        $(awk -v p="$peak" 'BEGIN {printf "%.1f", p / 1e9}') GFLOP/s (1 thread)"
echo

runs="one $layouts"
for r in $runs ref pair; do : > "$tmp/$r.txt"; done
for i in $(seq "$repeat"); do
	for r in $(round_runs "$i"); do
		case $r in
		pair) titan_pair >> "$tmp/pair.txt" ;;
		ref)
			ref_run > "$tmp/ref.out"
			cut -d' ' -f1 "$tmp/ref.out" >> "$tmp/ref.txt"
			;;
		*) titan_run "$r" >> "$tmp/$r.txt" ;;
		esac
	done
done
ref_sha=$(cut -d' ' -f2 "$tmp/ref.out")
for l in $layouts; do
	titan_prof "$l" > "$tmp/$l.prof"
done

# row NAME NP DP RUN [EXPOSED_PCT EXPOSED_MS OVERLAPPED_PCT]: NP ranks
# training DP batches per step, the rounds' times in $tmp/RUN.txt
row() {
	local f="$tmp/$4.txt"
	awk -v name="$1" -v np="$2" -v dp="$3" -v s="$(median < "$f")" -v e="${5:-}" -v ems="${6:-}" -v o="${7:-}" \
		-v lo="$(sort -g "$f" | head -1)" -v hi="$(sort -g "$f" | tail -1)" \
		-v tok=$((batch * seq)) -v fpt="$fpt" -v peak="$peak" 'BEGIN {
		tps = dp * tok / s
		c = e == "" ? "-" : sprintf("%.1f%% (%.0f ms)", e, ems)
		ov = o == "" ? "-" : sprintf("%.1f%%", o)
		printf "| %s | %d x 1 | %.3f (%.3f-%.3f) | %.0f (%.0f-%.0f) | %.0f | %.1f%% | %s | %s |\n",
			name, np, s, lo, hi, tps, dp * tok / hi, dp * tok / lo, tps / np,
			100 * tps / np * fpt / peak, c, ov }'
}
tps() { awk -v np="$1" -v s="$2" -v tok=$((batch * seq)) 'BEGIN {printf "%.6f", np * tok / s}'; }

echo "| run | ranks x threads | s/step (fastest-slowest round) | tokens/s (slowest-fastest) | tokens/s per rank | % peak per rank | comm exposed / step | comm overlapped / step |"
echo "|---|---|---|---|---|---|---|---|"
one_s=$(median < "$tmp/one.txt")
row "$(layout_name one)" 1 1 one
for l in $layouts; do
	read -r e ems o < "$tmp/$l.prof"
	row "$(layout_name "$l")" "$ranks" "$(layout_dp "$l")" "$l" "$e" "$ems" "$o"
done
ref_s=$(median < "$tmp/ref.txt")
row "PyTorch DDP ${ranks}x1" "$ranks" "$ranks" ref
pair_s=$(median < "$tmp/pair.txt")
row "2 x titan 1x1 at once (independent)" "$ranks" "$ranks" pair
echo
echo "PyTorch DDP replicas: parameters identical after the run (SHA-256 ${ref_sha}...)"
one_tps=$(tps 1 "$one_s")
ref_tps=$(tps "$ranks" "$ref_s")
for l in $layouts; do
	[ "$l" != tp ] || continue # TP trains the 1-rank batch: not DDP's peer
	t=$(tps "$ranks" "$(median < "$tmp/$l.txt")")
	name=$(echo "$l" | tr '[:lower:]' '[:upper:]')
	awk -v n="$name" -v t="$t" -v r="$ref_tps" 'BEGIN {
		x = t / r
		printf "%-30s %6.2fx  (goal >= 1.30x: %s)\n", "titan " n " / PyTorch DDP:", x, (x >= 1.3 ? "met" : "NOT met") }'
done
for l in $layouts; do
	t=$(tps "$(layout_dp "$l")" "$(median < "$tmp/$l.txt")")
	name=$(echo "$l" | tr '[:lower:]' '[:upper:]')
	awk -v n="$name" -v t="$t" -v o="$one_tps" -v np="$ranks" 'BEGIN {
		e = 100 * t / (np * o)
		printf "%-30s %6.1f%%  (goal >= 95%%: %s)\n", "scaling efficiency " n ":", e, (e >= 95 ? "met" : "NOT met") }'
done
awk -v t="$(tps "$ranks" "$pair_s")" -v o="$one_tps" -v np="$ranks" 'BEGIN {
	printf "%-30s %6.1f%%  (two independent 1-rank jobs at once: this machine'"'"'s ceiling)\n",
		"scaling without communication:", 100 * t / (np * o) }'
case " $layouts " in *" tp "*)
	case " $layouts " in *" fsdp "*)
		awk -v t="$(tps 1 "$(median < "$tmp/tp.txt")")" -v f="$(tps "$ranks" "$(median < "$tmp/fsdp.txt")")" 'BEGIN {
			printf "%-30s %6.2fx  (TP splits every matmul and adds 4 collectives per block; FSDP splits the batch)\n",
				"titan TP / titan FSDP:", t / f }' ;;
	esac ;;
esac
