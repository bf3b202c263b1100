#!/usr/bin/env bats
# titan-ckpt-convert: the tool contract, info, HF -> h5 -> HF round trips
# bit-exact in float32, h5py reading the checkpoint (float32 and bfloat16
# values) and writing one titan reads, the HF export read by an independent
# Python safetensors reader with q/k checked against numpy's
# reshape/transpose of the h5 tensors, the export's logits under HF's
# rotate-half RoPE equal to torchtitan's model (tests/ref/llama_ref.py) on
# the checkpoint, sharding, dtype casts, checkpoint folders, and bad inputs.

bats_require_minimum_version 1.5.0

PY=/usr/bin/python3

setup_file() {
	# A tiny Llama in HF layout (random weights), made with the reference
	# safetensors writer: dim 32, 2 layers, 4 heads (2 kv), ffn 96, vocab
	# 272 (>= the tiny tokenizer's 268 ids).
	export HF="$BATS_FILE_TMPDIR/hf"
	if $PY -c 'import torch' 2>/dev/null; then
		$PY - "$HF" "${TITAN_SRCDIR:-.}/tests/ref" <<'EOF'
import json, os, sys, torch
sys.path.insert(0, sys.argv[2])
import safetensors_py as st
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
D, L, H, KV, V, F = 32, 2, 4, 2, 272, 96
hd = D // H
g = torch.Generator().manual_seed(0)
r = lambda *s: torch.randn(*s, generator=g)
t = [("model.embed_tokens.weight", r(V, D))]
for i in range(L):
    p = f"model.layers.{i}."
    t += [(p + "self_attn.q_proj.weight", r(H * hd, D)), (p + "self_attn.k_proj.weight", r(KV * hd, D)),
          (p + "self_attn.v_proj.weight", r(KV * hd, D)), (p + "self_attn.o_proj.weight", r(D, H * hd)),
          (p + "mlp.gate_proj.weight", r(F, D)), (p + "mlp.up_proj.weight", r(F, D)),
          (p + "mlp.down_proj.weight", r(D, F)), (p + "input_layernorm.weight", r(D)),
          (p + "post_attention_layernorm.weight", r(D)),
          (p + "self_attn.rotary_emb.inv_freq", r(hd // 2))]
t += [("model.norm.weight", r(D)), ("lm_head.weight", r(V, D))]
st.save(out + "/model.safetensors", t, {"format": "pt"}, reverse_header=True)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": KV, "vocab_size": V, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
           "bos_token_id": 265, "eos_token_id": 266, "torch_dtype": "float32"},
          open(out + "/config.json", "w"))
EOF
	fi
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	T=$BATS_TEST_TMPDIR
}

need_hf() { [ -f "$HF/model.safetensors" ] || skip "python3-torch is not installed (tests/ref)"; }
need_h5py() { $PY -c 'import h5py' 2>/dev/null || skip "python3-h5py is not installed"; }
need_hdf5() { titan-ckpt-convert --version | grep -q '+hdf5' || skip "built without HDF5"; }

# ---------------------------------------------------------------- contract

@test "no arguments is a usage error (2)" {
	run -2 --separate-stderr titan-ckpt-convert
	refute_crash
	[[ $stderr == *"titan-ckpt-convert: error: nothing to do"* ]]
	[[ $stderr == *"Try 'titan-ckpt-convert --help'"* ]]
	[ -z "$output" ]
}

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr titan-ckpt-convert --help
	assert_line --partial "Usage: titan-ckpt-convert info"
	assert_output --partial "--to hf"
	assert_output --partial "See also"
	[ -z "$stderr" ]
}

@test "--version prints version, revision and features" {
	run -0 titan-ckpt-convert --version
	assert_line --regexp '^titan-ckpt-convert \(titan\) [0-9]+\.[0-9]+\.[0-9]+$'
	assert_line --regexp '^features: [+-]cuda [+-]nccl [+-]mpi [+-]hdf5 [+-]hdf5-parallel [+-]openblas$'
}

@test "a bad option is a usage error (2)" {
	run -2 --separate-stderr titan-ckpt-convert --frobnicate
	refute_crash
	[[ $stderr == *"unrecognized option"* ]]
	[ -z "$output" ]
}

@test "bad option values and combinations are usage errors (2)" {
	run -2 --separate-stderr titan-ckpt-convert --to hf --dtype int8 a b
	[[ $stderr == *"--dtype: 'int8' is not float32, bfloat16 or float16"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to gguf a b
	[[ $stderr == *"--to: unknown format 'gguf' (hf)"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to hf --max-shard-size 5XB a b
	[[ $stderr == *"--max-shard-size: bad size '5XB'"* ]]
	run -2 --separate-stderr titan-ckpt-convert info a b
	[[ $stderr == *"expected one checkpoint, got 2 arguments"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to hf a
	[[ $stderr == *"expected an input and an output"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to hf --from hf a b
	[[ $stderr == *"exclusive"* ]]
	run -2 --separate-stderr titan-ckpt-convert --json a b
	[[ $stderr == *"--json and --no-checksums go with info"* ]]
	run -2 --separate-stderr titan-ckpt-convert --weights-only --to hf a b
	[[ $stderr == *"--weights-only"* ]]
}

@test "a missing checkpoint is an error naming the file (1)" {
	need_hdf5
	run -1 --separate-stderr titan-ckpt-convert info "$T/nope.h5"
	refute_crash
	[[ $stderr == "titan-ckpt-convert: error: cannot open '$T/nope.h5': No such file or directory" ]]
	[ -z "$output" ]
}

@test "a file that is not HDF5, a truncated one and an empty folder are errors (1)" {
	need_hdf5
	need_hf
	echo hello > "$T/text.h5"
	run -1 --separate-stderr titan-ckpt-convert info "$T/text.h5"
	refute_crash
	[[ $stderr == *"'$T/text.h5' is not an HDF5 file"* ]]
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	head -c 20000 "$T/a.h5" > "$T/cut.h5"
	run -1 --separate-stderr titan-ckpt-convert info "$T/cut.h5"
	refute_crash
	[[ $stderr == *"cannot open '$T/cut.h5': damaged or truncated HDF5 file"* ]]
	run -1 --separate-stderr titan-ckpt-convert --to hf "$T/cut.h5" "$T/out"
	refute_crash
	[ ! -e "$T/out/model.safetensors" ]
	mkdir "$T/empty"
	run -1 --separate-stderr titan-ckpt-convert info "$T/empty"
	[[ $stderr == *"'$T/empty' holds no complete checkpoint"* ]]
}

# -------------------------------------------------------------------- info

@test "info lists dims, tensors with dtype, shape, size and CRC32C, and the config" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	run -0 --separate-stderr titan-ckpt-convert info "$T/a.h5"
	assert_line "format:        titan-checkpoint version 1 (titan $(cat VERSION))"
	assert_line "contents:      model only"
	assert_line --partial "model:         custom: dim 32, layers 2, heads 4, kv heads 2, head_dim 8, ffn hidden 96, vocab 272"
	assert_line "tensors:       21"
	assert_line --regexp '^  model/layers\.0\.attention\.wq\.weight +float32 +\[32, 32\] +4\.00 KiB +crc32c [0-9a-f]{8}$'
	assert_line --regexp '^  model/norm\.weight +float32 +\[32\] +128 B +crc32c [0-9a-f]{8}$'
	assert_line "  model:"
	assert_line "    flavor: custom"
	assert_line "    multiple_of: 96"
	[ -z "$stderr" ]
	run -0 titan-ckpt-convert info --no-checksums "$T/a.h5"
	refute_output --partial crc32c
}

@test "info --json is one object with the tensors, checksums and config" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert info --json "$T/a.h5" > "$T/info.json"
	[ "$(wc -l < "$T/info.json")" = 1 ]
	$PY - "$T/info.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "titan-checkpoint" and j["format_version"] == 1, j
assert j["model_only"] is True and "train_state" not in j
assert j["model"]["dim"] == 32 and j["model"]["n_kv_heads"] == 2 and j["model"]["rope_scaling"]
assert len(j["tensors"]) == 21
t = {x["name"]: x for x in j["tensors"]}
assert t["model/tok_embeddings.weight"]["shape"] == [272, 32]
assert t["model/output.weight"]["bytes"] == 272 * 32 * 4
assert all(len(x["crc32c"]) == 8 for x in j["tensors"])
assert j["parameters"] == sum(x["bytes"] // 4 for x in j["tensors"])
assert "flavor: custom" in j["config"]
EOF
}

# ------------------------------------------------------------- HF round trip

@test "HF -> h5 -> HF -> h5 is bit-exact in float32; tensors equal the source" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	run -0 --separate-stderr titan-ckpt-convert --to hf "$T/a.h5" "$T/hf2"
	[ -z "$output" ]
	assert_file_exists "$T/hf2/model.safetensors"
	assert_file_exists "$T/hf2/config.json"
	assert_file_exists "$T/hf2/generation_config.json"
	titan-ckpt-convert --from hf "$T/hf2" "$T/b.h5"
	cmp "$T/a.h5" "$T/b.h5"     # the same bytes: the checkpoint is deterministic
	diff -u <(titan-ckpt-convert info "$T/a.h5" | grep crc32c) \
		<(titan-ckpt-convert info "$T/b.h5" | grep crc32c)
	$PY - "$HF" "$T/hf2" tests/ref <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[3])
import safetensors_py as st, torch
a, _ = st.load(sys.argv[1] + "/model.safetensors")
b, meta = st.load(sys.argv[2] + "/model.safetensors")
assert meta == {"format": "pt"}, meta
a = {k: v for k, v in a.items() if not k.endswith("rotary_emb.inv_freq")}
assert sorted(a) == sorted(b), set(a) ^ set(b)
for k in a:
    assert a[k].dtype == b[k].dtype == torch.float32 and torch.equal(a[k], b[k]), k
c1, c2 = json.load(open(sys.argv[1] + "/config.json")), json.load(open(sys.argv[2] + "/config.json"))
for k in ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "vocab_size", "rms_norm_eps", "rope_theta", "rope_scaling",
          "tie_word_embeddings", "architectures", "torch_dtype"]:
    assert c1[k] == c2[k], (k, c1[k], c2[k])
assert c2["max_position_embeddings"] == 131072 and c2["head_dim"] == 8
EOF
}

@test "h5py reads the checkpoint; q/k are HF's rows permuted back (numpy reshape/transpose)" {
	need_hdf5
	need_hf
	need_h5py
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	$PY - "$T/a.h5" "$HF" tests/ref <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
import h5py, numpy as np, safetensors_py as st
f = h5py.File(sys.argv[1], "r")
assert f.attrs["format"] == "titan-checkpoint" and f.attrs["format_version"] == 1
assert f.attrs["n_kv_heads"] == 2 and f.attrs["head_dim"] == 8
assert "optimizer" not in f and "train_state" not in f
hf = {k: v.numpy() for k, v in st.load(sys.argv[2] + "/model.safetensors")[0].items()}
names = list(f["model"].keys())
assert names[:2] == ["tok_embeddings.weight", "layers.0.attention.wq.weight"], names
assert names[-1] == "output.weight" and len(names) == 21
def to_hf(w, nh):
    rows, dim = w.shape
    return w.reshape(nh, rows // nh // 2, 2, dim).transpose(0, 2, 1, 3).reshape(rows, dim)
m = f["model"]
assert np.array_equal(m["tok_embeddings.weight"][...], hf["model.embed_tokens.weight"])
assert np.array_equal(m["output.weight"][...], hf["lm_head.weight"])
assert np.array_equal(m["norm.weight"][...], hf["model.norm.weight"])
for i in range(2):
    p, q = f"layers.{i}.", f"model.layers.{i}."
    wq, wk = m[p + "attention.wq.weight"][...], m[p + "attention.wk.weight"][...]
    assert wq.dtype == np.float32 and wq.shape == (32, 32)
    assert np.array_equal(to_hf(wq, 4), hf[q + "self_attn.q_proj.weight"])
    assert np.array_equal(to_hf(wk, 2), hf[q + "self_attn.k_proj.weight"])
    assert not np.array_equal(wq, hf[q + "self_attn.q_proj.weight"])   # really permuted
    for tt, h in [("attention.wv", "self_attn.v_proj"), ("attention.wo", "self_attn.o_proj"),
                  ("feed_forward.w1", "mlp.gate_proj"), ("feed_forward.w2", "mlp.down_proj"),
                  ("feed_forward.w3", "mlp.up_proj"), ("attention_norm", "input_layernorm"),
                  ("ffn_norm", "post_attention_layernorm")]:
        assert np.array_equal(m[p + tt + ".weight"][...], hf[q + h + ".weight"]), tt
EOF
}

@test "a checkpoint rewritten by h5py (no creation order, h5py's own types) reads the same" {
	need_hdf5
	need_hf
	need_h5py
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	$PY - "$T/a.h5" "$T/py.h5" <<'EOF'
import sys, h5py
a = h5py.File(sys.argv[1], "r")
with h5py.File(sys.argv[2], "w") as b:      # h5py defaults: groups ordered by name
    for k, v in a.attrs.items():
        b.attrs[k] = v
    g = b.create_group("model")
    for k in sorted(a["model"], reverse=True):
        g[k] = a["model"][k][...]
EOF
	diff -u <(titan-ckpt-convert info "$T/a.h5" | grep crc32c | sort) \
		<(titan-ckpt-convert info "$T/py.h5" | grep crc32c | sort)
	titan-ckpt-convert --to hf "$T/py.h5" "$T/hfpy"
	titan-ckpt-convert --from hf "$T/hfpy" "$T/b.h5"
	cmp "$T/a.h5" "$T/b.h5"
}

@test "bfloat16 and float16 checkpoints: h5py and h5dump read the rounded values" {
	need_hdf5
	need_hf
	need_h5py
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert --weights-only --dtype bfloat16 "$T/a.h5" "$T/bf.h5"
	titan-ckpt-convert --from hf --dtype float16 "$HF" "$T/f16.h5"
	run -0 titan-ckpt-convert info "$T/bf.h5"
	assert_line --regexp '^  model/tok_embeddings\.weight +bfloat16 +\[272, 32\] +17\.00 KiB'
	$PY - "$T/a.h5" "$T/bf.h5" "$T/f16.h5" <<'EOF'
import sys, h5py, numpy as np, torch
a, b, c = (h5py.File(p, "r") for p in sys.argv[1:4])
for k in a["model"]:
    x = a["model"][k][...]
    y = b["model"][k]
    assert y.dtype == np.float32 and y.id.get_type().get_size() == 2, (k, y.dtype)
    want = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()  # round to nearest even
    assert np.array_equal(y[...], want), k
    assert np.array_equal(c["model"][k][...], x.astype(np.float16)), k
    assert c["model"][k].dtype == np.float16
EOF
	run -0 h5dump -d /model/norm.weight "$T/bf.h5"
	assert_output --partial "16-bit little-endian floating-point 16-bit precision"
	first=$($PY -c "import h5py,sys; print('%g' % h5py.File(sys.argv[1])['model/norm.weight'][0])" "$T/bf.h5")
	[[ $output == *"(0): ${first}"* ]] || [[ $output == *"(0): $(printf '%g' "$first")"* ]]
}

@test "--to hf --dtype bfloat16: BF16 safetensors equal torch's rounding of the permuted weights" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert --to hf --dtype bfloat16 "$T/a.h5" "$T/hfb"
	$PY - "$HF" "$T/hfb" tests/ref <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[3])
import safetensors_py as st, torch
a, _ = st.load(sys.argv[1] + "/model.safetensors")
b, _ = st.load(sys.argv[2] + "/model.safetensors")
for k, v in b.items():
    assert v.dtype == torch.bfloat16 and torch.equal(v, a[k].to(torch.bfloat16)), k
assert json.load(open(sys.argv[2] + "/config.json"))["torch_dtype"] == "bfloat16"
EOF
}

@test "the HF export under HF's rotate-half RoPE gives the logits of torchtitan's model on the checkpoint" {
	need_hdf5
	need_hf
	need_h5py
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert --to hf "$T/a.h5" "$T/hf2"
	# tests/ref/llama_ref.py (torchtitan: interleaved pairs as complex
	# numbers) on the h5 weights vs a transformers-style LlamaForCausalLM
	# forward (rotate_half, cos/sin, Llama 3.1 inv_freq scaling as in
	# _compute_llama3_parameters) on the exported safetensors + config.json
	$PY - "$T/a.h5" "$T/hf2" tests/ref <<'EOF'
import json, math, sys
sys.path.insert(0, sys.argv[3])
import h5py, torch, llama_ref, safetensors_py as st
f = h5py.File(sys.argv[1], "r")
A = dict(f.attrs)
args = llama_ref.ModelArgs(dim=int(A["dim"]), n_layers=int(A["n_layers"]), n_heads=int(A["n_heads"]),
                           n_kv_heads=int(A["n_kv_heads"]), vocab_size=int(A["vocab_size"]),
                           multiple_of=int(A["multiple_of"]), norm_eps=float(A["norm_eps"]),
                           rope_theta=float(A["rope_theta"]), max_seq_len=24)
assert args.ffn_hidden == int(A["ffn_hidden"])
tt = llama_ref.Transformer(args)
tt.load_state_dict({k: torch.from_numpy(f["model"][k][...]) for k in f["model"]}, strict=True)
tokens = torch.randint(0, args.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    ref = tt(tokens)

c = json.load(open(sys.argv[2] + "/config.json"))
W, _ = st.load(sys.argv[2] + "/model.safetensors")
H, KV, D = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"]
hd = D // H
def llama3_inv_freq(c):
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    s = c["rope_scaling"]
    if not s:
        return inv
    lo, hi, old, fac = s["low_freq_factor"], s["high_freq_factor"], s["original_max_position_embeddings"], s["factor"]
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > old / lo, inv / fac, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * inv_l / fac + smooth * inv_l
    medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
    return torch.where(medium, smoothed, inv_l)
def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)
def rms(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["rms_norm_eps"]))
def hf_forward(W, tokens, permuted=True):
    B, T = tokens.shape
    freqs = torch.outer(torch.arange(T).float(), llama3_inv_freq(c))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    x = W["model.embed_tokens.weight"][tokens]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        g = torch.nn.functional.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)
        x = x + g @ W[p + "mlp.down_proj.weight"].T
    x = rms(x, W["model.norm.weight"])
    return x @ (W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]).T
with torch.no_grad():
    out = hf_forward(W, tokens)
    err = (out - ref).abs().max().item() / ref.abs().max().item()   # fp32 rounding only
    assert err < 1e-5, f"HF logits differ from torchtitan's by {err} (relative)"
    # the check has teeth: torchtitan's q/k rows used as they are do not match
    raw = dict(W)
    for i in range(args.n_layers):
        raw[f"model.layers.{i}.self_attn.q_proj.weight"] = torch.from_numpy(f["model"][f"layers.{i}.attention.wq.weight"][...])
        raw[f"model.layers.{i}.self_attn.k_proj.weight"] = torch.from_numpy(f["model"][f"layers.{i}.attention.wk.weight"][...])
    bad = (hf_forward(raw, tokens) - ref).abs().max().item() / ref.abs().max().item()
    assert bad > 1e-2, (bad, err)
print(f"max |HF - torchtitan| / max |logit| = {err:.2e}; unpermuted q/k: {bad:.2e}", file=sys.stderr)
EOF
}

@test "--max-shard-size shards the export with an index that --from hf reads" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert --to hf --max-shard-size 30KB "$T/a.h5" "$T/sh"
	assert_file_exists "$T/sh/model.safetensors.index.json"
	assert_file_not_exists "$T/sh/model.safetensors"
	n=$(ls "$T/sh"/model-*-of-*.safetensors | wc -l)
	[ "$n" -gt 2 ]
	assert_file_exists "$T/sh/model-00001-of-0000$n.safetensors"
	$PY - "$T/sh" "$HF" tests/ref <<'EOF'
import json, os, sys
sys.path.insert(0, sys.argv[3])
import safetensors_py as st, torch
idx = json.load(open(sys.argv[1] + "/model.safetensors.index.json"))
src, _ = st.load(sys.argv[2] + "/model.safetensors")
seen, total = {}, 0
for f in sorted(set(idx["weight_map"].values())):
    t, _ = st.load(os.path.join(sys.argv[1], f))
    assert os.path.getsize(os.path.join(sys.argv[1], f)) < 30000 + 40000  # one big tensor may exceed
    for k, v in t.items():
        assert idx["weight_map"][k] == f
        seen[k] = v
        total += v.numel() * 4
assert idx["metadata"]["total_size"] == total
for k, v in seen.items():
    assert torch.equal(v, src[k]), k
assert len(seen) == 21
EOF
	titan-ckpt-convert --from hf "$T/sh" "$T/c.h5"
	cmp "$T/a.h5" "$T/c.h5"
}

@test "--tokenizer is copied and gives bos/eos; a tokenizer larger than the vocab is refused" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert --to hf --tokenizer tests/fixtures/tok/tiny.json "$T/a.h5" "$T/tk"
	cmp tests/fixtures/tok/tiny.json "$T/tk/tiny.json"
	run -0 cat "$T/tk/config.json"
	assert_line '  "bos_token_id": 265,'
	assert_line '  "eos_token_id": 266,'
	run -0 cat "$T/tk/generation_config.json"
	assert_line '  "bos_token_id": 265,'
	run -1 --separate-stderr titan-ckpt-convert --to hf --tokenizer tests/fixtures/tok/tiny.tiktoken \
		"$T/a.h5" "$T/tk2"
	refute_crash
	[[ $stderr == *"tiny.tiktoken' has 521 token ids, more than the model's vocab_size 272"* ]]
	[ -z "$(ls -A "$T/tk2" 2>/dev/null)" ]   # nothing half-written
}

# ------------------------------------------------------------ h5 -> h5, folders

@test "a checkpoint folder means its newest complete step; temporary files are ignored" {
	need_hdf5
	need_hf
	mkdir "$T/ck"
	titan-ckpt-convert --from hf "$HF" "$T/ck/step-3.h5"
	titan-ckpt-convert --weights-only --dtype bf16 "$T/ck" "$T/ck/step-10.h5"
	echo partial > "$T/ck/step-20.h5.tmp.abcdef"
	run -0 --separate-stderr titan-ckpt-convert -v info --no-checksums "$T/ck"
	assert_line --partial "file:          $T/ck/step-10.h5"
	[[ $stderr == *"using $T/ck/step-10.h5, the newest complete step"* ]]
	# --weights-only of a model-only checkpoint is a plain copy
	titan-ckpt-convert --weights-only "$T/ck/step-3.h5" "$T/copy.h5"
	cmp "$T/ck/step-3.h5" "$T/copy.h5"
}

@test "bad HF folders and unwritable outputs are errors (1) that leave nothing behind" {
	need_hdf5
	need_hf
	mkdir "$T/nohf"
	run -1 --separate-stderr titan-ckpt-convert --from hf "$T/nohf" "$T/x.h5"
	refute_crash
	[[ $stderr == *"cannot open '$T/nohf/config.json': No such file or directory"* ]]
	cp "$HF/config.json" "$T/nohf/"
	run -1 --separate-stderr titan-ckpt-convert --from hf "$T/nohf" "$T/x.h5"
	[[ $stderr == *"'$T/nohf' has no model.safetensors nor model.safetensors.index.json"* ]]
	sed 's/"intermediate_size": 96/"intermediate_size": 64/' "$HF/config.json" > "$T/nohf/config.json"
	ln -s "$HF/model.safetensors" "$T/nohf/model.safetensors"
	run -1 --separate-stderr titan-ckpt-convert --from hf "$T/nohf" "$T/x.h5"
	[[ $stderr == *"'model.layers.0.mlp.gate_proj.weight' has shape [96, 32], config.json makes it [64, 32]"* ]]
	run -1 --separate-stderr titan-ckpt-convert --from hf "$HF" "$T/missing/dir/x.h5"
	refute_crash
	[[ $stderr == *"cannot create checkpoint '$T/missing/dir/x.h5'"* ]]
	[ ! -e "$T/x.h5" ]
	[ -z "$(ls "$T" | grep tmp)" ]
}
