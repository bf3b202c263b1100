#!/usr/bin/env bats
# The PyTorch reference behind the golden files (tests/ref, Debian's
# python3-torch): the committed golden files are exactly what the committed
# reference produces, and the reference passes its own checks (fast
# gradcheck, component checks, injected-bug detection).

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	/usr/bin/python3 -c 'import torch' 2>/dev/null || fail "python3-torch is missing (make deps installs it)"
}

@test "golden files are reproduced by tests/ref/make_golden.py (byte for byte, or within 1e-4 on another CPU)" {
	run -0 /usr/bin/python3 tests/ref/make_golden.py --check
}

@test "the reference checks itself (gradcheck fast mode, components, injected bugs)" {
	run -0 /usr/bin/python3 tests/ref/make_golden.py --selfcheck --fast
}

@test "qwen3_ref.py: titan's q/k layout with Llama's pair RoPE is the public Qwen3 (rotate_half)" {
	run -0 /usr/bin/python3 tests/ref/qwen3_ref.py
	assert_output --regexp '^titan layout vs public Qwen3: rel err [0-9.]+e-(0[6-9]|[1-9][0-9])$'
}
