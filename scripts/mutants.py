#!/usr/bin/env python3
"""mutants.py - mutation testing of the losslessness gate: does it go red when the code it guards changes?

    scripts/mutants.py [--drafters ngram,recycling,toy,test:test_verify] [--out DIR] [--limit N] [--seed S]
                       [--timeout SEC] [--again RESULTS] [--list] FILE[:FIRST-LAST] ...

Every single-token edit of the named C files (or of their lines FIRST..LAST) that a typo could make:
a comparison flipped or loosened (< <=, > >=, == !=), && for || and back, + 1 / - 1 dropped, a sign
turned, a 0 for a 1 and back, a continue or break removed, ++ for --. Each mutant is built in a
private copy of the working tree (tracked and untracked files: the tree itself is never edited, an
interrupted run leaves nothing behind) and judged by the gate's production-round cases of each
drafter in turn (`dspark-bench lossless --drafter D --no-real --quick`; the name `toy` runs the toy
worlds instead, `lossless --toy --quick`: every verification rule's exact law; `test:SUITE` a unit
suite, `test:SUITE@GLOB` only its cases the glob names, for suites that honour DS_TEST_FILTER) until
one fails:

    killed      a check went red (a lossless case rejected, a control not flagged, an error or a crash)
    equivalent  every drafter's gate passed and printed what the unmutated build prints (figures
                equal; only timings differ): the edit changed nothing these cases can see
    survived    every gate passed but some figure moved: behaviour changed and nothing objected. Read
                these by hand: a legal variant (a rule still exact, a drafter's choice of tokens) or a
                hole in the gate
    nocompile   the edit does not build (not counted)

Lines with error messages, checks (DS_CHECK) and comments are left alone. Results go to
DIR/results.jsonl as they come (a rerun with the same DIR resumes) and a table to DIR/report.md.
With --limit N, N mutants drawn at random (--seed) from all of them; with --again RESULTS, only the
mutants an earlier run (its results.jsonl) did not kill, to judge them with other drafters. A mutant
costs a rebuild of one object and the link (~2 s) plus the gate cases until one fails (on one Zen 1
core: ngram 4 s, recycling 12 s, medusa 21 s, vanilla 61 s, toy 64 s); the copy's first build takes a
few minutes. One core: OMP_NUM_THREADS=1.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

OPS = [
    (r"(?<![<>=!-])<(?![<=])", "<="), (r"<=", "<"), (r"(?<![-<>=!])>(?![>=])", ">="), (r">=", ">"),
    (r"==", "!="), (r"!=", "=="), (r"&&", "||"), (r"\|\|", "&&"), (r" \+ 1\b", ""), (r" - 1\b", ""),
    (r"(?<=\W)0(?=[;,)\]])", "1"), (r"(?<=\W)1(?=[;,)\]])", "0"), (r" \+ (?!=)", " - "), (r" - (?!=)", " + "),
    (r"\bcontinue;", ";"), (r"\bbreak;", ";"), (r"\+\+", "--"),
]
SKIP = ("ds_error", "DS_CHECK", "snprintf", "printf", "ds_malloc", "ds_calloc")


def fail(msg):
    print(f"mutants.py: {msg}", file=sys.stderr)
    sys.exit(1)


def mutants_of(path, lo, hi):
    """single edits of the code (not comments, strings, preprocessor lines or checks) in lines lo..hi"""
    out, in_comment = [], False
    with open(path) as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if in_comment:
            in_comment = "*/" not in s
            continue
        if s.startswith("/*") and "*/" not in s:
            in_comment = True
            continue
        if not (lo <= n <= hi) or not s or s.startswith(("#", "/*", "//", "*")) or any(k in s for k in SKIP):
            continue
        code = re.sub(r"/\*.*?\*/|//.*", lambda m: " " * len(m.group(0)), line)
        code = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])\'', lambda m: " " * len(m.group(0)), code)
        for pat, rep in OPS:
            for m in re.finditer(pat, code):
                if rep == "--" and re.match(r"\s*for\b", code):
                    continue  # a loop counter run backwards never ends: a timeout, not a finding
                out.append({"file": path, "line": n, "col": m.start(), "old": m.group(0), "new": rep,
                            "mutated": (line[:m.start()] + rep + line[m.end():]).strip()})
    return out


def gate_output(text):
    """what the gate printed, less what varies from run to run (timings)"""
    keep = []
    for l in text.split("\n"):
        if l.startswith("lossless:") or re.search(r"\bchecks in [0-9.]+ s\b", l):
            continue
        if re.search(r"tok/s|requests/s|\bETA\b|mean batch", l):  # a suite's rates and progress (serve's timing)
            continue
        l = re.sub(r"/dsb-[0-9]+-", "/dsb-PID-", l)  # testutil's tmp_path: a suite's scratch files carry its pid
        keep.append(re.sub(r"[0-9.]+ s\b", "", l))
    return "\n".join(keep)


def suite_of(drafter):
    """test:SUITE@GLOB -> (SUITE, GLOB); GLOB is "" for a whole suite"""
    suite, _, pattern = drafter[5:].partition("@")
    return suite, pattern


def run_gate(work, drafter, timeout):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if drafter.startswith("test:"):  # a unit suite: its cmocka cases (and what they print) judge the mutant
        suite, pattern = suite_of(drafter)  # test:SUITE@GLOB: only the cases DS_TEST_FILTER matches
        cmd = ["./build/tests/" + suite]
        if pattern:
            env["DS_TEST_FILTER"] = pattern
    else:
        what = ["--toy"] if drafter == "toy" else ["--drafter", drafter, "--no-real"]
        cmd = ["./build/dspark-bench", "lossless", "--quick"] + what
    try:
        r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, errors="replace", env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    return r.returncode, r.stdout + r.stderr


def build(work, suites, jobs=1):
    targets = ["build/dspark-bench"] + ["build/tests/" + suite_of(d)[0] for d in suites if d.startswith("test:")]
    r = subprocess.run(["make", "-s", f"-j{jobs}", "CUDA=0"] + targets, cwd=work, capture_output=True, text=True)
    return r.returncode == 0, r.stdout + r.stderr


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the copy (finally below)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="FILE or FILE:FIRST-LAST (lines)")
    ap.add_argument("--drafters", default="ngram,recycling,toy")
    ap.add_argument("--again", help="an earlier run's results.jsonl: only its mutants not killed")
    ap.add_argument("--out", default="out/mutants")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="print the mutants (after --limit) and stop")
    ap.add_argument("--report-only", action="store_true",
                    help="judge nothing: the table of the mutants DIR/results.jsonl holds (an interrupted campaign)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=300, help="seconds a drafter's gate may run (a hang is a kill)")
    a = ap.parse_args()
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True).stdout.strip()
    if not root:
        fail("run it inside the repository")
    os.chdir(root)
    drafters = [d for d in a.drafters.split(",") if d]
    key = lambda m: (m["file"], m["line"], m["col"], m["new"])
    muts = []
    for spec in a.files:
        path, _, rng = spec.partition(":")
        if not os.path.isfile(path):
            fail(f"{path}: no such file")
        lo, hi = 1, 1 << 30
        if rng:
            m = re.fullmatch(r"(\d+)-(\d+)", rng)
            if not m:
                fail(f"{spec}: a line range is FIRST-LAST")
            lo, hi = int(m.group(1)), int(m.group(2))
        muts += mutants_of(path, lo, hi)
    if a.again:
        with open(a.again) as f:
            # by the mutated line's text, not its number: the tests and fixes made since may have moved it
            same = lambda m: (m["file"], m["mutated"].strip(), m["col"], m["new"])
            alive = {same(r) for r in map(json.loads, f) if r["status"] in ("equivalent", "survived")}
        muts = [m for m in muts if same(m) in alive]
    if a.limit and a.limit < len(muts):
        muts = sorted(random.Random(a.seed).sample(muts, a.limit), key=lambda m: (m["file"], m["line"], m["col"]))
    for d in drafters:
        if d.startswith("test:") and not os.path.isfile(f"tests/{suite_of(d)[0]}.c"):
            fail(f"{d}: no suite tests/{suite_of(d)[0]}.c")
    if a.list:
        for m in muts:
            print(f"{m['file']}:{m['line']}:{m['col']} {m['old']!r} -> {m['new']!r}")
        print(f"mutants.py: {len(muts)} mutants", file=sys.stderr)
        return
    os.makedirs(a.out, exist_ok=True)
    resf = os.path.join(a.out, "results.jsonl")
    done = {}
    if os.path.exists(resf):
        with open(resf) as f:
            for l in f:
                r = json.loads(l)
                done[key(r)] = r
    todo = [] if a.report_only else [m for m in muts if key(m) not in done]
    print(f"mutants.py: {len(muts)} mutants of {', '.join(a.files)}; {sum(key(m) in done for m in muts)} already judged in {resf}",
          file=sys.stderr)

    work = tempfile.mkdtemp(prefix="dspark-mutants.")
    try:
        if todo:
            files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True,
                                   text=True, check=True).stdout.split("\0")
            for p in files:
                if p and os.path.isfile(p):
                    os.makedirs(os.path.join(work, os.path.dirname(p)), exist_ok=True)
                    shutil.copy2(p, os.path.join(work, p))
            print(f"mutants.py: building the unmutated copy in {work} (CUDA=0)", file=sys.stderr)
            ok, log = build(work, drafters, os.cpu_count() or 1)
            if not ok:
                fail(f"the unmutated tree does not build:\n{log[-2000:]}")
            base = {}
            for d in drafters:
                rc, text = run_gate(work, d, a.timeout)
                if rc != 0:
                    fail(f"the unmutated gate fails for drafter '{d}' (exit {rc}): fix that first\n{text[-1500:]}")
                base[d] = gate_output(text)
        t0 = time.time()
        for i, m in enumerate(todo, 1):
            src_path = os.path.join(work, m["file"])
            with open(src_path) as f:
                src = f.read()
            lines = src.split("\n")
            l = lines[m["line"] - 1]
            if l[m["col"]:m["col"] + len(m["old"])] != m["old"]:
                fail(f"{m['file']}:{m['line']}: the line changed since the mutants were listed")
            lines[m["line"] - 1] = l[:m["col"]] + m["new"] + l[m["col"] + len(m["old"]):]
            res = dict(m)  # with its mutated line, as listed
            try:
                with open(src_path, "w") as f:
                    f.write("\n".join(lines))
                ok, _ = build(work, drafters)
                if not ok:
                    res["status"] = "nocompile"
                else:
                    res["status"] = "equivalent"
                    for d in drafters:
                        rc, text = run_gate(work, d, a.timeout)
                        if rc != 0:
                            res.update(status="killed", by=d, rc=rc, tail=text.strip().split("\n")[-1][:200])
                            break
                        if gate_output(text) != base[d]:
                            res["status"], res["moved"] = "survived", d
            finally:
                with open(src_path, "w") as f:
                    f.write(src)
            done[key(m)] = res
            with open(resf, "a") as f:
                f.write(json.dumps(res) + "\n")
            el = time.time() - t0
            print(f"[{i}/{len(todo)}, {el:.0f} s, eta {el / i * (len(todo) - i):.0f} s] {m['file']}:{m['line']} "
                  f"{m['old']!r} -> {m['new']!r}: {res['status']} {res.get('by', '')}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [done[key(m)] for m in muts if key(m) in done]
    part = f" ({len(rows)} of a sample of {len(muts)} judged so far)" if len(rows) < len(muts) else ""
    count = {s: sum(r["status"] == s for r in rows) for s in ("killed", "equivalent", "survived", "nocompile")}
    judged = count["killed"] + count["survived"]
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(f"# Mutants of {', '.join(a.files)} against the gate ({', '.join(drafters)})\n\n")
        f.write(f"{len(rows)} mutants{part}: {count['killed']} killed, {count['survived']} survived (behaviour moved, "
                f"every check passed), {count['equivalent']} equivalent on these cases, {count['nocompile']} did "
                f"not build. Killed of those that moved: "
                f"{100 * count['killed'] / judged if judged else 0:.1f} %.\n\n")
        f.write("| status | where | edit | the line mutated | by / moved |\n|---|---|---|---|---|\n")
        for r in rows:
            if r["status"] == "nocompile":
                continue
            cell = lambda t: t.replace("|", "\\|")  # a table cell's pipes, code spans too (GFM)
            f.write(f"| {r['status']} | {r['file']}:{r['line']} | `{cell(r['old'])}` -> `{cell(r['new'])}` | "
                    f"`{cell(r['mutated'])}` | {r.get('by', r.get('moved', ''))} |\n")
    print(f"mutants.py: {count} -> {os.path.join(a.out, 'report.md')}", file=sys.stderr)


if __name__ == "__main__":
    main()
