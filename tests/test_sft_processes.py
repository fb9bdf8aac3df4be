"""vf-sft with several processes (sft/launch.py): torchrun as vf-rl runs it, DDP over gloo on the CPU."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from verifiers_rl.config.loading import ConfigError
from verifiers_rl.sft.config import SFTTrainerSection
from verifiers_rl.sft.launch import world_size

WORDS = ["apple", "river", "stone", "cloud", "lamp", "tree", "bird", "sand"]


def _vf_sft_two_processes(model, tmp_path, rows: list[dict], extra: str = "") -> tuple[Path, Any]:
    """vf-sft on `rows` with `[trainer] processes = 2` (2 steps of 4 rows): its output dir and the finished run."""
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "sft"
    (tmp_path / "sft.toml").write_text(
        f'model = "{model}"\n[data]\npath = "{data}"\n[trainer]\noutput_dir = "{out}"\nmax_steps = 2\n'
        f'batch_size = 4\nmax_length = 64\nprocesses = 2\n{extra}')
    return out, subprocess.run([sys.executable, "-m", "verifiers_rl.cli.sft", "@", str(tmp_path / "sft.toml")],
                               capture_output=True, text=True, timeout=600, cwd=tmp_path)


def test_vf_sft_trains_with_two_processes_and_writes_the_model_once(tiny_model_dir, tmp_path):
    rows = [{"prompt": [{"role": "user", "content": w}], "completion": [{"role": "assistant", "content": w[::-1]}]}
            for w in WORDS]
    # one row per forward: each rank accumulates its 2 rows of a step over 2 forwards
    out, r = _vf_sft_two_processes(tiny_model_dir, tmp_path, rows,
                                   "logging_steps = 1\nsave_steps = 2\nmicro_batch_size = 1\n")
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-4000:]
    # the ranks share stdout: rank 0's progress bar may end on the same line as another rank's report
    ranks = sorted(re.findall(r"SFT rank (\d of \d: \d+ steps of \d+ rows)", r.stdout))
    assert ranks == ["0 of 2: 2 steps of 2 rows", "1 of 2: 2 steps of 2 rows"], log[-4000:]
    assert r.stdout.count("SFT done: ") == 1 and r.stdout.count("SFT: 2 steps on 8 rows") == 1, r.stdout
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-")) == ["checkpoint-2"]
    assert (out / "model.safetensors").exists() and (out / "checkpoint-2" / "model.safetensors").exists()
    # each rank saved its own RNG state in the one checkpoint: both trained
    assert sorted(p.name for p in (out / "checkpoint-2").glob("rng_state*")) == ["rng_state_0.pth",
                                                                                 "rng_state_1.pth"]
    assert list((out / "logs" / "trainer" / "torchrun").glob("*/attempt_0"))  # torchrun's folders: the run's


def test_a_row_no_rank_could_train_on_is_one_line_before_torchrun_starts(tiny_model_dir, tmp_path):
    good = {"prompt": [{"role": "user", "content": "apple"}], "completion": [{"role": "assistant", "content": "elppa"}]}
    out, r = _vf_sft_two_processes(tiny_model_dir, tmp_path, [good, {**good, "tools": "[not json"}, good, good])
    log = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in log, log[-3000:]
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: data row 1: column 'tools': not valid JSON"), log
    assert "rank" not in log and not out.exists()  # torchrun never started


@pytest.mark.parametrize("kw, gpus, match", [
    (dict(processes=3, batch_size=8), 0, "trainer.batch_size: 8 rows per step cannot be shared by 3 processes"),
    (dict(gpus=2), 0, "trainer.gpus: 2 asked but no GPU is visible; on the CPU set trainer.processes"),
    (dict(gpus=4), 2, "trainer.gpus: 4 asked but 2 GPU(s) are visible"),
    (dict(gpus=2, processes=3, batch_size=6), 2, "trainer.processes: 3 asked but training runs one process per GPU"),
    (dict(processes=2, batch_size=12, micro_batch_size=4), 0,
     "trainer.micro_batch_size: 12 rows per step do not split into forwards of 4 rows on 2 process(es)"),
])
def test_process_counts_the_machine_or_batch_cannot_take_are_one_line(kw, gpus, match):
    with pytest.raises(ConfigError) as e:
        world_size(SFTTrainerSection(**kw), gpus)
    assert str(e.value).startswith(match) and "\n" not in str(e.value)


def test_process_counts():
    assert world_size(SFTTrainerSection(), 0) == 1 and world_size(SFTTrainerSection(processes=2), 0) == 2
    assert world_size(SFTTrainerSection(gpus=2), 2) == 2  # one per GPU (the GPU side of the rule: no GPU here)
