# shellcheck shell=bash
# bench/lib.sh — helpers the training benches share (sourced, not run).

# median: the median of the numbers on stdin, one a line
median() { sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# order R: round R's order of the two sides: titan first in odd rounds,
# the PyTorch reference first in even ones (a slow minute of a shared
# machine hits both)
order() { if [ $(($1 % 2)) -eq 1 ]; then echo "titan ref"; else echo "ref titan"; fi; }

# metrics_median METRICS.JSONL WARMUP: the median step_time_s after the
# first WARMUP steps of a titan-train run
metrics_median() {
	/usr/bin/python3 -c '
import json, sys, statistics
w = int(sys.argv[2])
t = [json.loads(l)["step_time_s"] for l in open(sys.argv[1])]
print(statistics.median(t[w:]))' "$1" "$2"
}
