#!/usr/bin/env bats
# The training benches' plan (bench/train_cpu.sh, bench/train_dist.sh
# --dry-run): at least 3 rounds by default, titan and PyTorch alternating
# which goes first, and the placement each side runs under (--bind cores:
# mpiexec -bind-to core, OMP_PROC_BIND/OMP_PLACES, taskset for the
# independent pair, train_dist_ref.py --bind; --bind none: nothing).
# Nothing is timed here: the timings are the benches' own business.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
}

@test "train_cpu.sh --dry-run: 3 rounds, titan and PyTorch alternate, both bound alike" {
	run -0 bench/train_cpu.sh --dry-run --models 25m --threads 2
	assert_line "bind: cores (OMP_PROC_BIND=close OMP_PLACES=cores)"
	run -0 bash -c "bench/train_cpu.sh --dry-run --models 25m --threads 2 | sed -n 's/^round \([0-9]\): 25m 2 thread(s): \([A-Za-z]*\):.*/\1 \2/p' | tr '\n' ' '"
	assert_output "1 titan 1 PyTorch 2 PyTorch 2 titan 3 titan 3 PyTorch "
	run -0 bench/train_cpu.sh --dry-run --models debug --threads 1
	assert_line "round 1: debug 1 thread(s): titan: OMP_PROC_BIND=close OMP_PLACES=cores OMP_NUM_THREADS=1 titan-train --threads 1"
	assert_line "round 1: debug 1 thread(s): PyTorch: OMP_PROC_BIND=close OMP_PLACES=cores OMP_NUM_THREADS=1 train_ref.py --threads 1"
	# a user's placement wins; --bind none sets nothing
	run -0 env OMP_PLACES=threads bench/train_cpu.sh --dry-run --models debug --threads 1 --repeat 1
	assert_line "bind: cores (OMP_PROC_BIND=close OMP_PLACES=threads)"
	run -0 bench/train_cpu.sh --dry-run --models debug --threads 1 --bind none --repeat 4
	assert_line "bind: none"
	assert_line "round 4: debug 1 thread(s): PyTorch: OMP_NUM_THREADS=1 train_ref.py --threads 1"
	refute_output --partial OMP_PROC_BIND
	run -2 --separate-stderr bench/train_cpu.sh --dry-run --bind sockets
	[[ $stderr == *"--bind: expected cores or none, got 'sockets'"* ]]
	run -1 --separate-stderr bench/train_cpu.sh --dry-run --repeat 0
	[[ $stderr == *"--repeat need"* ]]
}

@test "train_dist.sh --dry-run: 3 rounds in alternating order, ranks bound on both sides" {
	run -0 bench/train_dist.sh --dry-run --layouts "ddp fsdp"
	assert_line "rounds: 3; warm-up 2 + median of 6 steps per run"
	run -0 bash -c "bench/train_dist.sh --dry-run --layouts 'ddp fsdp' | sed -n 's/^round \([0-9]\): \([a-z]*\):.*/\1\2/p' | tr '\n' ' '"
	assert_output "1one 1ddp 1fsdp 1pair 1ref 2ref 2pair 2fsdp 2ddp 2one 3one 3ddp 3fsdp 3pair 3ref "
	run -0 bench/train_dist.sh --dry-run --layouts ddp --repeat 1
	assert_line "round 1: ddp: OMP_PROC_BIND=close OMP_PLACES=cores mpiexec -n 2 -bind-to core:1 titan-train --threads 1 (ddp)"
	assert_line "round 1: ref: train_dist_ref.py --world 2 --threads 1 --bind"
	if command -v taskset >/dev/null; then
		assert_line --regexp "^round 1: pair: OMP_PROC_BIND=close OMP_PLACES=cores taskset -c [0-9]+ titan-train --threads 1 & taskset -c [0-9]+ titan-train --threads 1$"
	fi
	run -0 bench/train_dist.sh --dry-run --layouts ddp --repeat 1 --bind none
	assert_line "round 1: ddp: mpiexec -n 2 titan-train --threads 1 (ddp)"
	assert_line "round 1: ref: train_dist_ref.py --world 2 --threads 1"
	refute_output --partial taskset
	run -2 --separate-stderr bench/train_dist.sh --dry-run --bind x
	[[ $stderr == *"--bind: expected cores or none, got 'x'"* ]]
}

@test "train_dist_ref.py takes --bind (each PyTorch rank on its own CPUs)" {
	/usr/bin/python3 -c 'import torch' 2>/dev/null || skip "no torch for /usr/bin/python3"
	run -0 /usr/bin/python3 bench/train_dist_ref.py --help
	assert_output --partial "--bind"
}

@test "moe_cpu.sh --dry-run: the MoE model and shapes, 3 rounds alternating titan/PyTorch, then 1 rank vs EP 2" {
	run -0 bench/moe_cpu.sh --dry-run
	assert_line "model: dim 768, 6 layers, 12 heads, vocab 8192, 8 experts top-2 + 1 shared, expert hidden 2048"
	assert_line "shape: batch 4 x seq 512, fp32"
	assert_line "rounds: 3; warm-up 2 + median of 6 steps per run"
	assert_line --partial "titan: titan-train --threads 2 --model.flavor=custom --model.dim=768 --model.n_layers=6 --model.n_heads=12 --model.vocab_size=8192 --model.moe_num_experts=8 --model.moe_top_k=2 --model.moe_num_shared_experts=1 --model.moe_inter_dim=2048 --training.seq_len=512"
	assert_line "PyTorch: moe_ref.py --threads 2 --dim 768 --layers 6 --heads 12 --vocab 8192 --experts 8 --top-k 2 --shared 1 --inter 2048 --seq 512 --batch 4"
	run -0 bash -c "bench/moe_cpu.sh --dry-run | sed -n 's/^round \([0-9]\): \([A-Za-z0-9]*\):.*/\1\2/p' | tr '\n' ' '"
	assert_output "1titan 1PyTorch 2PyTorch 2titan 3titan 3PyTorch 1ep1 1ep2 2ep2 2ep1 3ep1 3ep2 "
	run -0 bench/moe_cpu.sh --dry-run --rounds 1
	assert_line "round 1: ep2: OMP_PROC_BIND=close OMP_PLACES=cores OMP_NUM_THREADS=1 mpiexec -n 2 -bind-to core:1 titan-train --threads 1 --parallelism.expert_parallel_degree=2"
	assert_line "round 1: ep1: OMP_PROC_BIND=close OMP_PLACES=cores OMP_NUM_THREADS=1 titan-train --threads 1"
	# the shrinking flags reach both sides; --no-ep drops part 2
	run -0 bench/moe_cpu.sh --dry-run --dim 256 --layers 2 --seq 128 --batch 2 --steps 3 --warmup 1 --rounds 4 --no-ep --bind none
	assert_line "model: dim 256, 2 layers, 4 heads, vocab 8192, 8 experts top-2 + 1 shared, expert hidden 768"
	assert_line "rounds: 4; warm-up 1 + median of 3 steps per run"
	assert_line "bind: none"
	assert_line "round 4: PyTorch: OMP_NUM_THREADS=2 moe_ref.py --threads 2"
	assert_line --partial "moe_ref.py --threads 2 --dim 256 --layers 2 --heads 4 --vocab 8192 --experts 8 --top-k 2 --shared 1 --inter 768 --seq 128 --batch 2"
	refute_output --partial ep2
	refute_output --partial OMP_PROC_BIND
	run -1 --separate-stderr bench/moe_cpu.sh --dry-run --dim 100
	[[ $stderr == *"--dim must be a multiple of 64"* ]]
	run -1 --separate-stderr bench/moe_cpu.sh --dry-run --rounds 0
	[[ $stderr == *"--rounds needs a positive integer, got '0'"* ]]
	run -2 --separate-stderr bench/moe_cpu.sh --dry-run --bind x
	[[ $stderr == *"--bind: expected cores or none, got 'x'"* ]]
}

@test "moe_ref.py (the PyTorch side of moe_cpu.sh) takes the model flags" {
	/usr/bin/python3 -c 'import torch' 2>/dev/null || skip "no torch for /usr/bin/python3"
	run -0 /usr/bin/python3 bench/moe_ref.py --help
	assert_output --partial "--experts"
	assert_output --partial "--shards"
}
