#!/usr/bin/env bats
# Hostile HDF5 checkpoints (issue 21): a checkpoint is a file from someone
# else, and HDF5 can make a reader read other files (external storage,
# external and soft links, virtual datasets), inflate a small chunk to
# gigabytes (filters) or carry values no model has (a negative step, a NaN
# norm_eps).  Each variant is built with h5py from one real checkpoint, and
# every reader of checkpoints must refuse it at open with exit 1, naming
# the dataset or attribute: titan-ckpt-convert info (--verify), --to hf,
# --to gguf, titan-generate, and titan-train resuming from the folder or
# starting from checkpoint.initial_load_path.  No byte of the file pointed
# at may reach an output.

bats_require_minimum_version 1.5.0

PY=/usr/bin/python3
SECRET=TITAN-SECRET-0123456789abcdef

setup_file() {
	load tiny
	tiny_env
	tiny_corpus genesis 2000 768 40
	tiny_yaml "$DATA/tiny.yaml" 768 64 2 4 2 "$DATA/tok.tiktoken" <<YAML
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 32
  steps: 2
checkpoint:
  interval: 2
  last_save_model_only: false
YAML
	titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable --job.dump_folder="$DATA/run"
	# mk.py SRC OUT KIND: a copy of SRC made hostile; secret.bin (256 bytes
	# of $SECRET) and other.h5 (a dataset of them) lie beside OUT
	cat > "$DATA/mk.py" <<'EOF'
import sys, os, shutil, zlib, h5py, numpy as np
src, out, kind = sys.argv[1], sys.argv[2], sys.argv[3]
d = os.path.dirname(os.path.abspath(out))
SEC = (b"TITAN-SECRET-0123456789abcdef-" * 9)[:256]
secret = os.path.join(d, "secret.bin")
open(secret, "wb").write(SEC)
other = os.path.join(d, "other.h5")
with h5py.File(other, "w") as o:
    o["x"] = np.frombuffer(SEC, dtype="<f4")
shutil.copy(src, out)
N = "model/layers.0.attention_norm.weight"   # [64] float32: 256 bytes
with h5py.File(out, "r+") as f:
    if kind == "external":
        del f[N]
        f.create_dataset(N, shape=(64,), dtype="<f4", external=[(secret, 0, 256)])
    elif kind == "elink":
        del f[N]
        f[N] = h5py.ExternalLink(other, "/x")
    elif kind == "elink-group":       # the whole /optimizer elsewhere
        with h5py.File(other, "a") as o:
            f.copy("optimizer", o)
        del f["optimizer"]
        f["optimizer"] = h5py.ExternalLink(other, "/optimizer")
    elif kind == "vds":
        del f[N]
        lay = h5py.VirtualLayout(shape=(64,), dtype="<f4")
        lay[:] = h5py.VirtualSource(other, "x", shape=(64,))
        f.create_virtual_dataset(N, lay)
    elif kind == "soft":
        x = f[N][...]
        del f[N]
        f["stash"] = x
        f[N] = h5py.SoftLink("/stash")
    elif kind in ("gzip", "lzf", "fletcher32", "shuffle", "scaleoffset"):
        x = f[N][...]
        del f[N]
        kw = {"gzip": dict(compression="gzip"), "lzf": dict(compression="lzf"),
              "fletcher32": dict(fletcher32=True), "shuffle": dict(shuffle=True),
              "scaleoffset": dict(scaleoffset=4)}[kind]
        f.create_dataset(N, data=x, chunks=(64,), **kw)
    elif kind == "bomb":
        # tok_embeddings [768, 64] (196,608 bytes) as one gzip chunk that
        # inflates to 128 MiB, padded to the raw size: its storage size is right
        E = "model/tok_embeddings.weight"
        shape, raw = f[E].shape, f[E].id.get_storage_size()
        del f[E]
        z = zlib.compress(b"\0" * (128 << 20), 9)
        assert len(z) <= raw, len(z)
        ds = f.create_dataset(E, shape=shape, dtype="<f4", chunks=shape, compression="gzip")
        ds.id.write_direct_chunk((0, 0), z + b"\0" * (raw - len(z)))
    elif kind == "step":
        f["train_state"].attrs["step"] = np.int64(-5)
    elif kind == "nan_eps":
        f.attrs["norm_eps"] = np.float64("nan")
    elif kind == "inf_theta":
        f.attrs["rope_theta"] = np.float64("inf")
    elif kind == "heads0":
        f.attrs["n_kv_heads"] = np.int64(0)
    else:
        raise SystemExit("mk.py: unknown kind " + kind)
EOF
}

setup() {
	load helpers
	cd "$BATS_TEST_TMPDIR" || return 1
	$PY -c 'import h5py, numpy' 2>/dev/null || skip "python3-h5py is not installed"
	titan-ckpt-convert --version | grep -q '+hdf5' || skip "built without HDF5"
}

# hostile KIND: $BATS_TEST_TMPDIR/in/KIND.h5
hostile() {
	mkdir -p in
	$PY "$DATA/mk.py" "$DATA/run/checkpoint/step-2.h5" "in/$1.h5" "$1"
	H=$BATS_TEST_TMPDIR/in/$1.h5
}

# refused WHAT: every reader of $H exits 1 with one error naming WHAT (a
# glob), and nothing it wrote holds the secret
refused() {
	local what=$1 o=$BATS_TEST_TMPDIR/out
	mkdir -p "$o"
	run -1 --separate-stderr titan-ckpt-convert info "$H"
	refute_crash
	[[ $stderr == "titan-ckpt-convert: error: '$H': "$what* ]] || fail "info: $stderr"
	run -1 --separate-stderr titan-ckpt-convert info --verify --json "$H"
	refute_crash
	[[ $stderr == *"'$H': "$what* ]] || fail "info --verify: $stderr"
	run -1 --separate-stderr titan-ckpt-convert --to hf "$H" "$o/hf"
	refute_crash
	[[ $stderr == *"'$H': "$what* ]] || fail "--to hf: $stderr"
	[ ! -e "$o/hf/model.safetensors" ]
	run -1 --separate-stderr titan-ckpt-convert --to gguf "$H" "$o/m.gguf"
	refute_crash
	[[ $stderr == *"'$H': "$what* ]] || fail "--to gguf: $stderr"
	[ ! -e "$o/m.gguf" ]
	run -1 --separate-stderr titan-generate -n 4 -t "$DATA/tok.tiktoken" "$H" "In the"
	refute_crash
	[[ $stderr == *"'$H': "$what* ]] || fail "titan-generate: $stderr"
	# resume: the hostile file is the folder's newest step
	mkdir -p "$o/run/checkpoint"
	cp "$H" "$o/run/checkpoint/step-2.h5"
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable \
		--training.steps=4 --job.dump_folder="$o/run"
	refute_crash
	[[ $stderr == *"step-2.h5': "$what* ]] || fail "titan-train resume: $stderr"
	[ ! -e "$o/run/checkpoint/step-4.h5" ]
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable \
		--checkpoint.initial_load_path="$H" --job.dump_folder="$o/init"
	refute_crash
	[[ $stderr == *"'$H': "$what* ]] || fail "titan-train initial_load_path: $stderr"
	[ -z "$(compgen -G "$o/init/checkpoint/step-*" || true)" ]
	run grep -rlaF "$SECRET" "$o"
	[ "$status" -eq 1 ] || fail "the secret reached: $output"
}

@test "the untouched checkpoint passes every reader (the suite's baseline)" {
	H=$DATA/run/checkpoint/step-2.h5
	run -0 titan-ckpt-convert info --verify "$H"
	run -0 titan-ckpt-convert -q --to hf "$H" hf
	run -0 titan-ckpt-convert -q --to gguf "$H" m.gguf
	run -0 --separate-stderr titan-generate -n 2 -t "$DATA/tok.tiktoken" "$H" "In the"
}

@test "external storage (a dataset's bytes in another file) is refused naming the dataset" {
	hostile external
	refused "/model/layers.0.attention_norm.weight has external storage"
}

@test "an external link to a dataset in another file is refused naming the link" {
	hostile elink
	refused "/model/layers.0.attention_norm.weight is an external link"
}

@test "an external link standing for a whole group (/optimizer) is refused" {
	hostile elink-group
	refused "/optimizer is an external link"
}

@test "a soft link is refused naming the link" {
	hostile soft
	refused "/model/layers.0.attention_norm.weight is a soft link"
}

@test "a virtual dataset (VDS) mapping another file is refused naming the dataset" {
	hostile vds
	refused "/model/layers.0.attention_norm.weight is a virtual dataset"
}

@test "filters titan does not write (gzip, lzf, fletcher32, shuffle, scaleoffset) are refused naming dataset and filter" {
	for k in gzip:1 lzf:32000 fletcher32:3 shuffle:2 scaleoffset:6; do
		hostile "${k%:*}"
		refused "/model/layers.0.attention_norm.weight is stored through HDF5 filter ${k#*:} "
		rm -rf out
	done
}

@test "a gzip bomb padded to the tensor's raw size is refused without inflating it (memory stays small)" {
	hostile bomb
	refused "/model/tok_embeddings.weight is stored through HDF5 filter 1 (deflate"
	# the 128 MiB it inflates to are never allocated: a clean file's reader
	# peaks near 16 MB here
	run -1 /usr/bin/time -f 'maxrss %M' titan-ckpt-convert info --verify "$H"
	local kb
	kb=$(sed -n 's/^maxrss //p' <<< "$output")
	[ -n "$kb" ] && [ "$kb" -lt 65536 ] || fail "max RSS $kb KiB: $output"
}

@test "a negative step is refused at open naming the file and the value" {
	hostile step
	refused "/train_state: attribute 'step' is -5 (must not be negative)"
}

@test "a NaN norm_eps, an infinite rope_theta and 0 kv heads are refused naming the attribute" {
	hostile nan_eps
	refused "norm_eps nan: must be a finite number above 0"
	rm -rf out
	hostile inf_theta
	refused "rope_theta inf: must be a finite number above 0"
	rm -rf out
	hostile heads0
	refused "n_kv_heads 0: must be in [1, "
}

@test "2 ranks resuming from a checkpoint with external storage both stop with exit 1 naming the dataset, no hang" {
	command -v mpiexec >/dev/null || skip "mpiexec is not installed"
	hostile external
	mkdir -p out/run/checkpoint
	cp "$H" out/run/checkpoint/step-2.h5
	run -1 --separate-stderr timeout 120 mpiexec -n 2 titan-train -q --config "$DATA/tiny.yaml" \
		--checkpoint.enable --training.steps=4 --job.dump_folder=out/run
	refute_crash
	[[ $stderr == *"[rank0]: titan-train: error: "*"step-2.h5': /model/layers.0.attention_norm.weight has external storage"* ]]
	[[ $stderr == *"[rank1]: titan-train: error: "*"has external storage"* ]]
	[ ! -e out/run/checkpoint/step-4.h5 ]
}
