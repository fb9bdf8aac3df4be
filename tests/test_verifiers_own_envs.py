"""verifiers' own v1 environments (its repository's `environments/`), run unchanged: on the same scripted replies,
our driver gives the rewards verifiers' own `run_slot` gives, and each trains two steps through `vf-rl`.

They are not on PyPI, so these tests need a checkout: set VF_ENVIRONMENTS_DIR to its `environments/` folder (else
they skip, as in CI). The three that read their dataset from the Hugging Face hub get generated stand-in rows of
the same columns (tests/fixtures/hub_standin: nothing can be downloaded here). Needs verifiers 0.4:
    VF_ENVIRONMENTS_DIR=... UV_PROJECT_ENVIRONMENT=.venv-verifiers-v1 uv run --frozen --extra verifiers-v1 \\
        pytest tests/test_verifiers_own_envs.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verifiers_rl.v1 import v1_available

ROOT = os.environ.get("VF_ENVIRONMENTS_DIR")
STANDIN = Path(__file__).parent / "fixtures" / "hub_standin"
pytestmark = [
    pytest.mark.skipif(v1_available() is None, reason="verifiers>=0.4,<0.5 (v1) is not installed"),
    pytest.mark.skipif(not ROOT, reason="verifiers' environments are not on PyPI: set VF_ENVIRONMENTS_DIR to the "
                       "environments/ folder of a verifiers checkout to run these tests"),
]


def _kuhn(prompt: str) -> str:
    """Check when checking is legal, else call: every hand is checked down to a showdown."""
    last = prompt[prompt.rfind("Your legal actions"):]
    return "I [check]." if "[check]" in last else "I [call]."


def _sorted_names(prompt: str) -> str:
    return "<alphabetical_sorted>\nAda Lovelace\nAlan Turing\n</alphabetical_sorted>"


NULL = {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}  # our default seat (tool-less: a tiny model)

# env folder → (the v1 env config, scripted reply). Replies depend on the prompt only: both drivers get the same.
ENVS = {
    "reverse_text": ({"taskset": {"id": "reverse_text"}, "agent": NULL},
                     lambda p: "<reversed_text>pmal revir</reversed_text>"),
    "gsm8k": ({"taskset": {"id": "gsm8k"}, "agent": NULL}, lambda p: "So the answer is\n#### 4"),
    "alphabet_sort": ({"taskset": {"id": "alphabet_sort"}, "agent": NULL}, _sorted_names),
    "kuhn_poker": ({"taskset": {"id": "kuhn_poker"}, "player0": NULL, "player1": NULL}, _kuhn),
    "code_golf": ({"taskset": {"id": "code_golf"}, "golfer": NULL}, lambda p: "```python\nprint(1)\n```"),
    "interception": ({"taskset": {"id": "interception"}, "agent": NULL}, lambda p: "Done."),
    "bash_interception": ({"taskset": {"id": "bash_interception"}, "agent": NULL}, lambda p: "Done."),
    "web_search_interception": ({"taskset": {"id": "web_search_interception"}, "agent": NULL}, lambda p: "Done."),
}


@pytest.fixture(autouse=True)
def _standin_datasets(monkeypatch):
    """The hub stand-ins in this process (verifiers' driver and ours load the tasksets here) and in the vf-rl
    processes (PYTHONPATH)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hub_standin", STANDIN / "sitecustomize.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # wraps datasets.load_dataset (once)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.parametrize("name", sorted(ENVS))
def test_rewards_equal_verifiers_own_run_slot(name, tiny_model_dir):
    from test_v1_envs import _both_drivers

    config, reply = ENVS[name]
    theirs, ours, seats = _both_drivers(tiny_model_dir, config, Path(ROOT) / name, reply, 3)
    assert len(ours) == len(seats) * len(theirs) and theirs  # the first 3 tasks (or all, if fewer)
    rewards = []
    for game, ep in enumerate(theirs):
        traces = {t.agent.name: t for t in ep.traces}
        for k, seat in enumerate(seats):
            state = ours[len(seats) * game + k]
            assert state["error"] is None, state["error"]
            assert state["reward"] == pytest.approx(traces[seat].reward), (name, game, seat)
            rewards.append(round(state["reward"], 3))
    print(f"{name}: rewards {rewards} (both drivers)")
    if name == "kuhn_poker":  # two seats, zero-sum: a hand is won or lost
        assert all(a == -b and abs(a) == 1.0 for a, b in zip(rewards[::2], rewards[1::2])), rewards


TOML = """
[env]
id = "{id}"
api = "v1"
path = "{path}"
args = {args}

[inference]
backend = "local"

[trainer.args]
output_dir = "outputs/run"
max_steps = 2
batch_size = 4
rollouts_per_example = 2
micro_batch_size = 4
max_tokens = 8
max_seq_len = 2048
learning_rate = 1e-2
temperature = 1.0
save_steps = 100
logging_steps = 1
sample_log_interval = 0
seed = 0
"""


def _inline(value) -> str:
    """A TOML inline table of a JSON-shaped dict."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_inline(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


@pytest.mark.parametrize("name", sorted(ENVS))
def test_trains_two_steps_through_vf_rl(name, tiny_model_dir, tmp_path):
    config, _ = ENVS[name]
    args = {"max_tasks": 8, **{k: v for k, v in config.items() if k != "taskset"}}
    (tmp_path / "run.toml").write_text(TOML.format(id=config["taskset"]["id"], path=Path(ROOT) / name,
                                                   args=_inline(args)))
    cmd = [sys.executable, "-m", "verifiers_rl.cli.rl", "@", "run.toml", "--model", str(tiny_model_dir), "--no-eval"]
    p = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    steps = [json.loads(line) for line in (tmp_path / "outputs/run/metrics.jsonl").read_text().splitlines()]
    trained = [r for r in steps if "reward/all/mean" in r]
    assert [r["step"] for r in trained] == [1, 2], steps
    assert all(r["errors/rollouts"] == 0 for r in trained), trained
