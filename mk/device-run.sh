#!/bin/bash
# mk/device-run.sh — titan's GPU checks on a bare GPU machine, from the
# bundle of mk/device-bundle.sh (carried in .device/): the CUDA op tests
# against the CPU twins (make cuda-test's binaries), the end-to-end loss
# curve of the debug model on GPU against the CPU, and the throughput bench.
#   bash mk/device-run.sh [env] [unit] [sanitize] [e2e] [bench ARGS...]
# Logs go to $OUT (or .device/out).  Exit status: the first failing stage.
set -uo pipefail
root=$(pwd)
out=${OUT:-.device/out}
mkdir -p "$out"
tb=/tmp/titan-bundle
if [ ! -x "$tb/bin/titan-train" ]; then
	mkdir -p "$tb" && tar -C "$tb" -xzf .device/bundle.tar.gz || exit 1
fi
# CUDA's libraries: the toolkit's, else the ones PyTorch's wheels bring
libpath=$tb/lib
for so in libcublas.so.13 libcublasLt.so.13 libcudart.so.13 libnccl.so.2; do
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

stage_unit() {
	"$tb/tests/test_cuda" 2>&1 | tee "$out/test_cuda.log" || fail test_cuda
	TITAN_CUDA_TEST_LARGE=1 TITAN_CUDA_TEST_TIME=1 "$tb/tests/test_cuda_ops" 2>&1 |
		tee "$out/test_cuda_ops.log" || fail test_cuda_ops
}

stage_sanitize() {
	command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer"; return; }
	compute-sanitizer --tool memcheck --error-exitcode 3 "$tb/tests/test_cuda_ops" \
		> "$out/memcheck.log" 2>&1 || fail "memcheck (see memcheck.log)"
	tail -3 "$out/memcheck.log"
}

# 100 steps of the debug model (seq 512, batch 4) on the GPU in fp32 and in
# bf16 GEMMs, and on the CPU (fp32, the oracle): the loss curves must agree.
stage_e2e() {
	local common="--config configs/llama3_debug.yaml --training.dataset_path=$tb/data/kjv
		--training.steps=100 --training.seq_len=512 --training.local_batch_size=4
		--lr_scheduler.warmup_steps=10 --metrics.log_freq=1 --checkpoint.enable=false"
	for dev in cpu cuda-fp32 cuda-bf16; do
		local d=${dev%%-*} mp=float32
		[ "$dev" = cuda-bf16 ] && mp=bfloat16
		# shellcheck disable=SC2086
		timeout 300 titan-train $common --training.device=$d \
			--training.mixed_precision_param=$mp --job.dump_folder=/tmp/e2e-$dev \
			> "$out/e2e-$dev.log" 2>&1 || { fail "e2e $dev"; tail -5 "$out/e2e-$dev.log"; }
		grep -E "Device|step: *(1|50|100) " "$out/e2e-$dev.log" | head -5
	done
	python3 - "$out" <<'PY' || fail "e2e curves"
import re, sys
out = sys.argv[1]
def curve(name):
    return [float(m.group(1)) for m in re.finditer(r"step: *\d+ +loss: *([-\d.naninf]+)", open(f"{out}/e2e-{name}.log").read())]
cpu, f32, b16 = curve("cpu"), curve("cuda-fp32"), curve("cuda-bf16")
assert len(cpu) == len(f32) == len(b16) == 100, (len(cpu), len(f32), len(b16))
def worst(a, b): return max(abs(x - y) / abs(y) for x, y in zip(a, b))
w32, w16 = worst(f32, cpu), worst(b16, cpu)
print(f"e2e: loss step 1 {cpu[0]:.5f}/{f32[0]:.5f}/{b16[0]:.5f}, step 100 cpu {cpu[-1]:.5f} cuda-fp32 {f32[-1]:.5f} cuda-bf16 {b16[-1]:.5f}")
print(f"e2e: worst relative loss difference vs CPU over 100 steps: fp32 {w32:.2e}, bf16 GEMMs {w16:.2e}")
with open(f"{out}/e2e-curves.tsv", "w") as f:
    f.write("step\tcpu\tcuda_fp32\tcuda_bf16\n")
    for i, (a, b, c) in enumerate(zip(cpu, f32, b16)):
        f.write(f"{i+1}\t{a:.6f}\t{b:.6f}\t{c:.6f}\n")
assert w32 < 1e-3 and w16 < 2e-2, "curves differ"
PY
}

stage_bench() {
	bash bench/train_gpu.sh "$@" 2>&1 | tee "$out/bench.log" || fail bench
}

[ $# -gt 0 ] || set -- env unit e2e
while [ $# -gt 0 ]; do
	s=$1; shift
	case $s in
	env|unit|sanitize|e2e) echo "== $s"; "stage_$s" ;;
	bench) echo "== bench $*"; stage_bench "$@"; break ;;
	*) echo "unknown stage '$s'"; exit 2 ;;
	esac
done
exit $status
