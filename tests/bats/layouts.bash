# tests/bats/layouts.bash — what the multi-rank layout suites share
# (titan-train-tp-pp, -zb, -cp): titan-train on N MPICH ranks under a time
# limit, and the comparison of two runs' loss curves.  The suite's
# setup_file writes $DATA/tiny.yaml; its setup loads this after helpers.

# mpi N ARGS...: titan-train on N ranks, one thread each, under a time limit
mpi() {
	local n=$1
	shift
	timeout -k 5 300 mpiexec -n "$n" env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/tiny.yaml" "$@"
}

# same_curve A.jsonl B.jsonl [bits]: the losses and grad norms of every step
# of B equal A's within 1e-5 relative (bit for bit with `bits`); B ends at
# step 10 and may start later (a resumed run)
same_curve() { /usr/bin/python3 - "$@" <<'PY'
import json, sys
def load(p):
    return {o["step"]: o for o in map(json.loads, open(p)) if "loss" in o}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert b and max(b) == 10, sorted(b)
tol = 0.0 if sys.argv[3:] == ["bits"] else 1e-5
worst = 0.0
for s in sorted(b):
    for k in ("loss", "grad_norm"):
        x, y = a[s][k], b[s][k]
        rel = abs(x - y) / max(abs(x), 1e-30)
        worst = max(worst, rel)
        assert rel <= tol, (s, k, x, y, rel)
print("steps %d-%d, worst relative difference %.2e" % (min(b), max(b), worst))
PY
}
