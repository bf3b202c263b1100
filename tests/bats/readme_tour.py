#!/usr/bin/python3
"""readme_tour.py — the command blocks of README.md, for tests/bats/docs.bats.

    readme_tour.py list README.md        one line per fenced block:
                                         "run|skip<TAB>first command<TAB>reason"
    readme_tour.py run README.md DIR     run every block not marked, in order,
                                         in DIR (bash, one command at a time)

A block is every ``` fence.  Its commands are the lines starting with "$ "
(with the lines after one ending in a backslash), or, in a block without
any, every line; the other lines are the output shown.  A block preceded
by "<!-- not run: REASON -->" (blank lines between allowed) is not run.  A
command is expected to succeed unless the output shown after it has an
"error:" line: then it must fail and print each such line to stderr.
"""
import re
import subprocess
import sys

MARK = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->")


def blocks(path):
    out, lines, i, pending = [], open(path, encoding="utf-8").read().split("\n"), 0, None
    while i < len(lines):
        line = lines[i]
        m = MARK.fullmatch(line.strip())
        if m:
            pending = m.group(1)
        elif line.startswith("```"):
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            out.append((pending, lines[i + 1:j]))
            pending, i = None, j
        elif line.strip():
            pending = None
        i += 1
    return out


def commands(body):
    """[(command, [output lines shown])]"""
    prompted = any(l.startswith("$ ") for l in body)
    cmds, cont = [], False
    for l in body:
        if cont:
            cmds[-1][0] += "\n" + l
        elif l.startswith("$ ") or (not prompted and l.strip()):
            cmds.append([l[2:] if prompted else l, []])
        elif cmds:
            cmds[-1][1].append(l)
        cont = (l.startswith("$ ") or cont or not prompted) and l.endswith("\\")
    return [(c, o) for c, o in cmds]


def main():
    if sys.argv[1] == "list":
        for reason, body in blocks(sys.argv[2]):
            first = commands(body)[0][0].split("\n")[0] if commands(body) else ""
            print(f"{'skip' if reason else 'run'}\t{first}\t{reason or ''}")
        return 0
    readme, work = sys.argv[2], sys.argv[3]
    for reason, body in blocks(readme):
        if reason:
            continue
        for cmd, shown in commands(body):
            errors = [l for l in shown if "error:" in l]
            print(f"$ {cmd}", flush=True)
            p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=work,
                               capture_output=True, text=True, errors="replace", timeout=300)
            if errors:
                if p.returncode == 0:
                    sys.exit(f"readme: expected to fail (it shows an error): {cmd}")
                missing = [e for e in errors if e not in p.stderr.splitlines()]
                if missing:
                    sys.exit(f"readme: {cmd}: the error shown is not the one printed:\n"
                             f"  shown:   {missing}\n  printed: {p.stderr.strip()}")
            elif p.returncode != 0:
                sys.exit(f"readme: exit {p.returncode}: {cmd}\n{p.stderr[-3000:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
