"""Where a JudgeRubric's calls go (rubrics/judge_endpoint.py): verifiers' choice (the client the environment passed,
else OPENAI_BASE_URL / OPENAI_API_KEY, else OpenAI's API) with VF_JUDGE_* first; one start line per judge naming
endpoint, model and source (never a key); a judge that OPENAI_BASE_URL sends to the policy's own server refused in
one line before anything runs, in vf-eval, vf-rl and a notebook RLTrainer.

The judge is a real HTTP server started by each test (a stand-in: it answers "yes" and counts the calls); no
judge model can be downloaded here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import verifiers_rl as vf
from verifiers_rl import policy_servers
from verifiers_rl.rubrics.judge_endpoint import (JudgeIsPolicyError, JudgeNotConfiguredError, check_judges,
                                                  endpoint_from_settings, judge_rubrics)

FIXTURES = Path(__file__).parent / "fixtures" / "judge_env"
BIN = Path(sys.executable).parent
SETTINGS = ("VF_JUDGE_BASE_URL", "VF_JUDGE_API_KEY", "VF_JUDGE_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL")
SECRET = "sk-secret-judge-key-0123"


class StandInJudge(BaseHTTPRequestHandler):
    """An OpenAI-compatible judge: POST /v1/chat/completions answers "yes" (counted), GET /v1/models lists one."""

    calls: list[dict] = []
    gets: list[str] = []

    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        type(self).gets.append(self.path)
        self._send({"object": "list", "data": [{"id": "judge-1", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append({"path": self.path, "model": body["model"], "auth": self.headers.get("Authorization")})
        self._send({"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "yes"}}]})

    def log_message(self, *args):
        pass


@pytest.fixture
def judge_server():
    """(url, handler class): a stand-in judge on a free port of 127.0.0.1."""
    handler = type("Judge", (StandInJudge,), {"calls": [], "gets": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


@pytest.fixture
def clean_settings(monkeypatch):
    for var in SETTINGS:
        monkeypatch.delenv(var, raising=False)


def _load_env(**kwargs):
    sys.path.insert(0, str(FIXTURES))
    try:
        import judged_words
    finally:
        sys.path.remove(str(FIXTURES))
    return judged_words.load_environment(**kwargs)


# --- the choice --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("settings, url, source, key_source", [
    ({}, None, None, None),
    ({"OPENAI_API_KEY": "k"}, "https://api.openai.com/v1", "OpenAI's default", "OPENAI_API_KEY"),
    ({"OPENAI_BASE_URL": "http://j:1/v1"}, "http://j:1/v1", "OPENAI_BASE_URL", None),
    ({"OPENAI_BASE_URL": "http://j:1/v1", "OPENAI_API_KEY": "k"}, "http://j:1/v1", "OPENAI_BASE_URL",
     "OPENAI_API_KEY"),
    ({"OPENAI_BASE_URL": "http://j:1/v1", "VF_JUDGE_BASE_URL": "http://v:2/v1", "OPENAI_API_KEY": "k",
      "VF_JUDGE_API_KEY": "vk"}, "http://v:2/v1", "VF_JUDGE_BASE_URL", "VF_JUDGE_API_KEY"),
    ({"VF_JUDGE_API_KEY": "vk", "OPENAI_BASE_URL": "http://j:1/v1"}, "http://j:1/v1", "OPENAI_BASE_URL",
     "VF_JUDGE_API_KEY"),
])
def test_endpoint_is_chosen_as_verifiers_does_with_vf_judge_first(clean_settings, monkeypatch, settings, url, source,
                                                                   key_source):
    for k, v in settings.items():
        monkeypatch.setenv(k, v)
    endpoint = endpoint_from_settings()
    if url is None:
        assert endpoint is None
        return
    assert (endpoint.base_url, endpoint.source, endpoint.key_source) == (url, source, key_source)
    client = vf.JudgeRubric().judge_client
    assert str(client.base_url).rstrip("/") == url and client.api_key == (
        settings.get("VF_JUDGE_API_KEY") or settings.get("OPENAI_API_KEY") or "EMPTY")


def test_server_key_treats_spellings_of_one_server_alike():
    key = policy_servers.server_key
    assert key("http://127.0.0.1:8000/v1") == key("http://localhost:8000") == key("http://0.0.0.0:8000/v1/")
    assert key("http://127.0.0.1:8000/v1") != key("http://127.0.0.1:8001/v1")
    assert key("https://api.openai.com/v1") == key("https://api.openai.com:443")


def test_start_line_names_endpoint_model_and_source_never_the_key(clean_settings, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://user:pw@judge.example:9000/v1?token=abc")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("VF_JUDGE_MODEL", "judge-1")
    lines: list[str] = []
    check_judges([("judged", _load_env())], announce=lines.append)
    assert lines == ["judge (judged): http://judge.example:9000/v1, model judge-1 (endpoint from OPENAI_BASE_URL, "
                     "key from OPENAI_API_KEY)"]
    check_judges([("judged", _load_env())], announce=lines.append)  # a new env, a new rubric: said again
    env = _load_env()
    check_judges([("judged", env)], announce=lines.append)
    check_judges([("judged", env)], announce=lines.append)  # the same rubric: said once
    assert len(lines) == 3 and not any(s in line for line in lines for s in (SECRET, "pw", "token"))


def test_every_judge_of_groups_is_found_and_a_passed_client_is_named(clean_settings, judge_server):
    from openai import AsyncOpenAI

    url, _ = judge_server
    passed = vf.JudgeRubric(judge_client=AsyncOpenAI(base_url=url, api_key=SECRET), judge_model="m")
    rubric = vf.RubricGroup([vf.Rubric(), passed])
    a = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "a"}], rubric=rubric)
    b = _load_env()
    group = vf.EnvGroup([a, b], env_names=["first", "second"])
    found = judge_rubrics([group])
    assert [(label, r is passed) for label, r in found] == [("first", True), ("second", False)]
    lines: list[str] = []
    with pytest.raises(JudgeNotConfiguredError) as e:  # "second" has a judge with reward functions and no endpoint
        check_judges([group], announce=lines.append)
    assert str(e.value).startswith("judge (second): no judge configured") and "\n" not in str(e.value)
    assert lines == [f"judge (first): {url}, model m (endpoint from a judge_client the environment passed)"]
    check_judges([vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "a"}], rubric=vf.JudgeRubric())])  # no funcs


def test_a_judge_the_environment_points_at_the_policy_runs_and_is_named_so(clean_settings, judge_server):
    """verifiers' self-reward example passes a client to the policy's own server on purpose: not refused."""
    from openai import AsyncOpenAI

    url, _ = judge_server
    rubric = vf.JudgeRubric(judge_client=AsyncOpenAI(base_url=url, api_key="k"), judge_model="policy")
    lines: list[str] = []
    check_judges([("self", vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "a"}], rubric=rubric))],
                 [(url.replace("127.0.0.1", "localhost"), None)], lines.append)
    assert lines[0].endswith("this is the policy's own server (http://localhost:" + url.split(":")[2] + "): the "
                             "model judges itself")


@pytest.mark.integration  # spawns a process
def test_openai_base_url_at_the_policy_is_refused_at_start_and_at_call(clean_settings, monkeypatch, judge_server):
    url, handler = judge_server
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    env = _load_env()
    with pytest.raises(JudgeIsPolicyError) as e:
        check_judges([("judged", env)], [(url.replace("/v1", ""), None)])
    msg = str(e.value)
    assert msg.startswith(f"judge (judged): OPENAI_BASE_URL={url} is the policy's own inference server") and \
        "VF_JUDGE_BASE_URL" in msg and "unset OPENAI_BASE_URL" in msg and "\n" not in msg
    # vf-eval's policy is one model on a server: another model there is the judge's business
    check_judges([("judged", env)], [(url, "the-evaluated-model")], announce=None)
    with pytest.raises(JudgeIsPolicyError):
        check_judges([("judged", env)], [(url, "gpt-4.1-nano")], announce=None)
    # a policy server that starts after the check (a free port): the call itself is refused, not contained
    policy_servers.add(url)
    try:
        state = {"prompt": [{"role": "user", "content": "q"}], "completion": [{"role": "assistant", "content": "a"}],
                 "answer": "a", "timing": {}, "trajectory": []}
        with pytest.raises(JudgeIsPolicyError):
            env.rubric.score_group_sync([state])
    finally:
        policy_servers.remove(url)
    assert handler.calls == []
    env.rubric.score_group_sync([state])
    assert len(handler.calls) == 1


def test_the_local_engines_http_endpoint_is_the_policys_while_it_runs():
    from verifiers_rl.inference.local_http import LocalHTTPServer

    srv = LocalHTTPServer(engine=None).start()
    try:
        assert policy_servers.policy_at(srv.base_url, "any") == srv.base_url
    finally:
        srv.stop()
    assert policy_servers.policy_at(srv.base_url, "any") is None


# --- a notebook RLTrainer ----------------------------------------------------------------------------------------
def _args(tmp_path, **kw):
    return vf.RLConfig(output_dir=str(tmp_path / "rl"), max_steps=1, batch_size=4, rollouts_per_example=2,
                       micro_batch_size=4, max_tokens=4, max_seq_len=64, save_steps=100, logging_steps=1,
                       sample_log_interval=0, disable_tqdm=True, seed=0, report_to=[], **kw)


def test_rltrainer_judges_at_openai_base_url_and_says_so(tiny_model_dir, tmp_path, clean_settings, monkeypatch,
                                                         judge_server, capsys):
    url, handler = judge_server
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("VF_JUDGE_MODEL", "judge-1")
    trainer = vf.RLTrainer(str(tiny_model_dir), _load_env(), _args(tmp_path))
    try:
        trainer.train()
    finally:
        trainer.close()
    out = capsys.readouterr().out
    assert f"judge (SingleTurnEnv): {url}, model judge-1 (endpoint from OPENAI_BASE_URL, key from OPENAI_API_KEY)" \
        in out and SECRET not in out
    assert len(handler.calls) >= 4 and len(handler.calls) % 2 == 0  # every rollout of each generated step judged
    assert {c["model"] for c in handler.calls} == {"judge-1"} and handler.calls[0]["auth"] == f"Bearer {SECRET}"
    rows = [json.loads(line) for line in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward/all/mean"] for r in rows if "reward/all/mean" in r] == [1.0]  # the stand-in said "yes"


def test_rltrainer_refuses_openai_base_url_at_its_vllm_server_before_contacting_it(tiny_model_dir, tmp_path,
                                                                                     clean_settings, monkeypatch,
                                                                                     judge_server):
    from verifiers_rl.plan.inference import InferencePlan

    url, handler = judge_server  # here it plays the policy's vLLM server, given by URL
    monkeypatch.setenv("OPENAI_BASE_URL", url.replace("127.0.0.1", "localhost"))
    plan = InferencePlan(backend="vllm", weight_sync="disk", urls=[url])
    with pytest.raises(JudgeIsPolicyError) as e:
        vf.RLTrainer(str(tiny_model_dir), _load_env(), _args(tmp_path, use_lora=False), plan=plan)
    msg = str(e.value)
    assert msg.startswith("judge (SingleTurnEnv): OPENAI_BASE_URL=http://localhost:") and "\n" not in msg
    assert f"is the policy's own inference server ({url})" in msg and "VF_JUDGE_BASE_URL" in msg
    assert handler.calls == [] and handler.gets == []  # refused before the server was asked anything


@pytest.mark.integration  # spawns a process
def test_vf_eval_judges_at_openai_base_url_and_vf_rl_refuses_the_policys_server(tiny_model_dir, tmp_path,
                                                                                 judge_server):
    url, handler = judge_server
    env = {**{k: v for k, v in os.environ.items() if k not in SETTINGS}, "HF_HUB_OFFLINE": "1",
           "OPENAI_BASE_URL": url, "OPENAI_API_KEY": SECRET}
    r = subprocess.run([str(BIN / "vfrl-eval"), "judged_words", "--env-path", str(FIXTURES), "-m",
                        str(tiny_model_dir), "-n", "2", "-r", "2", "-t", "4", "-a", '{"judge_model": "judge-1"}'],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert f"judge (judged_words): {url}, model judge-1 (endpoint from OPENAI_BASE_URL, key from OPENAI_API_KEY)" \
        in out and SECRET not in out
    assert len(handler.calls) == 4 and {c["model"] for c in handler.calls} == {"judge-1"}
    # vf-rl: the same server given as the policy's vLLM server: one line from the trainer, no step, no judge call
    config = tmp_path / "judged.toml"
    config.write_text(f'model = "{tiny_model_dir}"\n[env]\nid = "judged_words"\npath = "{FIXTURES}"\n'
                      f'[inference]\nbackend = "vllm"\nurls = ["{url.replace("127.0.0.1", "localhost")}"]\n'
                      '[trainer.args]\nmax_steps = 1\nuse_lora = false\n')
    r = subprocess.run([str(BIN / "vfrl"), "@", str(config), "--output-dir", str(tmp_path / "rl")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: judge (judged_words): OPENAI_BASE_URL={url} is the "
                                                     "policy's own inference server"), out[-3000:]
    assert "Traceback" not in out and "step 1" not in out and len(handler.calls) == 4
