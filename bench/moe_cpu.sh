#!/usr/bin/env bash
# bench/moe_cpu.sh — a mixture-of-experts model on the CPU: titan-train
# against the PyTorch reference model (tests/ref/moe_ref.py, timed by
# bench/moe_ref.py) in the same run, then titan's expert parallelism on 2
# ranks against 1 rank.
#
#   bench/moe_cpu.sh [--dim D] [--layers L] [--inter H] [--seq S] [--batch B]
#                    [--threads T] [--steps N] [--warmup W] [--rounds R]
#                    [--bind cores|none] [--no-ep] [--no-perf] [--no-comm]
#                    [--dry-run]
#
# Model (fp32, activation checkpointing none): Llama 3 blocks whose
# feed-forward is a MoE of 8 routed experts, top-2, and 1 shared expert
# (titan's model.moe_* defaults otherwise: sigmoid router, score before the
# experts, auxiliary-loss-free load balancing); dim D (768), L layers (6),
# D/64 heads, expert hidden H (8/3 D rounded up to 256: 2048), vocab 8192,
# batch B (4) x seq S (512).  The default is ~100M active parameters (the
# embedding, attention, router, top-2 + shared experts, output) of ~250M.
#
# Part 1, titan vs PyTorch: R rounds (default 3), each running titan-train
# (1 rank, --threads T, default 2) and moe_ref.py (torch.set_num_threads(T),
# the BLAS torch was built with) for W + N steps on the same KJV shards
# (bench/kjv_shards.sh), alternating which goes first.  A run's time is the
# median of its N steps after W warm-up steps; the table shows each side's
# tokens/s as the median over the rounds and (slowest-fastest round), and
# titan / PyTorch.
# Part 2 (--no-ep: not), expert parallelism: R rounds alternating titan on
# 1 rank x 1 thread and mpiexec -n 2 titan-train --threads 1
# --parallelism.expert_parallel_degree=2 (dp_shard 2: each rank holds 4 of
# the 8 experts and its own batch of B rows, tokens go to their experts by
# all-to-all); tokens/s counts both ranks' tokens; scaling = EP 2 / 1 rank.
# Part 3 (--no-perf or no perf: not), where titan's MoE time goes: one more
# titan run of part 1 under `perf record`, its CPU samples by shared object
# and the top symbols.
# Part 4 (--no-comm: not), EP 2's communication: one more EP 2 run of part
# 2 with its last step profiled (--profiling.enable_profiling=true; the
# trace's op events make that step slower than part 2's), then
# `titan-memprof time` on its traces: per rank, the all_to_all_v (MoE
# dispatch and combine) exposed and overlapped ms of the step and their
# share of it, and the table of every collective (calls, exposed,
# overlapped), split by titan-memprof's comm_exp/comm_ovl rule.
#
# Environment, as bench/train_cpu.sh: OMP_WAIT_POLICY=PASSIVE and
# OPENBLAS_THREAD_TIMEOUT=4 unless set, OMP_NUM_THREADS =
# OPENBLAS_NUM_THREADS = the thread count; --bind cores (default) sets
# OMP_PROC_BIND=close OMP_PLACES=cores (unless set) for both sides and
# mpiexec -bind-to core:1; --bind none leaves placement to the kernel.
# --dry-run prints the plan and runs nothing.  TITAN_BIN=DIR runs another
# build's tools.
set -euo pipefail

prog=moe_cpu.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() {
	sed -n '6,9p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# median, order (round R's order of the sides), metrics_median
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

dim=768 layers=6 inter='' seq=512 batch=4 threads=2 steps=6 warmup=2 rounds=3
bind=cores dry=0 use_ep=1 use_perf=1 use_comm=1 experts=8 topk=2 shared=1 vocab=8192
while [ $# -gt 0 ]; do
	case "$1" in
	--dim | --layers | --inter | --seq | --batch | --threads | --steps | --warmup | --rounds | --bind)
		[ $# -ge 2 ] || usage
		v=${1#--}
		printf -v "$v" '%s' "$2"
		shift ;;
	--dry-run) dry=1 ;;
	--no-ep) use_ep=0 ;;
	--no-perf) use_perf=0 ;;
	--no-comm) use_comm=0 ;;
	-h | --help) sed -n '2,49p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: error: unknown argument '$1'" >&2; usage ;;
	esac
	shift
done
[ -n "$inter" ] || inter=$(((dim * 8 / 3 + 255) / 256 * 256))
for v in dim layers inter seq batch threads steps rounds; do
	case "${!v}" in '' | *[!0-9]* | 0) die "--$v needs a positive integer, got '${!v}'" ;; esac
done
case "$warmup" in '' | *[!0-9]*) die "--warmup needs an integer >= 0" ;; esac
case "$bind" in cores | none) ;; *) echo "$prog: error: --bind: expected cores or none, got '$bind'" >&2; exit 2 ;; esac
[ $((dim % 64)) -eq 0 ] || die "--dim must be a multiple of 64 (heads of 64), got $dim"
heads=$((dim / 64))

bin=${TITAN_BIN:-$root/bin}
py=/usr/bin/python3
bindenv=() mpibind=()
if [ "$bind" = cores ]; then
	bindenv=(OMP_PROC_BIND="${OMP_PROC_BIND:-close}" OMP_PLACES="${OMP_PLACES:-cores}")
	mpibind=(-bind-to core:1)
fi
model_titan="--model.flavor=custom --model.dim=$dim --model.n_layers=$layers --model.n_heads=$heads \
--model.vocab_size=$vocab --model.moe_num_experts=$experts --model.moe_top_k=$topk \
--model.moe_num_shared_experts=$shared --model.moe_inter_dim=$inter"
common="--training.seq_len=$seq --training.local_batch_size=$batch --activation_checkpoint.mode=none"
# part 4: the last step of the run profiled
profile="--profiling.enable_profiling=true --profiling.profile_freq=$((warmup + steps)) \
--profiling.profiler_warmup=0 --profiling.profiler_active=1 --profiling.save_traces_folder=profile_traces"
model_ref="--dim $dim --layers $layers --heads $heads --vocab $vocab --experts $experts --top-k $topk \
--shared $shared --inter $inter --seq $seq --batch $batch"

if [ "$dry" -eq 1 ]; then
	echo "model: dim $dim, $layers layers, $heads heads, vocab $vocab, $experts experts top-$topk + $shared shared, expert hidden $inter"
	echo "shape: batch $batch x seq $seq, fp32"
	echo "bind: $bind${bindenv[*]:+ (${bindenv[*]}; mpiexec ${mpibind[*]})}"
	echo "rounds: $rounds; warm-up $warmup + median of $steps steps per run"
	echo "titan: titan-train --threads $threads $model_titan $common"
	echo "PyTorch: moe_ref.py --threads $threads $model_ref"
	for r in $(seq "$rounds"); do
		for side in $(order "$r"); do
			case $side in
			titan) echo "round $r: titan: ${bindenv[*]:+${bindenv[*]} }OMP_NUM_THREADS=$threads titan-train --threads $threads" ;;
			ref) echo "round $r: PyTorch: ${bindenv[*]:+${bindenv[*]} }OMP_NUM_THREADS=$threads moe_ref.py --threads $threads" ;;
			esac
		done
	done
	if [ "$use_ep" -eq 1 ]; then
		for r in $(seq "$rounds"); do
			for side in $(order "$r"); do
				case $side in
				titan) echo "round $r: ep1: ${bindenv[*]:+${bindenv[*]} }OMP_NUM_THREADS=1 titan-train --threads 1" ;;
				ref) echo "round $r: ep2: ${bindenv[*]:+${bindenv[*]} }OMP_NUM_THREADS=1 mpiexec -n 2${mpibind[*]:+ ${mpibind[*]}} titan-train --threads 1 --parallelism.expert_parallel_degree=2" ;;
				esac
			done
		done
	fi
	if [ "$use_comm" -eq 1 ]; then
		echo "comm: ${bindenv[*]:+${bindenv[*]} }OMP_NUM_THREADS=1 mpiexec -n 2${mpibind[*]:+ ${mpibind[*]}} titan-train --threads 1 --parallelism.expert_parallel_degree=2 $profile; titan-memprof time"
	fi
	exit 0
fi
for t in titan-train titan-config titan-tokenize titan-shard; do
	[ -x "$bin/$t" ] || die "$bin/$t is not built: run make"
done
$py -c 'import torch' 2>/dev/null || die "$py cannot import torch (Debian package python3-torch)"
[ "$use_ep" -eq 0 ] || command -v mpiexec >/dev/null || die "mpiexec is needed for EP 2 (or --no-ep)"
[ "$use_comm" -eq 0 ] || command -v mpiexec >/dev/null || die "mpiexec is needed for part 4 (or --no-comm)"
[ "$use_comm" -eq 0 ] || [ -x "$bin/titan-memprof" ] || die "$bin/titan-memprof is not built: run make"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-4}
"$root/bench/kjv_shards.sh" "$tmp" "$vocab" || die "cannot build the KJV shards"
data=$tmp/data$vocab

# titan_run THREADS [LAUNCH...] -> median step seconds (EXTRA: more keys)
prefix=() extra=()
titan_run() {
	local t=$1 out=$tmp/run
	shift
	rm -rf "$out"
	# shellcheck disable=SC2086
	env "${bindenv[@]}" OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" "${prefix[@]}" "$@" "$bin/titan-train" \
		--config configs/llama3_debug.yaml $model_titan $common "${extra[@]}" \
		--training.dataset_path="$data" --training.steps=$((warmup + steps)) \
		--lr_scheduler.warmup_steps=2 --metrics.log_freq=1 \
		--job.dump_folder="$out" --threads "$t" -q > "$tmp/titan.log" 2>&1 ||
		{ cat "$tmp/titan.log" >&2; die "titan-train failed"; }
	metrics_median "$out/metrics.jsonl" "$warmup"
}
ref_run() {
	# shellcheck disable=SC2086
	env "${bindenv[@]}" OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" $py bench/moe_ref.py \
		--shards "$data" $model_ref --threads "$threads" --steps "$steps" --warmup "$warmup" \
		> "$tmp/ref.json" 2> "$tmp/ref.log" || { cat "$tmp/ref.log" >&2; die "moe_ref.py failed"; }
	$py -c 'import json, sys; print(json.load(open(sys.argv[1]))["median_step_s"])' "$tmp/ref.json"
}
# row NAME TOKENS_PER_STEP FILE: "median (slowest-fastest)" tokens/s
tps() {
	awk -v tok="$2" -v m="$(median < "$3")" -v lo="$(sort -g "$3" | tail -1)" -v hi="$(sort -g "$3" | head -1)" \
		'BEGIN {printf "%.0f (%.0f-%.0f)", tok / m, tok / lo, tok / hi}'
}
ratio() { awk -v a="$(median < "$1")" -v b="$(median < "$2")" -v k="${3:-1}" 'BEGIN {printf "%.2fx", k * b / a}'; }

# shellcheck disable=SC2086
summary=$("$bin/titan-config" --config configs/llama3_debug.yaml $model_titan $common --summary 2>/dev/null || true)
echo "== environment"
echo "date:     $(date -u '+%Y-%m-%d %H:%M UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu:      $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($(nproc) online)"
echo "titan:    $("$bin/titan-train" --version 2>&1 | head -1); gemm: $("$bin/titan-train" --version 2>&1 | sed -n 's/^gemm: *//p')"
echo "torch:    $($py -c 'import re, torch; c = torch.__config__.show(); print(torch.__version__, " ".join(re.findall(r"BLAS_INFO=[a-z]+|MKLDNN=[A-Z]+", c)))') ($py)"
echo "model:    dim $dim, $layers layers, $heads heads, vocab $vocab, $experts experts top-$topk + $shared shared, expert hidden $inter"
# active = embedding + output + per layer attention, router, top-k +
# shared experts, 2 norms, + the final norm; total as titan-config says
echo "params:   $(awk -v d="$dim" -v l="$layers" -v v="$vocab" -v e="$experts" -v k="$topk" -v s="$shared" -v h="$inter" \
	'BEGIN {printf "%.1fM active", (2 * v * d + l * (4 * d * d + d * e + (k + s) * 3 * d * h + 2 * d) + d) / 1e6}'); $(echo "$summary" | sed -n 's/^parameters: *\([0-9]*\) total.*/\1/p' | awk '{printf "%.1fM total", $1 / 1e6}')"
echo "shape:    batch $batch x seq $seq, fp32; warm-up $warmup + median of $steps steps per run; $rounds rounds alternating"
echo "binding:  --bind $bind: ${bindenv[*]:-none}${mpibind[*]:+; mpiexec ${mpibind[*]}}"
echo

: > "$tmp/t.txt"
: > "$tmp/r.txt"
for r in $(seq "$rounds"); do
	for side in $(order "$r"); do
		case $side in
		titan) titan_run "$threads" >> "$tmp/t.txt" ;;
		ref) ref_run >> "$tmp/r.txt" ;;
		esac
	done
done
tok=$((batch * seq))
echo "| threads | titan tok/s | PyTorch tok/s | titan / PyTorch |"
echo "|---|---|---|---|"
echo "| $threads | $(tps titan $tok "$tmp/t.txt") | $(tps ref $tok "$tmp/r.txt") | $(ratio "$tmp/t.txt" "$tmp/r.txt") |"
echo "titan step s: $(paste -sd' ' "$tmp/t.txt"); PyTorch step s: $(paste -sd' ' "$tmp/r.txt")"

if [ "$use_ep" -eq 1 ]; then
	echo
	: > "$tmp/e1.txt"
	: > "$tmp/e2.txt"
	for r in $(seq "$rounds"); do
		for side in $(order "$r"); do
			case $side in
			titan) titan_run 1 >> "$tmp/e1.txt" ;;
			ref)
				extra=(--parallelism.expert_parallel_degree=2)
				titan_run 1 timeout 1800 mpiexec -n 2 "${mpibind[@]}" >> "$tmp/e2.txt"
				extra=() ;;
			esac
		done
	done
	echo "| titan | tok/s | scaling |"
	echo "|---|---|---|"
	echo "| 1 rank x 1 thread | $(tps e1 $tok "$tmp/e1.txt") | 1.00x |"
	echo "| EP 2: 2 ranks x 1 thread | $(tps e2 $((2 * tok)) "$tmp/e2.txt") | $(ratio "$tmp/e2.txt" "$tmp/e1.txt" 2) |"
	echo "1 rank step s: $(paste -sd' ' "$tmp/e1.txt"); EP 2 step s: $(paste -sd' ' "$tmp/e2.txt")"
fi

if [ "$use_perf" -eq 1 ] && command -v perf >/dev/null &&
	perf record -q -o "$tmp/perf.test" -- true > /dev/null 2>&1; then
	echo
	prefix=(perf record -q -F 499 -o "$tmp/perf.data" --)
	titan_run "$threads" > /dev/null
	prefix=()
	# the start-up is in the samples: on a short run the weights' truncated
	# normal init (titan_erfinv, philox, erf/log of libm) is a large share
	echo "== titan's CPU samples (one more run of part 1, start-up and init included): by shared object"
	perf report -i "$tmp/perf.data" --sort dso --stdio -q 2>/dev/null | sed '/^$/d' | head -8
	echo "== top symbols"
	perf report -i "$tmp/perf.data" --sort dso,sym --stdio -q 2>/dev/null | sed '/^$/d' | head -25
fi

if [ "$use_comm" -eq 1 ]; then
	echo
	# shellcheck disable=SC2206
	extra=(--parallelism.expert_parallel_degree=2 $profile)
	titan_run 1 timeout 1800 mpiexec -n 2 "${mpibind[@]}" > /dev/null
	extra=()
	"$bin/titan-memprof" time --json "$tmp/run/profile_traces" > "$tmp/time.json" ||
		die "titan-memprof time failed on $tmp/run/profile_traces"
	echo "== EP 2's communication: one more run of part 2, step $((warmup + steps)) profiled (titan-memprof time)"
	$py - "$tmp/time.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ranks"]:
    for s in r["steps"]:
        c = {x["name"]: x for x in s["collectives"]}
        a = c.get("all_to_all_v", {"calls": 0, "exposed_ms": 0, "overlapped_ms": 0})
        t = s["step_ms"]
        print(f"rank {r['rank']} step {s['step']}: {t:.1f} ms; all_to_all_v {a['calls']} calls, "
              f"exposed {a['exposed_ms']:.2f} ms ({100 * a['exposed_ms'] / t:.1f}% of the step), "
              f"overlapped {a['overlapped_ms']:.2f} ms ({100 * a['overlapped_ms'] / t:.1f}%); "
              f"all comm exposed {s['comm_exposed_ms']:.2f} ms, overlapped {s['comm_overlapped_ms']:.2f} ms")
EOF
	echo "== every collective (ms of the profiled step)"
	"$bin/titan-memprof" time "$tmp/run/profile_traces" | grep -v '^MFU: '
fi
