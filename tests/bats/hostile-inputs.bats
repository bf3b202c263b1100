#!/usr/bin/env bats
# Inputs made to hurt: YAML aliases that expand a small config into
# gigabytes, and names in model files that carry terminal escapes.  Each
# is refused or quoted with a bounded cost.

bats_require_minimum_version 1.5.0

PY=/usr/bin/python3

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
}

@test "YAML aliases of a large anchor in a list key: exit 2 naming the alias, in bounded memory" {
	$PY - "$BATS_TEST_TMPDIR/alias.yaml" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("model:\n  flavor: debugmodel\n")
    f.write('checkpoint:\n  exclude_from_loading: [&a "%s",\n' % ("x" * (2 << 20)))
    f.write("    " + ", ".join(["*a"] * 1000) + "]\n")
PY
	run -2 --separate-stderr bash -c "ulimit -v 1000000; exec titan-config --check -c '$BATS_TEST_TMPDIR/alias.yaml'"
	refute_crash
	[[ $stderr == "titan-config: error: $BATS_TEST_TMPDIR/alias.yaml:5:5: the alias '*a' expands the config's values past 4 MiB (a large anchor repeated): not a job config" ]] ||
		fail "$stderr"
	# "billion laughs": lists of aliases of lists, ten deep (a mapping that
	# is no section is refused later; the aliases are refused first)
	$PY - "$BATS_TEST_TMPDIR/laughs.yaml" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("a0: &a0 [lol]\n")
    for i in range(1, 10):
        f.write("a%d: &a%d [%s]\n" % (i, i, ", ".join(["*a%d" % (i - 1)] * 10)))
PY
	run -2 --separate-stderr bash -c "ulimit -v 1000000; exec titan-config --check -c '$BATS_TEST_TMPDIR/laughs.yaml'"
	refute_crash
	[[ $stderr == *"laughs.yaml:7:"*"expands the config's values past 4 MiB"* ]] || fail "$stderr"
	# a few aliases are fine
	printf 'checkpoint:\n  exclude_from_loading: [&o optimizer, *o]\n' > "$BATS_TEST_TMPDIR/ok.yaml"
	run -0 titan-config --check -c "$BATS_TEST_TMPDIR/ok.yaml"
}
