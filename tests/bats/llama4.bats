#!/usr/bin/env bats
# model.name llama4: torchtitan's Llama 4 text model (iRoPE's NoPE layers,
# MoE interleaved with dense blocks, top-1 sigmoid routing with one shared
# expert, the experts' hidden size auto-scaled, RoPE scaling factor 16)
# against the PyTorch reference tests/ref/llama4_ref.py (12 steps, fp32,
# <= 1e-5), titan-generate, titan-estimate to the byte, and what titan does
# not take refused naming the key.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus --line 'In the beginning God created the heaven and the earth. And the earth was without form, and void.' \
		c 400 600 2
	# debugmodel shrunk: NoPE in blocks 0 and 2, MoE in blocks 1 and 3
	# (interleave_moe_layer_step 2), 4 experts of int(170 / 2) -> 96
	cat > "$DATA/l4.yaml" <<YAML
model:
  name: llama4
  flavor: debugmodel
  dim: 64
  n_layers: 4
  n_heads: 4
  n_kv_heads: 2
  vocab_size: 600
  multiple_of: 32
  moe_num_experts: 4
  every_n_layers_nope: 2
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 16
  steps: 12
lr_scheduler:
  warmup_steps: 2
metrics:
  log_freq: 1
YAML
	# its 12-step checkpoint, for generation and conversion
	titan-train -q --config "$DATA/l4.yaml" --job.dump_folder="$DATA/r" --checkpoint.enable \
		--checkpoint.interval=12
}

setup() {
	load helpers
	load tiny
	load layouts
	DATA=$BATS_FILE_TMPDIR
}

MODEL='"dim":64,"n_layers":4,"n_heads":4,"n_kv_heads":2,"vocab_size":600,"multiple_of":32'
MOE='"num_experts":4,"top_k":1,"num_shared_experts":1,"score_func":"sigmoid","route_norm":false,"route_scale":1.0,"score_before_experts":true,"load_balance_coeff":1e-3'

# ref NAME MODEL_JSON MOE_JSON ARGS...: titan-train's seed checkpoint and 12
# steps with ARGS, then llama4_ref.py from the same weights and tokens,
# compared by tests/ref/check_curve.py (losses and grad norms within 1e-5
# relative, the balancing's expert_bias, every final tensor)
ref() {
	local name=$1 model=$2 moe=$3 d=$BATS_TEST_TMPDIR/$1
	shift 3
	cd "$TITAN_SRCDIR"
	run -0 titan-train -q --config "$DATA/l4.yaml" "$@" --job.dump_folder="$d/seed" \
		--checkpoint.enable --checkpoint.create_seed_checkpoint
	run -0 titan-train -q --config "$DATA/l4.yaml" "$@" --job.dump_folder="$d/run" \
		--checkpoint.enable --checkpoint.interval=12
	/usr/bin/python3 tests/ref/llama4_ref.py --init "$d/seed/checkpoint/step-0.h5" \
		--shards "$DATA/shards" --model "$model" --moe "$moe" \
		--train '{"batch":2,"seq_len":16,"steps":12,"lr":8e-4,"warmup":2}' \
		--save "$d/ref.npz" > "$d/ref.json"
	/usr/bin/python3 tests/ref/check_curve.py "$d/run/metrics.jsonl" "$d/ref.json" \
		"$d/run/checkpoint/step-12.h5" "$d/ref.npz" --moved
}

@test "llama4 debugmodel shrunk (NoPE every 2nd block, MoE every 2nd, expert hidden auto-scaled, RoPE factor 16): 12 steps equal the PyTorch reference" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	ref a "{$MODEL,\"every_n_layers_nope\":2}" "{$MOE,\"interleave_moe_layer_step\":2}"
	grep -q '"inter_dim": 96' "$BATS_TEST_TMPDIR/a/ref.json"
	run -0 /usr/bin/python3 -c 'import h5py, sys; f = h5py.File(sys.argv[1], "r")
assert f["model/layers.1.moe.experts.w1"].shape == (4, 96, 64), f["model/layers.1.moe.experts.w1"].shape
assert f["model/layers.0.feed_forward.w1.weight"].shape == (192, 64)
assert "layers.2.moe.experts.w1" not in f["model"]
assert f.attrs["model_name"] == "llama4" and f.attrs["every_n_layers_nope"] == 2, dict(f.attrs)
assert f.attrs["rope_scaling_factor"] == 16 and f.attrs["rope_high_freq_factor"] == 1' \
		"$BATS_TEST_TMPDIR/a/run/checkpoint/step-12.h5"
}

@test "llama4 with RoPE base 100, NoPE every 3rd block, MoE in every block: equal the reference, which without NoPE layers differs" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	local args=(--model.rope_theta=100 --model.every_n_layers_nope=3 --model.interleave_moe_layer_step=1
		    --model.moe_load_balance_coeff=null)
	local moe="{${MOE/1e-3/null},\"interleave_moe_layer_step\":1}"
	ref b "{$MODEL,\"rope_theta\":100,\"every_n_layers_nope\":3}" "$moe" "${args[@]}"
	# the same weights through a reference with RoPE in every block: not equal
	local d=$BATS_TEST_TMPDIR/b
	/usr/bin/python3 tests/ref/llama4_ref.py --init "$d/seed/checkpoint/step-0.h5" \
		--shards "$DATA/shards" --model "{$MODEL,\"rope_theta\":100}" --moe "$moe" \
		--train '{"batch":2,"seq_len":16,"steps":12,"lr":8e-4,"warmup":2}' > "$d/rope.json"
	# (at initialisation attention is near uniform: RoPE moves the grad
	# norms by about 1e-4 relative in these 12 steps, 10x the tolerance)
	run -1 /usr/bin/python3 -c 'import json, sys
a = [json.loads(l)["grad_norm"] for l in open(sys.argv[1])]
b = json.load(open(sys.argv[2]))["grad_norm"]
sys.exit(1 if max(abs(x - y) / abs(y) for x, y in zip(a, b)) > 5e-5 else 0)' \
		"$d/run/metrics.jsonl" "$d/rope.json"
}

@test "llama4 flavors: torchtitan's debugmodel, 17bx16e, 17bx128e (MoE keys, interleaving, RoPE scaling, sizes)" {
	run -0 titan-config --model.name=llama4
	[[ $output == *"moe_num_experts: 8"* && $output == *"moe_top_k: 1"* ]]
	[[ $output == *"moe_num_shared_experts: 1"* && $output == *"moe_score_func: sigmoid"* ]]
	[[ $output == *"interleave_moe_layer_step: 2"* && $output == *"rope_scaling_factor: 16"* ]]
	[[ $output == *"rope_high_freq_factor: 1"* && $output == *"every_n_layers_nope: 0"* ]]
	run -0 titan-config --model.name=llama4 --model.flavor=17bx16e
	[[ $output == *"moe_num_experts: 16"* && $output == *"interleave_moe_layer_step: 1"* ]]
	[[ $output == *"rope_scaling: true"* ]]
	run -0 titan-config --model.name=llama4 --model.flavor=17bx128e
	[[ $output == *"moe_num_experts: 128"* && $output == *"interleave_moe_layer_step: 2"* ]]
	[[ $output == *"rope_scaling: false"* ]]
	# Scout's and Maverick's text models: 16 experts of 8192 in every
	# block; 128 in every 2nd, dense blocks of 16384 between
	run -0 titan-config --model.name=llama4 --model.flavor=17bx16e --summary
	[[ $output == *"parameters:   107769861120 total (107.770 B)"* ]]
	[[ $output == *"dim 5120, layers 48, heads 40, kv heads 8, head_dim 128, ffn hidden 16384"* ]]
	run -0 titan-config --model.name=llama4 --model.flavor=17bx128e --summary
	[[ $output == *"parameters:   400711848960 total (400.712 B)"* ]]
	# back to llama3: its RoPE scaling and a dense model again
	run -0 titan-config --model.name=llama4 --model.flavor=17bx16e --model.name=llama3 --model.flavor=8B
	[[ $output == *"moe_num_experts: 0"* && $output == *"rope_scaling_factor: 8"* ]]
	[[ $output == *"rope_high_freq_factor: 4"* && $output == *"interleave_moe_layer_step: 1"* ]]
	run -2 --separate-stderr titan-train -q --model.name=llama4 --model.flavor=8B \
		--job.dump_folder="$BATS_TEST_TMPDIR/x"
	[[ $stderr == *"model.flavor: unknown flavor '8B' for model.name llama4"* ]]
}

@test "llama4: chunked attention, every_n_layers_nope 1, NoPE outside llama4, QK-norm and CUDA are refused with exit 2 naming the key" {
	local x=--job.dump_folder="$BATS_TEST_TMPDIR/x"
	run -2 --separate-stderr titan-train -q --config "$DATA/l4.yaml" --model.fixed_attn_block_size=8 "$x"
	[[ $stderr == "titan-train: error: model.fixed_attn_block_size: 8 is below training.seq_len 16: chunked attention on the RoPE layers is not supported"* ]]
	# without NoPE layers torchtitan's Llama 4 has no chunking either
	run -0 titan-train -q --config "$DATA/l4.yaml" --model.fixed_attn_block_size=8 \
		--model.every_n_layers_nope=0 --training.steps=1 "$x"
	run -2 --separate-stderr titan-train -q --config "$DATA/l4.yaml" --model.every_n_layers_nope=1 "$x"
	[[ $stderr == "titan-train: error: model.every_n_layers_nope: must be greater than 1"* ]]
	run -2 --separate-stderr titan-train -q --config "$DATA/l4.yaml" --model.name=llama3 "$x"
	[[ $stderr == "titan-train: error: model.every_n_layers_nope: 2: NoPE layers are Llama 4's (model.name llama4), not llama3's"* ]]
	run -2 --separate-stderr titan-train -q --config "$DATA/l4.yaml" --model.qk_norm=true "$x"
	[[ $stderr == "titan-train: error: model.qk_norm: torchtitan's Llama 4 has no QK-norm"* ]]
	run -2 --separate-stderr titan-train -q --config "$DATA/l4.yaml" --training.device=cuda "$x"
	[[ $stderr == *"error: training.device"* ]]
	# a dense llama4 too: not checked on a GPU yet
	run -2 --separate-stderr titan-train -q --config "$DATA/l4.yaml" --training.device=cuda \
		--model.moe_num_experts=0 "$x"
	[[ $stderr == "titan-train: error: training.device: cuda: model.name llama4 is not checked on a GPU yet"* ]]
}

@test "titan-generate: a llama4 checkpoint continues a prompt as the reference model does (NoPE layers' k/v cache)" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	local o=$BATS_TEST_TMPDIR prompt="In the beginning God"
	# RoPE base 100 and lr 0.01: positions matter enough that rotated keys
	# in the NoPE blocks' cache would move the log-probability by 5%
	run -0 titan-train -q --config "$DATA/l4.yaml" --model.rope_theta=100 --optimizer.lr=0.01 \
		--checkpoint.enable --checkpoint.interval=12 --job.dump_folder="$o/g"
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 11 \
		"$o/g/checkpoint/step-12.h5" "$prompt"
	logprob=$(grep -o 'log-probability of the new tokens: [-0-9.]*' <<< "$stderr" | grep -o '[-0-9.]*$')
	[ -n "$logprob" ]
	printf '%s' "$prompt" | titan-tokenize -t "$DATA/tok.tiktoken" --format text > "$o/prompt.ids"
	run -0 --separate-stderr /usr/bin/python3 tests/ref/llama4_ref.py --init "$o/g/checkpoint/step-12.h5" \
		--prompt "$o/prompt.ids" --model "{$MODEL,\"every_n_layers_nope\":2,\"rope_theta\":100}" \
		--moe "{$MOE,\"interleave_moe_layer_step\":2}"
	want=$output
	/usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); assert abs(a - b) <= 1e-4 * abs(b) + 1e-5, (a, b)' \
		"$logprob" "$want" || fail "log-probability: titan $logprob, reference $want"
	# a context past fixed_attn_block_size would need the chunked attention
	run -0 titan-train -q --config "$DATA/l4.yaml" --model.fixed_attn_block_size=16 --training.steps=1 \
		--checkpoint.enable --checkpoint.interval=1 --job.dump_folder="$o/c16"
	run -1 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 40 --context 40 \
		"$o/c16/checkpoint/step-1.h5" "$prompt"
	[[ $stderr == *"exceed the checkpoint's fixed_attn_block_size 16: chunked attention on the RoPE layers (llama4) is not supported"* ]]
}

@test "llama4: HF and GGUF conversion are refused naming the family" {
	local o=$BATS_TEST_TMPDIR
	run -1 --separate-stderr titan-ckpt-convert -q --to hf "$DATA/r/checkpoint/step-12.h5" "$o/hf"
	[[ $stderr == "titan-ckpt-convert: error: model.name llama4: HF export of Llama 4 (Llama4ForCausalLM) is not supported yet"* ]]
	run -1 --separate-stderr titan-ckpt-convert -q --to gguf "$DATA/r/checkpoint/step-12.h5" "$o/x.gguf"
	[[ $stderr == *"GGUF export: model.name llama4"* ]]
	mkdir -p "$o/in"
	echo '{"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4"}' > "$o/in/config.json"
	run -1 --separate-stderr titan-ckpt-convert -q --from hf "$o/in" "$o/back.h5"
	[[ $stderr == *"model_type \"llama4\": HF conversion of Llama 4 (model.name llama4) is not supported yet"* ]]
}

@test "llama4: a run resumed from its step-5 checkpoint continues bit for bit; other NoPE layers are refused" {
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	run -0 titan-train -q --config "$DATA/l4.yaml" --training.steps=10 $ck --job.dump_folder="$d/a"
	mkdir -p "$d/b/checkpoint"
	cp "$d/a/checkpoint/step-5.h5" "$d/b/checkpoint/"
	run -0 titan-train -q --config "$DATA/l4.yaml" --training.steps=10 $ck --job.dump_folder="$d/b"
	run -0 same_curve "$d/a/metrics.jsonl" "$d/b/metrics.jsonl" bits
	# the same tensor shapes, NoPE in other blocks: another model
	mkdir -p "$d/c/checkpoint"
	cp "$d/a/checkpoint/step-5.h5" "$d/c/checkpoint/"
	run -2 --separate-stderr titan-train -q --config "$DATA/l4.yaml" --training.steps=10 \
		--model.every_n_layers_nope=3 $ck --job.dump_folder="$d/c"
	[[ $stderr == *"holds another model than the config's: every_n_layers_nope 2 there, 3 in the config (model.every_n_layers_nope)"* ]]
}

@test "titan-estimate: a llama4 model's estimate is its metrics to the byte" {
	local o=$BATS_TEST_TMPDIR/e
	run -0 titan-train -q --threads 1 --config "$DATA/l4.yaml" --training.steps=2 --job.dump_folder="$o"
	titan-estimate --config "$DATA/l4.yaml" --training.steps=2 --device cpu --threads 1 --json > "$o/est.json"
	run -0 /usr/bin/python3 - "$o" <<'PY'
import json, sys
o = sys.argv[1]
rows = [json.loads(l) for l in open(o + "/metrics.jsonl")]
er = json.load(open(o + "/est.json"))["ranks"][0]
assert rows[0]["memory_peak_bytes"] == er["peak_bytes"], (rows[0]["memory_peak_bytes"], er["peak_bytes"])
for tag, v in rows[0]["memory_peak_by_tag"].items():
    assert er["at_peak"].get(tag, 0) == v, (tag, v, er["at_peak"])
assert rows[1]["memory_peak_bytes"] == er["step_peak_bytes"], (rows[1]["memory_peak_bytes"], er["step_peak_bytes"])
PY
	run -0 --separate-stderr titan-estimate --config "$DATA/l4.yaml" --device cpu --threads 1
	assert_line --partial "model     Llama 4 debugmodel:"
	assert_line --regexp "^moe       4 experts \(top 1, 1 shared, hidden 96\) in 2 of 4 blocks"
}

@test "llama4 on 2 ranks: a dense llama4 with NoPE layers under TP, CP and PP, and the MoE under FSDP, reproduce the 1-rank curve" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	local d=$BATS_TEST_TMPDIR dense=(--model.moe_num_experts=0 --model.rope_theta=100 --training.steps=10)
	run -0 titan-train -q --config "$DATA/l4.yaml" "${dense[@]}" --job.dump_folder="$d/one"
	for a in tensor_parallel_degree context_parallel_degree pipeline_parallel_degree; do
		run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
			--config "$DATA/l4.yaml" "${dense[@]}" --parallelism.$a=2 --job.dump_folder="$d/$a"
		run -0 same_curve "$d/one/metrics.jsonl" "$d/$a/metrics.jsonl"
	done
	run -0 titan-train -q --config "$DATA/l4.yaml" --training.local_batch_size=4 --training.steps=10 \
		--job.dump_folder="$d/moe1"
	run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/l4.yaml" \
		--training.steps=10 --parallelism.data_parallel_shard_degree=2 --job.dump_folder="$d/fsdp"
	run -0 same_curve "$d/moe1/metrics.jsonl" "$d/fsdp/metrics.jsonl"
}

@test "llama4: full, per-op and every-block activation checkpointing change no bit (NoPE blocks recomputed without RoPE)" {
	local d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/l4.yaml" --model.rope_theta=100 --training.steps=10 \
		--job.dump_folder="$d/none"
	for ac in "--activation_checkpoint.mode=full" \
		"--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op" \
		"--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=1"; do
		run -0 titan-train -q --config "$DATA/l4.yaml" --model.rope_theta=100 --training.steps=10 \
			$ac --job.dump_folder="$d/ac"
		run -0 same_curve "$d/none/metrics.jsonl" "$d/ac/metrics.jsonl" bits
		rm -rf "$d/ac"
	done
}
