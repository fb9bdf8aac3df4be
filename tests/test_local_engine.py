"""The local inference engine, on the real tiny model (no mocks of the model).

Where a test needs a particular completion (stop strings, tool calls), it scripts the output with a subclass of
the real model that adds a large bias to the next scripted token: a random tiny model never emits a tool call.
The sampler and stop criteria (`local_sampling`) are also tested on their own, on hand-made scores and token ids
with the tiny model's byte-level tokenizer (token id == byte): no model is needed for their math.
"""

from __future__ import annotations

import asyncio
import json

import pytest

torch = pytest.importorskip("torch")

from openai.types.chat import ChatCompletion  # noqa: E402

from verifiers_rl.inference.kv_cache import cache_keyword  # noqa: E402
from verifiers_rl.inference.local_engine import LocalEngine  # noqa: E402
from verifiers_rl.inference.local_sampling import (  # noqa: E402
    Sampler,
    StopCriteria,
    filter_scores,
    final_text,
    row_generators,
)
from verifiers_rl.inference.tool_calls import parse_hermes_tool_calls  # noqa: E402

MSGS = [{"role": "user", "content": "Reverse: hello"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return LocalEngine.from_pretrained(tiny_model_dir, model_name="tiny")


def run(coro):
    return asyncio.run(coro)


def create(engine, **kw):
    kw.setdefault("model", "tiny")
    kw.setdefault("messages", MSGS)
    return engine.client.chat.completions.create(**kw)


def forward_logprobs(model, prompt_ids, completion_ids, temperature=1.0, top_k=0):
    """Teacher-forced log-probs of the completion under log_softmax(logits / T) (optionally top-k filtered)."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logits = logits / temperature
    if top_k:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    lp = torch.log_softmax(logits, dim=-1)
    return lp.gather(1, torch.tensor(completion_ids)[:, None]).squeeze(1), logits


def scripted_model(tiny_model_dir, text: str, prompt_len: int):
    """The real tiny model with a +1e4 bias on the next token of `text` (then EOS repeatedly)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    script = tok(text, add_special_tokens=False)["input_ids"]
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)

    kv = cache_keyword(base)  # transformers 5.25 renamed past_key_values

    class Scripted(type(base)):
        def forward(self, input_ids=None, attention_mask=None, **kw):
            if attention_mask is not None:  # padded batch: count real tokens per row
                real = attention_mask.sum(-1)
            else:  # generate() drops an all-ones mask: the cache length tells where we are
                past = kw[kv].get_seq_length() if kw.get(kv) is not None else 0
                real = torch.full((input_ids.shape[0],), past + input_ids.shape[1])
            out = super().forward(input_ids=input_ids, attention_mask=attention_mask, **kw)
            for row, n in enumerate(real.tolist()):
                step = n - prompt_len
                nxt = script[step] if 0 <= step < len(script) else tok.eos_token_id
                out.logits[row, -1, nxt] += 1e4
            return out

    base.__class__ = Scripted
    return base, script


def prompt_ids_for(engine, messages, tools=None):
    out = engine.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


# ------------------------------------------------------------------------------------------ response shape


def test_response_shape_token_ids_and_logprobs(engine):
    r = run(create(engine, max_tokens=12, logprobs=True, extra_body={"return_token_ids": True}))
    assert isinstance(r, ChatCompletion) and r.object == "chat.completion" and r.model == "tiny"
    assert r.prompt_token_ids == prompt_ids_for(engine, MSGS)
    (c,) = r.choices
    assert c.index == 0 and c.message.role == "assistant"
    assert 1 <= len(c.token_ids) <= 12
    assert len(c.logprobs.content) == len(c.token_ids)
    assert all(e.top_logprobs == [] and e.logprob <= 0 for e in c.logprobs.content)
    eos = engine.tokenizer.eos_token_id
    if c.finish_reason == "stop":
        assert c.token_ids[-1] == eos
    else:
        assert c.finish_reason == "length" and len(c.token_ids) == 12 and eos not in c.token_ids
    body = [t for t in c.token_ids if t != eos]
    assert c.message.content == engine.tokenizer.decode(body, skip_special_tokens=True)
    assert r.usage.prompt_tokens == len(r.prompt_token_ids)
    assert r.usage.completion_tokens == len(c.token_ids)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # byte-level tokens report their exact byte
    for e, t in zip(c.logprobs.content, c.token_ids):
        if t < 256:
            assert e.bytes == [t]


def test_max_tokens_gives_length(engine):
    r = run(create(engine, max_tokens=5, logprobs=True, extra_body={"min_tokens": 5}))
    (c,) = r.choices
    assert c.finish_reason == "length" and len(c.token_ids) == 5 and len(c.logprobs.content) == 5
    # max_completion_tokens is honoured too
    r = run(create(engine, max_completion_tokens=3, extra_body={"min_tokens": 3}))
    assert len(r.choices[0].token_ids) == 3 and r.choices[0].logprobs is None


def test_n_choices_and_seed(engine):
    r = run(create(engine, n=3, max_tokens=16, seed=7, logprobs=True))
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in r.choices}) == 3  # independent samples
    again = run(create(engine, n=3, max_tokens=16, seed=7))
    assert [c.token_ids for c in again.choices] == [c.token_ids for c in r.choices]
    other = run(create(engine, n=3, max_tokens=16, seed=8))
    assert [c.token_ids for c in other.choices] != [c.token_ids for c in r.choices]
    assert r.usage.completion_tokens == sum(len(c.token_ids) for c in r.choices)


# ------------------------------------------------------------------------------------- logprob correctness


def test_sampling_logprobs_match_forward_pass(engine):
    r = run(create(engine, temperature=0.7, max_tokens=24, logprobs=True, n=2))
    for c in r.choices:
        got = torch.tensor([e.logprob for e in c.logprobs.content])
        want, _ = forward_logprobs(engine.model, r.prompt_token_ids, c.token_ids, temperature=0.7)
        assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()


def test_top_k_logprobs_are_of_the_filtered_distribution(engine):
    r = run(create(engine, temperature=0.7, max_tokens=16, logprobs=True, top_logprobs=3,
                   extra_body={"top_k": 5}))
    (c,) = r.choices
    want, logits = forward_logprobs(engine.model, r.prompt_token_ids, c.token_ids, temperature=0.7, top_k=5)
    got = torch.tensor([e.logprob for e in c.logprobs.content])
    assert torch.allclose(got, want, atol=1e-4)
    assert torch.isfinite(want).all()  # every sampled token was inside the top 5
    for e, row in zip(c.logprobs.content, logits):
        assert len(e.top_logprobs) == 3
        top3 = torch.log_softmax(row, -1).topk(3).values
        assert torch.allclose(torch.tensor([t.logprob for t in e.top_logprobs]), top3, atol=1e-4)


def test_top_p_min_p_logprobs_match_hf_warpers(engine):
    """Checked against transformers' own warpers (an independent implementation of the same filters)."""
    from transformers import MinPLogitsWarper, TopPLogitsWarper

    r = run(create(engine, temperature=0.7, top_p=0.9, max_tokens=16, logprobs=True, extra_body={"min_p": 0.05}))
    (c,) = r.choices
    ids = torch.tensor([r.prompt_token_ids + c.token_ids])
    with torch.no_grad():
        logits = engine.model(ids).logits[0, len(r.prompt_token_ids) - 1 : -1].float() / 0.7
    filtered = MinPLogitsWarper(0.05)(None, TopPLogitsWarper(0.9)(None, logits))
    want = torch.log_softmax(filtered, -1).gather(1, torch.tensor(c.token_ids)[:, None]).squeeze(1)
    got = torch.tensor([e.logprob for e in c.logprobs.content])
    assert torch.isfinite(want).all() and torch.allclose(got, want, atol=1e-4)


def test_greedy_is_argmax_with_raw_logprobs(engine):
    r = run(create(engine, temperature=0, max_tokens=10, logprobs=True))
    (c,) = r.choices
    want, logits = forward_logprobs(engine.model, r.prompt_token_ids, c.token_ids, temperature=1.0)
    assert c.token_ids == logits.argmax(-1).tolist()
    assert torch.allclose(torch.tensor([e.logprob for e in c.logprobs.content]), want, atol=1e-4)


def test_model_generation_config_defaults_do_not_leak(tiny_model_dir, capfd):
    """Sampling defaults in generation_config.json (as real Qwen checkpoints ship) must not change the
    distribution the engine samples from, and generate must not warn."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    g = model.generation_config
    g.do_sample, g.temperature, g.top_k, g.top_p, g.repetition_penalty, g.max_length = True, 0.1, 2, 0.5, 3.0, 64
    eng = LocalEngine(model, AutoTokenizer.from_pretrained(tiny_model_dir))
    capfd.readouterr()
    r = run(create(eng, temperature=0.7, max_tokens=16, logprobs=True))
    err = capfd.readouterr().err
    assert err.strip() == "", err
    (c,) = r.choices
    want, _ = forward_logprobs(model, r.prompt_token_ids, c.token_ids, temperature=0.7)
    assert torch.allclose(torch.tensor([e.logprob for e in c.logprobs.content]), want, atol=1e-4)


def test_chat_template_kwargs_reach_the_template(tiny_model_dir, tmp_path):
    """RLConfig.chat_template_kwargs (TRL's name; e.g. Qwen3's enable_thinking) rides in every request and renders
    the prompt: the template here writes a marker when enable_thinking is false."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import verifiers_rl as vf

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = "{%- if enable_thinking is defined and not enable_thinking %}NOTHINK{%- endif %}" + \
        tok.chat_template
    eng = LocalEngine(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tok)
    off = vf.RLConfig(output_dir=str(tmp_path), chat_template_kwargs={"enable_thinking": False})
    for cfg, marked in ((off, True), (vf.RLConfig(output_dir=str(tmp_path)), False)):
        r = run(create(eng, max_tokens=2, **cfg.sampling_args()))
        assert tok.decode(r.prompt_token_ids).startswith("NOTHINK") is marked


# -------------------------------------------------------------------------------------------- batching


@pytest.mark.parametrize("in_loop_thread", [True, False])
def test_concurrent_requests_are_batched(engine, in_loop_thread, monkeypatch):
    # decoding on the event loop's thread (default) or in a worker thread: the same batching and results
    from verifiers_rl.inference import local_decode

    monkeypatch.setattr(engine, "decode_in_loop_thread", in_loop_thread)
    calls = []
    decode = local_decode.decode

    def counting_decode(model, input_ids, *a, **kw):
        calls.append(input_ids.shape[0])
        return decode(model, input_ids, *a, **kw)

    monkeypatch.setattr(local_decode, "decode", counting_decode)
    prompts = [[{"role": "user", "content": f"request {i}: " + "x" * i}] for i in range(16)]

    async def main():
        return await asyncio.gather(
            *[create(engine, messages=m, temperature=0.7, max_tokens=16, logprobs=True) for m in prompts]
        )

    results = run(main())
    assert calls == [16]
    for m, r in zip(prompts, results):
        # each caller gets the completion of its own prompt (left padding doesn't leak across rows)
        assert r.prompt_token_ids == prompt_ids_for(engine, m)
        c = r.choices[0]
        want, _ = forward_logprobs(engine.model, r.prompt_token_ids, c.token_ids, temperature=0.7)
        assert torch.allclose(torch.tensor([e.logprob for e in c.logprobs.content]), want, atol=1e-4)


def test_rollouts_that_ask_one_after_another_share_a_batch(tiny_model_dir):
    """Rollouts whose requests trickle in (a v1 episode's program starting, a tool running first) join one batch:
    the rollout driver counts them in flight and the engine waits for those that have not asked yet, while they
    keep arriving. Without the count (a caller outside the driver) each arrival is its own batch."""
    import verifiers_rl as vf
    from verifiers_rl.envs.rollouts import generate_states

    class Staggered(vf.SingleTurnEnv):
        async def rollout(self, input, client, model, sampling_args=None):
            await asyncio.sleep(0.01 * input["example_id"])  # work before the model call, 10 ms apart
            return await super().rollout(input, client, model, sampling_args)

    rows = [{"question": f"q{i}", "answer": ""} for i in range(4)]
    env = Staggered(dataset=rows, rubric=vf.Rubric(funcs=[lambda completion: 0.0]))
    eng = LocalEngine.from_pretrained(tiny_model_dir, model_name="tiny")
    seen = []

    # min_tokens: the random tiny model may end its turn at once, and verifiers records an empty answer as an error
    args = {"max_tokens": 4, "extra_body": {"min_tokens": 4}}

    async def driven():
        states = await generate_states(env, env.get_dataset().to_list(), eng.client, "tiny", args, max_seq_len=512)
        seen.append(eng.rollouts_in_flight)
        return states

    states = run(driven())
    assert eng.generate_calls == 1 and seen == [0] and all(s["completion"] for s in states)

    async def staggered_callers():
        async def one(i):
            await asyncio.sleep(0.03 * i)
            return await create(eng, max_tokens=4)
        return await asyncio.gather(*(one(i) for i in range(4)))

    run(staggered_callers())
    assert eng.generate_calls >= 3  # one batch for the driven rollouts, then at least two for these


def test_different_sampling_params_are_grouped_and_chunked(tiny_model_dir):
    eng = LocalEngine.from_pretrained(tiny_model_dir, max_batch_size=4)

    async def main():
        reqs = [create(eng, temperature=0.7, max_tokens=4, n=3) for _ in range(2)]  # 6 rows → 2 chunks
        reqs += [create(eng, temperature=0, max_tokens=4)]  # another group
        reqs += [create(eng, temperature=0.7, max_tokens=2, seed=1)]  # same group, per-row length/seed
        return await asyncio.gather(*reqs)

    results = run(main())
    assert eng.generate_calls == 3  # 7 sampled rows in chunks of 4, plus one greedy batch
    assert [len(r.choices) for r in results] == [3, 3, 1, 1]
    assert len(results[3].choices[0].token_ids) <= 2


def test_errors_propagate_to_every_waiter(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    broken = AutoModelForCausalLM.from_pretrained(tiny_model_dir)

    class Broken(type(broken)):
        def forward(self, *a, **k):
            raise RuntimeError("boom in forward")

    broken.__class__ = Broken
    eng = LocalEngine.from_pretrained(tiny_model_dir)
    eng.set_model(broken)

    async def main():
        coros = [asyncio.wait_for(create(eng, max_tokens=4), timeout=60) for _ in range(3)]
        return await asyncio.gather(*coros, return_exceptions=True)

    outcomes = run(main())
    assert all(isinstance(o, RuntimeError) and "boom" in str(o) for o in outcomes), outcomes
    # the engine keeps serving once a working model is back
    eng.set_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir))
    assert run(create(eng, max_tokens=3)).choices[0].token_ids


def test_works_across_event_loops_and_restores_train_mode(engine):
    engine.model.train()
    try:
        for _ in range(2):  # a fresh loop each time: the worker is created lazily per loop
            assert run(create(engine, max_tokens=3)).choices[0].token_ids
        assert engine.model.training  # eval mode only for the duration of generate
    finally:
        engine.model.eval()


def test_context_overflow_is_a_bad_request(engine):
    import openai

    long = [{"role": "user", "content": "x" * 5000}]
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        run(create(engine, messages=long, max_tokens=4))


def test_presence_and_frequency_penalties_are_a_bad_request_not_ignored(engine):
    """vLLM applies them; the local engine does not, so sampling without them would silently differ. Their neutral
    value (which every request this package builds names) is fine."""
    import openai

    msgs = [{"role": "user", "content": "hi"}]
    run(create(engine, messages=msgs, max_tokens=2, presence_penalty=0.0, extra_body={"frequency_penalty": 0.0}))
    for kw in (dict(presence_penalty=0.5), dict(extra_body={"frequency_penalty": 1.0})):
        with pytest.raises(openai.BadRequestError, match=r"_penalty=.*: the local engine does not apply it; leave it"):
            run(create(engine, messages=msgs, max_tokens=2, **kw))


# ---------------------------------------------------------------------------------- stop strings, tools


def test_stop_string_truncation(tiny_model_dir):
    text = "Hello world. STOP here, never shown."
    prompt_len = len(prompt_ids_for(LocalEngine.from_pretrained(tiny_model_dir), MSGS))
    model, script = scripted_model(tiny_model_dir, text, prompt_len)
    from transformers import AutoTokenizer

    eng = LocalEngine(model, AutoTokenizer.from_pretrained(tiny_model_dir))
    r = run(create(eng, max_tokens=40, stop=["STOP", "never"], logprobs=True))
    (c,) = r.choices
    assert c.finish_reason == "stop"
    assert c.message.content == "Hello world. "
    # token_ids run up to and including the token that completed the stop string
    assert c.token_ids == script[: len("Hello world. STOP")]
    assert len(c.logprobs.content) == len(c.token_ids)
    # without a stop string the whole script comes back, ended by EOS
    r = run(create(eng, max_tokens=60))
    assert r.choices[0].message.content == text and r.choices[0].finish_reason == "stop"
    assert r.choices[0].token_ids == script + [eng.tokenizer.eos_token_id]
    # ignore_eos runs past EOS up to max_tokens
    r = run(create(eng, max_tokens=len(script) + 3, extra_body={"ignore_eos": True}))
    assert r.choices[0].finish_reason == "length" and len(r.choices[0].token_ids) == len(script) + 3


def test_hermes_parser_on_scripted_text():
    p = parse_hermes_tool_calls(
        'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
        '<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>'
    )
    assert p.content == "Let me add."
    assert [c["function"]["name"] for c in p.tool_calls] == ["add", "add"]
    assert [json.loads(c["function"]["arguments"]) for c in p.tool_calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in p.tool_calls)
    assert len({c["id"] for c in p.tool_calls}) == 2
    # only a call: content None; an unclosed final block (cut by max_tokens) still parses
    p = parse_hermes_tool_calls('<tool_call>\n{"name": "f", "arguments": {}}\n')
    assert p.content is None and json.loads(p.tool_calls[0]["function"]["arguments"]) == {}
    # malformed JSON or no name: plain content, no calls
    for bad in ['<tool_call>{"name": "f", "arguments": {</tool_call>', '<tool_call>{"arguments": {}}</tool_call>']:
        p = parse_hermes_tool_calls(bad)
        assert p.tool_calls == [] and p.content == bad
    assert parse_hermes_tool_calls("no calls here").content == "no calls here"


def test_tool_calls_end_to_end(tiny_model_dir, add_tools):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    call_text = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    messages = [{"role": "user", "content": "2+3?"}]
    out = tok.apply_chat_template(messages, tools=add_tools, add_generation_prompt=True)
    prompt_len = len(out["input_ids"] if hasattr(out, "keys") else out)
    model, script = scripted_model(tiny_model_dir, call_text, prompt_len)
    eng = LocalEngine(model, tok)

    r = run(create(eng, messages=messages, tools=add_tools, max_tokens=80, logprobs=True))
    (c,) = r.choices
    assert c.finish_reason == "tool_calls"
    assert c.message.content is None
    (tc,) = c.message.tool_calls
    assert tc.id.startswith("call_") and tc.type == "function" and tc.function.name == "add"
    assert json.loads(tc.function.arguments) == {"a": 2, "b": 3}
    assert c.token_ids == script + [tok.eos_token_id]

    # the same text without `tools` in the request stays plain content
    plain = run(create(eng, messages=messages, max_tokens=80))
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].finish_reason == "stop"

    # feed the assistant message object back with a tool result: the next prompt extends the same token
    # sequence (prompt ids + completion ids are a prefix), which multi-turn RL relies on
    follow = messages + [c.message, {"role": "tool", "tool_call_id": tc.id, "content": "5"}]
    r2 = run(create(eng, messages=follow, tools=add_tools, max_tokens=4))
    assert r2.prompt_token_ids[: len(r.prompt_token_ids) + len(c.token_ids)] == r.prompt_token_ids + c.token_ids


def test_from_pretrained_loads_a_peft_adapter(tiny_model_dir, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, cfg).save_pretrained(tmp_path / "adapter")

    eng = LocalEngine.from_pretrained(tmp_path / "adapter")
    assert isinstance(eng.model, PeftModel)
    r = run(create(eng, temperature=0.7, max_tokens=12, logprobs=True))
    (c,) = r.choices
    got = torch.tensor([e.logprob for e in c.logprobs.content])
    want, _ = forward_logprobs(eng.model, r.prompt_token_ids, c.token_ids, temperature=0.7)
    assert torch.allclose(got, want, atol=1e-4)
    # the adapter is live: the plain base model scores the same tokens differently
    plain, _ = forward_logprobs(AutoModelForCausalLM.from_pretrained(tiny_model_dir), r.prompt_token_ids,
                                c.token_ids, temperature=0.7)
    assert not torch.allclose(plain, want, atol=1e-3)


# ------------------------------------------------------------------------------ sampler math (no model)

def step_sampler(sampler, prompt, scores, new_tokens=()):
    """One generate step as HF makes it: the prompt plus the tokens generated so far, then the scores."""
    ids = torch.cat([prompt, torch.tensor(new_tokens, dtype=torch.long).reshape(prompt.shape[0], -1)], 1)
    return sampler(ids, scores)


def test_filter_scores_temperature_and_top_k():
    x = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(filter_scores(x, temperature=0.5, top_k=0, top_p=1.0, min_p=0.0), x / 0.5)
    assert torch.equal(filter_scores(x, temperature=1.0, top_k=50, top_p=1.0, min_p=0.0), x)  # k >= V: off
    f = filter_scores(x, temperature=0.5, top_k=5, top_p=1.0, min_p=0.0)
    kept = torch.isfinite(f)
    assert kept.sum(-1).tolist() == [5] * 4
    assert torch.equal(kept, torch.zeros_like(kept).scatter_(1, x.topk(5).indices, True))
    assert torch.equal(f[kept], (x / 0.5)[kept])


def test_filter_scores_top_p_and_min_p_by_hand():
    x = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()

    def kept(**kw):
        args = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0) | kw
        return torch.isfinite(filter_scores(x, **args))[0].tolist()

    # top_p: a token goes once the mass before it reaches top_p; the top token always stays
    assert kept(top_p=0.8) == [True, True, False, False]
    assert kept(top_p=0.81) == [True, True, True, False]
    assert kept(top_p=1e-6) == [True, False, False, False]
    # min_p: a token goes below min_p * (the top probability)
    assert kept(min_p=0.2) == [True, True, True, False]  # 0.05 < 0.1 <= 0.15
    assert kept(min_p=0.61) == [True, False, False, False]  # 0.3 < 0.305
    assert kept(top_p=0.8, min_p=0.8) == [True, False, False, False]
    # vLLM's order: min_p first, then top_p over what it left. On (0.4, 0.3, 0.2, 0.1), min_p 0.3 drops 0.1; the
    # rest renormalized (0.44, 0.33, 0.22) has 0.78 >= 0.75 before its third token, which goes too (HF's order,
    # top_p first, would keep it: 0.7 < 0.75)
    y = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log()
    assert torch.isfinite(filter_scores(y, temperature=1.0, top_k=0, top_p=0.75, min_p=0.3))[0].tolist() == [
        True, True, False, False]


def test_filter_scores_match_hf_warpers_in_vllms_order():
    # vLLM 0.32 applies min_p among its logits processors, then top-k, then top-p (v1/sample/sampler.py); each HF
    # warper has the same rule, so HF's warpers in that order are the reference
    from transformers import MinPLogitsWarper, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1)) * 3
    want = x
    for w in (TemperatureLogitsWarper(0.7), MinPLogitsWarper(0.05), TopKLogitsWarper(20), TopPLogitsWarper(0.9)):
        want = w(None, want)
    got = filter_scores(x, temperature=0.7, top_k=20, top_p=0.9, min_p=0.05)
    assert torch.equal(torch.isfinite(got), torch.isfinite(want))
    assert torch.allclose(torch.log_softmax(got, -1), torch.log_softmax(want, -1), equal_nan=True)


def test_sampler_greedy_is_one_hot_argmax_with_raw_logprobs():
    prompt = torch.tensor([[5, 6], [7, 8]])
    scores = torch.randn(2, 10, generator=torch.Generator().manual_seed(2))
    state = torch.get_rng_state()
    s = Sampler(torch.ones_like(prompt, dtype=torch.bool), temperature=0.0, top_k=2, top_logprobs=3)
    out = step_sampler(s, prompt, scores)
    choice = scores.argmax(-1)
    assert torch.equal(out.argmax(-1), choice) and torch.isfinite(out).sum().item() == 2
    assert (out.gather(1, choice[:, None]) == 0).all()
    raw_lp = torch.log_softmax(scores, -1)  # top_k is ignored when greedy: logprobs of the raw logits
    assert torch.allclose(s.chosen_lp[0], raw_lp.gather(1, choice[:, None]).squeeze(1))
    assert torch.allclose(s.top_vals[0], raw_lp.topk(3).values) and torch.equal(s.top_ids[0], raw_lp.topk(3).indices)
    assert torch.equal(torch.get_rng_state(), state)  # greedy draws nothing


def test_sampler_samples_the_filtered_distribution_and_reports_its_logprobs():
    B, logits = 20000, torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -1.0])
    prompt = torch.zeros(B, 1, dtype=torch.long)
    torch.manual_seed(0)
    s = Sampler(torch.ones_like(prompt, dtype=torch.bool), temperature=0.8, top_k=4)
    out = step_sampler(s, prompt, logits.expand(B, -1).clone())
    choice = out.argmax(-1)
    want_lp = torch.log_softmax(filter_scores(logits[None], temperature=0.8, top_k=4, top_p=1.0, min_p=0.0), -1)[0]
    assert torch.allclose(s.chosen_lp[0], want_lp[choice])  # the logprob of the distribution sampled from
    freq = torch.bincount(choice, minlength=6).float() / B
    assert freq[4:].sum() == 0  # filtered tokens are never drawn
    assert torch.allclose(freq, want_lp.exp(), atol=0.02), (freq, want_lp.exp())


@pytest.mark.integration  # trains for many seconds in-process
def test_sample_at_a_real_vocabulary_size_keeps_the_mass_of_rare_tokens():
    """Qwen's vocabulary: one token holds half the mass, 151,934 share the other half, the last is filtered."""
    from verifiers_rl.inference.local_sampling import sample

    V, B = 151_936, 4000
    probs = torch.full((V,), 0.5 / (V - 2))
    probs[0], probs[-1] = 0.5, 0.0
    lp = probs.log().expand(B, -1)
    picks = sample(lp, row_generators([("r", 3, 0)] * B))
    assert abs(float((picks == 0).float().mean()) - 0.5) < 0.04
    assert int((picks == V - 1).sum()) == 0
    assert len(picks[picks > 0].unique()) > 1500  # the rare half is spread over the tail, not lumped
    assert torch.equal(picks, sample(lp, row_generators([("r", 3, 0)] * B)))  # seeded: the same draws


def test_row_generators_seeds():
    def draws(seeds, global_seed=0):
        torch.manual_seed(global_seed)
        prompt = torch.zeros(len(seeds), 1, dtype=torch.long)
        s = Sampler(torch.ones_like(prompt, dtype=torch.bool), rng_groups=row_generators(seeds))
        return step_sampler(s, prompt, torch.zeros(len(seeds), 1000)).argmax(-1).tolist()

    a = draws([("r", 7, 0), ("r", 7, 1), ("q", 8, 0)])
    # a seeded request samples the same whatever the global RNG or the rows beside it
    assert draws([("r", 7, 0), ("r", 7, 1), None], global_seed=1)[:2] == a[:2]
    assert draws([None, ("q", 8, 0)], global_seed=3)[1] == a[2]
    # a request's rows get independent samples, and its second batch (choice 2 on) doesn't repeat the first
    assert a[0] != a[1]
    assert draws([("r", 7, 2), ("r", 7, 3)]) != a[:2]
    # unseeded rows follow torch's global RNG
    assert draws([None, None], global_seed=5) == draws([None, None], global_seed=5)
    assert draws([None, None], global_seed=5) != draws([None, None], global_seed=6)
    segments = row_generators([None, ("r", 1, 0), None])
    assert [None if idx is None else idx.tolist() for idx, _ in segments] == [[1], [0, 2]]
    assert row_generators([None, None])[0][0] is None  # all rows share one generator


def test_sampler_repetition_penalty_vllm_style():
    # row 0: token 3 is in the prompt; token 9 only in the left padding (mask 0), so not penalized
    prompt = torch.tensor([[9, 9, 3], [9, 4, 9]])
    mask = torch.tensor([[False, False, True], [True, True, True]])
    scores = torch.tensor([[0.0, 0.0, 0.0, 2.0, 1.9, 0, 0, 0, 0, 1.7], [0.0, 0.0, 0.0, 0, -1.0, -1.1, 0, 0, 0, 5.0]])
    scores[1, :4] = -3.0
    scores[1, 6:9] = -3.0
    s = Sampler(mask, temperature=0.0, repetition_penalty=1.2)
    # row 0: 2.0 / 1.2 < 1.9 → token 4; row 1: token 9 is in its prompt: 5 / 1.2 still wins
    assert step_sampler(s, prompt, scores.clone()).argmax(-1).tolist() == [4, 9]
    # negative scores are multiplied: row 1 with 9 out of the way: -1.0 * 1.2 < -1.1 → token 5
    scores[1, 9] = -10.0
    s = Sampler(mask, temperature=0.0, repetition_penalty=1.2)
    assert step_sampler(s, prompt, scores.clone()).argmax(-1).tolist() == [4, 5]
    # a generated token counts as seen from the next step on: row 0's 9 (1.7, padding only) beats 4 (1.9 / 1.2)
    # and 3 (2.0 / 1.2); row 1's 5 (-1.1 * 1.2) loses to 4 (-1.0 * 1.2)
    assert step_sampler(s, prompt, scores.clone(), [[4], [5]]).argmax(-1).tolist() == [9, 4]
    assert torch.allclose(s.chosen_lp[1], torch.log_softmax(scores, -1)[[0, 1], [9, 4]])  # greedy: raw logprobs


def test_sampler_min_tokens_masks_eos_per_row():
    eos = 7
    prompt = torch.zeros(2, 1, dtype=torch.long)
    scores = torch.zeros(2, 8)
    scores[:, eos] = 30.0  # EOS whenever it is allowed
    torch.manual_seed(0)
    s = Sampler(torch.ones_like(prompt, dtype=torch.bool), temperature=1.0, eos_ids={eos}, min_tokens=[2, 0])
    first = step_sampler(s, prompt, scores.clone()).argmax(-1).tolist()
    assert first[0] != eos and first[1] == eos
    assert torch.isclose(s.chosen_lp[0][0], -torch.tensor(7.0).log())  # EOS masked: 1 of the 7 tokens left
    second = step_sampler(s, prompt, scores.clone(), [[1], [eos]]).argmax(-1).tolist()
    assert second[0] != eos
    assert step_sampler(s, prompt, scores.clone(), [[1, 2], [eos, eos]]).argmax(-1).tolist() == [eos, eos]


def test_sampler_top_logprobs_are_of_the_processed_distribution():
    prompt = torch.zeros(3, 1, dtype=torch.long)
    scores = torch.randn(3, 30, generator=torch.Generator().manual_seed(4))
    s = Sampler(torch.ones_like(prompt, dtype=torch.bool), temperature=0.5, top_p=0.7, top_logprobs=40)
    step_sampler(s, prompt, scores)
    lp = torch.log_softmax(filter_scores(scores, temperature=0.5, top_k=0, top_p=0.7, min_p=0.0), -1)
    assert s.top_vals[0].shape == (3, 30)  # capped at the vocabulary
    assert torch.equal(s.top_vals[0], lp.topk(30).values)


@pytest.fixture(scope="module")
def byte_tok():
    from verifiers_rl.models.tiny import build_tokenizer

    return build_tokenizer()


def run_stopper(tok, completions, pad, **kw):
    """Feed completions to a StopCriteria token by token, as generate() does (finished rows get `pad`)."""
    B = len(completions)
    defaults = dict(eos_ids={tok.eos_token_id}, max_new=[64] * B, min_tokens=[0] * B, ignore_eos=[False] * B,
                    stops=[()] * B, skip_special_tokens=[True] * B)
    stopper = StopCriteria(tok, 2, **(defaults | kw))
    ids = torch.full((B, 2), pad)
    for t in range(max(map(len, completions))):
        nxt = [c[t] if t < len(c) and not stopper.done[i] else pad for i, c in enumerate(completions)]
        ids = torch.cat([ids, torch.tensor(nxt)[:, None]], 1)
        if stopper(ids, None).all():
            break
    return stopper


def test_stop_criteria_eos_length_and_stop_strings(byte_tok):
    tok, eos = byte_tok, byte_tok.eos_token_id
    text = list(b"Hello STOP more")
    rows = [text, text, text + [eos], list(b"ab") + [eos] + list(b"cd"), list("caf\u00e9!".encode())]
    s = run_stopper(
        tok, rows, tok.pad_token_id, stops=[("STOP",), (), (), (), ("\u00e9",)], max_new=[64, 4, 64, 64, 64],
        ignore_eos=[False, False, False, True, False],
    )
    # the token that completes the stop string ends the row; a 2-byte stop string completes on its 2nd byte
    assert s.lengths[0] == len("Hello STOP") and s.reasons[0] == "stop"
    assert s.lengths[1] == 4 and s.reasons[1] == "length"
    assert s.lengths[2] == len(text) + 1 and s.reasons[2] == "stop"  # EOS included
    assert s.lengths[3] == 0 and s.reasons[3] == "length"  # ignore_eos: runs on (never finished here)
    assert s.lengths[4] == len("caf\u00e9".encode()) and s.reasons[4] == "stop"
    assert s.done.tolist() == [True, True, True, False, True]
    assert torch.equal(s.eos_token_id, torch.tensor([eos]))  # makes generate() pad the rows we finish


def test_stop_strings_count_from_min_tokens(byte_tok):
    ids = list(b"aXbbXcc")
    s = run_stopper(byte_tok, [ids, ids], byte_tok.pad_token_id, stops=[("X",), ("X",)], min_tokens=[0, 3])
    assert s.lengths == [2, 5] and s.reasons == ["stop", "stop"]
    assert final_text(byte_tok, ids[:5], eos_ids={0}, ignore_eos=False, stop=("X",), min_tokens=3,
                      skip_special_tokens=True, reason="stop") == "aXbb"
    assert final_text(byte_tok, ids[:2], eos_ids={0}, ignore_eos=False, stop=("X",), min_tokens=0,
                      skip_special_tokens=True, reason="stop") == "a"


def test_final_text(byte_tok):
    tok, eos = byte_tok, byte_tok.eos_token_id
    ids = list(b"Hello STOP more")

    def text(ids, **kw):
        args = dict(eos_ids={eos}, ignore_eos=False, stop=(), min_tokens=0, skip_special_tokens=True, reason="stop")
        return final_text(tok, ids, **(args | kw))

    assert text(ids[:10], stop=("STOP", "llo")) == "He"  # the earliest stop string
    assert text(ids, stop=("STOP",), reason="length") == "Hello STOP more"  # cut only when a stop string ended it
    # a final EOS never shows, even with skip_special_tokens off, unless EOS is ignored
    assert text(ids[:5] + [eos], skip_special_tokens=False) == "Hello"
    assert text(ids[:5] + [eos], skip_special_tokens=False, ignore_eos=True) == "Hello<|im_end|>"
    assert text([eos, *ids[:2]], skip_special_tokens=False) == "<|im_end|>He"
