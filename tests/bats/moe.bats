#!/usr/bin/env bats
# Mixture of experts (model.moe_*): torchtitan's MoE feed-forward against
# the PyTorch reference tests/ref/moe_ref.py (12 steps, fp32, <= 1e-5),
# the same bits on any thread count, activation checkpointing, resume,
# DDP and FSDP on 2 ranks equal to 1 rank, the load metrics, and the
# layouts and tools that refuse a MoE.

bats_require_minimum_version 1.5.0

setup_file() {
	load moe
	moe_corpus 400
	WARMUP=2 moe_yaml "$DATA/moe.yaml" 2 12
}

setup() {
	load moe
	moe_setup
}

# curve JSONL: "step loss grad_norm" per step (every bit)
curve() { tiny_losses "$1"; }

# ref NAME MOE_JSON ARGS...: titan-train's seed checkpoint and 12 steps with
# ARGS (a Qwen3 MoE with QWEN3 = the qwen3_ref.Qwen3Args JSON), then the
# reference from the same weights and tokens, compared by
# tests/ref/check_curve.py (the expert_bias not zero with MOVED=1)
ref() {
	local name=$1 moe=$2 d=$BATS_TEST_TMPDIR/$1
	shift 2
	run -0 titan-train -q --config "$DATA/moe.yaml" "$@" --job.dump_folder="$d/seed" \
		--checkpoint.enable --checkpoint.create_seed_checkpoint
	run -0 titan-train -q --config "$DATA/moe.yaml" "$@" --job.dump_folder="$d/run" \
		--checkpoint.enable --checkpoint.interval=12
	/usr/bin/python3 tests/ref/moe_ref.py --init "$d/seed/checkpoint/step-0.h5" \
		--shards "$DATA/shards" \
		--model '{"dim":32,"n_layers":'"${NL:-2}"',"n_heads":4,"n_kv_heads":2,"vocab_size":600,"multiple_of":32}' \
		--moe "$moe" --train '{"batch":2,"seq_len":16,"steps":12,"lr":8e-4,"warmup":2}' \
		${QWEN3:+--qwen3 "$QWEN3"} --save "$d/ref.npz" > "$d/ref.json"
	/usr/bin/python3 tests/ref/check_curve.py "$d/run/metrics.jsonl" "$d/ref.json" \
		"$d/run/checkpoint/step-12.h5" "$d/ref.npz" ${MOVED:+--moved}
}

MOE='"num_experts":4,"top_k":2,"inter_dim":24,"n_dense_layers":0,"interleave_moe_layer_step":1,"load_balance_coeff":1e-3'

@test "MoE sigmoid routing + shared expert + load balancing: 12 steps equal the PyTorch reference" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	MOVED=1 ref sig "{$MOE,\"num_shared_experts\":1,\"score_func\":\"sigmoid\",\"route_norm\":false,\"route_scale\":1.0,\"score_before_experts\":true}"
}

@test "MoE softmax routing, no shared expert, route_norm, route_scale, scores after the experts: equal the reference" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	MOVED=1 ref soft "{$MOE,\"num_shared_experts\":0,\"score_func\":\"softmax\",\"route_norm\":true,\"route_scale\":2.5,\"score_before_experts\":false}" \
		--model.moe_num_shared_experts=0 --model.moe_score_func=softmax --model.moe_route_norm \
		--model.moe_route_scale=2.5 --model.moe_score_before_experts=false
}

@test "Qwen3 MoE (model.name qwen3, flavor debugmodel_moe shrunk): 12 steps equal the PyTorch reference (qwen3_ref + moe_ref)" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	# the flavor's routing (softmax, route_norm, no shared expert, scores
	# after the experts, not tied) with moe.yaml's experts and dims
	QWEN3='{"qk_head_dim":12,"hidden_dim":3072}' MOVED=1 ref qmoe \
		"{$MOE,\"num_shared_experts\":0,\"score_func\":\"softmax\",\"route_norm\":true,\"route_scale\":1.0,\"score_before_experts\":false}" \
		--model.name=qwen3 --model.flavor=debugmodel_moe --model.head_dim=12
	h5=$BATS_TEST_TMPDIR/qmoe/seed/checkpoint/step-0.h5
	/usr/bin/python3 - "$h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
a = dict(f.attrs)
assert a["model_name"] in ("qwen3", b"qwen3") and a["flavor"] in ("debugmodel_moe", b"debugmodel_moe"), a
assert a["moe_num_experts"] == 4 and a["moe_num_shared_experts"] == 0 and a["moe_route_norm"] == 1, a
assert "layers.0.attention.q_norm.weight" in f["model"] and "output.weight" in f["model"]
PY
}

@test "Qwen3 MoE flavors: torchtitan's debugmodel_moe, 30B-A3B, 235B-A22B routing in the model.moe_* keys" {
	for f in debugmodel_moe:64:768:1000000.0 30B-A3B:128:768:1000000.0 235B-A22B:128:1536:5000000.0; do
		IFS=: read -r fl e h th <<< "$f"
		run -0 titan-config --model.name=qwen3 --model.flavor="$fl"
		[[ $output == *"moe_num_experts: $e"* && $output == *"moe_top_k: 8"* ]]
		[[ $output == *"moe_inter_dim: $h"* && $output == *"moe_num_shared_experts: 0"* ]]
		[[ $output == *"moe_score_func: softmax"* && $output == *"moe_route_norm: true"* ]]
		[[ $output == *"moe_score_before_experts: false"* && $output == *"rope_theta: $th"* ]]
		# the flavor first, the family after: the same
		run -0 titan-config --model.flavor="$fl" --model.name=qwen3
		[[ $output == *"moe_num_experts: $e"* && $output == *"rope_theta: $th"* ]]
	done
	# a key set after the flavor wins; a dense flavor after a MoE one is dense
	run -0 titan-config --model.name=qwen3 --model.flavor=30B-A3B --model.moe_top_k=2
	[[ $output == *"moe_top_k: 2"* && $output == *"moe_num_experts: 128"* ]]
	run -0 titan-config --model.name=qwen3 --model.flavor=235B-A22B --model.flavor=8B
	[[ $output == *"moe_num_experts: 0"* && $output == *"moe_score_func: sigmoid"* ]]
	[[ $output == *"rope_theta: 1000000.0"* ]]
	run -2 --separate-stderr titan-train -q --model.flavor=debugmodel_moe \
		--job.dump_folder="$BATS_TEST_TMPDIR/x"
	[ "$stderr" = "titan-train: error: model.flavor: unknown flavor 'debugmodel_moe' for model.name llama3" ]
}

@test "MoE with a first dense block (n_dense_layers), interleave step 2, 3 experts top-1, 2 shared: equal the reference" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	cd "$TITAN_SRCDIR"
	NL=3 ref dense "{\"num_experts\":3,\"top_k\":1,\"inter_dim\":16,\"n_dense_layers\":1,\"interleave_moe_layer_step\":2,\"load_balance_coeff\":1e-2,\"num_shared_experts\":2,\"score_func\":\"sigmoid\",\"route_norm\":false,\"route_scale\":1.0,\"score_before_experts\":true}" \
		--model.moe_num_experts=3 --model.moe_top_k=1 --model.moe_inter_dim=16 --model.n_dense_layers=1 \
		--model.moe_load_balance_coeff=1e-2 --model.moe_num_shared_experts=2 --model.n_layers=3 \
		--model.interleave_moe_layer_step=2
	h5=$BATS_TEST_TMPDIR/dense/seed/checkpoint/step-0.h5
	/usr/bin/python3 - "$h5" <<'PY'
import sys, h5py
m = h5py.File(sys.argv[1], "r")["model"]
assert "layers.0.feed_forward.w1.weight" in m and "layers.0.moe.experts.w1" not in m
assert m["layers.1.moe.experts.w1"].shape == (3, 16, 32) and m["layers.1.moe.experts.w2"].shape == (3, 32, 16)
assert m["layers.1.moe.router.gate.weight"].shape == (3, 32)
assert m["layers.1.moe.shared_experts.w1.weight"].shape == (32, 32)
assert m["layers.1.moe.expert_bias"].shape == (3,)
assert "layers.2.feed_forward.w1.weight" in m and "layers.2.moe.experts.w1" not in m  # (2+1) % 2
PY
}

@test "MoE: the same bits on 1 and 3 threads; activation checkpointing (full, selective 1, op) changes no bit" {
	d=$BATS_TEST_TMPDIR
	OMP_NUM_THREADS=1 run -0 titan-train -q --config "$DATA/moe.yaml" --job.dump_folder="$d/t1"
	OMP_NUM_THREADS=3 run -0 titan-train -q --config "$DATA/moe.yaml" --job.dump_folder="$d/t3"
	[ "$(curve "$d/t1/metrics.jsonl")" = "$(curve "$d/t3/metrics.jsonl")" ]
	for ac in "--activation_checkpoint.mode=full" \
		"--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=1" \
		"--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op"; do
		run -0 titan-train -q --config "$DATA/moe.yaml" $ac --job.dump_folder="$d/ac"
		[ "$(curve "$d/t1/metrics.jsonl")" = "$(curve "$d/ac/metrics.jsonl")" ]
		# tokens are counted once per forward, not again in the recomputation
		[ "$(grep -o '"moe_load":[^}]*}' "$d/t1/metrics.jsonl")" = \
		  "$(grep -o '"moe_load":[^}]*}' "$d/ac/metrics.jsonl")" ]
		rm -rf "$d/ac"
	done
	# Qwen3's QK-norm in a MoE block under per-op AC (its q input kept: was a crash)
	q=(--model.name=qwen3 --model.head_dim=8 --training.steps=3)
	run -0 titan-train -q --config "$DATA/moe.yaml" "${q[@]}" --job.dump_folder="$d/q0"
	run -0 titan-train -q --config "$DATA/moe.yaml" "${q[@]}" --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=op --job.dump_folder="$d/qop"
	[ "$(curve "$d/q0/metrics.jsonl")" = "$(curve "$d/qop/metrics.jsonl")" ]
}

@test "MoE: metrics.jsonl has each MoE block's load (min/max tokens per expert, entropy)" {
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --model.n_dense_layers=1 --job.dump_folder="$d/m"
	/usr/bin/python3 - "$d/m/metrics.jsonl" <<'PY'
import json, math, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    ml = o["moe_load"]
    assert list(ml) == ["layers.1"], ml           # the dense block has none
    v = ml["layers.1"]
    # 2 rows x 16 tokens x top-2 slots over 4 experts per step
    assert 0 <= v["min_tokens"] <= 16 <= v["max_tokens"] <= 32, v
    assert 0 < v["entropy"] <= math.log(4) + 1e-12, v
PY
}

@test "MoE: TensorBoard gets the same load scalars under moe_load/layers.N/..." {
	/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null || skip "python3-protobuf is not installed"
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.steps=3 --metrics.enable_tensorboard \
		--job.dump_folder="$d/tb"
	/usr/bin/python3 - "$d"/tb/tb/*/events.out.tfevents.* "$d/tb/metrics.jsonl" "$TITAN_SRCDIR/tests/ref" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[3])
import tfevents_read as tr
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
ev = {e.step: {v.tag: v.simple_value for v in e.summary.value} for e in tr.load(sys.argv[1])[1:]}
for l in open(sys.argv[2]):
    o = json.loads(l)
    for layer, v in o["moe_load"].items():
        for k in ("min_tokens", "max_tokens", "entropy"):
            assert ev[o["step"]]["moe_load/%s/%s" % (layer, k)] == f32(v[k]), (o["step"], layer, k)
PY
}

@test "MoE: a run resumed from its step-6 checkpoint (expert_bias included) continues bit for bit" {
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --checkpoint.enable --checkpoint.interval=6 \
		--job.dump_folder="$d/full"
	mkdir -p "$d/res/checkpoint"
	cp "$d/full/checkpoint/step-6.h5" "$d/res/checkpoint/"
	run -0 titan-train -q --config "$DATA/moe.yaml" --checkpoint.enable --checkpoint.interval=6 \
		--job.dump_folder="$d/res"
	[ "$(curve "$d/full/metrics.jsonl" | tail -6)" = "$(curve "$d/res/metrics.jsonl")" ]
}

@test "MoE on 2 ranks: DDP and FSDP reproduce the 1-rank curve; checkpoints move between 1 rank and FSDP" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	# one rank with the global batch of 4 rows vs two ranks of 2
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.local_batch_size=4 \
		--training.steps=10 $ck --job.dump_folder="$d/one"
	for dp in "--parallelism.data_parallel_shard_degree=2" \
		"--parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1"; do
		run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
			--config "$DATA/moe.yaml" --training.steps=10 $dp $ck --job.dump_folder="$d/two"
		run -0 same_curve "$d/one/metrics.jsonl" "$d/two/metrics.jsonl"
		# the expert loads are summed over both ranks
		[ "$(grep -o '"moe_load":[^}]*}' "$d/one/metrics.jsonl")" = \
		  "$(grep -o '"moe_load":[^}]*}' "$d/two/metrics.jsonl")" ]
		rm -rf "$d/two"
	done
	# FSDP's step-5 checkpoint (3-d experts, sharded expert_bias) resumed on
	# 1 rank, and the 1-rank one under FSDP
	run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/moe.yaml" \
		--training.steps=5 --lr_scheduler.total_steps=10 --parallelism.data_parallel_shard_degree=2 $ck \
		--job.dump_folder="$d/f"
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.local_batch_size=4 \
		--training.steps=10 $ck --job.dump_folder="$d/f"
	run -0 same_curve "$d/one/metrics.jsonl" <(tail -5 "$d/f/metrics.jsonl")
	mkdir -p "$d/g/checkpoint"
	cp "$d/one/checkpoint/step-5.h5" "$d/g/checkpoint/"
	run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/moe.yaml" \
		--training.steps=10 --parallelism.data_parallel_shard_degree=2 $ck --job.dump_folder="$d/g"
	run -0 same_curve "$d/one/metrics.jsonl" "$d/g/metrics.jsonl"
}

@test "MoE: CUDA, HF checkpoints and bad keys are refused with exit 2 naming the key" {
	# (PP, CP and TP: moe-pp-cp.bats)
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" --training.device=cuda \
		--job.dump_folder="$BATS_TEST_TMPDIR/x"
	[[ $stderr == "titan-train: error: training.device: not supported with a mixture of experts yet"* ]]
	# HF checkpoints: Qwen3 MoE, DeepSeek-V3 and Llama 4 (train-hf.bats), not a llama3 MoE
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" --checkpoint.last_save_in_hf=true \
		--checkpoint.last_save_model_only --job.dump_folder="$BATS_TEST_TMPDIR/x"
	[[ $stderr == "titan-train: error: checkpoint.last_save_in_hf: a mixture of experts with model.name llama3 has no HF architecture"* ]]
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" --model.moe_top_k=5 \
		--job.dump_folder="$BATS_TEST_TMPDIR/x"
	[[ $stderr == "titan-train: error: model.moe_top_k: 5 exceeds model.moe_num_experts 4" ]]
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" \
		--model.moe_use_grouped_mm=false --job.dump_folder="$BATS_TEST_TMPDIR/x"
	[[ $stderr == "titan-train: error: model.moe_use_grouped_mm: false"* ]]
	# titan-estimate knows a MoE (titan-estimate.bats) and refuses the same layouts
	run -2 --separate-stderr titan-estimate --config "$DATA/moe.yaml" --ngpu 4 --device cpu \
		--parallelism.tensor_parallel_degree=2 --parallelism.expert_parallel_degree=2 \
		--parallelism.expert_tensor_parallel_degree=2
	[[ $stderr == "titan-estimate: error: parallelism.expert_tensor_parallel_degree: 2 is not supported"* ]]
}

@test "MoE: titan-ckpt-convert refuses a MoE checkpoint naming its first MoE tensor" {
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --job.dump_folder="$d/s" \
		--checkpoint.enable --checkpoint.create_seed_checkpoint
	run -1 --separate-stderr titan-ckpt-convert --to hf "$d/s/checkpoint/step-0.h5" "$d/hf"
	[[ $stderr == *"model/layers.0.moe.experts.w1: a mixture-of-experts checkpoint"* ]]
}

@test "Qwen3 MoE: titan-ckpt-convert --to hf writes Qwen3MoeForCausalLM, --from hf reads it back bit for bit (expert_bias from zero)" {
	/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch or h5py is missing"
	d=$BATS_TEST_TMPDIR
	q="--model.name=qwen3 --model.flavor=debugmodel_moe --model.head_dim=12 --model.n_dense_layers=1 --model.n_layers=3"
	run -0 titan-train -q --config "$DATA/moe.yaml" $q --job.dump_folder="$d/s" \
		--checkpoint.enable --checkpoint.interval=12
	h5=$d/s/checkpoint/step-12.h5
	run -0 titan-ckpt-convert -q --to hf "$h5" "$d/hf"
	run -0 titan-ckpt-convert -q --from hf "$d/hf" "$d/back.h5"
	cd "$TITAN_SRCDIR"
	run -0 /usr/bin/python3 - "$h5" "$d/hf" "$d/back.h5" <<'PY'
import json, sys, h5py, numpy as np
sys.path.insert(0, "tests/ref")
import safetensors_py as st
a, hf, b = h5py.File(sys.argv[1], "r"), sys.argv[2], h5py.File(sys.argv[3], "r")
c = json.load(open(hf + "/config.json"))
assert c["architectures"] == ["Qwen3MoeForCausalLM"] and c["model_type"] == "qwen3_moe", c
assert (c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]) == (4, 2, 24), c
assert c["norm_topk_prob"] is True and c["decoder_sparse_step"] == 1 and c["mlp_only_layers"] == [0], c
t = st.load(hf + "/model.safetensors")
t = t[0] if isinstance(t, tuple) else t
names = sorted(t)
assert "model.layers.0.mlp.gate_proj.weight" in names and "model.layers.1.mlp.gate.weight" in names
for l in (1, 2):
    for e in range(4):
        for p, k, sh in (("gate_proj", "w1", (24, 32)), ("up_proj", "w3", (24, 32)), ("down_proj", "w2", (32, 24))):
            x = np.asarray(t[f"model.layers.{l}.mlp.experts.{e}.{p}.weight"])
            assert x.shape == sh, (l, e, p, x.shape)
            assert np.array_equal(x, a["model"][f"layers.{l}.moe.experts.{k}"][e]), (l, e, p)
assert not any("expert_bias" in n or "shared" in n for n in names), names
assert sorted(a["model"]) == sorted(b["model"]), (sorted(a["model"]), sorted(b["model"]))
for k in a["model"]:
    x, y = a["model"][k][...], b["model"][k][...]
    if k.endswith("expert_bias"):
        assert np.any(x != 0) and not np.any(y), k   # trained bias; none in HF
    else:
        assert x.shape == y.shape and np.array_equal(x, y), k
for k in ("moe_num_experts", "moe_top_k", "moe_inter_dim", "n_dense_layers", "moe_route_norm",
          "moe_score_before_experts", "moe_num_shared_experts"):
    assert a.attrs[k] == b.attrs[k], (k, a.attrs[k], b.attrs[k])
assert b.attrs["moe_score_func"] in ("softmax", b"softmax")
PY
	# the HF folder and its re-import generate the same text
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 10 "$d/hf" "In the"
	text=$output
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 10 "$d/back.h5" "In the"
	assert_equal "$output" "$text"
	# routing Qwen3 MoE cannot hold: refused naming the key
	run -0 titan-train -q --config "$DATA/moe.yaml" $q --model.moe_num_shared_experts=1 \
		--job.dump_folder="$d/sh" --checkpoint.enable --checkpoint.create_seed_checkpoint
	run -1 --separate-stderr titan-ckpt-convert --to hf "$d/sh/checkpoint/step-0.h5" "$d/hf2"
	[[ $stderr == *"model/layers.1.moe.experts.w1: a mixture-of-experts checkpoint with model.moe_num_shared_experts above 0"* ]]
}

@test "MoE: titan-generate runs a MoE checkpoint from its moe_* attributes, as with the config" {
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --model.n_dense_layers=1 \
		--model.moe_num_shared_experts=1 --model.moe_score_func=softmax \
		--job.dump_folder="$d/s" --checkpoint.enable --checkpoint.interval=12
	h5=$d/s/checkpoint/step-12.h5
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 10 "$h5" "In the"
	text=$output
	[ -n "$text" ]
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 10 \
		--config "$DATA/moe.yaml" --model.n_dense_layers=1 --model.moe_num_shared_experts=1 \
		--model.moe_score_func=softmax "$h5" "In the"
	assert_equal "$output" "$text"
	# a config with another routing is another model
	run -2 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 10 \
		--config "$DATA/moe.yaml" --model.n_dense_layers=1 --model.moe_num_shared_experts=1 "$h5" "In"
	[[ $stderr == *"moe_score_func softmax true there, false in the config (model.moe_score_func)"* ]]
	# a MoE file without the attributes (titan before them) is refused by name
	/usr/bin/python3 -c 'import h5py' 2>/dev/null || skip "python3-h5py is missing"
	cp "$h5" "$d/old.h5"
	/usr/bin/python3 -c 'import h5py, sys; f = h5py.File(sys.argv[1], "r+"); del f.attrs["moe_num_experts"]' "$d/old.h5"
	run -1 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" "$d/old.h5" "In"
	[[ $stderr == *"model/layers.1.moe.experts.w1: a mixture-of-experts checkpoint without the moe_* attributes"* ]]
	# nor one whose attributes make another model than its tensors
	cp "$h5" "$d/bad.h5"
	/usr/bin/python3 -c 'import h5py, sys; f = h5py.File(sys.argv[1], "r+"); f.attrs["moe_top_k"] = 9' "$d/bad.h5"
	run -1 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" "$d/bad.h5" "In"
	[[ $stderr == *"moe_top_k 9"*"top_k must be in [1, num_experts]"* ]]
}
