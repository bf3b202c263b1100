# shellcheck shell=bash disable=SC2154
# bench/gpu_common.sh — sourced by bench/train_gpu.sh and bench/curve_gpu.sh:
# where titan's tools and a python3 with PyTorch are, and how a run that
# failed is reported.  The caller defines root (the source tree) and
# die MESSAGE (prints and exits).

# find_titan_bin TOOL...: bin = TITAN_BIN, else $root/bin, else the folder
# of titan-train on PATH (mk/device-run.sh puts the bundle's there); every
# TOOL must be in it
find_titan_bin() {
	if [ -n "${TITAN_BIN:-}" ]; then
		bin=$TITAN_BIN
	elif [ -x "$root/bin/titan-train" ]; then
		bin=$root/bin
	elif command -v titan-train >/dev/null; then
		bin=$(dirname "$(command -v titan-train)")
	else
		die "titan-train not found: build it (make), or set TITAN_BIN=DIR, or put it on PATH"
	fi
	local t
	for t in "$@"; do
		[ -x "$bin/$t" ] || die "$bin/$t is missing"
	done
}

# find_torch_python DEVICE: py = PYTHON, else the first python3 that
# imports torch; with DEVICE cuda, torch must see a GPU
find_torch_python() {
	if [ -n "${PYTHON:-}" ]; then
		py=$PYTHON
		"$py" -c 'import torch' 2>/dev/null || die "PYTHON=$py cannot import torch"
	else
		py=
		local c
		for c in python3 /usr/bin/python3 /usr/local/bin/python3; do
			if command -v "$c" >/dev/null && "$c" -c 'import torch' 2>/dev/null; then
				py=$c
				break
			fi
		done
		[ -n "$py" ] || die "no python3 with PyTorch found (set PYTHON=...)"
	fi
	if [ "$1" = cuda ]; then
		"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
			die "$py: torch.cuda.is_available() is False (no GPU? --device cpu for a logic check)"
	fi
}

# fail_run WHAT RC LOG: a run that failed: the end of its log, then exit 1
fail_run() {
	echo "$prog: error: $1 failed (exit $2); the end of $3:" >&2
	tail -n 25 "$3" >&2 || true
	exit 1
}
