#!/bin/sh
# mk/deps.sh LIST — install the Debian packages in LIST that are missing.
# Idempotent: one dpkg-query when everything is present.
set -u
list=$1
# A line "PACKAGE" is needed; "PACKAGE unless-command CMD" only when the
# command CMD is not on PATH (npm ships inside nodesource's nodejs, but is a
# package of its own in Debian).
pkgs= missing=
while read -r p cond cmd; do
	p=${p%%#*}
	[ -n "$p" ] || continue
	if [ "$cond" = unless-command ] && command -v "$cmd" >/dev/null 2>&1; then
		continue
	fi
	pkgs="$pkgs $p"
	s=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)
	[ "$s" = installed ] || missing="$missing $p"
done < "$list"

if [ -z "$missing" ]; then
	echo "deps: all $(echo $pkgs | wc -w) packages present"
	exit 0
fi
echo "deps: missing:$missing"
if ! command -v apt-get >/dev/null 2>&1; then
	echo "deps: error: apt-get not found; install the packages above by hand" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1; then sudo=sudo; else
		echo "deps: error: not root; run: apt-get install$missing" >&2
		exit 1
	fi
else
	sudo=
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q || exit 1
# shellcheck disable=SC2086
$sudo apt-get install -y -q --no-install-recommends $missing || exit 1
echo "deps: installed:$missing"
