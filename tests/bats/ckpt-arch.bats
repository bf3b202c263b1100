#!/usr/bin/env bats
# A checkpoint holds one model: resume (checkpoint.folder and
# checkpoint.initial_load_path) and titan-generate -c compare every
# architecture field it stores with the config's and refuse a mismatch
# (exit 2, naming the field and both values) — 4 heads of 16 and 8 heads
# of 8 make tensors of the same shapes.  The dims of a checkpoint or an HF
# config.json that no model can have (rms_norm_eps 0 or -1, huge dims over
# tiny tensors) are a bad file (exit 1), refused before memory is
# allocated for them.

bats_require_minimum_version 1.5.0

PY=/usr/bin/python3

setup_file() {
	load tiny
	tiny_env
	tiny_corpus text 400 600 4
	tiny_yaml "$DATA/tiny.yaml" 600 64 1 4 2 "$DATA/tok.tiktoken" <<YAML
job:
  dump_folder: $DATA/out
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 32
  steps: 2
checkpoint:
  enable: true
  interval: 2
  last_save_model_only: false
activation_checkpoint:
  mode: none
YAML
	titan-train -q --config "$DATA/tiny.yaml"
	titan-ckpt-convert -q --to hf --tokenizer "$DATA/tok.tiktoken" "$DATA/out/checkpoint" "$DATA/hf"
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	CKPT=$DATA/out/checkpoint/step-2.h5
}

need_h5py() {
	$PY -c 'import h5py' 2>/dev/null || skip "python3-h5py is not installed"
}

# A copy of the checkpoint with root attributes set: NAME=VALUE ...
edit_attrs() {
	local out=$1
	shift
	cp "$CKPT" "$out"
	$PY - "$out" "$@" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r+")
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    old = f.attrs[k]
    f.attrs[k] = np.array(float(v) if isinstance(old, (float, np.floating)) else int(v),
                          dtype=np.asarray(old).dtype)
f.close()
PY
}

@test "resume: the same shapes with other heads, rope_theta, norm_eps: exit 2 naming both values" {
	cp -r "$DATA/out" "$BATS_TEST_TMPDIR/out"
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/out" --training.steps=4 \
		--model.n_heads=8 --model.n_kv_heads=4
	refute_crash
	[[ $stderr == *"step-2.h5' holds another model than the config's: n_heads 4 there, 8 in the config (model.n_heads); n_kv_heads 2 there, 4 in the config (model.n_kv_heads)"* ]] ||
		fail "$stderr"
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/out" --training.steps=4 \
		--model.rope_theta=10000 --model.norm_eps=1e-6
	[[ $stderr == *"norm_eps 1e-05 there, 1e-06 in the config (model.norm_eps); rope_theta 500000 there, 10000 in the config (model.rope_theta)"* ]] ||
		fail "$stderr"
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/out" --training.steps=4 \
		--model.rope_scaling=false
	[[ $stderr == *"rope_scaling true there, false in the config (model.rope_scaling)"* ]] ||
		fail "$stderr"
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/out" --training.steps=4 \
		--model.rope_scaling_factor=4 --model.n_layers=2
	[[ $stderr == *"n_layers 1 there, 2 in the config (model.n_layers); rope_scaling_factor 8 there, 4 in the config (model.rope_scaling_factor)"* ]] ||
		fail "$stderr"
	# nothing was written: the step the run resumed from is the newest
	[ ! -e "$BATS_TEST_TMPDIR/out/checkpoint/step-4.h5" ]
	# the same architecture reached another way (multiple_of 64 also makes
	# ffn_hidden 192) resumes
	run -0 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/out" --training.steps=3 --model.multiple_of=64
}

@test "resume on 2 ranks (FSDP): every rank refuses another model, exit 2" {
	skip_without_mpi
	cp -r "$DATA/out" "$BATS_TEST_TMPDIR/out"
	run -2 --separate-stderr timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/tiny.yaml" --job.dump_folder="$BATS_TEST_TMPDIR/out" \
		--training.steps=4 --model.n_heads=8 --model.n_kv_heads=4
	refute_crash
	[[ $stderr == *"[rank0]: titan-train: error: resuming from step 2: "*"step-2.h5' holds another model than the config's: n_heads 4 there, 8 in the config (model.n_heads)"* ]] ||
		fail "$stderr"
	[ ! -e "$BATS_TEST_TMPDIR/out/checkpoint/step-4.h5" ]
}

@test "checkpoint.initial_load_path of another model: exit 2 naming the field" {
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/fresh" --checkpoint.initial_load_path="$CKPT" \
		--model.n_heads=8 --model.n_kv_heads=4
	refute_crash
	[[ $stderr == *"checkpoint.initial_load_path: '$CKPT' holds another model than the config's: n_heads 4 there, 8 in the config"* ]] ||
		fail "$stderr"
}

@test "titan-generate -c: dims of the config that are not the checkpoint's or the HF folder's: exit 2" {
	run -2 --separate-stderr titan-generate -n 2 -c "$DATA/tiny.yaml" --model.n_heads=8 \
		--model.n_kv_heads=4 "$CKPT" "In the"
	refute_crash
	[[ $stderr == *"titan-generate: error: '$CKPT' holds another model than the config's: n_heads 4 there, 8 in the config (model.n_heads)"* ]] ||
		fail "$stderr"
	run -2 --separate-stderr titan-generate -n 2 -c "$DATA/tiny.yaml" --model.rope_theta=10000 \
		"$CKPT" "In the"
	[[ $stderr == *"rope_theta 500000 there, 10000 in the config (model.rope_theta)"* ]] || fail "$stderr"
	run -2 --separate-stderr titan-generate -n 2 -c "$DATA/tiny.yaml" --model.n_heads=8 \
		--model.n_kv_heads=4 "$DATA/hf" "In the"
	[[ $stderr == *"'$DATA/hf/config.json' holds another model than the config's: n_heads 4 there, 8 in the config"* ]] ||
		fail "$stderr"
	# the checkpoint's own config is fine
	run -0 --separate-stderr titan-generate -n 2 -c "$DATA/tiny.yaml" "$CKPT" "In the"
}

@test "rms_norm_eps 0 or -1 in an HF config.json or a checkpoint: refused by every reader (exit 1)" {
	for eps in 0 -1; do
		cp -r "$DATA/hf" "$BATS_TEST_TMPDIR/hf$eps"
		$PY - "$BATS_TEST_TMPDIR/hf$eps/config.json" "$eps" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["rms_norm_eps"] = float(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
		run -1 --separate-stderr titan-generate -n 2 "$BATS_TEST_TMPDIR/hf$eps" "In the"
		refute_crash
		[[ $stderr == *"hf$eps/config.json': rms_norm_eps $eps: must be a finite number above 0"* ]] ||
			fail "generate, $eps: $stderr"
		run -1 --separate-stderr titan-ckpt-convert -q --from hf "$BATS_TEST_TMPDIR/hf$eps" \
			"$BATS_TEST_TMPDIR/c$eps.h5"
		[[ $stderr == *"hf$eps/config.json': rms_norm_eps $eps: must be a finite number above 0"* ]] ||
			fail "convert, $eps: $stderr"
	done
	need_h5py
	for eps in 0 -1; do
		edit_attrs "$BATS_TEST_TMPDIR/eps$eps.h5" norm_eps=$eps
		run -1 --separate-stderr titan-generate -n 2 "$BATS_TEST_TMPDIR/eps$eps.h5" "In the"
		refute_crash
		[[ $stderr == *"eps$eps.h5': norm_eps $eps: must be a finite number above 0"* ]] ||
			fail "checkpoint, $eps: $stderr"
	done
}

@test "titan-generate, --to hf/gguf: huge dims over tiny tensors fail at once in bounded memory (exit 1)" {
	need_h5py
	# 2^20 wide, 1.4e13 parameters: the header's dims alone would need 56 TB
	edit_attrs "$BATS_TEST_TMPDIR/wide.h5" dim=1048576 n_heads=16384 n_kv_heads=8192 \
		head_dim=64 ffn_hidden=4194304
	run -1 --separate-stderr bash -c "ulimit -v 1000000; exec titan-generate -n 2 -t '$DATA/tok.tiktoken' '$BATS_TEST_TMPDIR/wide.h5' 'In the'"
	refute_crash
	[[ $stderr == *"wide.h5': model/tok_embeddings.weight: shape [600, 64], the model has [600, 1048576]"* ]] ||
		fail "$stderr"
	# the converters check the same before building anything
	run -1 --separate-stderr bash -c "ulimit -v 1000000; exec titan-ckpt-convert -q --to hf '$BATS_TEST_TMPDIR/wide.h5' '$BATS_TEST_TMPDIR/hfwide'"
	refute_crash
	[[ $stderr == *"wide.h5': model/tok_embeddings.weight: shape [600, 64], the model has [600, 1048576]"* ]] ||
		fail "$stderr"
	# a million blocks in a file of one
	edit_attrs "$BATS_TEST_TMPDIR/deep.h5" n_layers=1000000
	run -1 --separate-stderr bash -c "ulimit -v 1000000; exec titan-generate -n 2 -t '$DATA/tok.tiktoken' '$BATS_TEST_TMPDIR/deep.h5' 'In the'"
	refute_crash
	[[ $stderr == *"deep.h5': 12 model tensors, the dims (n_layers 1000000, tie_word_embeddings false) make 9000003"* ]] ||
		fail "$stderr"
	run -1 --separate-stderr bash -c "ulimit -v 1000000; exec titan-ckpt-convert -q --to gguf '$BATS_TEST_TMPDIR/deep.h5' '$BATS_TEST_TMPDIR/deep.gguf'"
	refute_crash
	[[ $stderr == *"deep.h5': 12 model tensors, the dims (n_layers 1000000, tie_word_embeddings false) make 9000003"* ]] ||
		fail "$stderr"
	# and a size past any model
	edit_attrs "$BATS_TEST_TMPDIR/vast.h5" vocab_size=4000000000
	run -1 --separate-stderr titan-generate -n 2 -t "$DATA/tok.tiktoken" "$BATS_TEST_TMPDIR/vast.h5" "In the"
	[[ $stderr == *"vast.h5': vocab_size 4000000000: must be in [1, 2147483647]"* ]] || fail "$stderr"
	# an HF folder whose config.json says a million blocks
	cp -r "$DATA/hf" "$BATS_TEST_TMPDIR/hfdeep"
	$PY - "$BATS_TEST_TMPDIR/hfdeep/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["num_hidden_layers"] = 1000000
json.dump(c, open(sys.argv[1], "w"))
PY
	run -1 --separate-stderr bash -c "ulimit -v 1000000; exec titan-generate -n 2 -t '$DATA/tok.tiktoken' '$BATS_TEST_TMPDIR/hfdeep' 'In the'"
	refute_crash
	[[ $stderr == *"hfdeep/config.json': num_hidden_layers 1000000 makes 9000003 tensors, '$BATS_TEST_TMPDIR/hfdeep/model.safetensors' has 12"* ]] ||
		fail "$stderr"
}
