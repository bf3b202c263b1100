#!/usr/bin/env bats
# titan-generate: the tool contract, then text from a tiny model trained
# here by titan-train on Genesis (Debian's bible-kjv, or a repeated verse):
# the checkpoint and its HF export give the same greedy text, a seed
# repeats a sample and another seed changes it, and bad inputs fail with
# a message naming the file or the option.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus --bible --line 'Ge1:1 In the beginning God created the heaven and the earth.' genesis 1500 768 40
	# the tiny Llama of titan-train.bats; its config names the tokenizer
	tiny_yaml "$DATA/tiny.yaml" 768 64 2 4 2 "$DATA/tok.tiktoken" <<YAML
job:
  dump_folder: $DATA/out
optimizer:
  lr: 3.0e-3
lr_scheduler:
  warmup_steps: 5
training:
  dataset_path: $DATA/shards
  local_batch_size: 4
  seq_len: 64
  steps: 100
checkpoint:
  enable: true
  interval: 100
activation_checkpoint:
  mode: none
YAML
	titan-train -q --config "$DATA/tiny.yaml"
	titan-ckpt-convert -q --to hf --tokenizer "$DATA/tok.tiktoken" "$DATA/out/checkpoint" "$DATA/hf"
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	CKPT=$DATA/out/checkpoint/step-100.h5
}

@test "contract: no args, --help, --version, a bad option" {
	run -2 --separate-stderr titan-generate
	[[ $stderr == *"titan-generate: error: MODEL is required"* ]]
	run -0 titan-generate --help
	assert_line --partial "Usage: titan-generate [OPTIONS] MODEL [PROMPT]"
	assert_line --partial "--top-p P"
	assert_line --partial "See also:"
	run -0 titan-generate --version
	assert_line --regexp '^titan-generate \(titan\) '
	run -2 --separate-stderr titan-generate --frob "$CKPT" x
	[[ $stderr == *"unrecognized option '--frob'"* ]]
	run -2 --separate-stderr titan-generate "$CKPT" one two
	[[ $stderr == *"one PROMPT argument expected"* ]]
}

@test "a missing or bad model, a missing tokenizer: exit 1 naming the file" {
	run -1 --separate-stderr titan-generate "$BATS_TEST_TMPDIR/step-9.h5" hello
	[[ $stderr == *"error: cannot open '$BATS_TEST_TMPDIR/step-9.h5': No such file or directory"* ]]
	echo 'not a checkpoint' > "$BATS_TEST_TMPDIR/step-1.h5"
	run -1 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" "$BATS_TEST_TMPDIR/step-1.h5" hello
	[[ $stderr == *"'$BATS_TEST_TMPDIR/step-1.h5' is not an HDF5 file"* ]]
	mkdir "$BATS_TEST_TMPDIR/empty"
	run -1 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" "$BATS_TEST_TMPDIR/empty" hello
	[[ $stderr == *"'$BATS_TEST_TMPDIR/empty' holds neither a complete checkpoint"* ]]
	run -1 --separate-stderr titan-generate -t "$BATS_TEST_TMPDIR/none.tiktoken" "$CKPT" hello
	[[ $stderr == *"cannot open '$BATS_TEST_TMPDIR/none.tiktoken'"* ]]
	refute_crash
	[ -z "$output" ]
}

@test "bad options: exit 2 naming the option" {
	for bad in "--top-p 0" "--top-p 1.5" "--top-p x" "--temperature -1" "--temperature nan" \
		   "--top-k -1" "--max-new-tokens -3" "-n many" "--seed -1" "--context 0"; do
		run -2 --separate-stderr titan-generate $bad "$CKPT" hello
		opt=${bad%% *}
		[ "$opt" != -n ] || opt=--max-new-tokens
		[[ $stderr == *"error: $opt: expected"* ]] || fail "$bad: $stderr"
	done
	run -2 --separate-stderr titan-generate --model.dim=32 "$CKPT" hello
	[[ $stderr == *"--model.dim: config overrides apply to --config FILE"* ]]
	# --config dims that are not the checkpoint's
	run -2 --separate-stderr titan-generate --config "$DATA/tiny.yaml" --model.dim=32 "$CKPT" hello
	[[ $stderr == *"step-100.h5' holds another model than the config's: dim 64 there, 32 in the config (model.dim)"* ]]
}

@test "a prompt longer than the context: exit 2 naming the lengths and --context" {
	run -2 --separate-stderr titan-generate "$CKPT" "$(head -c 3000 "$DATA/genesis.txt")"
	[[ $stderr == *"the prompt is "*" tokens, the context of '$CKPT' is 64 (training.seq_len of the config stored in it)"*"raise --context"* ]]
	[ -z "$output" ]
	# a larger --context lets it through, with a warning
	run -0 --separate-stderr titan-generate --context 2048 -n 4 "$CKPT" "$(head -c 3000 "$DATA/genesis.txt")"
	[[ $stderr == *"--context 2048 is beyond the 64 tokens"* ]]
	# a long continuation stops at the context
	run -0 --separate-stderr titan-generate -n 1000 "$CKPT" "Ge1:3 And God said"
	[[ $stderr == *"stopped at the context of 64 tokens"* ]]
}

@test "greedy: the checkpoint, its folder and its HF export give the same text" {
	run -0 --separate-stderr titan-generate -n 40 "$CKPT" "Ge1:3 And God said"
	[ -n "$output" ]
	[[ $stderr == *"tokenizer $DATA/tok.tiktoken"* ]]   # from the checkpoint's config
	[[ $stderr == *"stopped by"* ]]
	text=$output
	# the continuation's log-probability: equal weights give equal logits
	lp() { grep -o 'log-probability of the new tokens: [-0-9.]*' <<< "$1"; }
	logprob=$(lp "$stderr")
	[ -n "$logprob" ]
	echo "# $text" >&3
	run -0 --separate-stderr titan-generate -n 40 "$DATA/out/checkpoint" "Ge1:3 And God said"
	assert_equal "$output" "$text"
	# the HF folder: q/k rows permuted back; the tokenizer.json the export
	# made of the tiktoken file (HF's first choice, as titan-generate's)
	run -0 --separate-stderr titan-generate -n 40 "$DATA/hf" "Ge1:3 And God said"
	[[ $stderr == *"tokenizer $DATA/hf/tokenizer.json"* ]]   # written by the export from tok.tiktoken
	assert_equal "$output" "$text"
	assert_equal "$(lp "$stderr")" "$logprob"
	# the prompt from standard input ('-' or nothing), bytes as they are
	run -0 --separate-stderr bash -c "printf 'Ge1:3 And God said' | titan-generate -n 40 '$CKPT' -"
	assert_equal "$output" "$text"
	run -0 --separate-stderr bash -c "printf 'Ge1:3 And God said' | titan-generate -n 40 '$CKPT'"
	assert_equal "$output" "$text"
	# a prefix of it with fewer tokens, any thread count
	run -0 --separate-stderr titan-generate --threads 1 -n 10 "$CKPT" "Ge1:3 And God said"
	[[ $text == "$output"* ]]
	run -0 --separate-stderr titan-generate -n 0 "$CKPT" "Ge1:3 And God said"
	assert_output ""
}

@test "sampling: a seed repeats the text, another seed changes it" {
	s=(--temperature 1.0 --top-k 100 --top-p 0.95 -n 40)
	run -0 --separate-stderr titan-generate "${s[@]}" --seed 5 "$CKPT" "Ge1:3 And God said"
	[ -n "$output" ]
	a=$output
	echo "# seed 5: $a" >&3
	run -0 --separate-stderr titan-generate "${s[@]}" --seed 5 --threads 1 "$DATA/hf" "Ge1:3 And God said"
	assert_equal "$output" "$a"
	# 40 draws at temperature 1 from a model this undertrained: two seeds
	# agreeing on all of them would be a broken generator, not luck
	run -0 --separate-stderr titan-generate "${s[@]}" --seed 6 "$CKPT" "Ge1:3 And God said"
	[ "$output" != "$a" ]
	# without --seed: a random one, logged so that it can be repeated
	run -0 --separate-stderr titan-generate --temperature 1.0 -n 20 "$CKPT" "Ge1:3 And God said"
	seed=$(sed -n 's/.*seed \([0-9]*\) (--seed repeats this text).*/\1/p' <<< "$stderr")
	[ -n "$seed" ]
	b=$output
	run -0 --separate-stderr titan-generate --temperature 1.0 -n 20 --seed "$seed" "$CKPT" "Ge1:3 And God said"
	assert_equal "$output" "$b"
}

@test "greedy text equals transformers' LlamaForCausalLM.generate on the HF export" {
	/usr/bin/python3 -c 'import transformers, torch' 2>/dev/null ||
		skip "transformers and torch are not installed for /usr/bin/python3"
	run -0 --separate-stderr titan-generate -n 24 "$DATA/hf" "Ge1:3 And God said"
	text=$output
	titan-tokenize -t "$DATA/tok.tiktoken" --format text --no-eos \
		<(printf 'Ge1:3 And God said') > "$BATS_TEST_TMPDIR/prompt.tok"
	run -0 /usr/bin/python3 - "$DATA/hf" "$BATS_TEST_TMPDIR/prompt.tok" "$DATA/tok.tiktoken" <<'PY'
import base64, struct, sys, torch, transformers
hf, prompt, tok = sys.argv[1:4]
data = open(prompt, "rb").read()
ids = list(struct.unpack("<%dI" % (len(data) // 4), data))
ranks = {}
for line in open(tok, "rb"):
    b64, rank = line.split()
    ranks[int(rank)] = base64.b64decode(b64)
model = transformers.LlamaForCausalLM.from_pretrained(hf, torch_dtype=torch.float32)
model.eval()
eos = model.config.eos_token_id
out = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False,
                     eos_token_id=eos, pad_token_id=eos)[0, len(ids):].tolist()
if eos in out:
    out = out[:out.index(eos)]
sys.stdout.buffer.write(b"".join(ranks[i] for i in out))
PY
	assert_equal "$output" "$text"
}
