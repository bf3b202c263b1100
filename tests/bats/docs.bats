#!/usr/bin/env bats
# Documentation: every tool has a man page that renders cleanly,
# docs/config.md and the man pages list every config key (generated from the
# schema by titan-config --doc, checked by regenerating them), and README.md's
# command blocks run as written (tests/bats/readme_tour.py), but for the few
# marked "not run" with a reason.

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

@test "the config reference in docs/ is the schema's (make docs: mk/gen-docs.sh)" {
	# the files whose reference is generated keep their marker blocks
	for f in docs/config.md docs/titan-train.1 docs/titan-config.1; do
		[ "$(grep -c 'BEGIN titan-config --doc ' "$f")" = 1 ] || fail "$f: no generated block"
		[ "$(grep -c 'END titan-config --doc ' "$f")" = 1 ] || fail "$f: no end of the block"
	done
	# regenerated into a copy, nothing differs: a key added to the schema
	# (or a changed default or doc line) without `make docs` fails here
	cp -R docs "$BATS_TEST_TMPDIR/docs"
	run -0 mk/gen-docs.sh "$TITAN_BIN/titan-config" "$BATS_TEST_TMPDIR/docs"
	run -0 diff -ru docs "$BATS_TEST_TMPDIR/docs"
	# the generated blocks are not empty: every key is in each
	n=$(titan-config --json | /usr/bin/python3 -c '
import json, sys
print(sum(len(kv) for kv in json.load(sys.stdin).values()))')
	[ "$(grep -c '^| `[a-z_]*\.[a-z_0-9]*` |' docs/config.md)" = "$n" ]
	[ "$(grep -c '^\.B [a-z_]*\.[a-z_0-9]*$' docs/titan-config.1)" = "$n" ]
}

@test "titan-config --doc: markdown and man from the schema, unknown formats refused" {
	run -0 --separate-stderr titan-config --doc markdown
	[[ ${lines[0]} == "### job" ]]
	[[ $output == *'| `training.steps` | int | `10000` | >= 1 | training steps |'* ]]
	[[ $output == *'| `training.device` | choice | `auto` | one of auto, cpu, cuda |'* ]]
	run -0 --separate-stderr titan-config --doc man
	[[ ${lines[0]} == ".SS job" ]]
	[[ $output == *$'.B training.steps\n\\fIint\\fR, default 10000; >= 1.\n.br\n\\&training steps'* ]]
	run -2 --separate-stderr titan-config --doc xml
	[[ $stderr == "titan-config: error: --doc: 'xml' is not a format (markdown, man)"* ]]
	run -2 --separate-stderr titan-config --doc man --json
	[[ $stderr == "titan-config: error: --doc prints the schema's reference: not with"* ]]
}

@test "README.md: the blocks not run are marked with a reason, and only these" {
	run -0 /usr/bin/python3 tests/bats/readme_tour.py list README.md
	skipped=$(grep '^skip' <<< "$output" | cut -f2 | sed 's/ .*//' | tr '\n' ' ')
	# make (installs and builds), 4 and 8 ranks, SLURM, make (the build options)
	[ "$skipped" = "make mpiexec sbatch make " ] || fail "blocks not run: $skipped"
	while IFS=$'\t' read -r what first reason; do
		[ "$what" = run ] || [ -n "$reason" ] || fail "no reason: $first"
	done <<< "$output"
	[ "$(grep -c '^run' <<< "$output")" -ge 7 ]
}

@test "README.md: the tour runs as written (every block not marked, in a temporary folder)" {
	command -v bible >/dev/null || skip "bible-kjv is not installed (make deps installs it)"
	command -v zstd >/dev/null || skip "zstd is not installed"
	skip_without_mpi
	# the top of a source tree: the files the tour uses by path, nothing
	# written into the real one
	t=$BATS_TEST_TMPDIR/tree
	mkdir "$t"
	ln -s "$TITAN_SRCDIR/configs" "$TITAN_SRCDIR/mk" "$TITAN_SRCDIR/slurm" "$t/"
	PATH=$TITAN_BIN:$PATH run --separate-stderr timeout 900 /usr/bin/python3 \
		tests/bats/readme_tour.py run README.md "$t"
	[ "$status" = 0 ] || fail "$(tail -n 3 <<< "$output")"$'\n'"$stderr"
	# what the tour says it makes
	assert_file_exists "$t/data/val-00000.tok"
	assert_file_exists "$t/outputs/checkpoint/step-10.h5"
	assert_file_exists "$t/export/tokenizer.json"
	assert_file_exists "$t/model.gguf"
	assert_file_exists "$t/mem.svg"
}
