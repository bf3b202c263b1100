#!/usr/bin/env bats
# training.attn_mask_type block_causal (torchtitan's document mask: a token
# attends only to the earlier tokens of its own document, documents ending
# at the shards' EOS id): the losses and grad norms of the PyTorch
# reference that masks explicitly (tests/ref/block_causal_ref.py); CP 2
# (rotate methods allgather and alltoall), TP 2 and PP 2 reproduce 1 rank;
# the refusals (shards without document ids, the CUDA backend) name the
# key; titan-generate keeps a prompt's documents apart.
# The data: one short document per line (1 to 14 words), about 2.5
# documents per row of 32 tokens.

bats_require_minimum_version 1.5.0

setup_file() {
	export DATA=$BATS_FILE_TMPDIR
	PATH=${TITAN_BIN:-$BATS_TEST_DIRNAME/../../bin}:$PATH
	/usr/bin/python3 - > "$DATA/docs.txt" <<'PY'
import random
r = random.Random(5)
words = ("in the beginning god created the heaven and earth was without form void "
         "darkness upon face of deep spirit moved waters").split()
for i in range(4000):
    print(" ".join(r.choice(words) for _ in range(r.randint(1, 14))))
PY
	titan-tokenize train --vocab-size 560 --format text "$DATA/docs.txt" -o "$DATA/tok.tiktoken"
	titan-tokenize -t "$DATA/tok.tiktoken" --doc-per-line "$DATA/docs.txt" |
		titan-shard -q -t "$DATA/tok.tiktoken" --out "$DATA/shards"
	# the layout suites' tiny model (layouts.bash), with block_causal
	load layouts
	layouts_yaml 2 560
	sed -i 's/^  seq_len: 32$/&\n  attn_mask_type: block_causal/' "$DATA/tiny.yaml"
	grep -q "^  attn_mask_type: block_causal$" "$DATA/tiny.yaml"
}

setup() {
	load helpers
	load layouts
	cd "$TITAN_SRCDIR"
}

@test "block_causal: the losses and grad norms of the PyTorch reference that masks explicitly" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null ||
		skip "python3-torch or h5py missing for /usr/bin/python3 (tests/ref)"
	local o=$BATS_TEST_TMPDIR
	titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable --checkpoint.create_seed_checkpoint \
		--job.dump_folder="$o/seed"
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" --training.steps=4 \
		--job.dump_folder="$o/t"
	for m in block_causal causal; do
		/usr/bin/python3 tests/ref/block_causal_ref.py "$o/seed/checkpoint/step-0.h5" \
			"$DATA/shards/train-00000.tok" --seq 32 --batch 8 --steps 4 --lr 3e-3 \
			--warmup 2 --mask $m > "$o/ref-$m.jsonl"
	done
	run -0 /usr/bin/python3 - "$o/t/metrics.jsonl" "$o/ref-block_causal.jsonl" "$o/ref-causal.jsonl" <<'PY'
import json, sys
def load(p):
    return {o["step"]: o for o in map(json.loads, open(p)) if "loss" in o}
t, ref, causal = (load(p) for p in sys.argv[1:])
assert sorted(t) == sorted(ref) == [1, 2, 3, 4], (sorted(t), sorted(ref))
worst = far = 0.0
for s in t:
    assert ref[s]["docs_per_row"] >= 2, ref[s]  # several documents per row
    for k in ("loss", "grad_norm"):
        rel = abs(t[s][k] - ref[s][k]) / abs(ref[s][k])
        worst = max(worst, rel)
        assert rel <= 1e-5, (s, k, t[s][k], ref[s][k], rel)
        far = max(far, abs(t[s][k] - causal[s][k]) / abs(causal[s][k]))
assert far > 1e-3, far  # the mask matters: the causal reference is far
print("worst relative difference %.2e (causal reference: %.2e)" % (worst, far))
PY
	echo "# titan vs PyTorch block_causal: $output" >&3
}

@test "block_causal: CP 2 (allgather and alltoall), CP 4, TP 2 and PP 2 reproduce 1 rank; causal differs" {
	skip_without_mpi
	local o=$BATS_TEST_TMPDIR
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" --job.dump_folder="$o/ref"
	run -0 mpi 2 --parallelism.context_parallel_degree=2 --job.dump_folder="$o/g2"
	run -0 same_curve "$o/ref/metrics.jsonl" "$o/g2/metrics.jsonl"
	echo "# CP 2 allgather vs 1 rank: $output" >&3
	run -0 mpi 2 --parallelism.context_parallel_degree=2 \
		--parallelism.context_parallel_rotate_method=alltoall --job.dump_folder="$o/a2"
	run -0 same_curve "$o/ref/metrics.jsonl" "$o/a2/metrics.jsonl"
	echo "# CP 2 alltoall vs 1 rank: $output" >&3
	# CP 4: ranks 2 and 3's document ids, and keys that visit them, in
	# the ring's later steps
	run -0 mpi 4 --parallelism.context_parallel_degree=4 \
		--parallelism.context_parallel_rotate_method=alltoall --job.dump_folder="$o/a4"
	run -0 same_curve "$o/ref/metrics.jsonl" "$o/a4/metrics.jsonl"
	echo "# CP 4 alltoall vs 1 rank: $output" >&3
	run -0 mpi 2 --parallelism.tensor_parallel_degree=2 --job.dump_folder="$o/tp2"
	run -0 same_curve "$o/ref/metrics.jsonl" "$o/tp2/metrics.jsonl"
	echo "# TP 2 vs 1 rank: $output" >&3
	# PP 2, 1F1B over 4 microbatches: every stage numbers its microbatch's
	# documents, kept until that microbatch's backward
	run -0 mpi 2 --parallelism.pipeline_parallel_degree=2 \
		--parallelism.pipeline_parallel_microbatch_size=2 --job.dump_folder="$o/pp2"
	run -0 same_curve "$o/ref/metrics.jsonl" "$o/pp2/metrics.jsonl"
	echo "# PP 2 vs 1 rank: $output" >&3
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" --training.attn_mask_type=causal \
		--job.dump_folder="$o/causal"
	run -1 same_curve "$o/ref/metrics.jsonl" "$o/causal/metrics.jsonl"
}

@test "block_causal: shards without EOS or BOS and bad values are refused naming the key; the CUDA backend is not" {
	local o=$BATS_TEST_TMPDIR
	titan-tokenize -t "$DATA/tok.tiktoken" --doc-per-line "$DATA/docs.txt" |
		titan-shard -q --vocab-size 560 --eos-id -1 --out "$o/nodocs"
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" \
		--training.dataset_path="$o/nodocs" --job.dump_folder="$o/x"
	refute_crash
	[[ $stderr == *"training.attn_mask_type: block_causal needs document boundaries"*"$o/nodocs"* ]] ||
		fail "$stderr"
	# the CUDA backend has the document mask (lib/cuda/attention.cu):
	# without a GPU the usual no-device error, not a refusal of the key
	if ! nvidia-smi -L >/dev/null 2>&1; then
		run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" \
			--training.device=cuda --job.dump_folder="$o/y"
		refute_crash
		[[ $stderr == *"training.device: cuda"* && $stderr != *block_causal* ]] ||
			fail "$stderr"
	fi
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" \
		--training.attn_mask_type=document --job.dump_folder="$o/z"
	refute_crash
	[[ $stderr == *"training.attn_mask_type"*"causal"*"block_causal"* ]] || fail "$stderr"
}

# logp PROMPT ARGS...: "N_PROMPT LOGPROB TEXT" of a greedy 8-token continuation
logp() {
	local p=$1
	shift
	titan-generate "$@" --allow-special -n 8 "$DATA/gen/checkpoint/step-20.h5" "$p" 2> "$BATS_TEST_TMPDIR/err" |
		tr '\n' ' '
	grep -o "prompt of [0-9]*\|log-probability of the new tokens: [-0-9.]*" "$BATS_TEST_TMPDIR/err" | tr '\n' ' '
}

@test "titan-generate under block_causal: the prompt's earlier documents do not change the continuation" {
	[ -f "$DATA/gen/checkpoint/step-20.h5" ] ||
		titan-train -q --threads 1 --config "$DATA/tiny.yaml" --training.steps=20 --checkpoint.enable \
			--checkpoint.interval=20 --model.tokenizer_path="$DATA/tok.tiktoken" \
			--job.dump_folder="$DATA/gen"
	# two first documents of the same length, then the same second one:
	# the stored config's block_causal gives the same text and
	# log-probability bit for bit (prefill with document ids, then the
	# KV-cache decode from the document's first position); causal does not
	local a="earth the waters<|end_of_text|>god created" b="face of the deep<|end_of_text|>god created"
	run -0 logp "$a"
	local la=$output
	[[ $la == *"prompt of 17"*"log-probability"* ]] || fail "$la"
	run -0 logp "$b"
	[ "$output" = "$la" ] || fail "block_causal: '$output' != '$la'"
	grep -q "training.attn_mask_type block_causal: attention stays within a document" \
		"$BATS_TEST_TMPDIR/err"
	run -0 logp "$a" --config "$DATA/tiny.yaml" --training.attn_mask_type=causal -t "$DATA/tok.tiktoken"
	local ca=$output
	run -0 logp "$b" --config "$DATA/tiny.yaml" --training.attn_mask_type=causal -t "$DATA/tok.tiktoken"
	[[ $ca == *"prompt of 17"* ]] || fail "$ca"
	[ "$output" != "$ca" ] || fail "causal: the earlier document changed nothing: $ca"
}
