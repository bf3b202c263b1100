#!/usr/bin/env bats
# titan-ckpt-convert --to hf --tokenizer FILE.tiktoken: the export holds a
# tokenizer.json and a tokenizer_config.json (transformers, vLLM and lm_eval
# load the tokenizer from them), and the reference tokenizers load them and
# encode the test corpora to titan-tokenize's ids on the .tiktoken file:
# HuggingFace tokenizers (npm `tokenizers`, the Rust core) on every corpus,
# transformers.js' @huggingface/tokenizers on some.  The peers and the
# vocabularies come from tests/peers/setup.sh, the corpora from
# tests/corpora/fetch.sh (see tokenize-peers.bats); nothing is committed.

# bats file_tags=parallel,slow
bats_require_minimum_version 1.5.0

PY=/usr/bin/python3

setup_file() {
	cd "${TITAN_SRCDIR:-$BATS_TEST_DIRNAME/../..}"
	tests/peers/setup.sh >&3 2>&1 || {
		echo "# tests/peers/setup.sh failed: the peers could not be installed" >&3
		return 1
	}
	tests/corpora/fetch.sh build/cache/corpora >&3 2>&1
	# one seed checkpoint whose vocabulary holds every tokenizer's ids
	# (o200k_base: 200019); its shards are made with Llama 3's tokenizer
	local d=$BATS_FILE_TMPDIR B=${TITAN_BIN:-bin} v=build/cache/peers/cache/llama3.tiktoken
	yes 'In the beginning God created the heaven and the earth.' | head -n 64 > "$d/t.txt"
	"$B/titan-tokenize" -t "$v" --doc-per-line "$d/t.txt" > "$d/t.tok"
	"$B/titan-shard" -q -t "$v" --out "$d/shards" --val-docs 2 < "$d/t.tok"
	cat > "$d/seed.yaml" <<YAML
model:
  flavor: custom
  dim: 16
  n_layers: 1
  n_heads: 2
  vocab_size: 200064
  multiple_of: 32
training:
  dataset_path: $d/shards
  steps: 1
  local_batch_size: 1
  seq_len: 16
checkpoint:
  enable: true
  folder: $d/ck
  create_seed_checkpoint: true
job:
  dump_folder: $d
YAML
	"$B/titan-train" --config "$d/seed.yaml" > /dev/null 2>&1
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	PEERS=build/cache/peers
	VOC=$PEERS/cache
	CORP=build/cache/corpora
	CK=$BATS_FILE_TMPDIR/ck/step-0.h5
	[ -s "$CK" ] || fail "setup_file made no seed checkpoint"
}

corpora_text() {
	for f in kjv jargon fortunes-en fortunes-zh fortunes-ru unicode-all unicode16-new emoji \
		 man-ja man-zh man-ru scripts crlf-ws code; do
		echo "$CORP/$f.txt"
	done
	echo "$CORP/invalid-utf8.bin"
}

# same TIKTOKEN TOKENIZER_JSON PEER [TITAN-ARGS] FORMAT-ARGS FILE...: titan-tokenize
# on the .tiktoken file and PEER on the exported tokenizer.json give the same
# stream (every file one document: [BOS] ids EOS)
same() {
	local tik=$1 json=$2 peer=$3 extra=$4 fmt=$5
	shift 5
	# shellcheck disable=SC2086
	titan-tokenize -t "$tik" $extra $fmt "$@" > "$BATS_TEST_TMPDIR/titan.tok" ||
		fail "titan-tokenize failed"
	# shellcheck disable=SC2086
	node "$PEERS/encode.mjs" --peer "$peer" --tokenizer "$json" $extra $fmt "$@" \
		> "$BATS_TEST_TMPDIR/peer.tok" || fail "$peer cannot encode with $json"
	if ! cmp -s "$BATS_TEST_TMPDIR/titan.tok" "$BATS_TEST_TMPDIR/peer.tok"; then
		node "$PEERS/compare.mjs" --peer "$peer" --tokenizer "$json" "$BATS_TEST_TMPDIR/peer.tok" \
			"$BATS_TEST_TMPDIR/titan.tok" | head -n 40
		fail "$peer on $json and titan-tokenize on $tik differ ($fmt $*)"
	fi
}

# export TIKTOKEN: $OUT, the HF folder
export_hf() {
	OUT=$BATS_TEST_TMPDIR/hf
	run -0 --separate-stderr titan-ckpt-convert -q --to hf --tokenizer "$1" "$CK" "$OUT"
	[ -s "$OUT/tokenizer.json" ] || fail "no tokenizer.json in the export"
	[ -s "$OUT/tokenizer_config.json" ] || fail "no tokenizer_config.json in the export"
	cmp "$1" "$OUT/$(basename "$1")" || fail "the .tiktoken file is not copied"
}

@test "Llama 3 tiktoken: tokenizer.json gives titan's ids on every corpus (HF tokenizers)" {
	export_hf "$VOC/llama3.tiktoken"
	# shellcheck disable=SC2046
	same "$VOC/llama3.tiktoken" "$OUT/tokenizer.json" hf "" "--format text" $(corpora_text)
	same "$VOC/llama3.tiktoken" "$OUT/tokenizer.json" hf "" "--format jsonl" \
		"$CORP/corpus.jsonl" "$CORP/json-escapes.jsonl"
	# special-token text in the input: ids with --allow-special, text without
	same "$VOC/llama3.tiktoken" "$OUT/tokenizer.json" hf --allow-special "--format jsonl" \
		"$CORP/corpus.jsonl"
	printf 'a<|begin_of_text|>b <|eot_id|>\n<|reserved_special_token_7|>' > "$BATS_TEST_TMPDIR/sp.txt"
	same "$VOC/llama3.tiktoken" "$OUT/tokenizer.json" hf --allow-special "--format text" \
		"$BATS_TEST_TMPDIR/sp.txt"
	same "$VOC/llama3.tiktoken" "$OUT/tokenizer.json" hf "" "--format text" "$BATS_TEST_TMPDIR/sp.txt"
}

@test "Llama 3 tiktoken: tokenizer.json is Meta's (model, pre-tokenizer, post-processor, decoder)" {
	export_hf "$VOC/llama3.tiktoken"
	$PY - "$OUT" "$VOC/llama3-tokenizer.json" <<'EOF'
import json, sys
out, meta = sys.argv[1], json.load(open(sys.argv[2]))
t = json.load(open(out + "/tokenizer.json"))
for k in ("model", "pre_tokenizer", "post_processor", "decoder", "normalizer", "version"):
    assert t[k] == meta[k], k
# the same ids and flags; the names of 128002.. are Llama 3.1's (titan's)
assert [(a["id"], a["special"]) for a in t["added_tokens"]] == \
       [(a["id"], a["special"]) for a in meta["added_tokens"]]
assert t["added_tokens"][0]["content"] == "<|begin_of_text|>"
c = json.load(open(out + "/tokenizer_config.json"))
assert c["tokenizer_class"] == "PreTrainedTokenizerFast", c
assert c["bos_token"] == "<|begin_of_text|>" and c["eos_token"] == "<|end_of_text|>", c
assert c["clean_up_tokenization_spaces"] is False and "chat_template" not in c, c
assert c["model_max_length"] == json.load(open(out + "/config.json"))["max_position_embeddings"]
cfg = json.load(open(out + "/config.json"))
assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (128000, 128001), cfg
EOF
}

@test "Llama 3 tiktoken: the loaded tokenizer adds BOS as titan does and decodes back" {
	export_hf "$VOC/llama3.tiktoken"
	NODE_PATH=$PEERS/node_modules run -0 node -e '
const { Tokenizer } = require("tokenizers");
(async () => {
	const t = Tokenizer.fromFile(process.argv[1]);
	const e = await t.encode("Hello world", null);
	console.log(Array.from(e.getIds()).join(" "));
	console.log(await t.decode(Array.from(e.getIds()), true));
})().catch((e) => { console.error(e); process.exit(1); });' "$OUT/tokenizer.json"
	want=$(printf 'Hello world' | titan-tokenize -t "$VOC/llama3.tiktoken" --format text --no-eos - |
	       od -An -tu4 -v | xargs)
	assert_line -n 0 "$want"
	assert_line -n 1 "Hello world"
}

@test "Llama 3 tiktoken: transformers.js (@huggingface/tokenizers) gives titan's ids too" {
	export_hf "$VOC/llama3.tiktoken"
	same "$VOC/llama3.tiktoken" "$OUT/tokenizer.json" hf-js "" "--format text" \
		"$CORP/kjv.txt" "$CORP/fortunes-zh.txt" "$CORP/crlf-ws.txt" "$CORP/code.txt" "$CORP/emoji.txt"
}

@test "cl100k_base tiktoken (no BOS): tokenizer.json gives titan's ids on every corpus" {
	export_hf "$VOC/cl100k_base.tiktoken"
	# shellcheck disable=SC2046
	same "$VOC/cl100k_base.tiktoken" "$OUT/tokenizer.json" hf "" "--format text" $(corpora_text)
	$PY - "$OUT" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1] + "/tokenizer.json"))
c = json.load(open(sys.argv[1] + "/tokenizer_config.json"))
assert [p["type"] for p in t["post_processor"]["processors"]] == ["ByteLevel"], t["post_processor"]
assert "bos_token" not in c and c["eos_token"] == "<|endoftext|>", c
EOF
}

@test "o200k_base tiktoken: tokenizer.json gives titan's ids" {
	export_hf "$VOC/o200k_base.tiktoken"
	same "$VOC/o200k_base.tiktoken" "$OUT/tokenizer.json" hf "" "--format text" \
		"$CORP/kjv.txt" "$CORP/fortunes-ru.txt" "$CORP/unicode-all.txt" "$CORP/crlf-ws.txt" \
		"$CORP/code.txt" "$CORP/man-ja.txt"
}

@test "a tokenizer from titan-tokenize train: tokenizer.json gives titan's ids" {
	titan-tokenize train -q --vocab-size 2048 --format text "$CORP/kjv.txt" "$CORP/jargon.txt" \
		-o "$BATS_TEST_TMPDIR/t.tiktoken"
	export_hf "$BATS_TEST_TMPDIR/t.tiktoken"
	same "$BATS_TEST_TMPDIR/t.tiktoken" "$OUT/tokenizer.json" hf "" "--format text" \
		"$CORP/kjv.txt" "$CORP/fortunes-en.txt" "$CORP/unicode-all.txt" "$CORP/invalid-utf8.bin"
}

@test "transformers' AutoTokenizer loads the export and gives titan's ids" {
	$PY -c 'import transformers' 2>/dev/null ||
		skip "transformers is not installed for $PY"
	export_hf "$VOC/llama3.tiktoken"
	$PY - "$OUT" "$CORP/kjv.txt" > "$BATS_TEST_TMPDIR/hf.ids" <<'EOF'
import sys
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[1])
print(" ".join(map(str, t(open(sys.argv[2], encoding="utf-8").read())["input_ids"])))
EOF
	titan-tokenize -t "$VOC/llama3.tiktoken" --format text --no-eos "$CORP/kjv.txt" |
		od -An -tu4 -v | xargs > "$BATS_TEST_TMPDIR/titan.ids"
	cmp "$BATS_TEST_TMPDIR/hf.ids" "$BATS_TEST_TMPDIR/titan.ids"
}
