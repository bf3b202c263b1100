#!/usr/bin/env bash
# bench/tokenize.sh — titan-tokenize against tiktoken (its Rust core as WASM,
# the `tiktoken` npm package) on the same corpus, in the same run.
#
#   bench/tokenize.sh [--check] [--corpus FILE] [--format text|lines|jsonl]
#                     [--encodings "cl100k_base o200k_base llama3"] [--repeat N]
#                     [--compress gzip|zstd]
#
# For each encoding: titan-tokenize with --threads 1 and --threads 2, and the
# tiktoken peer (tests/peers/encode.mjs --time), on CORPUS (default: the
# ~50 MB build/cache/corpora/bench.txt, one document with --format text).
# Prints MB/s (1 MB = 1e6 bytes of corpus) and the ratio titan (1 thread) /
# tiktoken.  titan's MB/s is corpus bytes over the wall time of the whole
# command (loading the tokenizer, reading, writing to /dev/null included);
# tiktoken's counts only the time inside its encode calls (no loading,
# reading, UTF-8 decoding or writing), so the ratio is conservative.  The
# best of --repeat runs (default 1) is kept for each.
#
# --compress gzip|zstd: also run titan (1 and 2 threads) on the corpus
# compressed with `gzip -6` / `zstd -3` (made once in a temporary folder),
# reading the compressed file directly; its MB/s still counts uncompressed
# corpus bytes, so the column next to the plain one is the cost of
# decompressing on the fly.  With --check, the compressed input's stream is
# also compared with the plain one's.
#
# --check: instead of timing, verify that titan's stream and the peer's are
# identical (cmp) for each encoding; exit 1 when one differs, with the first
# difference shown by tests/peers/compare.mjs.
#
# Builds what is missing: the corpora (tests/corpora/fetch.sh --bench) and the
# peers (tests/peers/setup.sh).  bin/titan-tokenize must be built (make);
# TITAN_TOKENIZE=PATH runs another build.
set -euo pipefail

prog=tokenize.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() {
	sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

check=0 corpus='' format=text repeat=1 compress=''
encodings="cl100k_base o200k_base llama3"
while [ $# -gt 0 ]; do
	case "$1" in
	--check) check=1 ;;
	--corpus) [ $# -ge 2 ] || usage; corpus=$2; shift ;;
	--format) [ $# -ge 2 ] || usage; format=$2; shift ;;
	--encodings) [ $# -ge 2 ] || usage; encodings=$2; shift ;;
	--repeat) [ $# -ge 2 ] || usage; repeat=$2; shift ;;
	--compress) [ $# -ge 2 ] || usage; compress=$2; shift ;;
	-h | --help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: error: unknown argument '$1'" >&2; usage ;;
	esac
	shift
done
case "$format" in text | lines | jsonl) ;; *) die "--format must be text, lines or jsonl" ;; esac
case "$repeat" in '' | *[!0-9]* | 0) die "--repeat needs a positive integer" ;; esac
case "$compress" in '' | gzip | zstd) ;; *) die "--compress must be gzip or zstd" ;; esac

titan=${TITAN_TOKENIZE:-$root/bin/titan-tokenize}
[ -x "$titan" ] || die "$titan is not built: run make"
tests/peers/setup.sh >/dev/null || die "tests/peers/setup.sh failed"
if [ -z "$corpus" ]; then
	if [ "$format" = jsonl ]; then corpus=build/cache/corpora/bench.jsonl; else corpus=build/cache/corpora/bench.txt; fi
	[ -s "$corpus" ] || tests/corpora/fetch.sh --bench build/cache/corpora >/dev/null || die "building the bench corpus failed"
fi
[ -r "$corpus" ] || die "cannot read corpus '$corpus'"
bytes=$(wc -c <"$corpus")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
zcorpus=
if [ -n "$compress" ]; then
	command -v "$compress" >/dev/null || die "$compress is not installed (make deps)"
	"$titan" --version | grep -q -- "+$( [ "$compress" = gzip ] && echo zlib || echo zstd)" ||
		die "$titan was built without $compress support"
	if [ "$compress" = gzip ]; then
		zcorpus=$tmp/corpus.gz
		gzip -6 -c "$corpus" >"$zcorpus"
	else
		zcorpus=$tmp/corpus.zst
		zstd -q -3 -c "$corpus" >"$zcorpus"
	fi
fi

vocab_of() { echo "build/cache/peers/cache/$1.tiktoken"; }
peer_fmt=(--format "$format")
titan_fmt=(--format "$format")

now() { date +%s%N; }
mbps() { awk -v b="$1" -v ns="$2" 'BEGIN { printf "%.2f", b / 1e6 / (ns / 1e9) }'; }

# best MB/s (uncompressed corpus bytes) of $repeat runs of titan with $1
# threads on encoding $2, reading FILE $3 (default: the corpus)
titan_mbps() {
	local best=0 t0 t1 r i in=${3:-$corpus}
	for ((i = 0; i < repeat; i++)); do
		t0=$(now)
		"$titan" --tokenizer "$(vocab_of "$2")" --encoding "$2" --threads "$1" "${titan_fmt[@]}" "$in" >/dev/null ||
			die "titan-tokenize failed on $in ($2, $1 threads)"
		t1=$(now)
		r=$(mbps "$bytes" $((t1 - t0)))
		best=$(awk -v a="$best" -v b="$r" 'BEGIN { print (b > a) ? b : a }')
	done
	echo "$best"
}
peer_mbps() {
	local best=0 line r i
	for ((i = 0; i < repeat; i++)); do
		line=$(node build/cache/peers/encode.mjs --peer tiktoken --vocab "$(vocab_of "$1")" --encoding "$1" \
			"${peer_fmt[@]}" --time "$corpus" 2>&1 >/dev/null) || die "the tiktoken peer failed: $line"
		r=$(printf '%s\n' "$line" | sed -n 's/.*MBps=\([0-9.]*\).*/\1/p')
		[ -n "$r" ] || die "no MBps in the peer's output: $line"
		best=$(awk -v a="$best" -v b="$r" 'BEGIN { print (b > a) ? b : a }')
	done
	echo "$best"
}

echo "corpus: $corpus ($(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }') MB, --format $format)"
[ -z "$zcorpus" ] || echo "compressed: $compress, $(awk -v b="$(wc -c <"$zcorpus")" 'BEGIN { printf "%.1f", b / 1e6 }') MB"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "titan: $("$titan" --version 2>&1 | head -1)"
echo "peer: tiktoken $(node -p 'require("./build/cache/peers/node_modules/tiktoken/package.json").version') (WASM) on node $(node --version)"

if [ "$check" = 1 ]; then
	bad=0
	for e in $encodings; do
		"$titan" --tokenizer "$(vocab_of "$e")" --encoding "$e" "${titan_fmt[@]}" "$corpus" >"$tmp/titan" ||
			die "titan-tokenize failed on $corpus ($e)"
		node build/cache/peers/encode.mjs --peer tiktoken --vocab "$(vocab_of "$e")" --encoding "$e" \
			"${peer_fmt[@]}" "$corpus" >"$tmp/peer" || die "the tiktoken peer failed ($e)"
		if cmp -s "$tmp/titan" "$tmp/peer"; then
			echo "$e: identical ($(($(wc -c <"$tmp/titan") / 4)) ids)"
		else
			echo "$e: DIFFERENT"
			node build/cache/peers/compare.mjs --vocab "$(vocab_of "$e")" --encoding "$e" "$tmp/titan" "$tmp/peer" || true
			bad=1
		fi
		if [ -n "$zcorpus" ]; then
			"$titan" --tokenizer "$(vocab_of "$e")" --encoding "$e" "${titan_fmt[@]}" "$zcorpus" >"$tmp/z" ||
				die "titan-tokenize failed on the $compress corpus ($e)"
			if cmp -s "$tmp/titan" "$tmp/z"; then
				echo "$e: $compress input identical to the plain one"
			else
				echo "$e: $compress input DIFFERENT from the plain one"
				bad=1
			fi
		fi
	done
	exit "$bad"
fi

printf '\n%-12s %9s %16s %16s %14s %12s' encoding "corpus MB" "titan 1T MB/s" "titan 2T MB/s" "tiktoken MB/s" "titan/tikt."
[ -z "$zcorpus" ] || printf ' %16s %16s %12s' "1T .$compress MB/s" "2T .$compress MB/s" "1T z/plain"
echo
for e in $encodings; do
	t1=$(titan_mbps 1 "$e")
	t2=$(titan_mbps 2 "$e")
	p=$(peer_mbps "$e")
	printf '%-12s %9.1f %16s %16s %14s %11.2fx' "$e" "$(awk -v b="$bytes" 'BEGIN { print b / 1e6 }')" \
		"$t1" "$t2" "$p" "$(awk -v a="$t1" -v b="$p" 'BEGIN { print a / b }')"
	if [ -n "$zcorpus" ]; then
		z1=$(titan_mbps 1 "$e" "$zcorpus")
		z2=$(titan_mbps 2 "$e" "$zcorpus")
		printf ' %16s %16s %11.2fx' "$z1" "$z2" "$(awk -v a="$z1" -v b="$t1" 'BEGIN { print a / b }')"
	fi
	echo
done
