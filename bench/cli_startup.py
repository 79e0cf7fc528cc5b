#!/usr/bin/env python3
"""How long a short CLI verb takes as a whole process: `validate` and `render` of config/examples
and `--help`, each the median of N runs: the wall time of the child (fork to exit) and its CPU time
(user + system, from its rusage), with the machine's load average. On a busy shared machine the
wall time moves with the load; the CPU time much less, so compare versions on it.

To compare two versions on the same load, give each source tree with --tree (a checkout or a
`git archive` of another commit); the runs interleave (round by round: every tree, every verb), so
a burst of load falls on all of them alike:

    python3 bench/cli_startup.py                         # this tree, 15 runs per verb
    git archive main | tar -x -C /tmp/main-tree
    python3 bench/cli_startup.py --tree /tmp/main-tree --tree . --runs 21
    python3 bench/cli_startup.py -o json

Each tree runs as `python -m syncer` in the tree (so its own `syncer` and config/examples come
first on the path; this interpreter's packages for the rest), with bytecode caches on as an installed
package has them (PYTHONDONTWRITEBYTECODE is dropped for the runs; a first untimed round writes
them). --importtime FILE also runs `validate` under `-X importtime` as many times per tree, prints
the median of the import time (the sum of the profile's self column, less noisy than wall time on a
shared machine) and keeps the last profile of each tree in FILE.<n>.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERBS = {
    "validate": ["validate", "config/examples"],
    "render": ["render", "config/examples"],
    "--help": ["--help"],
}


def child_env(tree: Path) -> dict[str, str]:
    """The environment of a run: `tree` first on the path, and bytecode written and read (an installed
    package has it; with PYTHONDONTWRITEBYTECODE a tree without __pycache__ would be compiled on
    every run, and compiling is most of what would be measured)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    for name in ("_ARGCOMPLETE", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    return env


def import_self_ms(profile: str) -> float:
    """The sum of the `self` column of an `-X importtime` profile, in ms: the time spent importing."""
    return sum(int(line.split(":", 1)[1].split("|")[0]) for line in profile.splitlines()
               if line.startswith("import time:") and "self [us]" not in line) / 1000


def run_once(tree: Path, argv: list[str], python: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    env = child_env(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([python, "-m", "syncer", *argv], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):  # 1: a verb's own verdict (e.g. an invalid example); anything else is broken
        raise SystemExit(f"{tree}: flower-syncer {' '.join(argv)} exited {done.returncode}")
    return seconds, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", type=Path, default=[],
                    help="source tree to run (repeatable; default: this one)")
    ap.add_argument("--runs", type=int, default=15, help="runs per verb and tree (default 15)")
    ap.add_argument("--verb", action="append", choices=sorted(VERBS), default=[], help="only these verbs")
    ap.add_argument("--python", default=sys.executable, help="interpreter (default: this one)")
    ap.add_argument("--importtime", type=Path, default=None, metavar="FILE",
                    help="also write one `-X importtime` profile of validate per tree to FILE.<n>")
    ap.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    verbs = args.verb or list(VERBS)
    for tree in trees:  # warm the page cache and bytecode, and fail early on a broken tree
        for verb in verbs:
            run_once(tree, VERBS[verb], args.python)
    load_before = os.getloadavg()
    times: dict[tuple[int, str], list[tuple[float, float]]] = {(i, v): [] for i in range(len(trees)) for v in verbs}
    for _ in range(args.runs):
        for i, tree in enumerate(trees):
            for verb in verbs:
                times[(i, verb)].append(run_once(tree, VERBS[verb], args.python))
    load_after = os.getloadavg()
    imports: dict[int, list[float]] = {i: [] for i in range(len(trees))}
    for _ in range(args.runs if args.importtime is not None else 0):
        for i, tree in enumerate(trees):
            profile = subprocess.run([args.python, "-X", "importtime", "-m", "syncer", *VERBS["validate"]], cwd=tree,
                                     env=child_env(tree), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, check=False).stderr
            imports[i].append(import_self_ms(profile))
            Path(f"{args.importtime}.{i}").write_text(profile)
    rows = [{"tree": str(trees[i]), "verb": verb, "runs": len(ts),
             "median_s": round(statistics.median(w for w, _ in ts), 4), "min_s": round(min(w for w, _ in ts), 4),
             "max_s": round(max(w for w, _ in ts), 4), "cpu_median_s": round(statistics.median(c for _, c in ts), 4),
             "cpu_min_s": round(min(c for _, c in ts), 4)} for (i, verb), ts in times.items()]
    import_rows = [{"tree": str(trees[i]), "validate_import_ms_median": round(statistics.median(ms), 1),
                    "validate_import_ms_min": round(min(ms), 1)} for i, ms in imports.items() if ms]
    result = {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
              "load_after": [round(x, 2) for x in load_after], "results": rows, "imports": import_rows}
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return 0
    print(f"{os.cpu_count()} CPUs; load average {' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in load_after)} after; {args.runs} interleaved runs each")
    print(f"{'VERB':<10} {'WALL MEDIAN':>11} {'MIN':>7} {'MAX':>7} {'CPU MEDIAN':>10} {'MIN':>7}  TREE")
    for r in rows:
        print(f"{r['verb']:<10} {r['median_s']:>11.3f} {r['min_s']:>7.3f} {r['max_s']:>7.3f} "
              f"{r['cpu_median_s']:>10.3f} {r['cpu_min_s']:>7.3f}  {r['tree']}")
    for r in import_rows:
        print(f"validate's imports (sum of -X importtime self): median {r['validate_import_ms_median']:.1f} ms, "
              f"min {r['validate_import_ms_min']:.1f} ms  {r['tree']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
