#!/usr/bin/env bats
# checkpoint.last_save_in_hf and checkpoint.initial_load_in_hf in the
# training loop (torchtitan's CheckpointManager with to_hf / from_hf):
# the last step's model also as the HF folder checkpoint/step-N/, byte for
# byte what titan-ckpt-convert --to hf writes from step-N.h5; and an HF
# folder as the initial weights, exactly as titan-ckpt-convert --from hf
# then checkpoint.initial_load_path would load them — on 1 rank and on 2
# (FSDP 2, TP 2).

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus text 400 600 4
	tiny_yaml "$DATA/tiny.yaml" 600 64 2 4 2 "$DATA/tok.tiktoken" <<YAML
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 32
  steps: 2
checkpoint:
  enable: true
  interval: 2
activation_checkpoint:
  mode: none
YAML
	# the reference run: its last step as step-2.h5, and that converted
	titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder="$DATA/ref"
	titan-ckpt-convert -q --to hf --tokenizer "$DATA/tok.tiktoken" \
		"$DATA/ref/checkpoint/step-2.h5" "$DATA/ref-hf"
}

setup() {
	load helpers
	load tiny
	cd "$BATS_TEST_TMPDIR"
}

losses() { tiny_losses "$@"; }

# same_folder A B: the same file names, every file the same bytes
same_folder() {
	diff <(cd "$1" && ls -A) <(cd "$2" && ls -A) || fail "'$1' and '$2' hold other files"
	local f
	for f in "$2"/*; do
		cmp "$1/${f##*/}" "$f" || fail "'$1/${f##*/}' differs from titan-ckpt-convert's"
	done
}

@test "last_save_in_hf: the last step also as HF checkpoint/step-2/, titan-ckpt-convert's bytes" {
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=a \
		--checkpoint.last_save_in_hf=true
	[[ $stderr == *"Saved the last step as HF safetensors "*"a/checkpoint/step-2/"* ]] ||
		fail "no HF save in the log: $stderr"
	assert_file_exists a/checkpoint/step-2.h5
	assert_file_exists a/checkpoint/step-2/model.safetensors
	assert_file_exists a/checkpoint/step-2/config.json
	assert_file_exists a/checkpoint/step-2/tokenizer.json
	# the same training: the same checkpoint, the same HF folder
	cmp <(losses a/metrics.jsonl) <(losses "$DATA/ref/metrics.jsonl")
	same_folder a/checkpoint/step-2 "$DATA/ref-hf"
	# checkpoint.export_dtype is the folder's dtype, as --dtype
	run -0 titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=b \
		--checkpoint.last_save_in_hf=true --checkpoint.export_dtype=bfloat16
	titan-ckpt-convert -q --to hf --dtype bfloat16 --tokenizer "$DATA/tok.tiktoken" \
		b/checkpoint/step-2.h5 b-hf
	same_folder b/checkpoint/step-2 b-hf
	grep -q '"torch_dtype": "bfloat16"' b/checkpoint/step-2/config.json
	# an interval save before the last is not exported; async saves
	# before it, the last one (synchronous) as without async
	run -0 titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=c \
		--checkpoint.last_save_in_hf=true --checkpoint.interval=1 --checkpoint.async_mode=async
	assert_file_not_exists c/checkpoint/step-1/config.json
	same_folder c/checkpoint/step-2 "$DATA/ref-hf"
}

@test "initial_load_in_hf: an HF folder as the initial weights, as its .h5 via initial_load_path" {
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=hf \
		--checkpoint.initial_load_in_hf=true --checkpoint.initial_load_path="$DATA/ref-hf" \
		--checkpoint.last_save_model_only=false
	[[ $stderr == *"Loaded initial weights from HF safetensors $DATA/ref-hf"* ]] ||
		fail "no HF load in the log: $stderr"
	assert_file_not_exists hf/initial_load_in_hf.h5.tmp
	run -0 titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=h5 \
		--checkpoint.initial_load_path="$DATA/ref/checkpoint/step-2.h5"
	cmp <(losses hf/metrics.jsonl) <(losses h5/metrics.jsonl)
	# and not the fresh start's weights
	run -1 diff <(losses hf/metrics.jsonl) <(losses "$DATA/ref/metrics.jsonl")
	# torchtitan: without initial_load_path, model.hf_assets_path
	run -0 titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=assets \
		--checkpoint.initial_load_in_hf=true --model.hf_assets_path="$DATA/ref-hf"
	cmp <(losses assets/metrics.jsonl) <(losses h5/metrics.jsonl)
	# the run's own checkpoint wins on a resume, as torchtitan's
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=hf \
		--training.steps=3 --checkpoint.initial_load_in_hf=true \
		--checkpoint.initial_load_path="$DATA/ref-hf" --checkpoint.last_save_model_only=false
	[[ $stderr != *"HF safetensors"* ]] || fail "$stderr"
	[[ $stderr == *"Loaded checkpoint "*"hf/checkpoint/step-2.h5"* ]] || fail "$stderr"
}

@test "in_hf: what torchtitan refuses is refused, a folder of another model names the field" {
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=x \
		--checkpoint.initial_load_in_hf=true --checkpoint.initial_load_path="$DATA/ref-hf" \
		--checkpoint.initial_load_model_only=false
	[[ $stderr == *"checkpoint.initial_load_in_hf: needs checkpoint.initial_load_model_only"* ]] ||
		fail "$stderr"
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=x \
		--checkpoint.initial_load_in_hf=true
	[[ $stderr == *"checkpoint.initial_load_in_hf: needs checkpoint.initial_load_path or model.hf_assets_path"* ]] ||
		fail "$stderr"
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=x \
		--checkpoint.last_save_in_hf=true --checkpoint.last_save_model_only=false
	[[ $stderr == *"checkpoint.last_save_in_hf: needs checkpoint.last_save_model_only"* ]] ||
		fail "$stderr"
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=x \
		--checkpoint.initial_load_in_hf=true --checkpoint.initial_load_path="$DATA/ref-hf" \
		--model.n_heads=8 --model.n_kv_heads=4
	[[ $stderr == *"checkpoint.initial_load_in_hf: '$DATA/ref-hf'"*"n_heads"* ]] || fail "$stderr"
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=x \
		--checkpoint.initial_load_in_hf=true --checkpoint.initial_load_path="$DATA/nowhere"
	[[ $stderr == *"checkpoint.initial_load_in_hf: '$DATA/nowhere'"* ]] || fail "$stderr"
	refute_crash
}

@test "in_hf on 2 ranks (FSDP 2, TP 2): the same HF folder, the same initial weights" {
	[ -z "${NO_MPI:-}" ] || skip "no mpiexec, or titan-train without MPI"
	for layout in --parallelism.data_parallel_shard_degree=2 --parallelism.tensor_parallel_degree=2; do
		rm -rf s f h
		run -0 timeout 120 mpiexec -n 2 titan-train -q --config "$DATA/tiny.yaml" \
			--job.dump_folder=s --checkpoint.last_save_in_hf=true "$layout"
		titan-ckpt-convert -q --to hf --tokenizer "$DATA/tok.tiktoken" s/checkpoint/step-2.h5 s-hf
		same_folder s/checkpoint/step-2 s-hf
		rm -rf s-hf
		run -0 timeout 120 mpiexec -n 2 titan-train -q --config "$DATA/tiny.yaml" \
			--job.dump_folder=f --checkpoint.initial_load_in_hf=true \
			--checkpoint.initial_load_path="$DATA/ref-hf" "$layout"
		run -0 timeout 120 mpiexec -n 2 titan-train -q --config "$DATA/tiny.yaml" \
			--job.dump_folder=h --checkpoint.initial_load_path="$DATA/ref/checkpoint/step-2.h5" \
			"$layout"
		cmp <(losses f/metrics.jsonl) <(losses h/metrics.jsonl) || fail "$layout"
		assert_file_not_exists f/initial_load_in_hf.h5.tmp
	done
}

# The MoE families' runs: a tiny model of FAMILY, 2 steps, checkpoint at 2
moe_args() {
	local c=(--training.dataset_path="$DATA/shards" --training.local_batch_size=2
		 --training.seq_len=16 --training.steps=2 --checkpoint.enable --checkpoint.interval=2
		 --model.tokenizer_path="$DATA/tok.tiktoken" --model.vocab_size=600
		 --activation_checkpoint.mode=none)
	case $1 in
	# softmax top-2 of 8 after a dense block; HF has no expert_bias: none
	qwen3) c+=(--model.name=qwen3 --model.flavor=debugmodel_moe --model.head_dim=12
		   --model.n_dense_layers=1 --model.n_layers=3 --model.moe_load_balance_coeff=null) ;;
	# MLA, sigmoid routing, shared experts; expert_bias is HF's
	# e_score_correction_bias: balancing on
	deepseek_v3) c+=(--model.name=deepseek_v3 --model.flavor=debugmodel_mla) ;;
	# NoPE blocks, MoE every 2nd block, top-1 with a shared expert
	llama4) c+=(--model.name=llama4 --model.dim=64 --model.n_layers=4 --model.n_heads=4
		    --model.n_kv_heads=2 --model.multiple_of=32 --model.moe_num_experts=4
		    --model.every_n_layers_nope=2 --model.moe_load_balance_coeff=null) ;;
	esac
	printf '%s\n' "${c[@]}"
}

# same_model A.h5 B.h5: every model tensor bit for bit (B, made from HF,
# may have zero expert_bias tensors A has not: --from hf turns balancing on)
same_model() {
	/usr/bin/python3 - "$@" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["model"] for p in sys.argv[1:3])
extra = sorted(set(b) - set(a))
assert set(a) <= set(b) and all(n.endswith("expert_bias") and not np.any(b[n][()]) for n in extra), \
    (sorted(a), sorted(b))
for n in a:
    assert np.array_equal(a[n][()], b[n][()]), n
print(len(a), "tensors")
PY
}

@test "MoE families (Qwen3 MoE, DeepSeek-V3, Llama 4): last_save_in_hf is titan-ckpt-convert's folder and converts back bit for bit; initial_load_in_hf of it starts where the .h5 does" {
	/usr/bin/python3 -c 'import h5py' 2>/dev/null || skip "python3-h5py is missing"
	local f
	for f in qwen3 deepseek_v3 llama4; do
		mapfile -t a < <(moe_args $f)
		run -0 titan-train -q "${a[@]}" --job.dump_folder=$f --checkpoint.last_save_in_hf=true
		assert_file_exists $f/checkpoint/step-2/model.safetensors
		titan-ckpt-convert -q --to hf --tokenizer "$DATA/tok.tiktoken" $f/checkpoint/step-2.h5 $f-hf
		same_folder $f/checkpoint/step-2 $f-hf
		run -0 titan-ckpt-convert -q --from hf $f/checkpoint/step-2 $f-back.h5
		run -0 same_model $f/checkpoint/step-2.h5 $f-back.h5
		# the folder as initial weights: the .h5's first loss and the rest
		run -0 --separate-stderr titan-train "${a[@]}" --job.dump_folder=$f-ih \
			--checkpoint.initial_load_in_hf=true --checkpoint.initial_load_path=$f-hf
		[[ $stderr == *"Loaded initial weights from HF safetensors $f-hf"* ]] || fail "$stderr"
		run -0 titan-train -q "${a[@]}" --job.dump_folder=$f-ip \
			--checkpoint.initial_load_path=$f/checkpoint/step-2.h5
		cmp <(losses $f-ih/metrics.jsonl) <(losses $f-ip/metrics.jsonl) || fail "$f"
		run -1 diff <(losses $f-ih/metrics.jsonl) <(losses $f/metrics.jsonl)
	done
	# DeepSeek-V3's e_score_correction_bias is its expert_bias (moved by
	# the balancing), the others have none in HF: zeros with balancing on
	run -0 /usr/bin/python3 -c 'import h5py, sys, numpy as np
b = h5py.File(sys.argv[1], "r")["model"]["layers.1.moe.expert_bias"][()]
assert np.any(b != 0), b' deepseek_v3/checkpoint/step-2.h5
	mapfile -t a < <(moe_args llama4)
	run -0 titan-train -q "${a[@]}" --model.moe_load_balance_coeff=0.001 --job.dump_folder=l4b \
		--checkpoint.initial_load_in_hf=true --checkpoint.initial_load_path=llama4-hf \
		--checkpoint.last_save_model_only=false
	run -0 /usr/bin/python3 -c 'import h5py, sys
assert "layers.1.moe.expert_bias" in h5py.File(sys.argv[1], "r")["model"]' l4b/checkpoint/step-2.h5
	# without balancing DeepSeek-V3's bias is dropped, said in the log
	mapfile -t a < <(moe_args deepseek_v3)
	run -0 --separate-stderr titan-train "${a[@]}" --model.moe_load_balance_coeff=null \
		--job.dump_folder=dsn --checkpoint.initial_load_in_hf=true --checkpoint.initial_load_path=deepseek_v3-hf
	[[ $stderr == *"its e_score_correction_bias is not loaded (model.moe_load_balance_coeff null: no expert_bias)"* ]] ||
		fail "$stderr"
}

@test "MoE in_hf on 2 ranks (DeepSeek-V3 under FSDP 2 and EP 2): the same HF folder, the same initial weights" {
	[ -z "${NO_MPI:-}" ] || skip "no mpiexec, or titan-train without MPI"
	mapfile -t a < <(moe_args deepseek_v3)
	run -0 titan-train -q "${a[@]}" --job.dump_folder=one
	titan-ckpt-convert -q --to hf --tokenizer "$DATA/tok.tiktoken" one/checkpoint/step-2.h5 one-hf
	for layout in "--parallelism.data_parallel_shard_degree=2" \
		"--parallelism.data_parallel_shard_degree=2 --parallelism.expert_parallel_degree=2"; do
		rm -rf s s-hf f h
		run -0 timeout 120 mpiexec -n 2 titan-train -q "${a[@]}" --training.local_batch_size=1 \
			--job.dump_folder=s --checkpoint.last_save_in_hf=true $layout
		titan-ckpt-convert -q --to hf --tokenizer "$DATA/tok.tiktoken" s/checkpoint/step-2.h5 s-hf
		same_folder s/checkpoint/step-2 s-hf
		run -0 timeout 120 mpiexec -n 2 titan-train -q "${a[@]}" --training.local_batch_size=1 \
			--job.dump_folder=f --checkpoint.initial_load_in_hf=true \
			--checkpoint.initial_load_path=one-hf $layout
		run -0 timeout 120 mpiexec -n 2 titan-train -q "${a[@]}" --training.local_batch_size=1 \
			--job.dump_folder=h --checkpoint.initial_load_path=one/checkpoint/step-2.h5 $layout
		cmp <(losses f/metrics.jsonl) <(losses h/metrics.jsonl) || fail "$layout"
		assert_file_not_exists f/initial_load_in_hf.h5.tmp
	done
}
