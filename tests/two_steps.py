"""Two training steps through `vf-rl` on the tiny model with a given objective, shared by the loss tests
(`from two_steps import two_steps_through_vf_rl, two_steps_in_process`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def two_steps_through_vf_rl(model_dir: Path, tmp_path: Path, monkeypatch: Any, objectives: str) -> list[dict]:
    """`vf-rl @ run.toml` through its `main`, as the console script calls it (it trains in a worker process), with
    `objectives` (TOML lines of [trainer.args], e.g. `loss = {...}`) added; the logged training steps."""
    from verifiers_rl.cli import rl as rl_cli

    out = _write_run(model_dir, tmp_path, monkeypatch, objectives)
    assert rl_cli.main(["@", "run.toml", "--output-dir", str(out)]) == 0
    return _steps(out)


def two_steps_in_process(model_dir: Path, tmp_path: Path, monkeypatch: Any, objectives: str) -> list[dict]:
    """The same run with vf-rl's process boundary left out, so that a test of many objectives pays the trainer's
    imports once: `vf-rl --dry-run` checks the config and writes what it hands its worker (configs/rl.toml), and
    this process does the worker's work on that file (`load_run`, then `launching.pipeline.run`)."""
    out = _write_run(model_dir, tmp_path, monkeypatch, objectives)
    vf_rl_in_process(["@", "run.toml"], out)
    return _steps(out)


def vf_rl_in_process(argv: list[str], out: Path) -> None:
    """`vf-rl ARGV --output-dir OUT` with its process boundary left out (as `two_steps_in_process`)."""
    from rich.console import Console

    from verifiers_rl.cli import rl as rl_cli
    from verifiers_rl.config.schema import load_run
    from verifiers_rl.launching.pipeline import run
    from verifiers_rl.verbosity import quiet_bars_begin, quiet_bars_end

    assert rl_cli.main([*argv, "--output-dir", str(out), "--dry-run"]) == 0
    resolved, _ = load_run(["@", str(out / "configs" / "rl.toml")])
    bars = quiet_bars_begin()  # the worker turns transformers' bars off for its process: this one is the session's
    try:
        run(resolved.cfg, resolved.rl_kwargs, Console(quiet=True))
    finally:
        quiet_bars_end(bars)


def _steps(out: Path) -> list[dict]:
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [s for s in steps if "loss/mean" in s]


def _write_run(model_dir: Path, tmp_path: Path, monkeypatch: Any, objectives: str) -> Path:
    (tmp_path / "run.toml").write_text(f"""
model = "{model_dir}"

[env]
id = "verifiers-rl/reverse-text"
args = {{ dataset_source = "offline", num_eval_examples = 4 }}

[inference]
backend = "local"

[eval]
before = false
after = false

[trainer.args]
max_steps = 2
batch_size = 8
rollouts_per_example = 4
micro_batch_size = 4
max_tokens = 8
max_seq_len = 128
max_prompt_len = 96
learning_rate = 1e-2
save_steps = 100
seed = 0
{objectives}
""")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "out"
