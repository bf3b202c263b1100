#!/usr/bin/env bats
# Multi-rank checkpoints (lib/ckpt/dist.c): tests/unit/test_ckpt_dist.c run
# under MPICH's mpiexec with 2, 3 (uneven shards) and 4 ranks (HSDP 2x2)
# writes step files from FSDP, DDP, HSDP, async, model-only bfloat16 and
# the gather-to-rank-0 path, reloads them at other layouts itself, and the
# files are then checked here with h5py (every dataset's bits, dtype,
# shape, contiguous layout, the members' order and every attribute equal
# to a single-process titan_ckpt_save of the unsharded state) and h5dump
# (the whole dump equal to the reference's, the crc32c attributes included;
# titan-ckpt-convert info --verify passes).  A write failing on one rank
# returns the error on every rank and leaves only the previous step.

bats_require_minimum_version 1.5.0

PY=/usr/bin/python3

setup() {
	load helpers
	BIN=$TITAN_BUILD/tests/test_ckpt_dist
	[ -x "$BIN" ] || skip "$BIN is not built"
	T=$BATS_TEST_TMPDIR
}

need_mpi() {
	grep -q '^#define TITAN_HAVE_MPI 1' "$TITAN_BUILD/config.h" || skip "built without MPI"
	grep -q '^#define TITAN_HAVE_HDF5 1' "$TITAN_BUILD/config.h" || skip "built without HDF5"
	command -v mpiexec >/dev/null || skip "no mpiexec"
	$PY -c 'import h5py' 2>/dev/null || skip "python3-h5py is not installed"
	command -v h5dump >/dev/null || skip "h5dump (hdf5-tools) is not installed"
}

mpirun() {
	local n=$1
	shift
	timeout -k 5 120 mpiexec -n "$n" env OMP_NUM_THREADS=1 "$@"
}

# compare FILE REF [model]: FILE holds what REF holds (only / and /model
# with "model"), to the bit
compare() {
	$PY - "$@" <<'EOF'
import sys
import h5py
import numpy as np

path, ref_path = sys.argv[1], sys.argv[2]
model_only = len(sys.argv) > 3
f, ref = h5py.File(path, "r"), h5py.File(ref_path, "r")

def attrs_equal(a, b, where, skip=()):
    ka = [k for k in a.attrs.keys() if k not in skip]
    kb = [k for k in b.attrs.keys() if k not in skip]
    assert sorted(ka) == sorted(kb), f"{where}: attrs {ka} vs {kb}"
    for k in ka:
        x, y = a.attrs[k], b.attrs[k]
        if isinstance(x, (float, np.floating)) and np.isnan(x):
            assert np.isnan(y), f"{where}: attr {k}"
        else:
            assert x == y, f"{where}: attr {k}: {x!r} vs {y!r}"

# titan_version and config are the same here (one build, one config)
attrs_equal(f, ref, "/")
want = ["model"] if model_only else list(ref.keys())
assert list(f.keys()) == want, f"groups {list(f.keys())} vs {want}"
n = 0

def walk(a, b, where):
    global n
    assert list(a.keys()) == list(b.keys()), f"{where}: members (order) differ"
    attrs_equal(a, b, where)
    for k in a.keys():
        x, y = a[k], b[k]
        w = f"{where}/{k}"
        if isinstance(y, h5py.Group):
            assert isinstance(x, h5py.Group), w
            walk(x, y, w)
            continue
        assert isinstance(x, h5py.Dataset), w
        assert x.shape == y.shape, f"{w}: shape {x.shape} vs {y.shape}"
        assert x.id.get_type().get_size() == y.id.get_type().get_size(), w
        assert x.id.get_type() == y.id.get_type(), f"{w}: HDF5 type differs"
        assert x.chunks is None, f"{w}: not contiguous"
        assert x.dtype == y.dtype, f"{w}: {x.dtype} vs {y.dtype}"
        vx, vy = x[...], y[...]
        assert vx.tobytes() == vy.tobytes(), f"{w}: values differ"
        n += 1

for g in want:
    walk(f[g], ref[g], "/" + g)
print(f"{path}: {n} datasets equal to {ref_path}")
EOF
}

check_run() { # N: the run's files against the references
	local n=$1 d=$T/out
	need_mpi
	mkdir -p "$d"
	run -0 --separate-stderr mpirun "$n" "$BIN" --mpi "$d"
	refute_crash
	echo "$output"
	[[ $output == *"all checks passed"* ]]
	[[ $output != *FAILED* ]]
	[ "$(grep -c '^ok: ' <<< "$output")" -ge 11 ]
	if [ "$n" = 4 ]; then
		[[ $output == *"ok: HSDP 2x2"* ]]
	else
		[[ $output == *"skip: HSDP 2x2 needs 4 ranks"* ]]
	fi
	# complete files only: no temporary file anywhere
	[ -z "$(find "$d" -name '*.tmp.*')" ]
	for f in fsdp/step-1 fsdp/step-2 ddp/step-1 gather/step-1 gather/step-2 fail/step-4 \
		 $([ "$n" = 4 ] && echo hsdp/step-1); do
		compare "$d/$f.h5" "$d/ref/step-1.h5"
	done
	for f in bf16/step-3 gather/step-3; do
		compare "$d/$f.h5" "$d/ref/step-3.h5"
	done
	for f in small/step-1 small/step-2; do
		compare "$d/$f.h5" "$d/ref/step-1.h5" model
	done
	# h5dump reads them: the whole dump equals the reference's (but for
	# the file name on the first line)
	diff -u <(h5dump "$d/ref/step-1.h5" | tail -n +2) <(h5dump "$d/fsdp/step-1.h5" | tail -n +2)
	diff -u <(h5dump "$d/ref/step-3.h5" | tail -n +2) <(h5dump "$d/bf16/step-3.h5" | tail -n +2)
	h5dump -d /model/norm.weight "$d/ddp/step-1.h5" | grep -q 'DATASPACE  SIMPLE { ( 32 ) / ( 32 ) }'
	# every dataset's crc32c (each rank's rows, XOR-reduced) is the whole
	# tensor's: every file verifies clean
	for f in $(find "$d" -name 'step-*.h5'); do
		run -0 titan-ckpt-convert info --verify --no-checksums "$f"
		assert_line --regexp '^verify: +[1-9][0-9]* ok, 0 mismatched, 0 without a checksum$'
	done
}

@test "plain run: no communicator is titan_ckpt_save" {
	run -0 --separate-stderr "$BIN"
	refute_crash
	[[ $stderr == *"PASSED  ]"* && $stderr != *FAILED* ]]
}

@test "--mpi in a build without MPI or HDF5 says skip" {
	grep -q '^#define TITAN_HAVE_MPI 1' "$TITAN_BUILD/config.h" &&
		grep -q '^#define TITAN_HAVE_HDF5 1' "$TITAN_BUILD/config.h" && skip "built with both"
	run -0 --separate-stderr "$BIN" --mpi "$T"
	[[ $output == "skip: built without "* ]]
}

@test "2 ranks: FSDP, DDP, async, bf16, gather, errors; files equal the 1-process save" {
	check_run 2
}

@test "3 ranks (uneven shards): the same" {
	check_run 3
}

@test "4 ranks (and HSDP 2x2): the same" {
	check_run 4
}

@test "a write failing on rank 2 of 3: every rank returns it, step-1.h5 stays alone" {
	need_mpi
	mkdir -p "$T/fail"
	run -0 --separate-stderr mpirun 3 env TITAN_TEST_CKPT_FAIL_RANK=2 "$BIN" --mpi "$T/fail"
	refute_crash
	echo "$output"
	[ "$(grep -c 'step 1: 0; step 2: -1 rank 2: .*failure injected by a test' <<< "$output")" = 3 ]
	[ "$(ls "$T/fail")" = step-1.h5 ]
}

@test "a write failing on rank 0 of 2: the same" {
	need_mpi
	mkdir -p "$T/fail"
	run -0 --separate-stderr mpirun 2 env TITAN_TEST_CKPT_FAIL_RANK=0 "$BIN" --mpi "$T/fail"
	refute_crash
	[ "$(grep -c 'step 1: 0; step 2: -1 rank 0: .*failure injected by a test' <<< "$output")" = 2 ]
	[ "$(ls "$T/fail")" = step-1.h5 ]
}
