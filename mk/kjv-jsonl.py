#!/usr/bin/python3
"""King James Bible (Debian's bible-kjv: `bible -f gen1:1-rev22:21` on stdin)
as JSONL on stdout: one {"text": ...} document per book, verses one a line.
Used by the demo (mk/demo.sh) and the training benches (bench/kjv_shards.sh)."""
import json
import re
import sys

book, lines = None, []
for line in sys.stdin:
    m = re.match(r"(\w+?)(\d+):\d+ (.*)", line)
    if not m:
        continue
    if m.group(1) != book and lines:
        print(json.dumps({"text": "\n".join(lines) + "\n"}))
        lines = []
    book = m.group(1)
    lines.append(m.group(3))
print(json.dumps({"text": "\n".join(lines) + "\n"}))
