#!/usr/bin/env python3
"""specbench_row.py — one Markdown table row of a Spec-Bench run from `report --json` (the experiments'
summaries share it instead of parsing the report's Markdown).

  scripts/specbench_row.py NAME METRICS.json tau-wall   # cell "tau / wall (decode)", macro = mean wall speedup
  scripts/specbench_row.py NAME METRICS.json dec-wall   # cell "decode (wall)", macro = mean decode speedup

Columns: the six categories, the macro, tau over all requests, outputs identical to the baseline's."""
import json
import sys

CATS = ["sb-mt", "sb-trans", "sb-sum", "sb-qa", "sb-math", "sb-rag"]


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("tau-wall", "dec-wall"):
        sys.exit(__doc__)
    name, path, mode = sys.argv[1:]
    try:
        groups = {g["group"]: g for g in json.load(open(path))}
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"specbench_row.py: {path}: {e}")
    cells, macro = [], []
    for c in CATS:
        g = groups.get("dataset:" + c)
        if g is None:
            cells.append("-")
            continue
        if mode == "tau-wall":
            cells.append(f"{g['tau']:.3f} / {g['speedup']:.3f}x ({g['decode_speedup']:.3f}x)")
            macro.append(g["speedup"])
        else:
            cells.append(f"{g['decode_speedup']:.3f}x ({g['speedup']:.3f}x)")
            macro.append(g["decode_speedup"])
    a = groups.get("all")
    if a is None:
        sys.exit(f"specbench_row.py: {path}: no 'all' group")
    m = sum(macro) / len(macro) if macro else 0
    print(f"| {name} | " + " | ".join(cells) + f" | {m:.3f}x | {a['tau']:.3f} | {a['identical']} of {a['pairs']} requests |")


if __name__ == "__main__":
    main()
