"""Reward curves: a PNG of a run's `metrics.jsonl` (train reward smoothed over the faint raw one, held-out eval
reward before / during / after RL, loss, entropy, step time). A panel with nothing to show is left out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EVAL_SUFFIX = "/reward/mean"
HELD_OUT = ("eval/", "val/")  # [eval]'s series and the periodic validation's
PANELS = [
    ("train reward", ["reward/all/mean"]),
    ("held-out eval reward", None),  # every eval/<env>/reward/mean and val/<env>/reward/mean series
    ("loss", ["loss/mean"]),
    ("entropy", ["entropy/mean"]),
    ("step time (s)", ["time/step"]),
]


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a run's output dir?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def smooth(ys: list[float], window: int | None = None) -> list[float]:
    """Trailing mean over `window` points (default: a tenth of the series, at least 1): the trend without the
    per-step noise, and no look-ahead."""
    if not ys:
        return []
    w = window or max(1, len(ys) // 10)
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= w:
            total -= ys[i - w]
        out.append(total / min(i + 1, w))
    return out


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], float(r[key])) for r in records
           if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool) and "step" in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def _panels(records: list[dict]) -> list[tuple[str, list[str]]]:
    """The panels that have data, each with its series keys."""
    out = []
    for title, keys in PANELS:
        if keys is None:
            keys = sorted({k for r in records for k in r if k.startswith(HELD_OUT) and k.endswith(EVAL_SUFFIX)})
        keys = [k for k in keys if series(records, k)[0]]
        if keys:
            out.append((title, keys))
    return out


def _draw(ax: Any, title: str, records: list[dict], keys: list[str]) -> None:
    for key in keys:
        xs, ys = series(records, key)
        if key == "reward/all/mean":
            raw = ax.plot(xs, ys, alpha=0.3, linewidth=1, label="per step")[0]
            ax.plot(xs, smooth(ys), color=raw.get_color(), linewidth=2, label="smoothed")
        elif key.startswith(HELD_OUT):
            # [eval] envs by name; the training env's validation ([val] / eval_steps) as "val <env>"
            label = key.removeprefix("eval/").removesuffix(EVAL_SUFFIX).replace("val/", "val ", 1)
            ax.plot(xs, ys, marker="o", markersize=4, label=label)  # few points: before, every interval, after
        else:
            ax.plot(xs, ys, alpha=0.3 if len(xs) >= 30 else 1.0, marker="o" if len(xs) < 30 else None, markersize=3)
            if len(xs) >= 30:
                ax.plot(xs, smooth(ys), linewidth=1.5)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if title == "train reward" or (title.startswith("held-out") and keys):
        ax.legend(fontsize=7)


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    out = Path(out) if out else Path(run_dir) / "metrics.png"
    panels = _panels(records) or [("train reward", [])]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (title, keys) in zip(axes[0], panels):
        _draw(ax, title, records, keys)
    fig.suptitle(Path(run_dir).name)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_run_safely(run_dir: str | Path) -> None:
    """`plot_run`, saying why instead of raising: a plot must never fail a finished run."""
    try:
        plot_run(run_dir)
    except Exception as e:
        print(f"could not write the metrics plot: {e}")


def panel_titles(run_dir: str | Path) -> list[str]:
    """The panels `plot_run` draws for this run (what a reader of metrics.png will see)."""
    return [t for t, _ in _panels(read_metrics(run_dir))]
