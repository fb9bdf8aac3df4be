"""Two training steps through `vf-rl` on the tiny model with a given objective, shared by the loss tests
(`from two_steps import two_steps_through_vf_rl`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def two_steps_through_vf_rl(model_dir: Path, tmp_path: Path, monkeypatch: Any, objectives: str) -> list[dict]:
    """`vf-rl @ run.toml` through its `main`, as the console script calls it (it trains in a worker process), with
    `objectives` (TOML lines of [trainer.args], e.g. `loss = {...}`) added; the logged training steps."""
    from verifiers_rl.cli import rl as rl_cli

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
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert rl_cli.main(["@", "run.toml", "--output-dir", str(out)]) == 0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [s for s in steps if "loss/mean" in s]
