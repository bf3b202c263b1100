#!/bin/bash
# mk/device-run.sh — titan's GPU checks on a bare GPU machine, from the
# bundle of mk/device-bundle.sh (carried in .device/): the CUDA op tests
# against the CPU twins (make cuda-test's binaries), the end-to-end loss
# curve of the debug model on GPU against the CPU, and the throughput bench.
#   bash mk/device-run.sh [env] [ceilings] [unit] [ops=GLOB] [sanitize] [e2e] [ckpt] [bench ARGS... --] [curve ARGS... --] [profile]
#   bash mk/device-run.sh e2e-ref     (on a CPU machine: the CPU curve e2e compares to)
# Logs go to .device/out, packed into $OUT/logs.tar.gz when OUT is set (the
# device tool returns few files).  Exit status: 1 when a stage failed.
set -uo pipefail
out=.device/out
rm -rf "$out"
mkdir -p "$out"
pack() { [ -n "${OUT:-}" ] && tar -C "$out" -czf "$OUT/logs.tar.gz" . ; }
trap pack EXIT
tb=/tmp/titan-bundle
if [ ! -x "$tb/bin/titan-train" ]; then
	mkdir -p "$tb" && tar -C "$tb" -xzf .device/bundle.tar.gz || exit 1
fi
# CUDA's libraries (cuDNN too: titan dlopens it): the toolkit's, else the ones PyTorch's wheels bring
libpath=$tb/lib
for so in libcublas.so.13 libcublasLt.so.13 libcudart.so.13 libnccl.so.2 libcudnn.so.9; do
	[ -e "/usr/local/cuda/lib64/$so" ] && continue
	d=$(find /usr/local /opt /usr/lib -name "$so" 2>/dev/null | head -1)
	[ -n "$d" ] && libpath=$libpath:$(dirname "$d")
done
export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$tb/bin:$PATH
status=0
fail() { echo "FAILED: $*"; [ $status -ne 0 ] || status=1; }

stage_env() {
	nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
	ldd "$tb/bin/titan-train" | grep -E "not found|cublas|nccl|cudart" || true
	titan-train --version
}

# the card's two ceilings (copy bandwidth, cuBLAS GEMM rates at the 1B shapes)
# and where cuDNN lives: bench/gpu_ceilings.py through PyTorch
stage_ceilings() {
	timeout 90 python3 bench/gpu_ceilings.py --json "$out/ceilings.json" 2>&1 |
		tee "$out/ceilings.txt" || fail ceilings
}

stage_unit() {
	timeout 60 "$tb/tests/test_cuda" 2>&1 | tee "$out/test_cuda.log" || fail test_cuda
	TITAN_CUDA_TEST_LARGE=${UNIT_LARGE:-1} TITAN_CUDA_TEST_TIME=${UNIT_LARGE:-1} timeout "${UNIT_TIMEOUT:-200}" \
		"$tb/tests/test_cuda_ops" 2>&1 | tee "$out/test_cuda_ops.log" || fail test_cuda_ops
}

# ops=GLOB: only the op tests whose name matches GLOB (cmocka's filter, e.g.
# 'test_attention*'), model-sized cases and timings on: a quick look at a
# few ops without the CPU oracle of all the others
stage_ops() {
	local log=$out/ops-$(printf '%s' "$1" | tr -c 'A-Za-z0-9_' '-').log
	TITAN_CUDA_TEST_ONLY=$1 TITAN_CUDA_TEST_LARGE=1 TITAN_CUDA_TEST_TIME=1 \
		timeout "${UNIT_TIMEOUT:-200}" "$tb/tests/test_cuda_ops" > "$log" 2>&1 ||
		fail "test_cuda_ops $1"
	grep -E '^\[ +(OK|FAILED|SKIPPED|ERROR) |^# [a-z_]+ +(fp32|tf32|bf16|-) ' "$log"
}

stage_sanitize() {
	command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer"; return; }
	timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 3 "$tb/tests/test_cuda_ops" \
		> "$out/memcheck.log" 2>&1 || fail "memcheck (see memcheck.log)"
	tail -3 "$out/memcheck.log"
}

# 100 steps of the debug model (seq 512, batch 4) on the GPU with fp32 GEMMs
# and with bf16 GEMMs; the loss curves must follow the CPU's (fp32, the
# oracle), tests/ref/cuda-e2e-cpu.txt: the CPU's losses are the same bits on
# any machine and thread count, so they are made once (stage e2e-ref, on a
# CPU machine: the GPU machine's CPU is slow) and committed.
e2e_run() { # NAME DEVICE PRECISION
	timeout "${E2E_TIMEOUT:-150}" titan-train --config configs/llama3_debug.yaml \
		--training.dataset_path="$tb/data/kjv" --training.steps=100 \
		--training.seq_len=512 --training.local_batch_size=4 \
		--lr_scheduler.warmup_steps=10 --metrics.log_freq=1 --checkpoint.enable=false \
		--training.device="$2" --training.mixed_precision_param="$3" \
		--job.dump_folder="/tmp/e2e-$1" > "$out/e2e-$1.log" 2>&1
}

stage_e2e_ref() {
	e2e_run cpu cpu float32 || { fail "e2e cpu"; return; }
	{
		echo "# titan-train on the CPU (fp32, the oracle): configs/llama3_debug.yaml, KJV shards of mk/device-bundle.sh,"
		echo "# seq 512, batch 4, warmup 10, 100 steps (mk/device-run.sh e2e-ref). Columns: step loss grad_norm"
		grep -o "step: .*" "$out/e2e-cpu.log" | awk '{print $2,$4,$6}'
	} > tests/ref/cuda-e2e-cpu.txt
}

stage_e2e() {
	for run in cuda-fp32:float32 cuda-bf16:bfloat16; do
		e2e_run "${run%%:*}" cuda "${run#*:}" ||
			{ fail "e2e ${run%%:*}"; tail -5 "$out/e2e-${run%%:*}.log"; }
		grep -E "Device|step: *(1|50|100) " "$out/e2e-${run%%:*}.log" | head -5
	done
	python3 - "$out" tests/ref/cuda-e2e-cpu.txt <<'PY' || fail "e2e curves"
import re, sys
out, ref = sys.argv[1], sys.argv[2]
def curve(name):
    t = open(f"{out}/e2e-{name}.log").read()
    return [float(m.group(1)) for m in re.finditer(r"step: *\d+ +loss: *([-\d.naninf]+)", t)]
cpu = [float(l.split()[1]) for l in open(ref) if not l.startswith("#")]
f32, b16 = curve("cuda-fp32"), curve("cuda-bf16")
assert len(cpu) == len(f32) == len(b16) == 100, (len(cpu), len(f32), len(b16))
def worst(a, b): return max(abs(x - y) / abs(y) for x, y in zip(a, b))
def first(a, b, tol): return next((i + 1 for i, (x, y) in enumerate(zip(a, b)) if abs(x - y) > tol * abs(y)), None)
w32, w16 = worst(f32, cpu), worst(b16, cpu)
print(f"e2e: loss at step 1 / 100: cpu {cpu[0]:.5f} / {cpu[-1]:.5f}, cuda fp32 {f32[0]:.5f} / {f32[-1]:.5f}, cuda bf16 {b16[0]:.5f} / {b16[-1]:.5f}")
print(f"e2e: worst relative loss difference from the CPU over 100 steps: fp32 GEMMs {w32:.2e} (first step over 1e-5: {first(f32, cpu, 1e-5)}), bf16 GEMMs {w16:.2e}")
with open(f"{out}/e2e-curves.tsv", "w") as f:
    f.write("step\tcpu\tcuda_fp32\tcuda_bf16\n")
    for i, (a, b, c) in enumerate(zip(cpu, f32, b16)):
        f.write(f"{i+1}\t{a:.5f}\t{b:.5f}\t{c:.5f}\n")
# fp32: the printed 5 decimals; bf16 GEMMs: bf16 rounding of every operand
assert w32 < 1e-3 and w16 < 2e-2, "curves differ"
PY
}

# checkpoints on the GPU: 8 steps equal 4 steps + resume to 8, bit for bit
# (losses and grad norms), and the step-8 checkpoint equals the CPU's layout
stage_ckpt() {
	local args="--config configs/llama3_debug.yaml --training.dataset_path=$tb/data/kjv
		--training.seq_len=512 --training.local_batch_size=4 --lr_scheduler.warmup_steps=2
		--metrics.log_freq=1 --training.device=cuda --checkpoint.enable=true --lr_scheduler.total_steps=8
		--checkpoint.interval=4"
	# shellcheck disable=SC2086
	{ timeout 120 titan-train $args --training.steps=8 --job.dump_folder=/tmp/ck-a &&
	  timeout 120 titan-train $args --training.steps=4 --job.dump_folder=/tmp/ck-b &&
	  timeout 120 titan-train $args --training.steps=8 --job.dump_folder=/tmp/ck-b; } \
		> "$out/ckpt.log" 2>&1 || { fail ckpt; tail -5 "$out/ckpt.log"; return; }
	python3 - /tmp/ck-a /tmp/ck-b <<'PY' || fail "ckpt resume not exact"
import json, sys
rows = lambda d: {o["step"]: (o["loss"], o["grad_norm"]) for o in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in o}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert sorted(a) == list(range(1, 9)) and all(a[s] == b[s] for s in range(1, 9)), (a, b)
print("ckpt: 8 steps == 4 + resume to 8 on the GPU, bit for bit; step 8 loss", a[8][0])
try:
    import h5py, numpy as np
except ImportError:
    sys.exit(0)
fa, fb = h5py.File(sys.argv[1] + "/checkpoint/step-8.h5"), h5py.File(sys.argv[2] + "/checkpoint/step-8.h5")
for g in ("model", "optimizer/exp_avg", "optimizer/exp_avg_sq"):
    assert list(fa[g]) == list(fb[g])
    for k in fa[g]:
        assert np.array_equal(fa[g][k][()], fb[g][k][()]), (g, k)
print("ckpt: step-8.h5 of both runs equal (weights and moments; read with h5py)")
PY
	titan-ckpt-convert info /tmp/ck-b/checkpoint/step-8.h5 2>&1 | head -5
}

# per-op GPU time of titan-train on the bench's 1B config (TITAN_CUDA_PROFILE)
stage_profile() {
	local cfg=$out/bench/${PROFILE_MODEL:-1b}/titan.yaml
	[ -f "$cfg" ] || { echo "no $cfg: run the bench stage first"; return; }
	TITAN_CUDA_PROFILE=1 timeout 120 titan-train --config "$cfg" --training.steps=8 \
		--job.dump_folder=/tmp/profile > "$out/profile.log" 2>&1 || fail profile
	grep -A25 "CUDA op profile" "$out/profile.log"
}

stage_bench() {
	DATA_DIR=/tmp/bench-data OUT=$out/bench timeout "${BENCH_TIMEOUT:-330}" bash bench/train_gpu.sh "$@" 2>&1 |
		tee "$out/bench.log" || fail bench
	check_memory
}

# issue 24: the 20-step 1B loss curve against PyTorch from the same initial
# weights (titan's HF export) and batches (bench/curve_gpu.sh): bf16 within
# 2e-2 per step, then fp32 (TF32 off) from the same HF folder within 1e-4,
# the sharper check of the weights and batches (CURVE_FP32=0 skips it).
# The work folders (a 5 GB HF export) stay in /tmp; $out/curve gets the
# tables, JSON, configs and logs.
stage_curve() {
	local w=/tmp/titan-curve p
	rm -rf "$w" "$out/curve"
	mkdir -p "$out/curve"
	timeout "${CURVE_TIMEOUT:-300}" bash bench/curve_gpu.sh --device cuda --out "$w/bf16" "$@" 2>&1 |
		tee "$out/curve/bf16.out" || fail "curve bf16"
	if [ "${CURVE_FP32:-1}" = 1 ] && [ -f "$w/bf16/hf/config.json" ]; then
		timeout "${CURVE_TIMEOUT:-300}" bash bench/curve_gpu.sh --device cuda --out "$w/fp32" "$@" \
			--precision fp32 --init-hf "$w/bf16/hf" 2>&1 | tee "$out/curve/fp32.out" || fail "curve fp32"
	fi
	for p in bf16 fp32; do
		[ -d "$w/$p" ] || continue
		mkdir -p "$out/curve/$p"
		cp "$w/$p"/*.md "$w/$p"/*.json "$w/$p"/*.log "$w/$p"/*.yaml "$w/$p/titan/metrics.jsonl" \
			"$w/$p/hf/config.json" "$out/curve/$p/" 2>/dev/null
	done
}

# issue 24: the peak memory of each bench run (the largest `memory:` of
# titan-train's step lines: its caching allocator's reserved bytes) equals
# titan-estimate's GPU model of titan-train's CUDA path (--device h200, the
# same config) within 5%
check_memory() {
	local cfg log
	for cfg in "$out"/bench/*/titan.yaml; do
		[ -f "$cfg" ] || continue
		log=${cfg%/titan.yaml}/titan.log
		[ -f "$log" ] || continue
		timeout 60 titan-estimate --config "$cfg" --ngpu 1 --device h200 --json \
			> "${cfg%.yaml}-estimate.json" 2> "${cfg%.yaml}-estimate.err" ||
			{ fail "titan-estimate on $cfg"; cat "${cfg%.yaml}-estimate.err"; continue; }
		python3 - "$log" "${cfg%.yaml}-estimate.json" <<'PY' || fail "memory vs titan-estimate ($cfg)"
import json, re, sys
log, est = sys.argv[1], json.load(open(sys.argv[2]))
got = [float(m) for m in re.findall(r"step:.*?memory:\s*([\d.]+)GiB", open(log).read())]
assert got, "no step line with memory: in " + log
peak = max(got)
r = est["ranks"][est["worst_rank"]]
want = r["reserved_bytes"] / 2**30
print(f"memory: titan-train {peak:.2f} GiB, titan-estimate ({est['memory_model']}) {want:.3f} GiB: "
      f"{100 * (want - peak) / peak:+.2f}% ({log})")
assert est["memory_model"] == "titan-cuda", est["memory_model"]
assert abs(want - peak) <= 0.05 * peak, "beyond 5%"
PY
	done
}

[ $# -gt 0 ] || set -- env unit e2e
while [ $# -gt 0 ]; do
	s=$1; shift
	case $s in
	env|ceilings|unit|sanitize|e2e|ckpt|profile) echo "== $s"; "stage_$s"; pack ;;
	e2e-ref) echo "== $s"; stage_e2e_ref ;;
	ops=*) echo "== $s"; stage_ops "${s#ops=}"; pack ;;
	bench) # bench [ARGS...] [-- more stages]
		args=()
		while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
		[ $# -gt 0 ] && shift
		echo "== bench ${args[*]}"; stage_bench "${args[@]}"; pack ;;
	curve) # curve [ARGS of bench/curve_gpu.sh...] [-- more stages]
		args=()
		while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
		[ $# -gt 0 ] && shift
		echo "== curve ${args[*]}"; stage_curve "${args[@]}"; pack ;;
	*) echo "unknown stage '$s'"; exit 2 ;;
	esac
done
exit $status
