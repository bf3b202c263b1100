# tests/bats/tiny.bash — the small training set-up many suites share: a
# text corpus, a tokenizer trained on it and its shards, and the model
# section of a tiny Llama config.  A suite's setup_file loads this and calls
# tiny_env, tiny_corpus and tiny_yaml with its own numbers (the numbers are
# what its expectations, losses and sizes, rest on).

# tiny_env: $DATA (the file's temporary folder) and the tools on PATH;
# NO_MPI=1 exported where there is no mpiexec or titan-train lacks MPI
tiny_env() {
	export DATA=$BATS_FILE_TMPDIR
	PATH=${TITAN_BIN:-$BATS_TEST_DIRNAME/../../bin}:$PATH
	if ! command -v mpiexec >/dev/null || ! titan-train --version | grep -q '+mpi'; then
		export NO_MPI=1
	fi
}

# tiny_corpus [--bible] [--line TEXT] NAME LINES VOCAB VAL_DOCS: $DATA/NAME.txt
# (LINES copies of TEXT, Genesis 1:1 by default; with --bible the book of
# Genesis where the `bible` command is there), $DATA/NAME.tok (its lines
# as documents), the tokenizer $DATA/tok.tiktoken of VOCAB tokens trained
# on it and the shards $DATA/shards with VAL_DOCS validation documents
tiny_corpus() {
	local bible='' line='In the beginning God created the heaven and the earth.'
	while :; do
		case $1 in
		--bible) bible=1; shift ;;
		--line) line=$2; shift 2 ;;
		*) break ;;
		esac
	done
	local txt=$DATA/$1.txt tok=$DATA/$1.tok
	if [ -n "$bible" ] && command -v bible >/dev/null; then
		bible -f gen1:1-gen50:26 > "$txt"
	else
		yes "$line" | head -n "$2" > "$txt"
	fi
	titan-tokenize train -q --vocab-size "$3" --format text "$txt" -o "$DATA/tok.tiktoken"
	titan-tokenize -t "$DATA/tok.tiktoken" --doc-per-line "$txt" > "$tok"
	titan-shard -q -t "$DATA/tok.tiktoken" --out "$DATA/shards" --val-docs "$4" < "$tok"
}

# tiny_yaml FILE VOCAB DIM LAYERS HEADS [KV_HEADS [TOKENIZER]] <<YAML: FILE
# holds the model section of a custom Llama (no n_kv_heads line where
# KV_HEADS is empty, a tokenizer_path where TOKENIZER is given), then the
# rest of the config from standard input
tiny_yaml() {
	{
		cat <<YAML
model:
  flavor: custom
  dim: $3
  n_layers: $4
  n_heads: $5
YAML
		[ -z "${6:-}" ] || echo "  n_kv_heads: $6"
		echo "  vocab_size: $2"
		echo "  multiple_of: 32"
		[ -z "${7:-}" ] || echo "  tokenizer_path: $7"
		cat
	} > "$1"
}

# tiny_mpi N ARGS...: titan-train on N ranks, one thread each, with
# $DATA/tiny.yaml, under a time limit
tiny_mpi() {
	local n=$1
	shift
	timeout -k 5 300 mpiexec -n "$n" env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/tiny.yaml" "$@"
}

# tiny_losses METRICS.JSONL: "step loss grad_norm" per logged step, in
# Python's repr (every bit of the doubles), for exact comparisons
tiny_losses() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if "loss" in o: print(o["step"], repr(o["loss"]), repr(o["grad_norm"]))' "$1"; }
