#!/bin/sh
# mk/gen-docs.sh TITAN_CONFIG [DIR] — regenerate the config key reference in
# the docs from the schema (`make docs`).  Every file of DIR (default docs)
# that holds a block
#   <!-- BEGIN titan-config --doc markdown ... -->  ...  <!-- END titan-config --doc markdown -->
#   .\" BEGIN titan-config --doc man ...             ...  .\" END titan-config --doc man
# gets the output of `TITAN_CONFIG --doc FORMAT` between the two marker
# lines; the text around them is hand-written and kept as it is.
# tests/bats/docs.bats runs this on a copy of docs/ and diffs the result.
set -eu
tc=${1:-bin/titan-config}
dir=${2:-docs}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tc" --doc markdown > "$tmp/markdown"
"$tc" --doc man > "$tmp/man"
for f in "$dir"/*.md "$dir"/*.1; do
	[ -f "$f" ] || continue
	grep -q 'BEGIN titan-config --doc ' "$f" || continue
	awk -v gen="$tmp" -v file="$f" '
		/BEGIN titan-config --doc (markdown|man)/ {
			if (fmt != "") { print file ": nested BEGIN" > "/dev/stderr"; exit 1 }
			fmt = ($0 ~ /--doc markdown/) ? "markdown" : "man"
			print
			while ((getline l < (gen "/" fmt)) > 0)
				print l
			close(gen "/" fmt)
			next
		}
		/END titan-config --doc (markdown|man)/ {
			if (fmt == "") { print file ": END without BEGIN" > "/dev/stderr"; exit 1 }
			fmt = ""
		}
		fmt == "" { print }
		END { if (fmt != "") { print file ": BEGIN without END" > "/dev/stderr"; exit 1 } }
	' "$f" > "$tmp/out"
	cmp -s "$tmp/out" "$f" || cat "$tmp/out" > "$f"
done
