#!/usr/bin/env bats
# Documentation: every tool has a man page that renders cleanly, and
# docs/config.md lists every config key.

bats_require_minimum_version 1.5.0

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
}

@test "every tool in bin/ has a man page" {
	for t in "$TITAN_BIN"/titan-*; do
		assert_file_exists "docs/$(basename "$t").1"
	done
}

@test "man pages render without warnings" {
	command -v man >/dev/null || skip "man is not installed"
	for m in docs/*.1; do
		run -0 --separate-stderr env MANWIDTH=80 man --warnings -l "$m"
		[ -z "$stderr" ] || fail "$m: $stderr"
		[[ $output == *"NAME"* && $output == *"SYNOPSIS"* ]]
	done
}

@test "docs/config.md documents every config key" {
	keys=$(titan-config --json | /usr/bin/python3 -c '
import json, sys
for s, kv in json.load(sys.stdin).items():
    for k in kv: print(f"{s}.{k}")')
	[ -n "$keys" ]
	for k in $keys; do
		grep -qF -- "$k" docs/config.md || fail "docs/config.md does not mention $k"
	done
}

@test "titan-train.1 documents the current config schema (mk/gen-man-train.sh)" {
	run -0 bash -c "mk/gen-man-train.sh '$TITAN_BIN/titan-config' | diff -u docs/titan-train.1 -"
}
