#!/bin/sh
# mk/version.sh OUT — write the version header, touching OUT only when it changes.
out=$1
top=$(cd "$(dirname "$0")/.." && pwd)
ver=$(cat "$top/VERSION")
rev=$(git -C "$top" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
new="/* written by mk/version.sh */
#define TITAN_VERSION_STRING \"$ver\"
#define TITAN_GIT_REVISION \"$rev\""
if [ ! -f "$out" ] || [ "$(cat "$out")" != "$new" ]; then
	printf '%s\n' "$new" > "$out.tmp" && mv "$out.tmp" "$out"
fi
