#!/usr/bin/env bats
# model.name qwen3 (dense Qwen3: QK-norm, a head_dim of its own, optional
# tied embeddings) through the tools: its flavors, a 1-rank run and its
# checkpoint, TP 2 / FSDP 2 / CP 2 / PP 2 and the zero-bubble schedules
# reproducing the 1-rank curve (the tolerance of layouts.bash), the
# refusals (tied + PP, CUDA, GGUF), HF conversion both ways with Qwen3's
# names, titan-generate on the checkpoint and on its HF export equal to the
# public architecture (tests/ref/qwen3_ref.py), and titan-estimate to the
# byte.  The step arithmetic itself is test_golden's (golden files Q, R).

bats_require_minimum_version 1.5.0

Q="--model.name=qwen3 --model.head_dim=24 --model.hidden_dim=96"

setup_file() {
	load layouts
	layouts_setup_file 2
	[ -z "${NO_MPI:-}" ] || return 0
	# the 1-rank references: untied (4 heads of 24 = 96 != dim 64), tied
	titan-train -q --threads 1 --config "$DATA/tiny.yaml" $Q --checkpoint.enable \
		--checkpoint.interval=10 --job.dump_folder="$DATA/qref"
	titan-train -q --threads 1 --config "$DATA/tiny.yaml" $Q --model.tie_word_embeddings=true \
		--checkpoint.enable --checkpoint.interval=10 --job.dump_folder="$DATA/qtied"
}

setup() {
	load helpers
	load layouts
	[ -z "${NO_MPI:-}" ] || skip "no MPI in this build (or no mpiexec): the suite's data need it"
	cd "$TITAN_SRCDIR"
}

@test "flavors: qwen3's are torchtitan's dense ones; a flavor of the other family is refused (exit 2)" {
	run -0 --separate-stderr titan-config --model.name=qwen3 --model.flavor=0.6B --summary
	assert_line --partial "model:        qwen3 0.6B (tied embeddings) (QK-norm)"
	assert_line --partial "dim 1024, layers 28, heads 16, kv heads 8, head_dim 128, ffn hidden 3072, vocab 151936"
	assert_line --partial "rope:         theta 1e+06"
	run -0 --separate-stderr titan-config --model.name=qwen3 --model.flavor=32B --summary
	assert_line --partial "dim 5120, layers 64, heads 64, kv heads 8, head_dim 128, ffn hidden 25600"
	run -2 --separate-stderr titan-config --model.name=qwen3 --model.flavor=70B --summary
	[[ $stderr == *"model.flavor: unknown flavor '70B' for model.name qwen3"* ]] || fail "$stderr"
	run -2 --separate-stderr titan-config --model.flavor=0.6B --summary
	[[ $stderr == *"model.flavor: unknown flavor '0.6B' for model.name llama3"* ]] || fail "$stderr"
	# torchtitan's own job file for it (tests/data/torchtitan)
	run -0 --separate-stderr titan-config --config tests/data/torchtitan/qwen3_0.6b.toml --summary
	assert_line --partial "model:        qwen3 0.6B (tied embeddings) (QK-norm)"
	assert_line --partial "parameters:   596049920 total (0.596 B)"
	# an own head_dim needs QK-norm (checkpoints and HF's Llama tie it to dim / heads)
	run -2 --separate-stderr titan-config --model.head_dim=32 --summary
	[[ $stderr == *"model.head_dim: 32 x 16 heads is not model.dim 256"* ]] || fail "$stderr"
	run -0 --separate-stderr titan-config --model.head_dim=32 --model.qk_norm=true --summary
	assert_line --partial "model:        llama3 debugmodel (QK-norm)"
	# the family's norm_eps / rope_theta / rope_scaling, unless set
	run -0 --separate-stderr titan-config --model.name=qwen3
	assert_line "  norm_eps: 1.0e-06"
	assert_line "  rope_theta: 1000000.0"
	assert_line "  rope_scaling: false"
	run -0 --separate-stderr titan-config --model.norm_eps=1e-4 --model.name=qwen3
	assert_line "  norm_eps: 0.0001"
}

@test "1 rank: the checkpoint holds q_norm/k_norm [head_dim], model_name, and a tied matrix once" {
	/usr/bin/python3 -c 'import h5py' 2>/dev/null || skip "python3-h5py is missing"
	run -0 /usr/bin/python3 - "$DATA/qref/checkpoint/step-10.h5" "$DATA/qtied/checkpoint/step-10.h5" <<'PY'
import h5py, sys
for path, tied in zip(sys.argv[1:], (False, True)):
    f = h5py.File(path, "r")
    a = f.attrs
    assert a["model_name"] in (b"qwen3", "qwen3"), a["model_name"]
    assert a["qk_norm"] == 1 and a["head_dim"] == 24 and a["ffn_hidden"] == 96
    m = f["model"]
    for i in range(2):
        for n in ("q_norm", "k_norm"):
            assert m[f"layers.{i}.attention.{n}.weight"].shape == (24,)
        assert m[f"layers.{i}.attention.wq.weight"].shape == (96, 64)
        assert m[f"layers.{i}.attention.wk.weight"].shape == (48, 64)
        assert m[f"layers.{i}.attention.wo.weight"].shape == (64, 96)
    assert ("output.weight" in m) == (not tied), list(m)
    assert len(m) == 11 * 2 + (2 if tied else 3), len(m)
print("ok")
PY
	assert_output "ok"
	# the training log names the family
	run -0 grep -c '"loss"' "$DATA/qtied/metrics.jsonl"
	assert_output 10
}

@test "TP 2, FSDP 2, CP 2 (allgather, alltoall) and PP 2 reproduce the 1-rank qwen3 curve" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 2 $Q --parallelism.tensor_parallel_degree=2 --job.dump_folder="$o/tp"
	run -0 same_curve "$DATA/qref/metrics.jsonl" "$o/tp/metrics.jsonl"
	echo "# tp 2: $output" >&3
	run -0 mpi 2 $Q --parallelism.data_parallel_shard_degree=2 --training.local_batch_size=4 \
		--job.dump_folder="$o/fsdp"
	run -0 same_curve "$DATA/qref/metrics.jsonl" "$o/fsdp/metrics.jsonl"
	echo "# fsdp 2: $output" >&3
	run -0 mpi 2 $Q --parallelism.context_parallel_degree=2 --job.dump_folder="$o/cp"
	run -0 same_curve "$DATA/qref/metrics.jsonl" "$o/cp/metrics.jsonl"
	echo "# cp 2: $output" >&3
	run -0 mpi 2 $Q --parallelism.context_parallel_degree=2 \
		--parallelism.context_parallel_rotate_method=alltoall \
		--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op \
		--job.dump_folder="$o/cpring"
	run -0 same_curve "$DATA/qref/metrics.jsonl" "$o/cpring/metrics.jsonl"
	echo "# cp 2 alltoall, selective op: $output" >&3
	run -0 mpi 2 $Q --parallelism.pipeline_parallel_degree=2 \
		--parallelism.pipeline_parallel_microbatch_size=2 \
		--parallelism.pipeline_parallel_schedule=1F1B --activation_checkpoint.mode=full \
		--job.dump_folder="$o/pp"
	run -0 same_curve "$DATA/qref/metrics.jsonl" "$o/pp/metrics.jsonl"
	echo "# pp 2: $output" >&3
	# tied embeddings under TP 2 (the tied 1-rank run)
	run -0 mpi 2 $Q --model.tie_word_embeddings=true --parallelism.tensor_parallel_degree=2 \
		--job.dump_folder="$o/tptied"
	run -0 same_curve "$DATA/qtied/metrics.jsonl" "$o/tptied/metrics.jsonl"
	echo "# tp 2 tied: $output" >&3
}

@test "checkpoints: a TP 2 x FSDP 2 one resumes on 1 rank, a 1-rank one on FSDP 2; another model's is refused" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 4 $Q --parallelism.tensor_parallel_degree=2 --parallelism.data_parallel_shard_degree=2 \
		--training.local_batch_size=4 --checkpoint.enable --checkpoint.interval=5 \
		--job.dump_folder="$o/tf"
	run -0 same_curve "$DATA/qref/metrics.jsonl" "$o/tf/metrics.jsonl"
	mkdir -p "$o/one/checkpoint" "$o/fsdp/checkpoint" "$o/llama/checkpoint"
	cp "$o/tf/checkpoint/step-5.h5" "$o/one/checkpoint/"
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" $Q --checkpoint.enable \
		--job.dump_folder="$o/one"
	run -0 same_curve "$DATA/qref/metrics.jsonl" "$o/one/metrics.jsonl"
	[[ $output == "steps 6-10,"* ]]
	echo "# TP 2 x FSDP 2 -> 1 rank: $output" >&3
	titan-train -q --threads 1 --config "$DATA/tiny.yaml" $Q --checkpoint.enable \
		--checkpoint.interval=5 --job.dump_folder="$o/five"
	cp "$o/five/checkpoint/step-5.h5" "$o/fsdp/checkpoint/"
	run -0 mpi 2 $Q --parallelism.data_parallel_shard_degree=2 --training.local_batch_size=4 \
		--checkpoint.enable --job.dump_folder="$o/fsdp"
	run -0 same_curve "$DATA/qref/metrics.jsonl" "$o/fsdp/metrics.jsonl"
	[[ $output == "steps 6-10,"* ]]
	echo "# 1 rank -> FSDP 2: $output" >&3
	# the qwen3 checkpoint under the Llama config of the same dims: named
	cp "$o/five/checkpoint/step-5.h5" "$o/llama/checkpoint/"
	run -2 --separate-stderr titan-train -q --threads 1 --config "$DATA/tiny.yaml" \
		--checkpoint.enable --job.dump_folder="$o/llama"
	[[ $stderr == *"head_dim 24 there, 16 in the config (model.head_dim)"* ]] || fail "$stderr"
	[[ $stderr == *"qk_norm true there, false in the config (model.qk_norm)"* ]] || fail "$stderr"
}

@test "zero-bubble schedules (split backward: q_norm/k_norm weight grads in the W pass) reproduce 1 rank" {
	local o=$BATS_TEST_TMPDIR PP="--parallelism.pipeline_parallel_degree=2 --parallelism.pipeline_parallel_microbatch_size=2"
	titan-train -q --threads 1 --config "$DATA/tiny.yaml" $Q --model.n_layers=6 \
		--job.dump_folder="$o/ref6"
	run -0 mpi 2 $Q --model.n_layers=6 $PP --parallelism.pipeline_parallel_schedule=ZBVZeroBubble \
		--activation_checkpoint.mode=full --job.dump_folder="$o/zbv"
	run -0 same_curve "$o/ref6/metrics.jsonl" "$o/zbv/metrics.jsonl"
	echo "# ZBV, full AC: $output" >&3
	run -0 mpi 2 $Q --model.n_layers=6 $PP --parallelism.pipeline_parallel_schedule=InterleavedZeroBubble \
		--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op \
		--job.dump_folder="$o/izb"
	run -0 same_curve "$o/ref6/metrics.jsonl" "$o/izb/metrics.jsonl"
	echo "# InterleavedZeroBubble, selective op: $output" >&3
	run -0 mpi 2 $Q --model.n_layers=6 $PP --parallelism.pipeline_parallel_schedule=InterleavedZeroBubble \
		--job.dump_folder="$o/izbn"
	run -0 same_curve "$o/ref6/metrics.jsonl" "$o/izbn/metrics.jsonl"
	echo "# InterleavedZeroBubble, no AC: $output" >&3
}

@test "refused naming the key: tied + PP, CUDA (exit 2), --to gguf (exit 1)" {
	local o=$BATS_TEST_TMPDIR
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" $Q \
		--model.tie_word_embeddings=true --parallelism.pipeline_parallel_degree=2
	[[ $stderr == *"model.tie_word_embeddings: tied weights cannot be used with parallelism.pipeline_parallel_degree > 1"* ]] ||
		fail "$stderr"
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" $Q --training.device=cuda \
		--job.dump_folder="$o/cuda"
	[[ $stderr == *"model.qk_norm: QK-norm (model.name qwen3) is not checked on training.device: cuda"* ]] ||
		fail "$stderr"
	# no GGUF writer for llama.cpp's qwen3 architecture: refused, nothing written
	run -1 --separate-stderr titan-ckpt-convert --to gguf "$DATA/qref/checkpoint/step-10.h5" "$o/q.gguf"
	[[ $stderr == *"GGUF export: model qwen3 (QK-norm) is not written as GGUF yet"* ]] || fail "$stderr"
	[ ! -e "$o/q.gguf" ]
	refute_crash
}

@test "HF: --to hf writes Qwen3's names and config.json, --from hf gives the tensors back bit for bit" {
	/usr/bin/python3 -c 'import h5py' 2>/dev/null || skip "python3-h5py is missing"
	local o=$BATS_TEST_TMPDIR
	for run in qref qtied; do
		titan-ckpt-convert -q --to hf --tokenizer "$DATA/tok.tiktoken" \
			"$DATA/$run/checkpoint/step-10.h5" "$o/hf-$run"
		titan-ckpt-convert -q --from hf "$o/hf-$run" "$o/back-$run.h5"
	done
	run -0 /usr/bin/python3 - "$o" "$DATA" <<'PY'
import json, sys, h5py, numpy as np
sys.path.insert(0, "tests/ref")
import safetensors_py as st
o, data = sys.argv[1:]
for run, tied in (("qref", False), ("qtied", True)):
    c = json.load(open(f"{o}/hf-{run}/config.json"))
    assert c["architectures"] == ["Qwen3ForCausalLM"] and c["model_type"] == "qwen3", c
    assert c["head_dim"] == 24 and c["hidden_size"] == 64 and c["intermediate_size"] == 96
    assert c["tie_word_embeddings"] is tied and c["rms_norm_eps"] == 1e-6
    assert c["rope_theta"] == 1e6 and c["rope_scaling"] is None
    assert c["use_sliding_window"] is False
    t, _ = st.load(f"{o}/hf-{run}/model.safetensors")
    for i in range(2):
        p = f"model.layers.{i}.self_attn."
        assert t[p + "q_norm.weight"].shape == (24,) and t[p + "k_norm.weight"].shape == (24,)
        assert t[p + "q_proj.weight"].shape == (96, 64)
    assert ("lm_head.weight" in t) == (not tied), sorted(t)
    assert len(t) == 11 * 2 + (2 if tied else 3)
    a = h5py.File(f"{data}/{run}/checkpoint/step-10.h5", "r")["model"]
    b = h5py.File(f"{o}/back-{run}.h5", "r")
    assert b.attrs["model_name"] in (b"qwen3", "qwen3") and b.attrs["qk_norm"] == 1
    b = b["model"]
    assert sorted(a) == sorted(b)
    for n in a:
        assert np.array_equal(a[n][()], b[n][()]), n
    # q/k rows and q_norm/k_norm: HF's halves are titan's pairs
    w = a["layers.1.attention.q_norm.weight"][()]
    assert np.array_equal(t["model.layers.1.self_attn.q_norm.weight"].numpy(),
                          w.reshape(12, 2).T.reshape(24))
print("ok")
PY
	assert_output "ok"
}

@test "titan-generate: the qwen3 checkpoint and its HF export continue a prompt as the public Qwen3 (qwen3_ref.py) does" {
	/usr/bin/python3 -c 'import torch' 2>/dev/null || skip "python3-torch is missing"
	local o=$BATS_TEST_TMPDIR prompt="In the beginning God"
	titan-ckpt-convert -q --to hf "$DATA/qtied/checkpoint/step-10.h5" "$o/hf"
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 12 \
		"$DATA/qtied/checkpoint/step-10.h5" "$prompt"
	text=$output
	[ -n "$text" ]
	logprob=$(grep -o 'log-probability of the new tokens: [-0-9.]*' <<< "$stderr" | grep -o '[-0-9.]*$')
	[ -n "$logprob" ]
	run -0 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" -n 12 "$o/hf" "$prompt"
	assert_equal "$output" "$text"
	# the prompt's ids (BOS, the tokens; titan-tokenize's EOS dropped),
	# greedy continuation by the reference on the HF tensors, decoded with
	# the tiktoken file's ranks
	printf '%s' "$prompt" | titan-tokenize -t "$DATA/tok.tiktoken" --format text > "$o/prompt.ids"
	run -0 --separate-stderr /usr/bin/python3 - "$o/hf" "$o/prompt.ids" "$DATA/tok.tiktoken" <<'PY'
import base64, json, sys, numpy as np, torch
sys.path.insert(0, "tests/ref")
import qwen3_ref, safetensors_py as st
hf, ids_path, tok = sys.argv[1:]
c = json.load(open(hf + "/config.json"))
a = qwen3_ref.Qwen3Args(dim=c["hidden_size"], n_layers=c["num_hidden_layers"],
                        n_heads=c["num_attention_heads"], n_kv_heads=c["num_key_value_heads"],
                        vocab_size=c["vocab_size"], qk_head_dim=c["head_dim"],
                        hidden_dim=c["intermediate_size"], norm_eps=c["rms_norm_eps"],
                        rope_theta=c["rope_theta"], tie_embeddings=c["tie_word_embeddings"],
                        max_seq_len=64)
m = qwen3_ref.Qwen3Model(a)
t, _ = st.load(hf + "/model.safetensors")
names = {"model.embed_tokens.weight": "tok_embeddings.weight", "model.norm.weight": "norm.weight",
         "lm_head.weight": "output.weight"}
sub = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
       "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
       "self_attn.q_norm": "attention.q_norm", "self_attn.k_norm": "attention.k_norm",
       "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
       "mlp.up_proj": "feed_forward.w3", "input_layernorm": "attention_norm",
       "post_attention_layernorm": "ffn_norm"}
sd = {}
for k, v in t.items():
    if k in names:
        sd[names[k]] = v
    else:
        _, _, i, rest = k.split(".", 3)
        sd[f"layers.{i}.{sub[rest[:-len('.weight')]]}.weight"] = v
missing = m.load_state_dict(sd, strict=False)
assert not missing.unexpected_keys and all(k == "output.weight" for k in missing.missing_keys), missing
ids = np.fromfile(ids_path, dtype=np.uint32).tolist()[:-1]
ranks = {}
for line in open(tok, "rb"):
    if line.strip():
        b64, r = line.split()
        ranks[int(r)] = base64.b64decode(b64)
out, lp = b"", 0.0
with torch.no_grad():
    for _ in range(12):
        logits = m(torch.tensor([ids]))[0, -1]
        nxt = int(logits.argmax())
        lp += float(torch.log_softmax(logits.double(), -1)[nxt])
        ids.append(nxt)
        out += ranks[nxt]
sys.stderr.write("%.6f\n" % lp)
sys.stdout.write(out.decode("utf-8", "replace"))
PY
	assert_equal "$output" "$text"
	# the continuation's log-probability: titan's logits are the reference's
	/usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); assert abs(a - b) <= 1e-4 * abs(b) + 1e-5, (a, b)' \
		"$logprob" "$stderr" || fail "log-probability: titan $logprob, reference $stderr"
	echo "# greedy: '$prompt' -> '$text', log-probability titan $logprob, reference $stderr" >&3
}

@test "titan-estimate: a qwen3 run's peak memory to the byte (no AC, selective op, full)" {
	local o=$BATS_TEST_TMPDIR
	for ac in "--activation_checkpoint.mode=none" \
		  "--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op" \
		  "--activation_checkpoint.mode=full"; do
		rm -rf "$o/out"
		titan-train -q --config "$DATA/tiny.yaml" $Q --threads 2 --training.steps=2 $ac \
			--job.dump_folder="$o/out"
		measured=$(head -n 1 "$o/out/metrics.jsonl" | /usr/bin/python3 -c \
			'import json, sys; print(json.load(sys.stdin)["memory_peak_bytes"])')
		run -0 --separate-stderr titan-estimate --config "$DATA/tiny.yaml" $Q --device cpu \
			--threads 2 --training.steps=2 $ac --job.dump_folder="$o/out"
		assert_line --regexp "^  peak [0-9.]+ MiB \\($measured bytes\\) at "
		assert_line --regexp "^model     Qwen3 custom: "
	done
}
