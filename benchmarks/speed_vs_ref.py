"""This tree against a git ref, side by side: seconds per RL step and per phase on speed_vs_trl.py's workloads, in
the same venv, alternating (the order flips every pair), so a change that slows the step, the engine or the loss
shows up before it lands (AGENTS.md asks for this output).

The ref is checked out into a temporary git worktree; each run is a child process whose `verifiers_rl` is that
tree's (its folder first on sys.path), with the same model, workload, steps and seed. Per workload: each pair's
seconds per step and ratio (this tree / ref), then the median ratio overall and per phase (`time/generate`,
`time/train`, `time/weight_sync` from each run's metrics.jsonl: medians over its steps after the first). Not a
test: numbers on a shared 2-core machine vary; compare ratios from one run.

    python benchmarks/speed_vs_ref.py [--ref REF] [--workload short|digits|lora|wide|all] [--pairs 5] [--steps 12]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PHASES = ("time/generate", "time/train", "time/weight_sync")


def default_ref() -> str:
    """The last release tag, else origin/main, else HEAD."""
    for cmd in (["git", "describe", "--tags", "--abbrev=0"], ["git", "rev-parse", "--verify", "-q", "origin/main"]):
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    return "HEAD"


def worker(tree: str, workload: str, model: str, steps: int, seed: int, out: str) -> None:
    """In the child: one run of this tree's or the ref's RLTrainer on the workload; prints one JSON line."""
    sys.path.insert(0, tree)
    for name in [m for m in sys.modules if m == "verifiers_rl" or m.startswith("verifiers_rl.")]:
        del sys.modules[name]
    sys.path.insert(0, str(HERE))
    import speed_vs_trl as s

    import verifiers_rl

    assert Path(verifiers_rl.__file__).resolve().is_relative_to(Path(tree).resolve()), verifiers_rl.__file__
    env = s.workload_env(workload)
    per_step, _ = s.run_ours(model, env, s.WORKLOADS[workload], steps, out, seed)
    rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/step" in r][1:]
    phases = {k: statistics.median(r[k] for r in rows) for k in PHASES if rows and all(k in r for r in rows)}
    print("RESULT " + json.dumps({"s_per_step": per_step, **phases}), flush=True)


def _run(tree: Path, workload: str, model: str, a: argparse.Namespace, out: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), "--workload", workload, "--model",
           model, "--steps", str(a.steps), "--seed", str(a.seed), "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(tree)}
    r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None:
        raise SystemExit(f"the run of {tree} failed (exit {r.returncode}): {(r.stderr or r.stdout)[-2000:]}")
    return json.loads(line.removeprefix("RESULT "))


def compare(workload: str, trees: dict[str, Path], model: str, a: argparse.Namespace, tmp: Path) -> None:
    runs: dict[str, list[dict]] = {"this": [], "ref": []}
    for i in range(a.pairs):
        order = ["this", "ref"] if i % 2 == 0 else ["ref", "this"]
        for side in order:
            runs[side].append(_run(trees[side], workload, model, a, tmp / f"{workload}-{side}-{i}"))
        t, r = runs["this"][-1]["s_per_step"], runs["ref"][-1]["s_per_step"]
        print(f"  {workload} pair {i + 1}: this {t:.3f} s/step, ref {r:.3f} s/step, ratio {t / r:.3f}", flush=True)
    ratios = [x["s_per_step"] / y["s_per_step"] for x, y in zip(runs["this"], runs["ref"])]
    parts = []
    for k in PHASES:
        if all(k in x for x in runs["this"] + runs["ref"]):
            this, ref = (statistics.median(x[k] for x in runs[s]) for s in ("this", "ref"))
            parts.append(f"{k.split('/')[1]} {this:.3f}/{ref:.3f} = {this / ref if ref else float('nan'):.2f}x")
    print(f"{workload}: this / ref = {statistics.median(ratios):.3f} (median of {a.pairs} pairs); per phase (this/ref "
          f"s/step): {', '.join(parts) or 'not logged by both'}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", help="git ref to compare with (default: the last release tag, else origin/main)")
    p.add_argument("--workload", default="all", choices=["short", "digits", "lora", "wide", "all"],
                   help="all: short, digits, lora and wide")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.worker, a.workload, a.model, a.steps, a.seed, a.out)
        return 0
    ref = a.ref or default_ref()
    names = ["short", "digits", "lora", "wide"] if a.workload == "all" else [a.workload]
    print(f"command: python {' '.join(sys.argv)}  (ref {ref})", flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tmp / "ref"), ref], cwd=REPO, check=True)
        try:
            sys.path.insert(0, str(REPO))
            from verifiers_rl.models.tiny import build_tiny_model
            from speed_vs_trl import WIDE_MODEL

            tiny = str(build_tiny_model(f"{tmp}/tiny"))
            wide = str(build_tiny_model(f"{tmp}/wide", **WIDE_MODEL))
            for name in names:
                compare(name, {"this": REPO, "ref": tmp / "ref"}, wide if name == "wide" else tiny, a, tmp)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "ref")], cwd=REPO)
    return 0


if __name__ == "__main__":
    sys.exit(main())
