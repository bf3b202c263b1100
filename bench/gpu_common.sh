# shellcheck shell=bash disable=SC2154
# bench/gpu_common.sh — sourced by bench/train_gpu.sh and bench/curve_gpu.sh:
# the models both run, where titan's tools and a python3 with PyTorch are,
# and how a run that failed is reported.  The caller defines root (the source tree) and
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

# The models (debug, 125m, 1b, tiny; bench/train_gpu.sh's header describes
# them): sequence length, default batch, vocabulary, titan's model: keys and
# tests/ref/torch_train_gpu.py's model arguments.
seq_of() { case "$1" in tiny) echo 128 ;; *) echo 2048 ;; esac; }
batch_default() { case "$1" in debug) echo 8 ;; 125m) echo 16 ;; 1b) echo 4 ;; tiny) echo 2 ;; esac; }
vocab_of() { case "$1" in debug) echo 2048 ;; 125m) echo 32000 ;; 1b) echo 128256 ;; tiny) echo 768 ;; esac; }
titan_model_yaml() {
	case "$1" in
	debug) printf '  flavor: debugmodel\n' ;;
	125m) printf '  flavor: custom\n  dim: 768\n  n_layers: 12\n  n_heads: 12\n  vocab_size: 32000\n  multiple_of: 256\n  tie_word_embeddings: "false"\n' ;;
	1b) printf '  flavor: 1B\n' ;;
	tiny) printf '  flavor: custom\n  dim: 64\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 2\n  vocab_size: 768\n  multiple_of: 32\n' ;;
	esac
}
peer_model_args() {
	case "$1" in
	debug) echo "--dim 256 --n-layers 6 --n-heads 16 --vocab 2048 --multiple-of 256" ;;
	125m) echo "--dim 768 --n-layers 12 --n-heads 12 --vocab 32000 --multiple-of 256" ;;
	1b) echo "--dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 --vocab 128256 --multiple-of 1024 --ffn-dim-multiplier 1.5 --tie-embeddings" ;;
	tiny) echo "--dim 64 --n-layers 2 --n-heads 4 --n-kv-heads 2 --vocab 768 --multiple-of 32" ;;
	esac
}
