#!/usr/bin/env bash
# bench/ckpt_async.sh — what a checkpoint costs a training run: the time a
# step is blocked by a save, sync and async (checkpoint.async_mode), against
# the step time of the same run.
#
#   bench/ckpt_async.sh [--models "debug 25m"] [--threads N] [--saves S]
#
# For each model (the bench/train_cpu.sh shapes: batch 4 x seq 512, fp32,
# KJV shards), titan-train runs 2 + 2·S steps with a full checkpoint
# (weights + AdamW moments, float32) every 2nd step, once with
# async_mode=disabled and once with async.  Blocked time per save is what
# the log reports ("Saved ... in X s" for sync: HDF5 write + fsync +
# rename; "Staged ... in X s" for async: the copy into the staging
# buffers); the step time is the median step_time_s of steps without a
# save.  Goal (issue 5): async blocked time < 2% of a step.
set -euo pipefail

prog=ckpt_async.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TITAN_BIN:-$root/bin}
models="debug 25m" threads=1 saves=3
while [ $# -gt 0 ]; do
	case $1 in
	--models) models=$2; shift ;;
	--threads) threads=$2; shift ;;
	--saves) saves=$2; shift ;;
	-h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
for m in $models; do
	case $m in debug | 25m) ;; *) die "unknown model '$m' (debug, 25m)" ;; esac
done
[ -x "$bin/titan-train" ] || die "$bin/titan-train is not built: run make"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$root/bench/kjv_shards.sh" "$tmp" 2048 8192 || die "cannot build the KJV shards"

model_args() {
	case $1 in
	debug) echo "--model.flavor=debugmodel --model.vocab_size=2048 --training.dataset_path=$tmp/data2048" ;;
	25m) echo "--model.flavor=debugmodel --model.dim=512 --model.n_layers=8 --model.n_heads=8 --model.n_kv_heads=4 --model.vocab_size=8192 --training.dataset_path=$tmp/data8192" ;;
	esac
}
steps=$((2 + 2 * saves))
echo "# $(uname -n), $(nproc) CPUs, $threads thread(s), checkpoints in $tmp ($(df -h "$tmp" | awk 'NR == 2 { print $1 }'))"
printf '| model | checkpoint | mode | blocked per save | step time | blocked / step |\n|---|---|---|---|---|---|\n'
for m in $models; do
	for mode in disabled async; do
		out=$tmp/run-$m-$mode
		# shellcheck disable=SC2046
		"$bin/titan-train" --config "$root/configs/llama3_debug.yaml" $(model_args "$m") \
			--training.seq_len=512 --training.local_batch_size=4 \
			--activation_checkpoint.mode=none --training.steps=$steps \
			--lr_scheduler.warmup_steps=2 --metrics.log_freq=1 --metrics.peak_flops=1e11 \
			--checkpoint.enable --checkpoint.interval=2 --checkpoint.keep_latest_k=2 \
			--checkpoint.last_save_model_only=false --checkpoint.async_mode=$mode \
			--job.dump_folder="$out" --threads "$threads" > "$out.stdout" 2> "$out.log" ||
			{ cat "$out.log" >&2; die "titan-train failed"; }
		/usr/bin/python3 - "$out" "$m" "$mode" <<'PY'
import json, os, re, statistics, sys
out, model, mode = sys.argv[1:]
log = open(out + ".log").read()
pat = r"Staged checkpoint step \d+ in ([0-9.]+) s" if mode == "async" else r"Saved checkpoint \S+ in ([0-9.]+) s"
blocked = [float(x) for x in re.findall(pat, log)]
rows = [json.loads(l) for l in open(out + "/metrics.jsonl")]
# a save at step s is timed in step s+1's line: steps after an odd step
# and past the warm-up carry no save
plain = [r["step_time_s"] for r in rows if r["step"] > 2 and r["step"] % 2 == 0]
step = statistics.median(plain)
size = os.path.getsize(out + "/checkpoint/" + sorted(os.listdir(out + "/checkpoint"))[-1])
b = statistics.mean(blocked)
print("| %s | %.0f MB | %s | %.3f s | %.3f s | %.2f%% |" % (model, size / 1e6, mode, b, step, 100 * b / step))
PY
	done
done
