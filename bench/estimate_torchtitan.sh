#!/usr/bin/env bash
# bench/estimate_torchtitan.sh — titan-estimate beside torchtitan's published
# H100 measurements (pytorch/torchtitan benchmarks/
# llama3_h100_202412_torchtitan.md, Dec 2024, torch 1963fc8, torchtitan
# 9dec370: Grand Teton hosts, 8 x H100 96 GB HBM2e per node, 500 W, 400 Gb/s
# RDMA per GPU).  The table of docs/estimate.md.
#
#   bench/estimate_torchtitan.sh [--mfu F]
#
# Each row runs titan-estimate on the preset of configs/ with the row's
# layout, batch, sequence and activation checkpointing, with --loss eager
# (torchtitan in 2024 materialised bf16 logits, an fp32 copy and the
# log-softmax) and, in the next column, titan's default chunked loss.
# torchtitan's "Memory(GiB)" is max_reserved of the caching allocator (the
# largest over all ranks for PP): compared with our reserved estimate
# (live peak x 1.10).  TPS/GPU is beside the predicted tokens/s at --mfu
# (default 0.40 of 989 TFLOP/s on the executed FLOPs; the float8 rows use
# 1979 TFLOP/s for the linears).  These are PyTorch measurements with
# torch.compile and float8 in most rows, which the model does not describe:
# agreement is a sanity check, not an assertion.
# TITAN_BIN=DIR runs another build's tools (default: ./bin).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PATH=${TITAN_BIN:-$here/../bin}:$PATH
cd "$here/.."
mfu=0.40
[ "${1:-}" = --mfu ] && mfu=$2

# table | row | measured GiB | measured TPS | config | options
rows=(
"1|8B FSDP 8, lb 2, sel. op|82.4|5762|configs/llama3_8b.yaml|--ngpu 8 --training.local_batch_size=2"
"1|+ compile|77.0|6667|configs/llama3_8b.yaml|--ngpu 8 --training.local_batch_size=2"
"1|+ compile + float8|76.8|8532|configs/llama3_8b.yaml|--ngpu 8 --training.local_batch_size=2 --float8"
"2|8B FSDP 8 CP 1, seq 32k, full AC (compile, float8)|83.9|3890|configs/llama3_8b.yaml|--ngpu 8 --training.seq_len=32768 --activation_checkpoint.mode=full --float8"
"2|8B FSDP 4 CP 2, seq 64k|84.2|2540|configs/llama3_8b.yaml|--ngpu 8 --training.seq_len=65536 --parallelism.context_parallel_degree=2 --activation_checkpoint.mode=full --float8"
"2|8B FSDP 2 CP 4, seq 128k|84.0|1071|configs/llama3_8b.yaml|--ngpu 8 --training.seq_len=131072 --parallelism.context_parallel_degree=4 --activation_checkpoint.mode=full --float8"
"2|8B FSDP 1 CP 8, seq 256k|84.5|548|configs/llama3_8b.yaml|--ngpu 8 --training.seq_len=262144 --parallelism.context_parallel_degree=8 --activation_checkpoint.mode=full --float8"
"3|8B FSDP 128, lb 2, sel. op|67.0|5605|configs/llama3_8b.yaml|--ngpu 128 --training.local_batch_size=2"
"3|+ compile|62.0|6514|configs/llama3_8b.yaml|--ngpu 128 --training.local_batch_size=2"
"3|+ compile + float8|61.8|8380|configs/llama3_8b.yaml|--ngpu 128 --training.local_batch_size=2 --float8"
"4|70B FSDP 32 TP 8, lb 16, full AC (compile, float8)|71.9|829|configs/llama3_70b.yaml|--ngpu 256 --training.local_batch_size=16 --float8"
"4|+ async TP|67.6|876|configs/llama3_70b.yaml|--ngpu 256 --training.local_batch_size=16 --float8 --parallelism.enable_async_tensor_parallel=true"
"5|405B FSDP 8 TP 8 PP 8, lb 32, 1F1B (compile, float8, async TP)|82.5|100|configs/llama3_405b.yaml|--ngpu 512 --training.local_batch_size=32 --parallelism.pipeline_parallel_degree=8"
"5|Interleaved 1F1B|72.7|128|configs/llama3_405b.yaml|--ngpu 512 --training.local_batch_size=32 --parallelism.pipeline_parallel_degree=8 --parallelism.pipeline_parallel_schedule=Interleaved1F1B"
"6|405B FSDP 8 CP 1 TP 8 PP 8, lb 8, seq 32k|75.3|76|configs/llama3_405b.yaml|--ngpu 512 --training.local_batch_size=8 --training.seq_len=32768 --parallelism.pipeline_parallel_degree=8"
"6|FSDP 4 CP 2, seq 64k|75.9|47|configs/llama3_405b.yaml|--ngpu 512 --training.local_batch_size=8 --training.seq_len=65536 --parallelism.context_parallel_degree=2 --parallelism.pipeline_parallel_degree=8"
"6|FSDP 2 CP 4, seq 128k|77.1|31|configs/llama3_405b.yaml|--ngpu 512 --training.local_batch_size=8 --training.seq_len=131072 --parallelism.context_parallel_degree=4 --parallelism.pipeline_parallel_degree=8"
"6|FSDP 1 CP 8, seq 256k|84.9|16|configs/llama3_405b.yaml|--ngpu 512 --training.local_batch_size=8 --training.seq_len=262144 --parallelism.context_parallel_degree=8 --parallelism.pipeline_parallel_degree=8"
)

summary() { /usr/bin/python3 -c '
import json, sys
o = json.load(sys.stdin)
w = o["ranks"][o["worst_rank"]]
print("%.1f %.1f %s %.0f" % (w["reserved_bytes"] / 2**30, w["peak_bytes"] / 2**30,
      w["peak_moment"].replace(" ", "_"), o["throughput"]["tokens_per_s_per_device"]))'; }

echo "| table | torchtitan run | measured GiB | estimate GiB (eager loss) | difference | live peak GiB, at | estimate GiB (chunked loss) | measured TPS/GPU | predicted TPS |"
echo "|---|---|---:|---:|---:|---|---:|---:|---:|"
for r in "${rows[@]}"; do
	IFS='|' read -r t label mem tps cfg opts <<< "$r"
	# shellcheck disable=SC2086
	read -r res live at ptps < <(titan-estimate --config "$cfg" $opts --mfu "$mfu" --loss eager --json | summary)
	# shellcheck disable=SC2086
	read -r res2 _ _ _ < <(titan-estimate --config "$cfg" $opts --mfu "$mfu" --json | summary)
	diff=$(/usr/bin/python3 -c "import sys; print('%+.0f%%' % (100 * (float(sys.argv[1]) / float(sys.argv[2]) - 1)))" "$res" "$mem")
	printf '| %s | %s | %s | %s | %s | %s, %s | %s | %s | %s |\n' "$t" "$label" "$mem" "$res" "$diff" \
		"$live" "${at//_/ }" "$res2" "$tps" "$ptps"
done
