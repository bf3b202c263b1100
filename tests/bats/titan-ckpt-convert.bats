#!/usr/bin/env bats
# titan-ckpt-convert: the tool contract, info, HF -> h5 -> HF round trips
# bit-exact in float32, h5py reading the checkpoint (float32 and bfloat16
# values) and writing one titan reads, the HF export read by an independent
# Python safetensors reader with q/k checked against numpy's
# reshape/transpose of the h5 tensors, the export's logits under HF's
# rotate-half RoPE equal to torchtitan's model (tests/ref/llama_ref.py) on
# the checkpoint, sharding, dtype casts, checkpoint folders, and bad inputs.
# GGUF (--to gguf, at the end): read back by a reader written from the spec
# (tests/ref/gguf_read.py) and by @huggingface/gguf (npm), tensors bit-equal
# to h5py's, q/k equal to llama.cpp's converter applied to the HF export,
# logits under llama.cpp's semantics equal to torchtitan's, tokenizer
# metadata from tokenizer.json and tiktoken files (merges recovered as
# transformers' TikTokenConverter does, equal to Meta's for Llama 3).

# bats file_tags=parallel
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
	assert_line --regexp '^features: [+-]cuda [+-]nccl [+-]mpi [+-]hdf5 [+-]hdf5-parallel [+-]openblas [+-]zlib [+-]zstd$'
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
	run -2 --separate-stderr titan-ckpt-convert --to onnx a b
	[[ $stderr == *"--to: unknown format 'onnx' (hf, gguf)"* ]]
	run -2 --separate-stderr titan-ckpt-convert --from gguf a b
	[[ $stderr == *"--from: unknown format 'gguf' (hf)"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to gguf --max-shard-size 1GB a b
	[[ $stderr == *"--max-shard-size goes with --to hf"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to gguf a
	[[ $stderr == *"expected an input and an output, got 1 argument"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to hf --max-shard-size 5XB a b
	[[ $stderr == *"--max-shard-size: bad size '5XB'"* ]]
	run -2 --separate-stderr titan-ckpt-convert info a b
	[[ $stderr == *"expected one checkpoint, got 2 arguments"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to hf a
	[[ $stderr == *"expected an input and an output"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to hf --from hf a b
	[[ $stderr == *"exclusive"* ]]
	run -2 --separate-stderr titan-ckpt-convert --json a b
	[[ $stderr == *"--json, --no-checksums and --verify go with info"* ]]
	run -2 --separate-stderr titan-ckpt-convert --verify --to hf a b
	[[ $stderr == *"--json, --no-checksums and --verify go with info"* ]]
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

@test "info --verify: each dataset's crc32c is the CRC32C of its stored bytes; a flipped byte is named (exit 1)" {
	need_hdf5
	need_hf
	need_h5py
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert --weights-only --dtype bfloat16 "$T/a.h5" "$T/bf.h5"
	# the attribute, checked from the spec: CRC32C (computed here) of the
	# bytes in the file at the dataset's offset, float32 and bfloat16
	$PY - "$T/a.h5" "$T/bf.h5" tests/ref <<'EOF'
import sys, h5py
sys.path.insert(0, sys.argv[3])
from tfevents_read import crc32c
for path in sys.argv[1:3]:
    raw = open(path, "rb").read()
    f = h5py.File(path, "r")
    names = []
    f.visit(lambda k: names.append(k) if isinstance(f[k], h5py.Dataset) else None)
    assert len(names) == 21, names
    for k in names:
        d = f[k]
        at, n = d.id.get_offset(), d.id.get_storage_size()
        assert d.attrs["crc32c"].dtype == "uint32", k
        assert int(d.attrs["crc32c"]) == crc32c(raw[at:at + n]), (path, k)
EOF
	run -0 --separate-stderr titan-ckpt-convert info --verify "$T/bf.h5"
	assert_line --regexp '^  model/layers\.1\.feed_forward\.w2\.weight +bfloat16 +\[32, 96\] +6\.00 KiB +crc32c [0-9a-f]{8}  ok$'
	assert_line "verify:        21 ok, 0 mismatched, 0 without a checksum"
	# one bit of w2's data flipped
	cp "$T/a.h5" "$T/bad.h5"
	$PY - "$T/bad.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    at = f["model/layers.1.feed_forward.w2.weight"].id.get_offset() + 1000
with open(sys.argv[1], "r+b") as f:
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 4]))
EOF
	run -1 --separate-stderr titan-ckpt-convert info --verify "$T/bad.h5"
	refute_crash
	assert_line --regexp '^  model/layers\.1\.feed_forward\.w2\.weight +float32 +\[32, 96\] +12\.00 KiB +crc32c --------  MISMATCH$'
	assert_line --regexp '^  model/layers\.1\.feed_forward\.w1\.weight +.*  ok$'
	assert_line "verify:        20 ok, 1 mismatched, 0 without a checksum"
	[ "$stderr" = "titan-ckpt-convert: error: '$T/bad.h5': checksum mismatch in 1 dataset: model/layers.1.feed_forward.w2.weight (the file is damaged)" ]
	run -1 --separate-stderr titan-ckpt-convert info --verify --json --no-checksums "$T/bad.h5"
	$PY -c 'import json, sys
j = json.loads(sys.argv[1])
assert j["verify"] == {"ok": 20, "mismatch": 1, "no_checksum": 0}, j["verify"]
bad = [t["name"] for t in j["tensors"] if t["verify"] != "ok"]
assert bad == ["model/layers.1.feed_forward.w2.weight"], bad
assert all(len(t["stored_crc32c"]) == 8 and "crc32c" not in t for t in j["tensors"])' "$output"
	# reading it is an error naming the file and the dataset, and leaves nothing
	bad() {
		refute_crash
		[[ $stderr == *"'$T/bad.h5': model/layers.1.feed_forward.w2.weight: checksum mismatch (crc32c attribute "*", the data's "*"): the file is damaged"* ]]
	}
	run -1 --separate-stderr titan-ckpt-convert info "$T/bad.h5"
	bad
	run -1 --separate-stderr titan-ckpt-convert -q --to hf "$T/bad.h5" "$T/hfbad"
	bad
	run -1 --separate-stderr titan-ckpt-convert -q --to gguf "$T/bad.h5" "$T/bad.gguf"
	bad
	run -1 --separate-stderr titan-ckpt-convert --weights-only "$T/bad.h5" "$T/copy.h5"
	bad
	[ ! -e "$T/copy.h5" ] && [ ! -e "$T/bad.gguf" ] && [ ! -e "$T/hfbad/model.safetensors" ]
}

@test "a checkpoint without checksums (h5py-made, an older titan's) loads; info --verify says 'no checksum'" {
	need_hdf5
	need_hf
	need_h5py
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	$PY - "$T/a.h5" "$T/old.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "w") as b:
    for k, v in a.attrs.items():
        b.attrs[k] = v
    g = b.create_group("model")
    for k in a["model"]:
        g[k] = a["model"][k][...]      # data only: no crc32c attribute
EOF
	run -0 --separate-stderr titan-ckpt-convert info --verify "$T/old.h5"
	assert_line --regexp '^  model/norm\.weight +float32 +\[32\] +128 B +crc32c [0-9a-f]{8}  no checksum$'
	assert_line "verify:        0 ok, 0 mismatched, 21 without a checksum"
	run -0 titan-ckpt-convert --to hf "$T/old.h5" "$T/hf2"
	titan-ckpt-convert --from hf "$T/hf2" "$T/b.h5"
	cmp "$T/a.h5" "$T/b.h5"
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

# ------------------------------------------------------------------- GGUF

# hf_model DIR VOCAB: a random tiny Llama in HF layout like setup_file's
# (dim 32, 2 layers, 4 heads, 2 kv heads, ffn 96, Llama 3.1 rope scaling)
# with VOCAB ids, as a model-only checkpoint DIR.h5.
hf_model() {
	$PY - "$1" "$2" tests/ref <<'EOF'
import json, os, sys, torch
sys.path.insert(0, sys.argv[3])
import safetensors_py as st
out, V = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
D, L, H, KV, F = 32, 2, 4, 2, 96
g = torch.Generator().manual_seed(V)
r = lambda *s: torch.randn(*s, generator=g)
t = [("model.embed_tokens.weight", r(V, D))]
for i in range(L):
    p = f"model.layers.{i}."
    t += [(p + "self_attn.q_proj.weight", r(D, D)), (p + "self_attn.k_proj.weight", r(KV * 8, D)),
          (p + "self_attn.v_proj.weight", r(KV * 8, D)), (p + "self_attn.o_proj.weight", r(D, D)),
          (p + "mlp.gate_proj.weight", r(F, D)), (p + "mlp.up_proj.weight", r(F, D)),
          (p + "mlp.down_proj.weight", r(D, F)), (p + "input_layernorm.weight", r(D)),
          (p + "post_attention_layernorm.weight", r(D))]
t += [("model.norm.weight", r(D)), ("lm_head.weight", r(V, D))]
st.save(out + "/model.safetensors", t, {"format": "pt"})
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": KV, "vocab_size": V, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
          open(out + "/config.json", "w"))
EOF
	titan-ckpt-convert --from hf "$1" "$1.h5"
}

@test "--to gguf: GGUF v3 read back by a reader written from the spec; tensors bit-equal to h5py's" {
	need_hdf5
	need_hf
	need_h5py
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	run -0 --separate-stderr titan-ckpt-convert --to gguf --tokenizer tests/fixtures/tok/tiny.json \
		"$T/a.h5" "$T/a.gguf"
	[ -z "$output" ]
	[ -z "$stderr" ]
	[ "$(head -c 4 "$T/a.gguf")" = GGUF ]
	[ -z "$(ls "$T" | grep tmp)" ]
	$PY - "$T/a.gguf" "$T/a.h5" "$HF" tests/ref <<'EOF'
import math, sys
sys.path.insert(0, sys.argv[4])
import gguf_read, h5py, numpy as np, safetensors_py as st
g = gguf_read.load(sys.argv[1])
f = h5py.File(sys.argv[2], "r")["model"]
m = {k: v for k, (t, v) in g.metadata.items()}
T = {k: t for k, (t, v) in g.metadata.items()}
assert g.version == 3 and g.alignment == 32 and g.data_offset % 32 == 0
want = {"general.architecture": "llama", "general.alignment": 32, "general.file_type": 0,
        "general.quantization_version": 2, "llama.block_count": 2, "llama.context_length": 131072,
        "llama.embedding_length": 32, "llama.feed_forward_length": 96,
        "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
        "llama.rope.dimension_count": 8, "llama.vocab_size": 272,
        "llama.attention.key_length": 8, "llama.attention.value_length": 8,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.bos_token_id": 265, "tokenizer.ggml.eos_token_id": 266,
        "tokenizer.ggml.add_bos_token": True}
for k, v in want.items():
    assert m[k] == v, (k, m[k], v)
for k in ["llama.block_count", "llama.context_length", "general.file_type", "llama.vocab_size"]:
    assert T[k] == "u32", (k, T[k])
assert T["llama.rope.freq_base"] == "f32" and m["llama.rope.freq_base"] == 500000.0
assert T["llama.attention.layer_norm_rms_epsilon"] == "f32"
assert m["llama.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-5))
# tensors: llama.cpp's names, ne = the reversed row-major shape, the h5 values
names = {"tok_embeddings.weight": "token_embd.weight", "norm.weight": "output_norm.weight",
         "output.weight": "output.weight"}
for i in range(2):
    for a, b in [("attention.wq", "attn_q"), ("attention.wk", "attn_k"), ("attention.wv", "attn_v"),
                 ("attention.wo", "attn_output"), ("feed_forward.w1", "ffn_gate"),
                 ("feed_forward.w2", "ffn_down"), ("feed_forward.w3", "ffn_up"),
                 ("attention_norm", "attn_norm"), ("ffn_norm", "ffn_norm")]:
        names[f"layers.{i}.{a}.weight"] = f"blk.{i}.{b}.weight"
assert sorted(names) == sorted(f.keys())
assert sorted(g.tensors) == sorted(list(names.values()) + ["rope_freqs.weight"])
end = 0
for tt, gg in names.items():
    x, t = f[tt][...], g.tensors[gg]
    assert t.type == "F32" and t.ne == list(x.shape[::-1]), (gg, t.ne, x.shape)
    assert t.array.dtype == np.float32 and np.array_equal(t.array, x), gg   # bit-for-bit
    assert t.offset % 32 == 0
# q/k: what llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute) makes of HF's rows
hf, _ = st.load(sys.argv[3] + "/model.safetensors")
def permute(w, n_head):
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
for i in range(2):
    q = hf[f"model.layers.{i}.self_attn.q_proj.weight"].numpy()
    k = hf[f"model.layers.{i}.self_attn.k_proj.weight"].numpy()
    assert np.array_equal(g.tensors[f"blk.{i}.attn_q.weight"].array, permute(q, 4))
    assert np.array_equal(g.tensors[f"blk.{i}.attn_k.weight"].array, permute(k, 2))
    assert not np.array_equal(g.tensors[f"blk.{i}.attn_q.weight"].array, q)
# rope_freqs: convert_hf_to_gguf.py's generate_extra_tensors for rope_type llama3
rf = g.tensors["rope_freqs.weight"]
assert rf.type == "F32" and rf.ne == [4]
want = []
for i in range(0, 8, 2):
    freq = 1.0 / (500000.0 ** (i / 8))
    wavelen = 2 * math.pi / freq
    if wavelen < 8192 / 4:
        want.append(1.0)
    elif wavelen > 8192 / 1:
        want.append(8.0)
    else:
        s = (8192 / wavelen - 1) / (4 - 1)
        want.append(1 / ((1 - s) / 8 + s))
assert np.array_equal(rf.array, np.array(want, dtype=np.float32)), (rf.array, want)
EOF
}

@test "--to gguf: tokenizer.json tokens, types and merges as llama.cpp's converter writes them" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert --to gguf --tokenizer tests/fixtures/tok/tiny.json "$T/a.h5" "$T/a.gguf"
	$PY - "$T/a.gguf" tests/fixtures/tok/tiny.json tests/ref <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[3])
import gguf_read
m = {k: v for k, (t, v) in gguf_read.load(sys.argv[1]).metadata.items()}
j = json.load(open(sys.argv[2]))
tokens, types = m["tokenizer.ggml.tokens"], m["tokenizer.ggml.token_type"]
assert len(tokens) == len(types) == 272
byid = {i: s for s, i in j["model"]["vocab"].items()}
added = {a["id"]: a for a in j["added_tokens"]}
for i in range(272):
    if i in added:   # special (or <|...|>): CONTROL 3, else USER_DEFINED 4
        assert tokens[i] == added[i]["content"] and types[i] == (3 if added[i]["special"] else 4), i
    elif i in byid:
        assert tokens[i] == byid[i] and types[i] == 1, i
    else:            # past the tokenizer: unused padding, as get_vocab_base
        assert tokens[i] == f"[PAD{i}]" and types[i] == 5, i
assert types[267] == 4 and tokens[267] == "zzz"
merges = [x if isinstance(x, str) else " ".join(x) for x in j["model"]["merges"]]
assert m["tokenizer.ggml.merges"] == merges, (m["tokenizer.ggml.merges"], merges)
EOF
}

@test "--to gguf: tiktoken merges are recovered from the ranks as transformers' TikTokenConverter does" {
	need_hdf5
	need_hf
	hf_model "$T/m528" 528     # tiny.tiktoken: 265 ranks + 256 specials
	titan-ckpt-convert --to gguf --tokenizer tests/fixtures/tok/tiny.tiktoken "$T/m528.h5" "$T/t.gguf"
	$PY - "$T/t.gguf" tests/fixtures/tok/tiny.tiktoken tests/ref <<'EOF'
import base64, sys
sys.path.insert(0, sys.argv[3])
import gguf_read
m = {k: v for k, (t, v) in gguf_read.load(sys.argv[1]).metadata.items()}
ranks = {}
for line in open(sys.argv[2], "rb"):
    if line.strip():
        tok, r = line.split()
        ranks[base64.b64decode(tok)] = int(r)
# transformers' bytes_to_unicode and TikTokenConverter.extract_vocab_merges_from_model
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
enc = dict(zip(bs, map(chr, cs)))
s = lambda b: "".join(enc[c] for c in b)
merges = []
for token, rank in ranks.items():
    if len(token) == 1:
        continue
    local = [(token[:i], token[i:], rank) for i in range(1, len(token))
             if token[:i] in ranks and token[i:] in ranks]
    merges.extend(sorted(local, key=lambda x: (ranks[x[0]], ranks[x[1]])))
merges = [s(a) + " " + s(b) for a, b, _ in sorted(merges, key=lambda v: v[2])]
assert m["tokenizer.ggml.merges"] == merges
assert len(ranks) == 265 and len(merges) >= 9
tokens, types = m["tokenizer.ggml.tokens"], m["tokenizer.ggml.token_type"]
assert len(tokens) == 528
for b, r in ranks.items():
    assert tokens[r] == s(b) and types[r] == 1, r
assert tokens[265:268] == ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>"]
assert tokens[265 + 9] == "<|eot_id|>" and set(types[265:521]) == {3}
assert tokens[521:] == [f"[PAD{i}]" for i in range(521, 528)] and set(types[521:]) == {5}
assert m["tokenizer.ggml.pre"] == "llama-bpe"
assert m["tokenizer.ggml.bos_token_id"] == 265 and m["tokenizer.ggml.eos_token_id"] == 266
EOF
}

@test "--to gguf: Llama 3's tiktoken file gives Meta's tokenizer.json tokens and 280147 merges" {
	need_hdf5
	need_hf
	[ -s build/cache/peers/cache/llama3.tiktoken ] && [ -s build/cache/peers/cache/llama3-tokenizer.json ] ||
		skip "tests/peers/setup.sh has not written build/cache/peers/cache"
	hf_model "$T/l3" 128256
	titan-ckpt-convert --to gguf --tokenizer build/cache/peers/cache/llama3.tiktoken "$T/l3.h5" "$T/tik.gguf"
	titan-ckpt-convert --to gguf --tokenizer build/cache/peers/cache/llama3-tokenizer.json "$T/l3.h5" "$T/hf.gguf"
	$PY - "$T/tik.gguf" "$T/hf.gguf" build/cache/peers/cache/llama3-tokenizer.json tests/ref <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[4])
import gguf_read
a = {k: v for k, (t, v) in gguf_read.load(sys.argv[1]).metadata.items() if k.startswith("tokenizer.")}
b = {k: v for k, (t, v) in gguf_read.load(sys.argv[2]).metadata.items() if k.startswith("tokenizer.")}
j = json.load(open(sys.argv[3]))
merges = [x if isinstance(x, str) else " ".join(x) for x in j["model"]["merges"]]
assert len(merges) == 280147
assert a["tokenizer.ggml.merges"] == merges       # recovered from the ranks
assert b["tokenizer.ggml.merges"] == merges       # copied from tokenizer.json
# the 128000 ranks are the same strings; the specials' names are lib/tok's
# Llama 3 convention (titan/tok.h: 128005 <|step_id|>, as Meta's newer
# llama-models), which Llama 3.1's tokenizer.json calls reserved_special_token_2
ta, tb = a.pop("tokenizer.ggml.tokens"), b.pop("tokenizer.ggml.tokens")
assert ta[:128000] == tb[:128000] and ta[128000:128005] == tb[128000:128005]
assert ta[128005] == "<|step_id|>" and tb[128005] == "<|reserved_special_token_2|>"
assert a == b, sorted(k for k in a if a[k] != b.get(k))
a["tokenizer.ggml.tokens"] = ta
assert a["tokenizer.ggml.pre"] == "llama-bpe" and len(a["tokenizer.ggml.tokens"]) == 128256
assert a["tokenizer.ggml.bos_token_id"] == 128000 and a["tokenizer.ggml.eos_token_id"] == 128001
assert a["tokenizer.ggml.tokens"][128009] == "<|eot_id|>" and a["tokenizer.ggml.token_type"][128009] == 3
EOF
}

@test "--to gguf --dtype bfloat16/float16: 2-D weights rounded as torch does, 1-D tensors stay F32" {
	need_hdf5
	need_hf
	need_h5py
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert -q --to gguf --dtype bfloat16 "$T/a.h5" "$T/bf.gguf"
	titan-ckpt-convert -q --to gguf --dtype float16 "$T/a.h5" "$T/f16.gguf"
	$PY - "$T/a.h5" "$T/bf.gguf" "$T/f16.gguf" tests/ref <<'EOF'
import sys
sys.path.insert(0, sys.argv[4])
import gguf_read, h5py, numpy as np, torch
f = h5py.File(sys.argv[1], "r")["model"]
bf, hf = gguf_read.load(sys.argv[2]), gguf_read.load(sys.argv[3])
assert bf.metadata["general.file_type"] == ("u32", 32) and hf.metadata["general.file_type"] == ("u32", 1)
x = f["layers.1.attention.wk.weight"][...]
t = bf.tensors["blk.1.attn_k.weight"]
assert t.type == "BF16" and np.array_equal(t.array, torch.from_numpy(x).to(torch.bfloat16).float().numpy())
t = hf.tensors["blk.1.attn_k.weight"]
assert t.type == "F16" and np.array_equal(t.array, x.astype(np.float16))
x = f["tok_embeddings.weight"][...]
assert np.array_equal(bf.tensors["token_embd.weight"].array, torch.from_numpy(x).to(torch.bfloat16).float().numpy())
for g in (bf, hf):   # norms and rope_freqs: F32, the values as they are
    for n in ["blk.0.attn_norm.weight", "output_norm.weight", "rope_freqs.weight"]:
        assert g.tensors[n].type == "F32", n
    assert np.array_equal(g.tensors["output_norm.weight"].array, f["norm.weight"][...])
EOF
}

@test "--to gguf: logits under llama.cpp's semantics equal torchtitan's model on the checkpoint" {
	need_hdf5
	need_hf
	need_h5py
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert -q --to gguf "$T/a.h5" "$T/a.gguf"
	# llama.cpp's LLM_ARCH_LLAMA graph: LLAMA_ROPE_TYPE_NORM rotates adjacent
	# pairs (2i, 2i+1) by pos * freq_base^(-2i/n_rot) / rope_freqs[i];
	# ggml_mul_mat broadcasts kv head h / (n_head / n_head_kv); RMSNorm with
	# layer_norm_rms_epsilon; output.weight or token_embd when tied
	$PY - "$T/a.h5" "$T/a.gguf" tests/ref <<'EOF'
import math, sys
sys.path.insert(0, sys.argv[3])
import gguf_read, h5py, llama_ref, torch
f = h5py.File(sys.argv[1], "r")
A = dict(f.attrs)
args = llama_ref.ModelArgs(dim=int(A["dim"]), n_layers=int(A["n_layers"]), n_heads=int(A["n_heads"]),
                           n_kv_heads=int(A["n_kv_heads"]), vocab_size=int(A["vocab_size"]),
                           multiple_of=int(A["multiple_of"]), norm_eps=float(A["norm_eps"]),
                           rope_theta=float(A["rope_theta"]), max_seq_len=24)
tt = llama_ref.Transformer(args)
tt.load_state_dict({k: torch.from_numpy(f["model"][k][...]) for k in f["model"]}, strict=True)
tokens = torch.randint(0, args.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    ref = tt(tokens)
g = gguf_read.load(sys.argv[2])
M = {k: v for k, (t, v) in g.metadata.items()}
W = {k: torch.from_numpy(t.array.copy()) for k, t in g.tensors.items()}
H, KV = M["llama.attention.head_count"], M["llama.attention.head_count_kv"]
n_rot, eps, base = M["llama.rope.dimension_count"], M["llama.attention.layer_norm_rms_epsilon"], M["llama.rope.freq_base"]
def rms(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
def rope_norm(x, factors):          # x [B, T, heads, n_rot]
    T = x.shape[1]
    i = torch.arange(n_rot // 2, dtype=torch.float64)
    theta = torch.arange(T, dtype=torch.float64)[:, None] * base ** (-2 * i / n_rot) / factors.double()
    cos, sin = theta.cos().float()[None, :, None], theta.sin().float()[None, :, None]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
def forward(W, tokens):
    B, T = tokens.shape
    hd = n_rot
    x = W["token_embd.weight"][tokens]
    for i in range(M["llama.block_count"]):
        p = f"blk.{i}."
        h = rms(x, W[p + "attn_norm.weight"])
        q = rope_norm((h @ W[p + "attn_q.weight"].T).view(B, T, H, hd), W["rope_freqs.weight"]).transpose(1, 2)
        k = rope_norm((h @ W[p + "attn_k.weight"].T).view(B, T, KV, hd), W["rope_freqs.weight"]).transpose(1, 2)
        v = (h @ W[p + "attn_v.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + o @ W[p + "attn_output.weight"].T
        h = rms(x, W[p + "ffn_norm.weight"])
        x = x + (torch.nn.functional.silu(h @ W[p + "ffn_gate.weight"].T) * (h @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
    x = rms(x, W["output_norm.weight"])
    return x @ W.get("output.weight", W["token_embd.weight"]).T
with torch.no_grad():
    out = forward(W, tokens)
    err = (out - ref).abs().max().item() / ref.abs().max().item()
    assert err < 1e-5, f"llama.cpp-style logits differ from torchtitan's by {err} (relative)"
    # teeth: HF's rotate-half rows in place of GGUF's, or no rope_freqs, do not match
    def to_hf(w, nh):
        return w.reshape(nh, w.shape[0] // nh // 2, 2, -1).transpose(1, 2).reshape(w.shape)
    bad = dict(W)
    for i in range(M["llama.block_count"]):
        bad[f"blk.{i}.attn_q.weight"] = to_hf(W[f"blk.{i}.attn_q.weight"], H)
        bad[f"blk.{i}.attn_k.weight"] = to_hf(W[f"blk.{i}.attn_k.weight"], KV)
    e1 = (forward(bad, tokens) - ref).abs().max().item() / ref.abs().max().item()
    nof = dict(W)
    nof["rope_freqs.weight"] = torch.ones_like(W["rope_freqs.weight"])
    tokens = torch.randint(0, args.vocab_size, (1, 24), generator=torch.Generator().manual_seed(2))
    e2 = (forward(nof, tokens) - tt(tokens)).abs().max().item() / tt(tokens).abs().max().item()
    assert e1 > 1e-2 and e2 > 1e-6, (err, e1, e2)
print(f"max |llama.cpp-style - torchtitan| / max |logit| = {err:.2e}; HF q/k rows: {e1:.2e}; "
      f"no rope_freqs: {e2:.2e}", file=sys.stderr)
EOF
}

@test "--to gguf: @huggingface/gguf (npm) parses the export as the spec reader does" {
	need_hdf5
	need_hf
	[ -d build/cache/peers/node_modules/@huggingface/gguf ] ||
		skip "@huggingface/gguf is not installed (tests/peers/setup.sh)"
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert --to gguf --dtype bf16 --tokenizer tests/fixtures/tok/tiny.json "$T/a.h5" "$T/a.gguf"
	node build/cache/peers/gguf.mjs "$T/a.gguf" > "$T/node.json"
	$PY tests/ref/gguf_read.py "$T/a.gguf" > "$T/py.json"
	$PY - "$T/node.json" "$T/py.json" <<'EOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["version"] == b["version"] == 3 and a["data_offset"] == b["data_offset"]
assert a["kv_count"] == len(b["metadata"]) and a["tensor_count"] == len(b["tensors"]) == 22
assert list(a["metadata"]) == list(b["metadata"])
for k in a["metadata"]:
    assert a["metadata"][k] == b["metadata"][k], (k, a["metadata"][k], b["metadata"][k])
assert a["tensors"] == b["tensors"], (a["tensors"], b["tensors"])
assert {t["type"] for t in a["tensors"]} == {"BF16", "F32"}
EOF
}

@test "info reads a GGUF file: metadata, tensors, CRC32C equal to the checkpoint's; --json" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	titan-ckpt-convert --to gguf --tokenizer tests/fixtures/tok/tiny.json "$T/a.h5" "$T/a.gguf"
	run -0 --separate-stderr titan-ckpt-convert info "$T/a.gguf"
	[ -z "$stderr" ]
	assert_line --regexp "^format: +GGUF version 3, alignment 32, data at byte [0-9]+$"
	assert_line --regexp '^  general\.architecture +string +"llama"$'
	assert_line --regexp '^  llama\.rope\.freq_base +f32 +500000$'
	assert_line --regexp '^  llama\.attention\.layer_norm_rms_epsilon +f32 +1e-05$'
	assert_line --regexp '^  tokenizer\.ggml\.tokens +\[string\] +272 elements: "Ā", "ā", .*, \.\.\.$'
	assert_line --regexp '^  tokenizer\.ggml\.add_bos_token +bool +true$'
	assert_line --regexp '^  blk\.0\.attn_q\.weight +F32 +\[32, 32\] +4\.00 KiB +crc32c [0-9a-f]{8}$'
	# the same float32 values: the same checksums as the h5 tensors (q/k included)
	crc() { titan-ckpt-convert info "$1" | grep -F "  $2 " | grep -o 'crc32c [0-9a-f]*'; }
	[ "$(crc "$T/a.gguf" blk.0.attn_q.weight)" = "$(crc "$T/a.h5" model/layers.0.attention.wq.weight)" ]
	[ "$(crc "$T/a.gguf" blk.1.ffn_down.weight)" = "$(crc "$T/a.h5" model/layers.1.feed_forward.w2.weight)" ]
	[ "$(crc "$T/a.gguf" token_embd.weight)" = "$(crc "$T/a.h5" model/tok_embeddings.weight)" ]
	titan-ckpt-convert info --json "$T/a.gguf" > "$T/info.json"
	[ "$(wc -l < "$T/info.json")" = 1 ]
	$PY - "$T/info.json" "$T/a.gguf" tests/ref <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[3])
import gguf_read
j, g = json.load(open(sys.argv[1])), gguf_read.load(sys.argv[2])
assert j["format"] == "gguf" and j["version"] == 3 and j["alignment"] == 32
assert j["data_offset"] == g.data_offset
assert [m["key"] for m in j["metadata"]] == list(g.metadata)
for m in j["metadata"]:
    t, v = g.metadata[m["key"]]
    assert m["type"] == t and (m["value"] == v or abs(m["value"] - v) <= 1e-12 * abs(v)), m
assert [t["name"] for t in j["tensors"]] == list(g.tensors)
for t in j["tensors"]:
    assert t["ne"] == g.tensors[t["name"]].ne and t["shape"] == t["ne"][::-1]
    assert t["offset"] == g.tensors[t["name"]].offset and len(t["crc32c"]) == 8
EOF
}

@test "--to gguf without --tokenizer warns that llama.cpp needs the tokenizer metadata" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	run -0 --separate-stderr titan-ckpt-convert --to gguf --max-position-embeddings 4096 "$T/a.h5" "$T/a.gguf"
	[[ $stderr == *"no --tokenizer: '$T/a.gguf' gets no tokenizer.ggml.* metadata, and llama.cpp needs it"* ]]
	run -0 titan-ckpt-convert info --no-checksums "$T/a.gguf"
	refute_output --partial tokenizer.
	assert_line --regexp '^  llama\.context_length +u32 +4096$'
	refute_output --partial crc32c
}

@test "--to gguf errors: a missing output folder, a tokenizer larger than the vocab, a bad GGUF (1)" {
	need_hdf5
	need_hf
	titan-ckpt-convert --from hf "$HF" "$T/a.h5"
	run -1 --separate-stderr titan-ckpt-convert --to gguf "$T/a.h5" "$T/missing/dir/a.gguf"
	refute_crash
	[[ $stderr == *"titan-ckpt-convert: error: cannot create '$T/missing/dir/a.gguf': No such file or directory"* ]]
	[ ! -e "$T/missing" ]
	run -1 --separate-stderr titan-ckpt-convert --to gguf --tokenizer tests/fixtures/tok/tiny.tiktoken \
		"$T/a.h5" "$T/big.gguf"
	refute_crash
	[[ $stderr == *"tiny.tiktoken' has 521 token ids, more than the model's vocab_size 272"* ]]
	run -1 --separate-stderr titan-ckpt-convert --to gguf --tokenizer "$T/nope.json" "$T/a.h5" "$T/b.gguf"
	[[ $stderr == *"nope.json"* ]]
	run -1 --separate-stderr titan-ckpt-convert --to gguf "$T/nope.h5" "$T/c.gguf"
	[[ $stderr == *"cannot open '$T/nope.h5'"* ]]
	[ "$(ls -A "$T" | grep -v '^separate-stderr-')" = a.h5 ]     # nothing half-written
	# a truncated GGUF and one with a corrupted string length: errors naming the field
	titan-ckpt-convert -q --to gguf "$T/a.h5" "$T/a.gguf"
	head -c 3000 "$T/a.gguf" > "$T/cut.gguf"
	run -1 --separate-stderr titan-ckpt-convert info "$T/cut.gguf"
	refute_crash
	[[ $stderr == "titan-ckpt-convert: error: '$T/cut.gguf': tensor 'token_embd.weight' at byte "*"runs past the end of the file (3000 bytes): truncated"* ]]
	$PY -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[24:32] = (1 << 40).to_bytes(8, "little"); open(sys.argv[2], "wb").write(b)' \
		"$T/a.gguf" "$T/bad.gguf"
	run -1 --separate-stderr titan-ckpt-convert info "$T/bad.gguf"
	[[ $stderr == *"'$T/bad.gguf': key 0 at byte 24: the key length 1099511627776 runs past the end of the file"* ]]
}

# --------------------------------------------------------------- progress

@test "--progress: tensor bytes of the total, one line per update off a terminal, the last at 100%" {
	need_hdf5
	need_hf
	export TITAN_PROGRESS_INTERVAL_MS=0
	titan-ckpt-convert --progress --from hf "$HF" "$T/a.h5" 2> "$T/err"
	# a line before each of the 21 tensors, then the final one
	run -0 grep -Ec '^titan-ckpt-convert: [0-9.]+ (B|KiB) / 164.62 KiB \([0-9]+%\), tensor [0-9]+/21, [0-9.]+ MB/s' "$T/err"
	assert_output 21
	run -0 tail -n 1 "$T/err"
	assert_output --regexp '^titan-ckpt-convert: 164.62 KiB / 164.62 KiB \(100%\), 21 tensors, [0-9.]+ MB/s, [0-9:]+ elapsed$'
	# the other modes: bfloat16 copy (stored bytes), HF and GGUF exports, info
	for cmd in "--weights-only --dtype bf16 $T/a.h5 $T/b.h5" "--to hf $T/a.h5 $T/hf" \
		   "--to gguf $T/a.h5 $T/a.gguf" "info --verify $T/b.h5"; do
		titan-ckpt-convert --progress $cmd > /dev/null 2> "$T/err"
		run -0 grep '^titan-ckpt-convert: ' "$T/err"
		assert_line --index $((${#lines[@]} - 1)) --regexp ' \(100%\), [0-9]+ tensors, .* elapsed$'
	done
	# without --progress, stderr not a terminal: no progress
	run -0 --separate-stderr titan-ckpt-convert info --verify "$T/b.h5"
	[[ $stderr != *"titan-ckpt-convert: "* ]]
	run -0 --separate-stderr titan-ckpt-convert --to hf "$T/a.h5" "$T/hf2"
	[[ $stderr != *"MB/s"* ]]
}

# hf_tied DIR TIE HEAD: a tiny HF Llama (numpy; safetensors written from the
# format spec) with tie_word_embeddings TIE and lm_head.weight HEAD: none,
# same (the embedding's bytes), bf16 (the embedding's values as BF16, exact)
# or other (different values)
hf_tied() {
	$PY - "$@" <<'EOF2'
import json, os, struct, sys
import numpy as np
out, tie, head = sys.argv[1], sys.argv[2] == "true", sys.argv[3]
os.makedirs(out, exist_ok=True)
D, L, H, KV, V, F = 32, 1, 4, 2, 272, 96
hd = D // H
rng = np.random.default_rng(7)
r = lambda *s: rng.standard_normal(s).astype(np.float32)
# embedding values that are exact in bfloat16, so a BF16 copy is the same matrix
emb = (r(V, D).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
t = {"model.embed_tokens.weight": ("F32", emb)}
p = "model.layers.0."
for n, s in [("self_attn.q_proj", (H * hd, D)), ("self_attn.k_proj", (KV * hd, D)),
             ("self_attn.v_proj", (KV * hd, D)), ("self_attn.o_proj", (D, H * hd)),
             ("mlp.gate_proj", (F, D)), ("mlp.up_proj", (F, D)), ("mlp.down_proj", (D, F)),
             ("input_layernorm", (D,)), ("post_attention_layernorm", (D,))]:
    t[p + n + ".weight"] = ("F32", r(*s))
t["model.norm.weight"] = ("F32", r(D))
if head == "same":
    t["lm_head.weight"] = ("F32", emb.copy())
elif head == "bf16":
    t["lm_head.weight"] = ("BF16", (emb.view(np.uint32) >> 16).astype(np.uint16))
elif head == "other":
    o = emb.copy(); o[5, 7] += 1.0
    t["lm_head.weight"] = ("F32", o)
hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
for k, (dt, a) in t.items():
    b = np.ascontiguousarray(a).tobytes()
    hdr[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
    off += len(b); blobs.append(b)
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
with open(out + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": KV, "vocab_size": V, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": tie,
           "torch_dtype": "float32"}, open(out + "/config.json", "w"))
EOF2
}

# st_tensor FILE NAME: the tensor's float32 values, hex of the bytes
st_tensor() {
	$PY - "$@" <<'EOF2'
import json, struct, sys
import numpy as np
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
if sys.argv[2] not in h: print("absent"); sys.exit(0)
e = h[sys.argv[2]]; s, t = e["data_offsets"]
print(e["dtype"], np.frombuffer(b[8 + n + s:8 + n + t], dtype=np.float32).tobytes().hex()[:64],
      __import__("hashlib").sha256(b[8 + n + s:8 + n + t]).hexdigest())
EOF2
}

@test "--from hf with tie_word_embeddings: a tied checkpoint; lm_head equal to the embedding is accepted, a different one refused; untied keeps lm_head; both round trips" {
	need_hdf5
	$PY -c 'import numpy' 2>/dev/null || skip "python3-numpy is not installed"
	# tied, with no lm_head, with the same bytes and with the same values in BF16
	for head in none same bf16; do
		hf_tied "$T/tied-$head" true $head
		run -0 --separate-stderr titan-ckpt-convert --from hf "$T/tied-$head" "$T/tied-$head.h5"
		if [ $head != none ]; then
			[[ $stderr == *"lm_head.weight equals model.embed_tokens.weight: one tied matrix"* ]]
		fi
		run -0 titan-ckpt-convert info "$T/tied-$head.h5"
		assert_output --partial "tied embeddings"
		refute_output --partial "output.weight"
		# and back: tie_word_embeddings true, no lm_head, the embedding's bytes
		run -0 titan-ckpt-convert --to hf "$T/tied-$head.h5" "$T/back-$head"
		$PY -c 'import json,sys; assert json.load(open(sys.argv[1]))["tie_word_embeddings"] is True' \
			"$T/back-$head/config.json"
		[ "$(st_tensor "$T/back-$head/model.safetensors" lm_head.weight)" = absent ]
		[ "$(st_tensor "$T/back-$head/model.safetensors" model.embed_tokens.weight)" = \
		  "$(st_tensor "$T/tied-$head/model.safetensors" model.embed_tokens.weight)" ]
	done
	# tied, but lm_head differs: refused (1) naming the element and the way out, nothing written
	hf_tied "$T/tied-other" true other
	run -1 --separate-stderr titan-ckpt-convert --from hf "$T/tied-other" "$T/tied-other.h5"
	refute_crash
	[[ $stderr == *"tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight (first at [5, 7]: "*"set tie_word_embeddings to false in config.json"* ]]
	assert_file_not_exists "$T/tied-other.h5"
	# the same folder untied: lm_head is the output, and comes back as it went
	hf_tied "$T/untied" false other
	run -0 titan-ckpt-convert --from hf "$T/untied" "$T/untied.h5"
	run -0 titan-ckpt-convert info "$T/untied.h5"
	assert_output --partial "output.weight"
	refute_output --partial "tied embeddings"
	run -0 titan-ckpt-convert --to hf "$T/untied.h5" "$T/back-untied"
	$PY -c 'import json,sys; assert json.load(open(sys.argv[1]))["tie_word_embeddings"] is False' \
		"$T/back-untied/config.json"
	for n in lm_head.weight model.embed_tokens.weight; do
		[ "$(st_tensor "$T/back-untied/model.safetensors" $n)" = \
		  "$(st_tensor "$T/untied/model.safetensors" $n)" ]
	done
	[ "$(st_tensor "$T/back-untied/model.safetensors" lm_head.weight)" != \
	  "$(st_tensor "$T/back-untied/model.safetensors" model.embed_tokens.weight)" ]
}
