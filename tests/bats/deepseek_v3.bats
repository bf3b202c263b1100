#!/usr/bin/env bats
# model.name deepseek_v3: torchtitan's DeepSeek-V3 family (multi-head latent
# attention with YaRN RoPE, first-k dense blocks, MoE with shared experts)
# against the PyTorch reference tests/ref/deepseek_v3_ref.py (12 steps,
# fp32, <= 1e-5), activation checkpointing, DDP and FSDP on 2 ranks equal
# to 1 rank, and the layouts refused naming the key (TP, CP and the
# zero-bubble schedules: mla-tp-cp.bats).

bats_require_minimum_version 1.5.0

setup_file() {
	load moe
	moe_corpus 400
	# titan's tiny flavor: q_lora_rank 32, DeepSeek-V3's sigmoid routing
	moe_train_yaml 12 2 | ds_yaml "$DATA/ds.yaml"
	# its 12-step checkpoint, for generation and conversion
	titan-train -q --config "$DATA/ds.yaml" --job.dump_folder="$DATA/r" --checkpoint.enable \
		--checkpoint.interval=12
}

setup() {
	load moe
	moe_setup
}

# ref NAME MODEL_JSON MOE_JSON ARGS...: ref_vs with deepseek_v3_ref.py and
# $DATA/ds.yaml (the caller in $TITAN_SRCDIR)
ref() { ref_vs deepseek_v3_ref.py "$DATA/ds.yaml" "$@"; }

TINY='"dim":64,"n_layers":3,"n_heads":4,"vocab_size":600,"hidden_dim":192'
SIG='"num_experts":8,"top_k":2,"inter_dim":64,"num_shared_experts":1,"score_func":"sigmoid","route_norm":true,"route_scale":2.5,"score_before_experts":false,"load_balance_coeff":1e-3,"n_dense_layers":1'

@test "deepseek_v3 debugmodel_mla (q_lora_rank 32, YaRN, sigmoid routing, 1 dense block): 12 steps equal the PyTorch reference" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	ref mla "{$TINY,\"q_lora_rank\":32,\"kv_lora_rank\":32,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,\"v_head_dim\":16}" "{$SIG}"
}

@test "deepseek_v3 debugmodel shrunk (plain wq, v_head_dim < q/k head, softmax routing, 2 shared): equal the reference" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	# debugmodel's routing (softmax top-3 of 8, 2 shared experts, mscale
	# 0.70 under rope_factor 40) with tiny dims; rope_theta set apart
	ref dbg "{\"dim\":48,\"n_layers\":2,\"n_heads\":2,\"vocab_size\":600,\"hidden_dim\":96,\"q_lora_rank\":0,\"kv_lora_rank\":24,\"qk_nope_head_dim\":12,\"qk_rope_head_dim\":8,\"v_head_dim\":10,\"rope_theta\":5000.0}" \
		'{"num_experts":8,"top_k":3,"inter_dim":32,"num_shared_experts":2,"score_func":"softmax","route_norm":false,"route_scale":1.0,"score_before_experts":false,"load_balance_coeff":1e-3,"n_dense_layers":1}' \
		--model.flavor=debugmodel --model.dim=48 --model.n_layers=2 --model.n_heads=2 \
		--model.hidden_dim=96 --model.kv_lora_rank=24 --model.qk_nope_head_dim=12 \
		--model.qk_rope_head_dim=8 --model.v_head_dim=10 --model.moe_inter_dim=32 \
		--model.rope_theta=5000
}

@test "deepseek_v3 with training.attn_mask_type block_causal: equal the reference that masks by document" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	MASK=block_causal ref bc "{$TINY,\"q_lora_rank\":32,\"kv_lora_rank\":32,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,\"v_head_dim\":16}" "{$SIG}" \
		--training.attn_mask_type=block_causal
}

@test "deepseek_v3 flavors: torchtitan's debugmodel, 16B, 236B, 671B routing in the model.moe_* keys; MLA keys override" {
	for f in debugmodel debugmodel_mla 16B 236B 671B; do
		run -0 titan-config --model.name=deepseek_v3 --model.flavor=$f
	done
	run -0 titan-config --model.name=deepseek_v3 --model.flavor=671B
	[[ $output == *"moe_num_experts: 256"* && $output == *"moe_top_k: 8"* ]]
	[[ $output == *"moe_score_func: sigmoid"* && $output == *"n_dense_layers: 3"* ]]
	[[ $output == *"moe_route_scale: 2.5"* && $output == *"rope_theta: 10000"* ]]
	run -0 titan-config --model.name=deepseek_v3 --model.flavor=debugmodel
	[[ $output == *"moe_num_experts: 8"* && $output == *"moe_top_k: 3"* ]]
	[[ $output == *"moe_num_shared_experts: 2"* && $output == *"moe_score_func: softmax"* ]]
	# the real flavors' sizes (torchtitan's 16B; DeepSeek-V3's 671B without MTP)
	run -0 titan-config --model.name=deepseek_v3 --model.flavor=16B --summary
	[[ $output == *"parameters:   15706484224 total (15.706 B)"* ]]
	run -0 titan-config --model.name=deepseek_v3 --model.flavor=671B --summary
	[[ $output == *"parameters:   671026404352 total (671.026 B)"* ]]
	[[ $output == *"dims:         dim 7168, layers 61, heads 128, kv heads 128, head_dim 192"* ]]
	# a qwen3-only flavor is refused
	run -2 --separate-stderr titan-train -q --model.name=deepseek_v3 --model.flavor=0.6B \
		--job.dump_folder="$BATS_TEST_TMPDIR/x"
	[[ $stderr == *"model.flavor: unknown flavor '0.6B' for model.name deepseek_v3"* ]]
	run -2 --separate-stderr titan-train -q --config "$DATA/ds.yaml" --model.v_head_dim=40 \
		--job.dump_folder="$BATS_TEST_TMPDIR/x"
	[[ $stderr == "titan-train: error: model.v_head_dim: 40 above the q/k head size 24"* ]]
}

@test "deepseek_v3: the checkpoint holds MLA's tensors in torchtitan's order and shapes" {
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/ds.yaml" --job.dump_folder="$d/s" \
		--checkpoint.enable --checkpoint.create_seed_checkpoint
	run -0 /usr/bin/python3 - "$d/s/checkpoint/step-0.h5" <<'PY'
import sys, h5py
m = h5py.File(sys.argv[1], "r")["model"]
names = [k for k in m if k.startswith("layers.0.")]
assert names == ["layers.0.attention.wq_a.weight", "layers.0.attention.q_norm.weight",
                 "layers.0.attention.wq_b.weight", "layers.0.attention.wkv_a.weight",
                 "layers.0.attention.kv_norm.weight", "layers.0.attention.wkv_b.weight",
                 "layers.0.attention.wo.weight", "layers.0.attention_norm.weight",
                 "layers.0.ffn_norm.weight", "layers.0.feed_forward.w1.weight",
                 "layers.0.feed_forward.w2.weight", "layers.0.feed_forward.w3.weight"], names
shapes = {k: m[k].shape for k in names}
assert shapes["layers.0.attention.wq_a.weight"] == (32, 64)
assert shapes["layers.0.attention.wq_b.weight"] == (4 * 24, 32)
assert shapes["layers.0.attention.wkv_a.weight"] == (32 + 8, 64)
assert shapes["layers.0.attention.wkv_b.weight"] == (4 * (16 + 16), 32)
assert shapes["layers.0.attention.wo.weight"] == (64, 4 * 16)
assert "layers.1.moe.experts.w1" in m and "layers.1.moe.shared_experts.w1.weight" in m
PY
}

@test "deepseek_v3: the same bits on 1 and 3 threads; full and selective-1 activation checkpointing change no bit" {
	d=$BATS_TEST_TMPDIR
	run -0 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/ds.yaml" --training.steps=10 \
		--job.dump_folder="$d/a"
	run -0 env OMP_NUM_THREADS=3 titan-train -q --config "$DATA/ds.yaml" --training.steps=10 \
		--job.dump_folder="$d/b"
	run -0 same_curve "$d/a/metrics.jsonl" "$d/b/metrics.jsonl" bits
	for ac in "--activation_checkpoint.mode=full" \
		"--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=1"; do
		rm -rf "$d/c"
		run -0 titan-train -q --config "$DATA/ds.yaml" --training.steps=10 $ac \
			--job.dump_folder="$d/c"
		run -0 same_curve "$d/a/metrics.jsonl" "$d/c/metrics.jsonl" bits
	done
}

@test "deepseek_v3 on 2 ranks: DDP, FSDP and (dense) PP reproduce the 1-rank curve" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/ds.yaml" --training.local_batch_size=4 \
		--training.steps=10 --job.dump_folder="$d/one"
	for dp in "--parallelism.data_parallel_shard_degree=2" \
		"--parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1"; do
		run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
			--config "$DATA/ds.yaml" --training.steps=10 $dp --job.dump_folder="$d/two"
		run -0 same_curve "$d/one/metrics.jsonl" "$d/two/metrics.jsonl"
		rm -rf "$d/two"
	done
	# PP 2 of dense blocks (MoE blocks refuse PP): the 1-rank curve
	run -0 titan-train -q --config "$DATA/ds.yaml" --model.moe_num_experts=0 \
		--training.steps=10 --job.dump_folder="$d/pp1"
	run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/ds.yaml" --model.moe_num_experts=0 --training.steps=10 \
		--parallelism.pipeline_parallel_degree=2 --job.dump_folder="$d/pp2"
	run -0 same_curve "$d/pp1/metrics.jsonl" "$d/pp2/metrics.jsonl"
}

@test "deepseek_v3: CUDA and titan-estimate's GPU model are refused with exit 2 naming the key" {
	# dense (moe_num_experts 0): the MoE's own refusals come first
	# otherwise; TP, CP, per-op AC and the zero-bubble schedules run
	# (mla-tp-cp.bats)
	run -2 --separate-stderr titan-train -q --config "$DATA/ds.yaml" --model.moe_num_experts=0 \
		--training.device=cuda --job.dump_folder="$BATS_TEST_TMPDIR/x"
	[[ $stderr == *"error: "*"training.device"* ]]
	# titan-estimate's GPU model does not count MLA yet: refused, not estimated wrong
	run -2 --separate-stderr titan-estimate --config "$DATA/ds.yaml" --model.moe_num_experts=0
	[[ $stderr == "titan-estimate: error: model.kv_lora_rank 32: the GPU model does not know multi-head latent attention"* ]]
}

@test "titan-estimate --device cpu --rank R: deepseek_v3's memory on 2 ranks to the byte (FSDP 2, EP 2, DDP 2 dense, TP 2, CP 2, TP 2 with op AC, ZBVZeroBubble)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	local d=$BATS_TEST_TMPDIR
	for dp in "--parallelism.data_parallel_shard_degree=2 --activation_checkpoint.mode=full" \
		"--parallelism.expert_parallel_degree=2" \
		"--parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1 --model.moe_num_experts=0" \
		"--parallelism.tensor_parallel_degree=2" \
		"--parallelism.context_parallel_degree=2 --parallelism.context_parallel_rotate_method=alltoall" \
		"--parallelism.tensor_parallel_degree=2 --model.moe_num_experts=0 --activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op" \
		"--model.moe_num_experts=0 --model.n_layers=6 --parallelism.pipeline_parallel_degree=2 --parallelism.pipeline_parallel_schedule=ZBVZeroBubble --activation_checkpoint.mode=full"; do
		rm -rf "$d/two"
		run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --threads 1 \
			--config "$DATA/ds.yaml" --training.steps=2 --metrics.save_for_all_ranks $dp \
			--job.dump_folder="$d/two"
		for r in 0 1; do
			titan-estimate --config "$DATA/ds.yaml" --device cpu --threads 1 --json --ngpu 2 --rank $r \
				--training.steps=2 --metrics.save_for_all_ranks $dp > "$d/est$r.json"
		done
		/usr/bin/python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
for r in range(2):
    rows = [json.loads(l) for l in open(d + ("/two/metrics.jsonl" if r == 0 else "/two/metrics.rank%d.jsonl" % r))]
    er = json.load(open("%s/est%d.json" % (d, r)))["ranks"][0]
    assert rows[0]["memory_peak_bytes"] == er["peak_bytes"], (r, rows[0]["memory_peak_bytes"], er["peak_bytes"], er["peak_moment"])
    tags = rows[0]["memory_peak_by_tag"]
    for tag in set(tags) | set(er["at_peak"]):
        assert er["at_peak"].get(tag, 0) == tags.get(tag, 0), (r, tag, tags, er["at_peak"])
    assert rows[1]["memory_peak_bytes"] == er["step_peak_bytes"], (r, rows[1]["memory_peak_bytes"], er["step_peak_bytes"])
PY
	done
}

@test "titan-generate: a deepseek_v3 checkpoint continues a prompt as the reference model does (expanded k/v cache)" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	local o=$BATS_TEST_TMPDIR prompt="In the beginning God"
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 11 \
		"$DATA/r/checkpoint/step-12.h5" "$prompt"
	logprob=$(grep -o 'log-probability of the new tokens: [-0-9.]*' <<< "$stderr" | grep -o '[-0-9.]*$')
	[ -n "$logprob" ]
	printf '%s' "$prompt" | titan-tokenize -t "$DATA/tok.tiktoken" --format text > "$o/prompt.ids"
	run -0 --separate-stderr /usr/bin/python3 - "$DATA/r/checkpoint/step-12.h5" "$o/prompt.ids" \
		"{$TINY,\"q_lora_rank\":32,\"kv_lora_rank\":32,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,\"v_head_dim\":16}" \
		"{$SIG}" <<'PY'
import json, sys, h5py, numpy as np, torch
sys.path.insert(0, "tests/ref")
import deepseek_v3_ref as R
ck, ids_path, model, moe = sys.argv[1:]
a = R.DSArgs(**json.loads(model), max_seq_len=16)
m, _ = R.build(a, json.loads(moe))
f = h5py.File(ck, "r")
m.load_state_dict({k: torch.from_numpy(f["model"][k][...]) for k in f["model"]}, strict=True)
m.eval()
ids = np.fromfile(ids_path, dtype=np.uint32).tolist()[:-1]
lp = 0.0
with torch.no_grad():
    while len(ids) < 16:
        logits = m(torch.tensor([ids]))[0, -1]
        nxt = int(logits.argmax())
        lp += float(torch.log_softmax(logits.double(), -1)[nxt])
        ids.append(nxt)
sys.stderr.write("%.6f\n" % lp)
PY
	/usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); assert abs(a - b) <= 1e-4 * abs(b) + 1e-5, (a, b)' \
		"$logprob" "$stderr" || fail "log-probability: titan $logprob, reference $stderr"
}

@test "HF: --to hf writes DeepseekV3ForCausalLM's names and config.json, --from hf gives every tensor back bit for bit" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	local o=$BATS_TEST_TMPDIR prompt="In the beginning God"
	run -0 titan-ckpt-convert -q --to hf "$DATA/r/checkpoint/step-12.h5" "$o/hf"
	run -0 titan-ckpt-convert -q --from hf "$o/hf" "$o/back.h5"
	run -0 /usr/bin/python3 - "$o/hf" "$DATA/r/checkpoint/step-12.h5" "$o/back.h5" <<'PY'
import json, sys, h5py, numpy as np
sys.path.insert(0, "tests/ref")
import safetensors_py as st
hf, ck, back = sys.argv[1:]
c = json.load(open(hf + "/config.json"))
assert c["architectures"] == ["DeepseekV3ForCausalLM"] and c["model_type"] == "deepseek_v3", c
want = {"q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
        "v_head_dim": 16, "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
        "moe_intermediate_size": 64, "first_k_dense_replace": 1, "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "intermediate_size": 192,
        "num_key_value_heads": 4, "rope_theta": 10000.0}
assert all(c[k] == v for k, v in want.items()), {k: c[k] for k in want}
rs = c["rope_scaling"]
assert rs["rope_type"] == "yarn" and rs["factor"] == 40.0 and rs["mscale_all_dim"] == 0.7 \
    and rs["original_max_position_embeddings"] == 4096, rs
t = st.load(hf + "/model.safetensors")[0]
l0 = sorted(k for k in t if k.startswith("model.layers.0."))
assert l0 == sorted("model.layers.0." + k for k in [
    "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
    "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight",
    "self_attn.kv_b_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
    "mlp.up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight",
    "post_attention_layernorm.weight"]), l0
l1 = set(k for k in t if k.startswith("model.layers.1."))
for k in ["mlp.gate.weight", "mlp.gate.e_score_correction_bias", "mlp.experts.7.gate_proj.weight",
          "mlp.experts.0.up_proj.weight", "mlp.experts.3.down_proj.weight",
          "mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight",
          "mlp.shared_experts.down_proj.weight"]:
    assert "model.layers.1." + k in l1, k
a, b = h5py.File(ck, "r")["model"], h5py.File(back, "r")["model"]
# the same weights as torchtitan's (no RoPE permutation: rope_interleave)
assert np.array_equal(t["model.layers.0.self_attn.q_b_proj.weight"].numpy(),
                      a["layers.0.attention.wq_b.weight"][...])
assert np.array_equal(t["model.layers.1.mlp.gate.e_score_correction_bias"].numpy(),
                      a["layers.1.moe.expert_bias"][...])
assert sorted(a) == sorted(b), set(a) ^ set(b)
bad = [k for k in a if not np.array_equal(a[k][...], b[k][...])]
assert not bad, bad
PY
	# titan-generate reads the HF folder as the checkpoint
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 11 \
		"$DATA/r/checkpoint/step-12.h5" "$prompt"
	text=$output
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 11 "$o/hf" "$prompt"
	assert_equal "$output" "$text"
	# group-limited routing (DeepSeek-V3's n_group 8, topk_group 4) is refused
	/usr/bin/python3 -c 'import json, sys; p = sys.argv[1] + "/config.json"; c = json.load(open(p)); c.update(n_group=8, topk_group=4); json.dump(c, open(p, "w"))' "$o/hf"
	run -1 --separate-stderr titan-ckpt-convert -q --from hf "$o/hf" "$o/g.h5"
	[[ $stderr == *"n_group 8, topk_group 4: group-limited routing is not titan's"* ]]
	[ ! -e "$o/g.h5" ]
}

@test "deepseek_v3: a run resumed from its step-5 checkpoint continues bit for bit; other MLA dims are refused" {
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	resume_bits "$DATA/ds.yaml" $ck
	# the same tensor shapes, another YaRN: the checkpoint holds another model
	rm -rf "$d/c" && mkdir -p "$d/c/checkpoint"
	cp "$d/a/checkpoint/step-5.h5" "$d/c/checkpoint/"
	run -2 --separate-stderr titan-train -q --config "$DATA/ds.yaml" --training.steps=10 \
		--model.rope_factor=8 $ck --job.dump_folder="$d/c"
	[[ $stderr == *"holds another model than the config's: rope_factor 40 there, 8 in the config (model.rope_factor)"* ]]
}
