#!/usr/bin/env bats
# tests/run on a tree of made-up suites: the suites tagged
# `# bats file_tags=parallel` run side by side in one bats --jobs call, the
# others alone after them (docs/conventions.md "Tests"); the TAP, the
# summary line and the list of failed tests stay right.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup() {
	load helpers
	T=$BATS_TEST_TMPDIR/tree
	mkdir -p "$T/tests/bats" "$T/build"
	cp "$TITAN_SRCDIR/tests/run" "$T/tests/run"
}

# suite NAME [TAG] <<BATS: tests/bats/NAME.bats in the tree, tagged TAG;
# its tests are written "TEST name {" (bats would take "@test" lines here,
# inside the here-documents, for this file's own tests)
suite() {
	{
		[ -z "${2:-}" ] || echo "# bats file_tags=$2"
		sed 's/^TEST /@test /'
	} > "$T/tests/bats/$1.bats"
}

# tree_run ARGS...: the tree's tests/run, its setup step off, none of this
# bats run's BATS_* variables (the inner bats would take them for its own)
tree_run() {
	local unset=() v
	for v in $(compgen -e BATS_); do unset+=(-u "$v"); done
	run --separate-stderr env "${unset[@]}" TITAN_SRCDIR="$T" TITAN_BUILD="$T/build" TITAN_TEST_SETUP=0 "$@"
}

@test "suites tagged parallel run side by side (slow ones first), the others alone after them; a failure is named with its file" {
	command -v parallel >/dev/null || skip "no GNU parallel (make deps installs it)"
	# a and b each wait for the other's test to start: only together do
	# they pass; b, also tagged slow, starts first; c, untagged, runs when
	# both have ended
	M=$BATS_TEST_TMPDIR/meet
	mkdir "$M"
	suite a parallel <<BATS
TEST "a meets b" { touch $M/a; timeout 120 bash -c 'until [ -e $M/b ]; do sleep 0.1; done'; }
TEST "a fails" { false; }
BATS
	suite b parallel,slow <<BATS
TEST "b meets a" { touch $M/b; timeout 120 bash -c 'until [ -e $M/a ]; do sleep 0.1; done'; }
TEST "b skips" { skip "for the count"; }
BATS
	suite c <<BATS
TEST "c runs alone, after a and b" { [ -e $M/a.done ] && [ -e $M/b.done ]; }
BATS
	# each tagged suite marks its end in teardown_file
	printf 'teardown_file() { touch %s/a.done; }\n' "$M" >> "$T/tests/bats/a.bats"
	printf 'teardown_file() { touch %s/b.done; }\n' "$M" >> "$T/tests/bats/b.bats"
	tree_run TITAN_BATS_JOBS=2 "$T/tests/run" --bats
	[ "$status" = 1 ] || fail "status $status: $output"
	assert_line "# bats --jobs 2 --no-parallelize-within-files: tests/bats/b.bats tests/bats/a.bats"
	assert_line "# bats: tests/bats/c.bats"
	assert_line "ok 1 b meets a"
	assert_line "ok 3 a meets b"
	assert_line "ok 1 c runs alone, after a and b"
	assert_line "# failed tests:"
	assert_line "#   bats (parallel): 4 a fails (tests/bats/a.bats)"
	assert_equal "${lines[-1]}" "3 passed, 1 failed, 1 skipped"
}

@test "TITAN_BATS_JOBS=1 runs every suite alone in one bats call; FILTER still picks suites by name" {
	suite par-ok parallel <<'BATS'
TEST "par-ok passes" { true; }
BATS
	suite lone <<'BATS'
TEST "lone passes" { true; }
BATS
	suite par-fail parallel <<'BATS'
TEST "par-fail fails" { false; }
BATS
	tree_run TITAN_BATS_JOBS=1 "$T/tests/run" --bats
	[ "$status" = 1 ] || fail "status $status: $output"
	assert_line "# bats: tests/bats/lone.bats tests/bats/par-fail.bats tests/bats/par-ok.bats"
	refute_line --partial -- "--jobs"
	assert_line "1..3"
	assert_line "#   bats: 2 par-fail fails (tests/bats/par-fail.bats)"
	assert_equal "${lines[-1]}" "2 passed, 1 failed, 0 skipped"
	tree_run TITAN_BATS_JOBS=1 "$T/tests/run" --bats lone
	assert_success
	assert_line "# bats: tests/bats/lone.bats"
	assert_equal "${lines[-1]}" "1 passed, 0 failed, 0 skipped"
	command -v parallel >/dev/null || skip "no GNU parallel (make deps installs it)"
	tree_run TITAN_BATS_JOBS=2 "$T/tests/run" --bats fail
	[ "$status" = 1 ] || fail "status $status: $output"
	assert_line "# bats --jobs 2 --no-parallelize-within-files: tests/bats/par-fail.bats"
	assert_line "#   bats (parallel): 1 par-fail fails (tests/bats/par-fail.bats)"
	assert_equal "${lines[-1]}" "0 passed, 1 failed, 0 skipped"
}
