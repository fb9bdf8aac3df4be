"""What a newcomer meets: lengths that follow what the user set, steps that train nothing are said out loud (and
stop the run), network failures end in one line, the metrics plot."""

from __future__ import annotations

import re
import warnings

import pytest

from verifiers_rl.config.loading import ConfigError
from verifiers_rl.config.schema import resolve_run

SHAPE = dict(batch_size=32, micro_batch_size=8, rollouts_per_example=8)


# --- lengths derived from what the user set ----------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, prompt_len, max_tokens", [
    (dict(max_seq_len=128), 64, None),                        # half the context: the default 512 would not fit
    (dict(max_seq_len=256, max_tokens=48), 208, 48),          # max_prompt_len = max_seq_len - max_tokens
    (dict(max_tokens=128), 1920, 128),                        # the default max_seq_len 2048 - 128
    (dict(), 512, None),                                      # nothing set: the old default
    (dict(max_seq_len=256, max_prompt_len=100), 100, None),   # explicit wins; max_tokens: what the prompt leaves
])
def test_unset_lengths_follow_the_ones_set(tmp_path, kwargs, prompt_len, max_tokens):
    from verifiers_rl.trainer.config import RLConfig

    cfg = RLConfig(output_dir=str(tmp_path / "r"), **SHAPE, **kwargs)
    assert (cfg.max_prompt_len, cfg.max_tokens) == (prompt_len, max_tokens)
    # whatever is derived fits: a prompt of max_prompt_len tokens still leaves room for the completion
    assert cfg.sampling_args(prompt_len=cfg.max_prompt_len).get("max_tokens", 1) >= 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_seq_len=128, max_prompt_len=128), "max_prompt_len=128 must be < max_seq_len=128"),
    (dict(max_seq_len=128, max_tokens=128), "max_tokens=128 must be in [1, max_seq_len=128)"),
    (dict(max_seq_len=1), "max_seq_len=1 leaves no room"),
])
def test_an_explicit_conflict_is_still_one_line(tmp_path, kwargs, message):
    from verifiers_rl.trainer.config import RLConfig

    with pytest.raises(ValueError) as e:
        RLConfig(output_dir=str(tmp_path / "r"), **SHAPE, **kwargs)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_toml_path_derives_the_same(tmp_path):
    base = {"model": "m", "env": {"id": "reverse-text"}}
    args = {"output_dir": str(tmp_path / "o"), **SHAPE}
    run = resolve_run({**base, "trainer": {"args": {**args, "max_seq_len": 128}}}, check_environments=False)
    assert run.args.max_prompt_len == 64
    run = resolve_run({**base, "trainer": {"args": {**args, "max_seq_len": 256, "max_tokens": 56}}},
                      check_environments=False)
    assert run.args.max_prompt_len == 200
    with pytest.raises(ConfigError) as e:
        resolve_run({**base, "trainer": {"args": {**args, "max_seq_len": 128, "max_prompt_len": 200}}},
                    check_environments=False)
    assert str(e.value).startswith("trainer.args.max_prompt_len: max_prompt_len=200 must be < max_seq_len=128")


# --- steps that train nothing ------------------------------------------------------------------------------------

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "vf-rl" / "quickstart.toml"


def _reverse_env():
    import verifiers_rl as vf

    words = ["apple", "river", "stone", "cloud"]
    return vf.SingleTurnEnv(dataset=[{"question": w, "answer": w[::-1]} for w in words],
                            system_prompt="Reverse the word.", rubric=vf.Rubric(funcs=[lambda completion: 1.0]))


def test_a_step_that_trains_nothing_warns_and_three_in_a_row_stop_the_run(tiny_model_dir, tmp_path, capsys):
    """The notebook case of the issue: every chat-templated prompt is longer than max_prompt_len."""
    import verifiers_rl as vf
    from verifiers_rl.errors import TrainingStalledError

    args = vf.RLConfig(output_dir=str(tmp_path / "rl"), max_steps=6, batch_size=8, rollouts_per_example=4,
                       micro_batch_size=8, max_tokens=4, max_seq_len=64, max_prompt_len=8, save_steps=100,
                       logging_steps=1, sample_log_interval=0, disable_tqdm=True, seed=0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer = vf.RLTrainer(str(tiny_model_dir), _reverse_env(), args)  # LoRA: peft wraps the model
        with pytest.raises(TrainingStalledError) as e:
            trainer.train()
    # deprecations are fixed at their source (or, peft's, filtered by message and module)
    assert not [str(w.message) for w in seen if issubclass(w.category, (FutureWarning, DeprecationWarning))]
    msg = str(e.value)
    assert msg.startswith("stopped at step 3: 3 steps in a row trained nothing: prompt_too_long: 8 of 8 rollouts "
                          "dropped (prompts up to ") and "max_prompt_len" in msg and "\n" not in msg
    out = capsys.readouterr().out
    assert "warning: step 1 trained nothing: prompt_too_long: 8 of 8 rollouts dropped" in out
    assert "warning: step 2 trained nothing" in out and trainer.state.global_step == 3


def _train_raises(error: type, model_dir, env, tmp_path, **settings) -> pytest.ExceptionInfo:
    """A small run of `env` that must end in `error` (the trainer closed either way)."""
    import verifiers_rl as vf

    args = vf.RLConfig(output_dir=str(tmp_path / "rl"), batch_size=4, rollouts_per_example=2, micro_batch_size=4,
                       save_steps=100, logging_steps=1, sample_log_interval=0, disable_tqdm=True, seed=0, **settings)
    trainer = vf.RLTrainer(str(model_dir), env, args)
    try:
        with pytest.raises(error) as e:
            trainer.train()
    finally:
        trainer.close()
    return e


def test_a_run_whose_every_step_errored_is_a_failure_not_a_success(tiny_model_dir, tmp_path):
    """Two steps (below the three-in-a-row stop) whose rollouts all errored: train() raises, naming how many
    errored and the first error's last line (vf-rl turns it into exit code 1)."""
    import verifiers_rl as vf
    from verifiers_rl.errors import TrainingStalledError

    class Broken(vf.SingleTurnEnv):
        async def rollout(self, *args, **kwargs):
            raise RuntimeError("while calling the tool server\nConnectionRefusedError: tool server is down")

    env = Broken(dataset=[{"question": w, "answer": w} for w in ("a", "b")], rubric=vf.Rubric(funcs=[lambda c: 1.0]))
    e = _train_raises(TrainingStalledError, tiny_model_dir, env, tmp_path, max_steps=2, max_tokens=4)
    assert str(e.value).startswith("no step of 2 trained anything: errored: 4 of 4 rollouts errored (first: "
                                   "ConnectionRefusedError: tool server is down)"), str(e.value)
    assert "\n" not in str(e.value)


def test_a_step_past_generation_timeout_is_one_line_naming_the_setting(tiny_model_dir, tmp_path):
    """An environment slower than generation_timeout (here its env_response sleeps): train() raises one line that
    names the setting (vf-rl prints it and exits 1), not asyncio's bare TimeoutError."""
    import asyncio

    import verifiers_rl as vf
    from verifiers_rl.errors import GenerationTimeoutError, TrainingStalledError

    class Slow(vf.MultiTurnEnv):
        async def env_response(self, messages, state):
            await asyncio.sleep(30)  # cancelled by the timeout
            return [{"role": "user", "content": "more"}]

    env = Slow(dataset=[{"question": w, "answer": w} for w in ("a", "b")], rubric=vf.Rubric(funcs=[lambda c: 1.0]),
               max_turns=3)
    e = _train_raises(GenerationTimeoutError, tiny_model_dir, env, tmp_path, max_steps=1, max_tokens=2,
                      generation_timeout=1.0)
    assert isinstance(e.value, TrainingStalledError)  # vf-rl's worker ends with its one line, exit 1
    assert str(e.value) == ("generation_timeout: 2 groups of 2 rollouts took longer than 1 s; raise "
                            "trainer.args.generation_timeout, or make the environment's turns (max_turns, tools, "
                            "env_response) or max_tokens shorter")


def test_an_environment_with_only_an_eval_dataset_is_one_line_before_training(tiny_model_dir, tmp_path):
    """Trained on, an environment built with an eval_dataset only says so, naming it: vf-rl's worker before the
    warm-up (`env.id: ...`, a config error: exit 2), a notebook's RLTrainer before it starts (verifiers' own 'dataset is not set'
    came from deep inside)."""
    import verifiers_rl as vf
    from verifiers_rl.config.resolution import validate_run_config
    from verifiers_rl.launching.pipeline import _training_envs

    def eval_only(*_a, **_k):
        return vf.SingleTurnEnv(eval_dataset=[{"question": "a", "answer": "a"}],
                                rubric=vf.Rubric(funcs=[lambda c: 1.0]))

    cfg = validate_run_config({"model": "m", "env": {"id": "me/probe-evalonly"}})
    with pytest.raises(ConfigError) as e:
        _training_envs(cfg, eval_only)
    assert str(e.value) == ("env.id: 'me/probe-evalonly' has no training dataset (its load_environment() gave an "
                            "eval_dataset only, or a dataset of no rows); give it a dataset, or evaluate it with "
                            "[[eval.env]]")
    cfg = validate_run_config({"model": "m", "env": [{"id": "a"}, {"id": "b"}]})
    with pytest.raises(ConfigError, match=r"^env\.0\.id: 'a' has no training dataset"):
        _training_envs(cfg, eval_only)
    with pytest.raises(ConfigError, match=r"^env\.0\.id: 'a' has no training dataset"):  # every row went to eval
        _training_envs(cfg, lambda *_a, **_k: vf.SingleTurnEnv(dataset=[], eval_dataset=[{"question": "a",
                                                                                          "answer": "a"}]))
    args = vf.RLConfig(output_dir=str(tmp_path / "rl"), max_steps=1, batch_size=4, rollouts_per_example=2,
                       micro_batch_size=4, max_tokens=2, save_steps=100, disable_tqdm=True)
    env = eval_only()
    env.env_id = "probe-evalonly"
    with pytest.raises(ValueError, match=r"^environment 'probe-evalonly' has no training dataset \(it was given an "
                                         r"eval_dataset only, or a dataset of no rows\)"):
        vf.RLTrainer(str(tiny_model_dir), env, args)
    assert env.get_eval_dataset() is not None  # what it has still evaluates


def test_an_sft_step_filtered_out_by_min_reward_is_said_not_stopped():
    """training_mode sft with sft_min_reward: a step whose teacher rollouts all scored below it trains nothing and
    says so (its loss 0 is not a loss), without counting towards the three-in-a-row stop (a rarely passing teacher
    leaves such steps by chance); a run that never trained anything still fails."""
    from types import SimpleNamespace

    from verifiers_rl.errors import TrainingStalledError
    from verifiers_rl.trainer.empty_steps import EmptyStepWatch, diagnose

    args = SimpleNamespace(max_prompt_len=None, mask_truncated_completions=False, training_mode="sft",
                           sft_min_reward=0.5)
    low = [{"reward": 0.25, "trajectory": []}] * 4
    assert diagnose(low, args) == ("below_min_reward: 4 of 4 rollouts filtered out (training_mode='sft', reward < "
                                   "sft_min_reward); the teacher's rollouts scored below sft_min_reward ([teacher] "
                                   "min_reward): lower it, or give the teacher easier examples")
    warned: list[str] = []
    watch = EmptyStepWatch(limit=2)
    for step in (1, 2, 3):
        watch.check(step, low, args, warned.append)
    assert len(warned) == 3 and warned[2].startswith("step 3 trained nothing: below_min_reward: 4 of 4")
    with pytest.raises(TrainingStalledError, match=r"^no step of 3 trained anything: below_min_reward"):
        watch.finish()
    errored = [{"reward": 0.25, "trajectory": []}, {"error": ValueError("x"), "trajectory": []}]
    with pytest.raises(TrainingStalledError):  # another cause in the step: counted as before
        for step in (1, 2):
            EmptyStepWatch(limit=1).check(step, errored, args, warned.append)
    assert diagnose(low, SimpleNamespace(**{**vars(args), "training_mode": "rl"})) == (
        "empty_completion: 4 of 4 rollouts had no completion tokens; the model returned no tokens: check max_tokens "
        "and the inference server")  # the floor is sft's only


def test_a_warning_naming_a_config_table_prints_it(capsys):
    from verifiers_rl.trainer.callbacks import warn

    warn("lower [teacher] min_reward")  # rich would take [teacher] for a style
    assert "warning: lower [teacher] min_reward" in capsys.readouterr().out


def test_a_step_with_tokens_resets_the_count():
    from types import SimpleNamespace

    from verifiers_rl.trainer.empty_steps import EmptyStepWatch, diagnose

    args = SimpleNamespace(max_prompt_len=None, mask_truncated_completions=False)
    bad = [{"error": ValueError("tool blew up"), "trajectory": []}] * 2
    assert diagnose(bad, args) == ("errored: 2 of 2 rollouts errored (first: ValueError: tool blew up); fix the "
                                   "environment (the rollouts' `error` is in the eval/trainer logs) or the server")
    warned: list[str] = []
    watch = EmptyStepWatch(limit=2)
    watch.check(1, bad, args, warned.append)
    watch.check(2, [], args, warned.append)  # no rollouts: nothing to say, the count restarts
    watch.check(3, bad, args, warned.append)
    assert len(warned) == 2 and watch.in_a_row == 1


@pytest.mark.integration  # spawns a process
def test_vf_rl_ends_a_run_that_trains_nothing_in_one_line(tmp_path):
    import subprocess
    import sys

    script = __import__("pathlib").Path(sys.executable).with_name("vf-rl")
    r = subprocess.run([str(script), "@", str(QUICKSTART), "--tiny_model.path", str(tmp_path / "tiny"),
                        "--no-warmup", "--no-eval", "--trainer.args.max-steps", "10", "--trainer.args.batch-size",
                        "16", "--trainer.args.micro-batch-size", "16", "--trainer.args.max-prompt-len", "8",
                        "--output-dir", str(tmp_path / "rl")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    line = _one_error_line(r)  # the trainer's stderr comes through the supervisor's stdout
    assert line.startswith("error: stopped at step 3: 3 steps in a row trained nothing: prompt_too_long: 16 of 16 "
                           "rollouts dropped")
    assert "warning: step 1 trained nothing" in r.stdout


# --- the plot ----------------------------------------------------------------------------------------------------


def _metrics(path, records):
    import json

    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_plot_smooths_the_reward_and_leaves_out_an_empty_eval_panel(tmp_path):
    from verifiers_rl.plots import panel_titles, plot_run, smooth

    train = [{"step": s, "reward/all/mean": 0.5 + 0.1 * (-1) ** s, "loss/mean": 0.1, "time/step": 1.0}
             for s in range(1, 41)]
    _metrics(tmp_path / "no-eval", train)
    assert "held-out eval reward" not in panel_titles(tmp_path / "no-eval")
    assert plot_run(tmp_path / "no-eval").stat().st_size > 0
    # the noisy ±0.1 alternation is smoothed to ~0.5 (a 4-step trailing mean of this series)
    assert all(abs(v - 0.5) < 0.03 for v in smooth([r["reward/all/mean"] for r in train])[4:])
    # before RL (step 0), the periodic one and after RL (last step): one series on its own panel
    evals = [{"step": s, "eval/reverse-text/reward/mean": v} for s, v in ((0, 0.4), (20, 0.5), (40, 0.6))]
    _metrics(tmp_path / "eval", train + evals)
    assert panel_titles(tmp_path / "eval") == ["train reward", "held-out eval reward", "loss", "step time (s)"]
    assert plot_run(tmp_path / "eval").stat().st_size > 0


# --- network failures: one line, fast, exit != 0, no traceback ----------------------------------------------------
# An unreachable hub is HF_ENDPOINT on a closed local port (HF_HUB_OFFLINE cleared, an empty cache); a server that
# never answers is a local socket that accepts connections (the kernel's backlog) and never reads.

import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

BIN = __import__("pathlib").Path(sys.executable).parent


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_server():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield SilentServer(f"http://127.0.0.1:{s.getsockname()[1]}/v1", s)
    s.close()


class SilentServer(str):
    """A server URL whose socket listens but never answers; `connections()` counts the connections made to it
    (the backlog holds them, answered or not, until accepted here)."""

    def __new__(cls, url: str, sock: socket.socket):
        self = super().__new__(cls, url)
        self.sock = sock
        return self

    def connections(self) -> int:
        self.sock.setblocking(False)
        n = 0
        while True:
            try:
                self.sock.accept()[0].close()
            except BlockingIOError:
                return n
            n += 1


def _cli(tmp_path, *cmd, hub_down: bool = True, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home")}  # an empty cache: nothing was ever downloaded
    if hub_down:
        env.pop("HF_HUB_OFFLINE", None)
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    r = subprocess.run([str(BIN / cmd[0]), *cmd[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=timeout)
    return r, time.monotonic() - t0


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    out = r.stdout + r.stderr
    assert r.returncode not in (0, None), out[-3000:]
    assert "Traceback" not in out and "Retrying" not in out, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out[-3000:]
    return errors[0]


@pytest.mark.integration  # spawns a process
def test_vf_eval_hub_model_unreachable_hub(tmp_path):
    r, seconds = _cli(tmp_path, "vf-eval", "reverse-text", "-a", '{"dataset_source": "offline"}', "-m",
                      "nobody/no-model", "-n", "1")
    line = _one_error_line(r)
    assert line.startswith("error: model 'nobody/no-model': not a local dir and not in the Hugging Face cache, and "
                           "the model hub http://127.0.0.1:") and "connection refused" in line
    assert "local model dir" in line and "HF_HUB_OFFLINE=1" in line
    assert "note: the model hub" in r.stderr and "working offline" in r.stderr  # probed once, then offline
    assert "verifiers runtime:" not in r.stderr  # the model is checked before the environment loads
    assert seconds < 240  # no retry storm (the libraries' retries took minutes); imports alone take ~10-20 s here


@pytest.mark.integration  # spawns a process
def test_vf_eval_hub_dataset_unreachable_hub_names_dataset_source(tmp_path, tiny_model_dir):
    r, _ = _cli(tmp_path, "vf-eval", "reverse-text", "-a", '{"dataset_source": "hub"}', "-m", str(tiny_model_dir))
    line = _one_error_line(r)
    assert line.startswith("error: environment 'reverse-text': its dataset is not in the local cache and the model "
                           "hub http://127.0.0.1:") and "dataset_source=offline" in line


@pytest.mark.integration  # spawns a process
def test_vf_eval_debug_shows_the_traceback(tmp_path):
    r, _ = _cli(tmp_path, "vf-eval", "reverse-text", "-a", '{"dataset_source": "hub"}', "-m", "m", "--debug")
    assert r.returncode == 1 and "Traceback" in r.stderr and r.stderr.rstrip().splitlines()[-1].startswith("error:")


@pytest.mark.integration  # spawns a process
def test_vf_eval_unreachable_and_silent_servers(tmp_path, silent_server):
    args = ["vf-eval", "reverse-text", "-a", '{"dataset_source": "offline"}', "-m", "m", "-n", "1", "-b"]
    r, _ = _cli(tmp_path, *args, f"http://127.0.0.1:{_closed_port()}/v1", hub_down=False)
    line = _one_error_line(r)
    assert line.startswith("error: inference server http://127.0.0.1:") and "cannot connect" in line
    assert "start it" in line
    r, _ = _cli(tmp_path, *args, silent_server, hub_down=False)
    line = _one_error_line(r)
    assert line == (f"error: inference server {silent_server}: accepted the connection but did not answer within "
                    "10 s; check that it is an OpenAI-compatible server and that it finished starting (its log)")
    assert silent_server.connections() == 1  # one probe with a deadline, no retries


@pytest.mark.integration  # spawns a process
def test_vf_sft_hub_dataset_unreachable_hub(tmp_path, tiny_model_dir):
    (tmp_path / "sft.toml").write_text(f'model = "{tiny_model_dir}"\n[data]\npath = "nobody/no-data"\n'
                                       f'[trainer]\noutput_dir = "{tmp_path / "out"}"\nmax_steps = 1\n')
    r, _ = _cli(tmp_path, "vf-sft", "@", str(tmp_path / "sft.toml"))
    line = _one_error_line(r)
    assert line.startswith("error: data.path: dataset 'nobody/no-data' is not in the local cache and the model hub")
    assert "local .jsonl" in line


@pytest.mark.integration  # spawns a process
def test_vf_rl_hub_model_and_silent_server(tmp_path, silent_server):
    common = ["vf-rl", "@", str(QUICKSTART), "--no-tiny-model", "--no-warmup", "--no-eval", "--output-dir",
              str(tmp_path / "rl"), "--trainer.args.max-steps", "2"]
    r, _ = _cli(tmp_path, *common, "--model", "nobody/no-model")
    line = _one_error_line(r)
    assert line.startswith("error: model 'nobody/no-model': not a local dir and not in the Hugging Face cache")
    assert not (tmp_path / "rl").exists()  # before the launch
    r, _ = _cli(tmp_path, *common[:3], "--tiny_model.path", str(tmp_path / "tiny"), *common[4:], "--env.args",
                '{"dataset_source": "hub"}')
    line = _one_error_line(r)
    assert re.match(r"error: environment '[\w/-]*reverse-text': its dataset is not in the local cache and the "
                    r"model hub http://127\.0\.0\.1:", line) and "dataset_source=offline" in line
    r, _ = _cli(tmp_path, *common, "--model", "nobody/no-model", "--inference.backend", "vllm", "--inference.urls",
                f'["{silent_server}"]', hub_down=False)
    line = _one_error_line(r)
    assert line.startswith(f"error: inference.urls: inference server {silent_server}: accepted the connection but "
                           "did not answer within 10 s")


@pytest.mark.integration  # spawns a process
def test_a_model_path_that_does_not_exist_is_one_line(tmp_path):
    """A path, not a hub id: named as a missing directory (transformers would call it an invalid repo id)."""
    from verifiers_rl.errors import ModelNotFoundError
    from verifiers_rl.network import check_model_path

    for name in ("/no/such/model", "./no-model", "../no-model", "~/no-model", "outputs/no/model"):
        with pytest.raises(ModelNotFoundError, match="no such directory"):
            check_model_path(name)
    for name in ("gpt2", "Qwen/Qwen3-0.6B", str(tmp_path)):  # hub ids and an existing dir pass untouched
        check_model_path(name)
    missing = str(tmp_path / "no" / "model")
    expected = f"error: model {missing!r}: no such directory (a hub id is 'name' or 'owner/name')"
    r, _ = _cli(tmp_path, "vf-eval", "reverse-text", "-a", '{"dataset_source": "offline"}', "-m", missing, "-n", "1")
    assert _one_error_line(r) == expected
    assert "verifiers runtime:" not in r.stderr  # checked before the environment (and its dataset) loads
    r, _ = _cli(tmp_path, "vf-rl", "@", str(QUICKSTART), "--no-tiny-model", "--no-warmup", "--no-eval",
                "--output-dir", str(tmp_path / "rl"), "--trainer.args.max-steps", "2", "--model", missing)
    assert _one_error_line(r) == expected
    assert not (tmp_path / "rl").exists()  # checked before the launch: no run dir, no trainer process


@pytest.mark.integration  # spawns a process
def test_vf_rl_environment_code_raising_in_load_environment_is_one_line(tmp_path, tiny_model_dir):
    (tmp_path / "environments" / "breaks").mkdir(parents=True)
    (tmp_path / "environments" / "breaks" / "breaks.py").write_text(
        "def load_environment(n=3, **kw):\n    return sorted([n, 1])\n")  # a str n: TypeError in its own code
    r, _ = _cli(tmp_path, "vf-rl", "@", str(QUICKSTART), "--no-tiny-model", "--no-warmup", "--no-eval", "--env.id",
                "breaks", "--env.args", '{"n": "x"}', "--model", str(tiny_model_dir), "--output-dir",
                str(tmp_path / "rl"), "--trainer.args.max-steps", "1", hub_down=False)
    assert _one_error_line(r) == ("error: environment 'breaks': load_environment() failed: TypeError: '<' not "
                                  "supported between instances of 'int' and 'str'")


# --- the console --------------------------------------------------------------------------------------------------

_NOISE = ("Warning", "warnings.warn", "Traceback", "Loading weights", "Writing model shards", "{'loss'",
          "{'train_runtime'")


@pytest.mark.integration  # spawns a process
def test_the_quickstart_console_is_ours(tmp_path):
    """A short quickstart (warm-up, eval before / after, RL): no third-party warning, library bar or raw log dict."""
    r, _ = _cli(tmp_path, "vf-rl", "@", str(QUICKSTART), "--tiny_model.path", str(tmp_path / "tiny"),
                "--warmup.output-dir", str(tmp_path / "warmup"), "--warmup.max-steps", "3",
                "--warmup.num-examples", "64", "--trainer.args.max-steps", "1",
                "--trainer.args.batch-size", "16", "--trainer.args.micro-batch-size", "16", "--eval.num-examples",
                "8", "--output-dir", str(tmp_path / "rl"), hub_down=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert not [line for line in out.splitlines() if any(n in line for n in _NOISE)], out[-3000:]
    assert "warm-up: SFT on the environment's data (64 examples), 3 steps" in out
    assert re.search(r"^warm-up .* 3/3 +mean loss \d", out, re.M)  # the SFT bar, drawn once at the end in a log
    assert "held-out eval after RL" in out and "step 1/1" in out


def test_rl_progress_bar_in_a_terminal_and_plain_lines_in_a_log():
    """The RL phase draws a bar under its step lines in a terminal; piped (vf-rl's log), the lines alone."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from verifiers_rl.trainer.callbacks import ConsoleCallback

    for terminal in (True, False):
        buf = io.StringIO()
        cb = ConsoleCallback(Console(file=buf, force_terminal=terminal, width=100))
        state = SimpleNamespace(is_world_process_zero=True, max_steps=3, global_step=0)
        cb.on_train_begin(None, state, None)
        for step in (1, 2, 3):
            state.global_step = step
            cb.on_step_end(None, state, None)
            cb.on_log(None, state, None, logs={"reward/all/mean": 0.5, "loss/mean": 0.1})
        cb.on_train_end(None, state, None)
        import re

        out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
        assert "step 3/3" in out and "reward 0.5" in out
        assert ("━" in out) == terminal and cb.progress is None


def test_the_first_errors_line_is_its_tracebacks_last_line_even_inside_an_exception_group():
    from verifiers_rl.evaluation import errors_line

    group = ("HarnessError: harness 'null' exited 1: Traceback (most recent call last):\n"
             "  + Exception Group Traceback (most recent call last):\n    |   File \"x.py\", line 1, in send\n"
             "    | httpx.ConnectError: [Errno -2] Name or service not known\n    +------------------------------------\n")
    states = [{"error": group}, {"error": None}, {"error": ValueError("second")}]
    assert errors_line(states) == "2 of 3 rollouts errored (first: httpx.ConnectError: [Errno -2] Name or service not known)"
    assert errors_line([{"error": None}]) is None
    long = ("ModelServerError: vLLM server http://127.0.0.1:8000 exited with code 1 " + "x" * 200
            + "; log: /o/logs/x.log")
    first = errors_line([{"error": long}]).removeprefix("1 of 1 rollouts errored (first: ").removesuffix(")")
    assert len(first) < 205 and first.startswith("ModelServerError: vLLM server") and first.endswith("/o/logs/x.log")


def test_the_hub_and_wandb_probes_go_through_a_configured_proxy(monkeypatch):
    """Behind HTTPS_PROXY the libraries reach the hub and W&B through the proxy: so does the probe, or a cluster
    whose only way out is a proxy would be sent offline (the hub) or refused (W&B). NO_PROXY hosts go direct."""
    import socket

    from verifiers_rl.network import _connect_error

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as proxy:
        proxy.bind(("127.0.0.1", 0))
        proxy.listen()
        url = "https://hub.example.invalid"  # .invalid never resolves
        assert _connect_error(url, 2) is not None  # "cannot resolve ...", or no answer from a slow resolver
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.getsockname()[1]}")
        assert _connect_error(url, 2) is None
        monkeypatch.setenv("NO_PROXY", "example.invalid")
        assert _connect_error(url, 2) is not None
