#!/bin/bash
# mk/device-bundle.sh — pack what a bare GPU machine needs to run titan's GPU
# checks (make cuda-test's binaries, titan-train, bench/train_gpu.sh) when it
# has CUDA but none of titan's Debian libraries and no package registry:
# the built tools and tests, the shared libraries they load that are not
# part of the CUDA toolkit or glibc, and a small dataset.  Writes
# DIR/bundle.tar.gz (default .device/, git-ignored); mk/device-run.sh
# unpacks it there.  Build first (make -j).
set -euo pipefail
out=${1:-.device}
bin=${TITAN_BIN:-bin}
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/tests" "$stage/lib" "$stage/data"

cp "$bin"/titan-* "$stage/bin/"
for t in test_cuda test_cuda_ops test_ops test_llama; do
	[ -x "build/tests/$t" ] && cp "build/tests/$t" "$stage/tests/"
done

# shared libraries: everything ldd resolves except glibc, the compiler's
# runtime and CUDA's own (the GPU machine has those, matching its driver)
skip='^(linux-vdso|libc\.|libm\.|libdl\.|librt\.|libpthread\.|ld-linux|libgcc_s|libstdc\+\+|libcudart|libcublas|libcublasLt|libnccl|libcuda\.)'
for f in "$stage"/bin/* "$stage"/tests/*; do
	ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
	[[ $name =~ $skip ]] && continue
	cp -L "$path" "$stage/lib/$name"
done

# a dataset for the debug model (vocab 2048): the KJV, as make demo builds it
if [ ! -f "$out/data.stamp" ]; then
	bible -f gen1:1-rev22:21 | python3 mk/kjv-jsonl.py > "$stage/kjv.jsonl"
	"$bin/titan-tokenize" train --vocab-size 2048 "$stage/kjv.jsonl" -o "$stage/data/kjv.tiktoken"
	"$bin/titan-tokenize" -t "$stage/data/kjv.tiktoken" "$stage/kjv.jsonl" -o "$stage/kjv.tok"
	"$bin/titan-shard" -t "$stage/data/kjv.tiktoken" --out "$stage/data/kjv" \
		--shard-tokens 400K --val-docs 2 "$stage/kjv.tok"
	rm -f "$stage/kjv.jsonl" "$stage/kjv.tok"
	rm -rf "$out/data"
	cp -r "$stage/data" "$out/data"
	touch "$out/data.stamp"
fi
cp -r "$out/data/." "$stage/data/"
tar -C "$stage" -czf "$out/bundle.tar.gz.tmp" .
mv "$out/bundle.tar.gz.tmp" "$out/bundle.tar.gz"
du -h "$out/bundle.tar.gz" | awk '{print "device bundle: " $1}'
tar -tzf "$out/bundle.tar.gz" | grep -c . | awk '{print "files: " $1}'
