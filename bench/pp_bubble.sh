#!/usr/bin/env bash
# bench/pp_bubble.sh — the pipeline bubble of titan-train's schedules,
# measured, next to the formula.
#
#   bench/pp_bubble.sh [--stages "2 4"]
#                      [--schedules "GPipe 1F1B Interleaved1F1B InterleavedZeroBubble ZBVZeroBubble"]
#                      [--microbatches M] [--steps N] [--warmup W]
#
# Model: dim 256, 16 blocks, 8 heads (4 kv), vocab 2048, seq 256, fp32, no
# activation checkpointing; the local batch is M sequences (default 8) run
# as M microbatches of one.  For each stage count p and schedule, one
# titan-train job under mpiexec -n p (1 thread per rank) runs W + N steps
# (default 2 + 3) with profiling.enable_profiling on every step;
# `titan-memprof time --json` splits each rank's step into computation and
# communication, and the communication not hidden under computation is, for
# a pipeline without data parallelism, the time a stage waits for its
# neighbours: the bubble (plus the transfers themselves and two small
# all-reduces per step).  The table shows, per run, the median over the N
# steps after warm-up of that share of the step, averaged over the ranks,
# and the formula: (p - 1) / (M + p - 1) for GPipe and 1F1B, (p - 1) /
# (V·M + p - 1) for Interleaved1F1B with V = 2 stages per rank, and
# (p - 1) / (3·V·M + p - 1) for InterleavedZeroBubble (V = 2): the ZB-H1
# estimate of arXiv:2401.10241 with forward, input backward and weight
# backward taking one unit each, where the weight passes fill all but
# (p - 1) units of the 1F1B bubble of 3·(p - 1); 0 for ZBVZeroBubble (2
# stages per rank, V style), whose ZB-V order has no bubble when those
# three times are equal (torch's docstring), and a bubble otherwise.
#
# With more ranks than cores (p = 4 on a 2-core machine) the ranks share
# cores: a waiting rank yields its core (OMP_WAIT_POLICY=PASSIVE, MPICH's
# blocking progress), so the measurement still counts time a stage could not
# proceed, but stages also wait for a core; read p > cores as indicative.
# TITAN_BIN=DIR runs another build's tools.  Every run is under timeout.
set -euo pipefail

prog=pp_bubble.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() { sed -n '5,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
stages="2 4" schedules="GPipe 1F1B Interleaved1F1B InterleavedZeroBubble ZBVZeroBubble" M=8 steps=3 warmup=2
while [ $# -gt 0 ]; do
	case "$1" in
	--stages) [ $# -ge 2 ] || usage; stages=$2; shift ;;
	--schedules) [ $# -ge 2 ] || usage; schedules=$2; shift ;;
	--microbatches) [ $# -ge 2 ] || usage; M=$2; shift ;;
	--steps) [ $# -ge 2 ] || usage; steps=$2; shift ;;
	--warmup) [ $# -ge 2 ] || usage; warmup=$2; shift ;;
	-h | --help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: error: unknown argument '$1'" >&2; usage ;;
	esac
	shift
done
for v in "$M" "$steps"; do
	case "$v" in '' | *[!0-9]* | 0) die "--microbatches and --steps need positive integers" ;; esac
done
case "$warmup" in '' | *[!0-9]*) die "--warmup needs an integer >= 0" ;; esac
for p in $stages; do
	case "$p" in 2 | 4) ;; *) die "--stages: $p (2 or 4)" ;; esac
done
bin=${TITAN_BIN:-$root/bin}
py=/usr/bin/python3
for t in titan-train titan-memprof titan-tokenize titan-shard; do
	[ -x "$bin/$t" ] || die "$bin/$t is not built: run make"
done
command -v mpiexec >/dev/null || die "mpiexec (MPICH) is needed"
ncpu=$(nproc) # before OMP_NUM_THREADS=1, which nproc obeys
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-4}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$root/bench/kjv_shards.sh" "$tmp" 2048 || die "cannot build the KJV shards"

echo "== environment"
echo "date:   $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu:    $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($ncpu online)"
echo "titan:  $("$bin/titan-train" --version 2>&1 | head -1)"
echo "model:  dim 256, 16 blocks, vocab 2048, seq 256; $M microbatches of 1 sequence per step"
echo "timing: warm-up $warmup + median of $steps profiled steps, mean over the ranks"
echo
echo "| ranks p | schedule | s/step | bubble measured (mean of ranks) | formula |"
echo "|---|---|---|---|---|"
for p in $stages; do
	for s in $schedules; do
		out=$tmp/run-$p-$s
		rc=0
		timeout 1200 mpiexec -n "$p" "$bin/titan-train" -q --threads 1 \
			--config configs/llama3_debug.yaml --model.dim=256 --model.n_layers=16 \
			--model.n_heads=8 --model.n_kv_heads=4 --model.vocab_size=2048 \
			--training.seq_len=256 --training.local_batch_size="$M" \
			--training.global_batch_size="$M" --activation_checkpoint.mode=none \
			--parallelism.pipeline_parallel_degree="$p" \
			--parallelism.pipeline_parallel_schedule="$s" \
			--parallelism.pipeline_parallel_microbatch_size=1 \
			--training.dataset_path="$tmp/data2048" --training.steps=$((warmup + steps)) \
			--metrics.log_freq=1 --metrics.peak_flops=1e11 --profiling.enable_profiling=true \
			--profiling.save_traces_folder=profile_traces --profiling.profile_freq=1 \
			--profiling.profiler_warmup=0 --profiling.profiler_active=1 \
			--job.dump_folder="$out" > "$out.log" 2>&1 || rc=$?
		if [ "$rc" -ne 0 ]; then
			tail -n 30 "$out.log" >&2
			die "PP $p $s failed (exit status $rc)"
		fi
		"$bin/titan-memprof" time --json "$out/profile_traces" > "$out.json" 2> "$out.err" ||
			{ cat "$out.err" >&2; die "titan-memprof time failed on PP $p $s"; }
		$py - "$out.json" "$out/metrics.jsonl" "$warmup" "$p" "$M" "$s" <<'PY' || die "PP $p $s: cannot read the traces"
import json, statistics, sys
d = json.load(open(sys.argv[1]))
w, p, m, s = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
t = [json.loads(l)["step_time_s"] for l in open(sys.argv[2]) if "step_time_s" in l][w:]
if len(d["ranks"]) != p:
    sys.exit("traces of %d ranks, expected %d" % (len(d["ranks"]), p))
per_rank = []
for r in d["ranks"]:
    st = [x for x in r["steps"] if x["step"] > w and x["step_ms"]]
    if not st:
        sys.exit("rank %d: no profiled step after warm-up" % r["rank"])
    per_rank.append(statistics.median(x["comm_exposed_ms"] / x["step_ms"] for x in st))
v = 2 if s in ("Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble") else 1
u = 3 if s == "InterleavedZeroBubble" else 1  # F, B and W: one unit each
f = 0.0 if s == "ZBVZeroBubble" else (p - 1) / (u * v * m + p - 1)
print("| %d | %s | %.3f | %.1f%% (ranks: %s) | %.1f%% |" % (
    p, s, statistics.median(t), 100 * statistics.mean(per_rank),
    " ".join("%.0f%%" % (100 * x) for x in per_rank), 100.0 * f))
PY
	done
done
