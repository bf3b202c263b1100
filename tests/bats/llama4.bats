#!/usr/bin/env bats
# model.name llama4: torchtitan's Llama 4 text model (iRoPE's NoPE layers,
# MoE interleaved with dense blocks, top-1 sigmoid routing with one shared
# expert, the experts' hidden size auto-scaled, RoPE scaling factor 16)
# against the PyTorch reference tests/ref/llama4_ref.py (12 steps, fp32,
# <= 1e-5), titan-generate, titan-estimate to the byte, and what titan does
# not take refused naming the key.

bats_require_minimum_version 1.5.0

setup_file() {
	load moe
	moe_corpus 400
	# debugmodel shrunk: NoPE in blocks 0 and 2, MoE in blocks 1 and 3
	# (interleave_moe_layer_step 2), 4 experts of int(170 / 2) -> 96
	{
		cat <<YAML
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
YAML
		moe_train_yaml 12 2
	} > "$DATA/l4.yaml"
	# its 12-step checkpoint, for generation and conversion
	titan-train -q --config "$DATA/l4.yaml" --job.dump_folder="$DATA/r" --checkpoint.enable \
		--checkpoint.interval=12
}

setup() {
	load moe
	moe_setup
}

MODEL='"dim":64,"n_layers":4,"n_heads":4,"n_kv_heads":2,"vocab_size":600,"multiple_of":32'
MOE='"num_experts":4,"top_k":1,"num_shared_experts":1,"score_func":"sigmoid","route_norm":false,"route_scale":1.0,"score_before_experts":true,"load_balance_coeff":1e-3'

# ref NAME MODEL_JSON MOE_JSON ARGS...: ref_vs with llama4_ref.py and
# $DATA/l4.yaml, in $TITAN_SRCDIR (the caller stays there)
ref() {
	cd "$TITAN_SRCDIR"
	ref_vs llama4_ref.py "$DATA/l4.yaml" "$@"
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

@test "llama4: every_n_layers_nope 1, NoPE outside llama4, QK-norm and CUDA are refused with exit 2 naming the key" {
	local x=--job.dump_folder="$BATS_TEST_TMPDIR/x"
	# chunked attention (a block below the sequence) runs: the suite's end
	# checks it; without NoPE layers torchtitan's Llama 4 has no chunking
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
}

@test "llama4 HF: --to hf writes Llama4ForCausalLM's names, layout and config.json, --from hf gives the tensors back bit for bit" {
	/usr/bin/python3 -c 'import h5py, torch' 2>/dev/null || skip "python3-h5py or torch is missing"
	cd "$TITAN_SRCDIR"
	local o=$BATS_TEST_TMPDIR
	run -0 titan-ckpt-convert -q --to hf --tokenizer "$DATA/tok.tiktoken" \
		"$DATA/r/checkpoint/step-12.h5" "$o/hf"
	run -0 titan-ckpt-convert -q --from hf "$o/hf" "$o/back.h5"
	run -0 /usr/bin/python3 - "$o" "$DATA" <<'PY'
import json, sys, h5py, numpy as np
sys.path.insert(0, "tests/ref")
import safetensors_py as st
o, data = sys.argv[1:]
c = json.load(open(f"{o}/hf/config.json"))
assert c["architectures"] == ["Llama4ForCausalLM"] and c["model_type"] == "llama4_text", c
assert c["hidden_size"] == 64 and c["intermediate_size"] == 96 and c["intermediate_size_mlp"] == 192
assert c["num_local_experts"] == 4 and c["num_experts_per_tok"] == 1, c
assert c["interleave_moe_layer_step"] == 2 and c["moe_layers"] == [1, 3], c
assert c["no_rope_layers"] == [0, 1, 0, 1], c  # 1: RoPE; titan's NoPE blocks 0 and 2
assert c["use_qk_norm"] is False and c["attn_temperature_tuning"] is False
assert c["attention_chunk_size"] == 8192 and c["head_dim"] == 16 and c["tie_word_embeddings"] is False
assert c["rope_scaling"] == {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}, c
t, _ = st.load(f"{o}/hf/model.safetensors")
a = h5py.File(f"{data}/r/checkpoint/step-12.h5", "r")["model"]
ff = "model.layers.1.feed_forward."
assert t[ff + "router.weight"].shape == (4, 64) and t[ff + "experts.gate_up_proj"].shape == (4, 64, 192)
assert t[ff + "experts.down_proj"].shape == (4, 96, 64)
assert t[ff + "shared_expert.gate_proj.weight"].shape == (96, 64)
assert t["model.layers.0.feed_forward.gate_proj.weight"].shape == (192, 64)
assert "model.layers.0.feed_forward.router.weight" not in t and "model.layers.2.mlp.gate_proj.weight" not in t
assert len(t) == 4 * 6 + 2 * 3 + 2 * 6 + 3, sorted(t)  # attention, norms; dense; MoE; embed, norm, head
# gate_up_proj[e] = [w1[e]ᵀ | w3[e]ᵀ], down_proj[e] = w2[e]ᵀ, q/k rows as titan's (no permutation)
gu = t[ff + "experts.gate_up_proj"].numpy()
assert np.array_equal(gu[:, :, :96], a["layers.1.moe.experts.w1"][()].transpose(0, 2, 1))
assert np.array_equal(gu[:, :, 96:], a["layers.1.moe.experts.w3"][()].transpose(0, 2, 1))
assert np.array_equal(t[ff + "experts.down_proj"].numpy(), a["layers.1.moe.experts.w2"][()].transpose(0, 2, 1))
assert np.array_equal(t["model.layers.2.self_attn.k_proj.weight"].numpy(), a["layers.2.attention.wk.weight"][()])
b = h5py.File(f"{o}/back.h5", "r")
assert b.attrs["model_name"] in (b"llama4", "llama4") and b.attrs["every_n_layers_nope"] == 2, dict(b.attrs)
assert b.attrs["interleave_moe_layer_step"] == 2 and b.attrs["moe_inter_dim"] == 96
assert b.attrs["moe_score_before_experts"] == 1 and b.attrs["moe_num_shared_experts"] == 1
b = b["model"]
assert sorted(a) == sorted(b)
for n in a:
    if n.endswith("expert_bias"):  # no HF counterpart: zero on import
        assert np.any(a[n][()] != 0) and not np.any(b[n][()]), n
    else:
        assert np.array_equal(a[n][()], b[n][()]), n
print("ok")
PY
	assert_output "ok"
}

@test "titan-generate: a llama4 checkpoint and its HF export continue a prompt alike; the multimodal layout (language_model.) reads back" {
	/usr/bin/python3 -c 'import h5py, torch' 2>/dev/null || skip "python3-h5py or torch is missing"
	cd "$TITAN_SRCDIR"
	local o=$BATS_TEST_TMPDIR prompt="In the beginning God"
	# without expert_bias (no HF counterpart), RoPE base 100: positions matter
	run -0 titan-train -q --config "$DATA/l4.yaml" --model.rope_theta=100 --optimizer.lr=0.01 \
		--model.moe_load_balance_coeff=null --training.steps=6 --checkpoint.enable \
		--checkpoint.interval=6 --job.dump_folder="$o/g"
	run -0 titan-ckpt-convert -q --to hf "$o/g/checkpoint/step-6.h5" "$o/hf"
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 11 \
		"$o/g/checkpoint/step-6.h5" "$prompt"
	local text=$output lp=${stderr##*log-probability of the new tokens: }
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 11 "$o/hf" "$prompt"
	assert_equal "$output" "$text"
	assert_equal "${stderr##*log-probability of the new tokens: }" "$lp"
	# Llama4ForConditionalGeneration's folder: the text config in
	# text_config, the tensors under language_model., image tensors beside
	mkdir -p "$o/mm"
	/usr/bin/python3 - "$o/hf" "$o/mm" <<'PY'
import json, sys, torch
sys.path.insert(0, "tests/ref")
import safetensors_py as st
src, dst = sys.argv[1:]
c = json.load(open(f"{src}/config.json"))
json.dump({"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
           "text_config": c, "vision_config": {"hidden_size": 8}}, open(f"{dst}/config.json", "w"))
t, _ = st.load(f"{src}/model.safetensors")
t = {"language_model." + k: v for k, v in t.items()}
t["vision_model.patch_embedding.linear.weight"] = torch.zeros(8, 4)
t["multi_modal_projector.linear_1.weight"] = torch.zeros(64, 8)
st.save(f"{dst}/model.safetensors", list(t.items()), {"format": "pt"})
PY
	run -0 titan-ckpt-convert -q --from hf "$o/mm" "$o/mm.h5"
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 11 "$o/mm.h5" "$prompt"
	assert_equal "$output" "$text"
}

@test "llama4 HF: what titan's Llama 4 cannot be is refused naming the key; GGUF export still refused" {
	local o=$BATS_TEST_TMPDIR
	run -1 --separate-stderr titan-ckpt-convert -q --to gguf "$DATA/r/checkpoint/step-12.h5" "$o/x.gguf"
	[[ $stderr == *"GGUF export: model.name llama4"* ]]
	titan-ckpt-convert -q --to hf "$DATA/r/checkpoint/step-12.h5" "$o/hf"
	# edit KEY=JSON...: the exported config.json with keys replaced (null: removed)
	edit() {
		rm -rf "$o/e" && cp -r "$o/hf" "$o/e"
		/usr/bin/python3 - "$o/e/config.json" "$@" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    v = json.loads(v)
    if v is None:
        c.pop(k, None)
    else:
        c[k] = v
json.dump(c, open(sys.argv[1], "w"))
PY
	}
	local e="titan-ckpt-convert: error: '$o/e/config.json'"
	edit use_qk_norm=null
	run -1 --separate-stderr titan-ckpt-convert -q --from hf "$o/e" "$o/x.h5"
	[[ $stderr == "$e: use_qk_norm is not false: titan's Llama 4 (torchtitan's) has no QK L2 norm"* ]]
	edit 'no_rope_layers=[1, 1, 1, 0]'
	run -1 --separate-stderr titan-ckpt-convert -q --from hf "$o/e" "$o/x.h5"
	[[ $stderr == "$e: no_rope_layers: titan's NoPE blocks (model.every_n_layers_nope n) are 0, n, 2n, ..; block 0 is not"* ]]
	edit no_rope_layers=null no_rope_layer_interval=2
	run -1 --separate-stderr titan-ckpt-convert -q --from hf "$o/e" "$o/x.h5"
	[[ $stderr == "$e: no_rope_layer_interval 2: HF's NoPE blocks 1, 3, .. are not titan's"* ]]
	edit 'moe_layers=[0, 2]'
	run -1 --separate-stderr titan-ckpt-convert -q --from hf "$o/e" "$o/x.h5"
	[[ $stderr == "$e: moe_layers: titan's MoE blocks are every interleave_moe_layer_step-th (1, 3, ..), or none"* ]]
	edit attn_temperature_tuning=true
	run -1 --separate-stderr titan-ckpt-convert -q --from hf "$o/e" "$o/x.h5"
	[[ $stderr == "$e: attn_temperature_tuning with floor_scale 8192 within attention_chunk_size 8192: titan's NoPE blocks do not scale queries by position"* ]]
	# past the chunk (no position titan reaches), and without NoPE blocks, it changes nothing
	edit attn_temperature_tuning=true floor_scale=16384
	run -0 titan-ckpt-convert -q --from hf "$o/e" "$o/x.h5"
	# every block dense, every block RoPE: a dense llama4 reading only the dense tensors
	edit 'moe_layers=[]' 'no_rope_layers=[1, 1, 1, 1]'
	run -1 --separate-stderr titan-ckpt-convert -q --from hf "$o/e" "$o/x.h5"
	[[ $stderr == *"tensor 'model.layers.1.feed_forward.gate_proj.weight' is missing"* ]]
}

@test "llama4: a run resumed from its step-5 checkpoint continues bit for bit; other NoPE layers are refused" {
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	resume_bits "$DATA/l4.yaml" $ck
	# the same tensor shapes, NoPE in other blocks: another model
	mkdir -p "$d/c/checkpoint"
	cp "$d/a/checkpoint/step-5.h5" "$d/c/checkpoint/"
	run -2 --separate-stderr titan-train -q --config "$DATA/l4.yaml" --training.steps=10 \
		--model.every_n_layers_nope=3 $ck --job.dump_folder="$d/c"
	[[ $stderr == *"holds another model than the config's: every_n_layers_nope 2 there, 3 in the config (model.every_n_layers_nope)"* ]]
}

# est_is_metrics DIR: DIR/est.json's peak (start-up included) and bytes by
# tag, and its step's peak, are those of DIR/metrics.jsonl, to the byte
est_is_metrics() {
	/usr/bin/python3 - "$1" <<'PY'
import json, sys
o = sys.argv[1]
rows = [json.loads(l) for l in open(o + "/metrics.jsonl")]
er = json.load(open(o + "/est.json"))["ranks"][0]
assert rows[0]["memory_peak_bytes"] == er["peak_bytes"], (rows[0]["memory_peak_bytes"], er["peak_bytes"])
for tag, v in rows[0]["memory_peak_by_tag"].items():
    assert er["at_peak"].get(tag, 0) == v, (tag, v, er["at_peak"])
assert rows[1]["memory_peak_bytes"] == er["step_peak_bytes"], (rows[1]["memory_peak_bytes"], er["step_peak_bytes"])
PY
}

@test "titan-estimate: a llama4 model's estimate is its metrics to the byte" {
	local o=$BATS_TEST_TMPDIR/e
	run -0 titan-train -q --threads 1 --config "$DATA/l4.yaml" --training.steps=2 --job.dump_folder="$o"
	titan-estimate --config "$DATA/l4.yaml" --training.steps=2 --device cpu --threads 1 --json > "$o/est.json"
	run -0 est_is_metrics "$o"
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

# 12 steps of the reference from run NAME's seed (model JSON, MoE JSON) into
# $BATS_TEST_TMPDIR/NAME/OUT.json
ref_only() {
	local d=$BATS_TEST_TMPDIR/$1
	/usr/bin/python3 tests/ref/llama4_ref.py --init "$d/seed/checkpoint/step-0.h5" \
		--shards "$DATA/shards" --model "$3" --moe "$4" ${MASK:+--mask "$MASK"} \
		--train '{"batch":2,"seq_len":16,"steps":12,"lr":8e-4,"warmup":2}' > "$d/$2.json"
}

# differs METRICS REF_JSON: the losses of the two curves differ somewhere
# by more than 1e-3 relative (100x check_curve.py's tolerance)
differs() {
	/usr/bin/python3 -c 'import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = json.load(open(sys.argv[2]))["loss"]
d = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("worst relative loss difference %.2e" % d)
sys.exit(0 if d > 1e-3 else 1)' "$@"
}

@test "llama4 chunked attention (fixed_attn_block_size 8 and 5 < seq_len 16, with block_causal): 12 steps equal the reference, which without the chunks differs" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	local moe="{$MOE,\"interleave_moe_layer_step\":2}" m="{$MODEL,\"every_n_layers_nope\":2"
	# the RoPE blocks 1 and 3 attend within positions 0-7 and 8-15
	ref c8 "$m,\"fixed_attn_block_size\":8}" "$moe" --model.fixed_attn_block_size=8
	ref_only c8 whole "$m}" "$moe"
	run -0 differs "$BATS_TEST_TMPDIR/c8/run/metrics.jsonl" "$BATS_TEST_TMPDIR/c8/whole.json"
	echo "# chunks of 8 vs none: $output" >&3
	# chunks of 5 (the last one of 1), and-ed with the documents' mask
	MASK=block_causal ref c5 "$m,\"fixed_attn_block_size\":5}" "$moe" \
		--model.fixed_attn_block_size=5 --training.attn_mask_type=block_causal
	MASK=block_causal ref_only c5 docs "$m}" "$moe"
	run -0 differs "$BATS_TEST_TMPDIR/c5/run/metrics.jsonl" "$BATS_TEST_TMPDIR/c5/docs.json"
	echo "# block_causal, chunks of 5 vs none: $output" >&3
}

@test "titan-generate: a llama4 checkpoint with chunks of 8 continues a 14-token prompt past position 16 as the reference does (prefill and cache past a chunk)" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	local o=$BATS_TEST_TMPDIR prompt="In the beginning God created the heaven and the earth. And the"
	run -0 titan-train -q --config "$DATA/l4.yaml" --model.rope_theta=100 --optimizer.lr=0.01 \
		--model.fixed_attn_block_size=8 --checkpoint.enable --checkpoint.interval=12 \
		--job.dump_folder="$o/g"
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 10 --context 24 \
		"$o/g/checkpoint/step-12.h5" "$prompt"
	logprob=$(grep -o 'log-probability of the new tokens: [-0-9.]*' <<< "$stderr" | grep -o '[-0-9.]*$')
	[ -n "$logprob" ]
	# the prompt fills the first chunk and part of the second (its
	# prefill), the continuation (to the line's EOS) the rest of it and
	# part of the third
	[[ $stderr =~ ([0-9]+)\ new\ tokens\ after\ a\ prompt\ of\ ([0-9]+) ]] || fail "$stderr"
	local len=$((BASH_REMATCH[1] + BASH_REMATCH[2]))
	[ "${BASH_REMATCH[2]}" -gt 8 ] && [ "$len" -gt 16 ] || fail "$len tokens, a prompt of ${BASH_REMATCH[2]}"
	printf '%s' "$prompt" | titan-tokenize -t "$DATA/tok.tiktoken" --format text > "$o/prompt.ids"
	local m="{$MODEL,\"every_n_layers_nope\":2,\"rope_theta\":100" moe="{$MOE,\"interleave_moe_layer_step\":2}"
	for c in 8 24; do
		run -0 --separate-stderr /usr/bin/python3 tests/ref/llama4_ref.py --length "$len" \
			--init "$o/g/checkpoint/step-12.h5" --prompt "$o/prompt.ids" \
			--model "$m,\"fixed_attn_block_size\":$c}" --moe "$moe"
		eval "want$c=\$output"
	done
	echo "# $len tokens: titan $logprob, reference $want8, reference without chunks $want24" >&3
	/usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); assert abs(a - b) <= 1e-4 * abs(b) + 1e-5, (a, b)' \
		"$logprob" "$want8" || fail "log-probability: titan $logprob, reference $want8"
	/usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); assert abs(a - b) > 0.1 * abs(b), (a, b)' \
		"$logprob" "$want24" || fail "log-probability: titan $logprob, unchunked reference $want24"
}

@test "llama4 chunked attention on 2 ranks: CP 2 (allgather, alltoall), TP 2 and PP 2 reproduce the 1-rank curve, with block_causal too" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	local d=$BATS_TEST_TMPDIR
	# chunks of 5 cut across CP 2's chunks of 4 positions
	local c=(--model.fixed_attn_block_size=5 --training.steps=10 --training.attn_mask_type=block_causal)
	local lay
	run -0 titan-train -q --config "$DATA/l4.yaml" "${c[@]}" --job.dump_folder="$d/one"
	for lay in "context_parallel_degree=2" \
		"context_parallel_degree=2 --parallelism.context_parallel_rotate_method=alltoall" \
		"tensor_parallel_degree=2" "pipeline_parallel_degree=2"; do
		rm -rf "$d/two"
		run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
			--config "$DATA/l4.yaml" "${c[@]}" --parallelism.$lay --job.dump_folder="$d/two"
		run -0 same_curve "$d/one/metrics.jsonl" "$d/two/metrics.jsonl"
		echo "# $lay: $output" >&3
	done
	# causal documents: CP 2 alltoall with chunks of 3
	c=(--model.fixed_attn_block_size=3 --training.steps=10)
	run -0 titan-train -q --config "$DATA/l4.yaml" "${c[@]}" --job.dump_folder="$d/one3"
	rm -rf "$d/two"
	run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/l4.yaml" \
		"${c[@]}" --parallelism.context_parallel_degree=2 \
		--parallelism.context_parallel_rotate_method=alltoall --job.dump_folder="$d/two"
	run -0 same_curve "$d/one3/metrics.jsonl" "$d/two/metrics.jsonl"
}

@test "titan-estimate: a chunked llama4's estimate is its metrics to the byte, its chunk ids a row of their own" {
	local o=$BATS_TEST_TMPDIR/e c=(--model.fixed_attn_block_size=8 --training.attn_mask_type=block_causal)
	run -0 titan-train -q --threads 1 --config "$DATA/l4.yaml" "${c[@]}" --training.steps=2 \
		--job.dump_folder="$o"
	titan-estimate --config "$DATA/l4.yaml" "${c[@]}" --training.steps=2 --device cpu --threads 1 \
		--json > "$o/est.json"
	run -0 est_is_metrics "$o"
	run -0 /usr/bin/python3 - "$o" <<'PY'
import json, sys
er = json.load(open(sys.argv[1] + "/est.json"))["ranks"][0]
# sequence order and CP's local order, an int32 a token each, of the 2 x 16 microbatch
for name in ("chunked attention: the RoPE blocks' chunk ids", "block_causal: document ids"):
    it = [i for i in er["items"] if i["name"] == name]
    assert it and it[0]["tag"] == "data" and it[0]["bytes"] == 2 * 2 * 16 * 4, (name, er["items"])
PY
	# no chunk past the sequence: no chunk ids
	titan-estimate --config "$DATA/l4.yaml" --device cpu --threads 1 --json > "$o/none.json"
	run -1 grep -q "chunk ids" "$o/none.json"
}
