# tests/bats/moe.bash — what the mixture-of-experts and MLA suites (moe,
# moe-ep, moe-ep-tp, moe-pp-cp, moe-zb, mla-tp-cp, deepseek_v3, llama4)
# share: their corpus, the pieces of their tiny MoE, DeepSeek-V3 and
# Llama 4 configs, their setup, titan-train on N ranks with those configs,
# and the run of a PyTorch reference against titan-train.  A suite's
# setup_file and setup load this (it loads layouts and tiny); the numbers
# stay each suite's own (its losses and expectations rest on them).
load layouts

# moe_corpus LINES: tiny_env, then the corpus $DATA/c.txt (LINES copies of
# Genesis 1:1-2a), the tokenizer $DATA/tok.tiktoken of 600 tokens and the
# shards $DATA/shards with 2 validation documents (tiny_corpus)
moe_corpus() {
	tiny_env
	tiny_corpus --line 'In the beginning God created the heaven and the earth. And the earth was without form, and void.' \
		c "$1" 600 2
}

# moe_pp_setup_file [KEY...]: the MoE pipeline suites' (moe-pp-cp, moe-zb)
# corpus and $DATA/moe.yaml: 6 blocks, block 0 dense, then MoE every second
# one (1, 3, 5), so PP 2's stages (and Interleaved1F1B's 4) hold dense and
# MoE blocks; 4 experts, top 2, hidden 24, 10 steps; each KEY ("name:
# value") one more model key
moe_pp_setup_file() {
	moe_corpus 200
	moe_yaml "$DATA/moe.yaml" 6 10 'n_dense_layers: 1' 'interleave_moe_layer_step: 2' "$@"
}

# moe_keys [KEY...]: the model keys of the suites' tiny MoE (4 experts, top
# 2, hidden 24), then each KEY ("name: value"), as lines of a model section
moe_keys() {
	local k
	for k in 'moe_num_experts: 4' 'moe_top_k: 2' 'moe_inter_dim: 24' "$@"; do
		echo "  $k"
	done
}

# moe_train_yaml STEPS [WARMUP]: the training section (batch 2 of 16
# tokens from $DATA/shards, STEPS steps), an lr_scheduler of WARMUP warm-up
# steps where given, and metrics on every step
moe_train_yaml() {
	cat <<YAML
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 16
  steps: $1
YAML
	[ -z "${2:-}" ] || printf 'lr_scheduler:\n  warmup_steps: %s\n' "$2"
	printf 'metrics:\n  log_freq: 1\n'
}

# moe_yaml FILE LAYERS STEPS [KEY...]: FILE, a custom Llama of dim 32,
# LAYERS blocks, 4 heads, 2 kv heads, 600 ids, with the tiny MoE
# (moe_keys KEY...), trained STEPS steps (moe_train_yaml; WARMUP=N: an
# lr_scheduler of N warm-up steps)
moe_yaml() {
	local f=$1 l=$2 s=$3
	shift 3
	{
		moe_keys "$@"
		moe_train_yaml "$s" "${WARMUP:-}"
	} | tiny_yaml "$f" 600 32 "$l" 4 2
}

# ds_yaml FILE [KEY...] <<YAML: FILE, DeepSeek-V3's tiny flavor
# (debugmodel_mla) with each KEY ("name: value") and 600 ids, then the
# rest of the config from standard input
ds_yaml() {
	local f=$1 k
	shift
	{
		printf 'model:\n  name: deepseek_v3\n  flavor: debugmodel_mla\n'
		for k in "$@"; do
			echo "  $k"
		done
		echo "  vocab_size: 600"
		cat
	} > "$f"
}

# moe_setup: a suite's setup (helpers, tiny and layouts loaded, $DATA)
moe_setup() {
	load helpers
	DATA=$BATS_FILE_TMPDIR
}

# mpi_cfg CONFIG N ARGS...: titan-train with CONFIG on N ranks, one thread
# each, under a time limit
mpi_cfg() {
	local cfg=$1 n=$2
	shift 2
	timeout -k 5 180 mpiexec -n "$n" env OMP_NUM_THREADS=1 titan-train -q --config "$cfg" "$@"
}

# mpi_moe N ARGS...: mpi_cfg with CFG, $DATA/moe.yaml by default
mpi_moe() { mpi_cfg "${CFG:-$DATA/moe.yaml}" "$@"; }

# mpi_ds N ARGS...: mpi_cfg with $DATA/ds.yaml
mpi_ds() { mpi_cfg "$DATA/ds.yaml" "$@"; }

# each_layout MPI CHECK N ONE ARGS...: each ARGS (words) run by MPI on N
# ranks into $BATS_TEST_TMPDIR/l, then CHECK ONE and its metrics.jsonl
each_layout() {
	local mpi=$1 check=$2 n=$3 one=$4 p
	shift 4
	for p in "$@"; do
		rm -rf "$BATS_TEST_TMPDIR/l"
		# shellcheck disable=SC2086
		run -0 "$mpi" "$n" $p --job.dump_folder="$BATS_TEST_TMPDIR/l"
		"$check" "$one" "$BATS_TEST_TMPDIR/l/metrics.jsonl"
	done
}

# resume_bits CONFIG ARGS...: 10 steps of CONFIG with ARGS (a checkpoint
# at step 5) in $BATS_TEST_TMPDIR/a, and its step-5 checkpoint resumed in
# $BATS_TEST_TMPDIR/b, continue on the same curve bit for bit
resume_bits() {
	local cfg=$1 d=$BATS_TEST_TMPDIR
	shift
	run -0 titan-train -q --config "$cfg" --training.steps=10 "$@" --job.dump_folder="$d/a"
	mkdir -p "$d/b/checkpoint"
	cp "$d/a/checkpoint/step-5.h5" "$d/b/checkpoint/"
	run -0 titan-train -q --config "$cfg" --training.steps=10 "$@" --job.dump_folder="$d/b"
	run -0 same_curve "$d/a/metrics.jsonl" "$d/b/metrics.jsonl" bits
}

# ref_vs SCRIPT CONFIG NAME MODEL_JSON MOE_JSON ARGS...: titan-train's seed
# checkpoint and 12 steps of CONFIG with ARGS in $BATS_TEST_TMPDIR/NAME,
# then tests/ref/SCRIPT from the same weights and tokens (with
# MASK=block_causal its document mask), compared by
# tests/ref/check_curve.py (losses and grad norms within 1e-5 relative,
# the balancing's expert_bias, every final tensor); run in $TITAN_SRCDIR
ref_vs() {
	local script=$1 cfg=$2 model=$4 moe=$5 d=$BATS_TEST_TMPDIR/$3
	shift 5
	run -0 titan-train -q --config "$cfg" "$@" --job.dump_folder="$d/seed" \
		--checkpoint.enable --checkpoint.create_seed_checkpoint
	run -0 titan-train -q --config "$cfg" "$@" --job.dump_folder="$d/run" \
		--checkpoint.enable --checkpoint.interval=12
	/usr/bin/python3 "tests/ref/$script" --init "$d/seed/checkpoint/step-0.h5" \
		--shards "$DATA/shards" --model "$model" --moe "$moe" \
		--train '{"batch":2,"seq_len":16,"steps":12,"lr":8e-4,"warmup":2}' \
		${MASK:+--mask "$MASK"} --save "$d/ref.npz" > "$d/ref.json"
	/usr/bin/python3 tests/ref/check_curve.py "$d/run/metrics.jsonl" "$d/ref.json" \
		"$d/run/checkpoint/step-12.h5" "$d/ref.npz" --moved
}
