"""The local engine's `POST /inference/v1/generate`: vLLM's tokens-in / tokens-out route, as verifiers 0.4's
`TrainClient` calls it (through `renderers.client.generate`, which renders the chat to token ids itself).

Request: vLLM's `GenerateRequest`. Keys the engine cannot honour (penalties, logit_bias, structured outputs) are refused
unless left at their default; stream, text output mode and multimodal inputs answer 400; model, cache_salt, priority and
X-Session-ID are accepted and ignored (one policy, no cross-request cache).

Response: vLLM's (`build_response`). Each logprob entry carries `token_id` and the `token: "token_id:N"` placeholder
renderers 0.1.x checks; `top_logprobs` as vLLM's (sampled token first). `token_ids` keep every sampled token, a stop
token included; `stop_token_ids` end a reply like EOS and are not ignored by `ignore_eos`. Each distinct end-token set
gets its own batching worker, so one renderer's requests batch together.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

from verifiers_rl.inference.local_openai import bad_request, new_token_limits, sampling_dist
from verifiers_rl.inference.local_worker import BatchWorker, Request, RowResult, find_eos_ids

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
MAX_WORKERS = 16  # distinct end-token sets served at once
LOGPROB_FLOOR = -9999.0  # vLLM's floor for -inf (JSON has no infinity)

# sampling_params the engine does not apply: accepted only when absent or at these (vLLM's default) values
UNAPPLIED = {
    "presence_penalty": 0.0, "frequency_penalty": 0.0, "prompt_logprobs": None, "logit_bias": None,
    "allowed_token_ids": None, "bad_words": None, "structured_outputs": None, "logprob_token_ids": None,
    "prompt_logprob_token_ids": None, "thinking_token_budget": None, "repetition_detection": None,
}

_workers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def generate(engine: Any, body: Any, request_id: str | None = None) -> dict:
    """One `/inference/v1/generate` call on `engine` (run on the event loop that serves its requests)."""
    req, worker, info = parse_request(engine, body)
    worker.submit(req)
    results: list[RowResult] = await req.future
    rid = request_id or (body.get("request_id") if isinstance(body.get("request_id"), str) else None)
    return build_response(req, results, info, engine, f"generate-tokens-{rid or uuid.uuid4().hex}")


def parse_request(engine: Any, body: Any) -> tuple[Request, BatchWorker, dict]:
    """Validate a generate body into a Request (400 with one line naming the field), the worker to run it on,
    and what the response needs."""
    if not isinstance(body, Mapping):
        raise bad_request("the request body must be a JSON object with token_ids and sampling_params")
    if body.get("stream"):
        raise bad_request("the local engine does not stream: send stream=false")
    if body.get("output_mode", "tokens") != "tokens":
        raise bad_request(f"output_mode={body.get('output_mode')!r} is not served by the local engine: use 'tokens'")
    if body.get("features") or body.get("content_parts"):
        raise bad_request("the local engine's model reads text only: multimodal features/content_parts are not served")
    prompt = _token_ids(engine, body.get("token_ids"))
    sp = body.get("sampling_params")
    if not isinstance(sp, Mapping):
        raise bad_request('sampling_params is required: a JSON object such as {"max_tokens": 64}')
    try:
        return _from_sampling(engine, prompt, sp, bool(body.get("return_token_ids")), asyncio.get_running_loop())
    except (TypeError, ValueError, OverflowError) as e:  # a value of the wrong type (a 400 of ours is neither)
        raise bad_request(f"invalid sampling_params: {e}") from e


def _token_ids(engine: Any, ids: Any) -> list[int]:
    if not isinstance(ids, list) or not ids:
        raise bad_request("token_ids must be a non-empty list of token ids (the rendered prompt)")
    vocab = _vocab_size(engine.model)
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0 or (vocab is not None and t >= vocab):
            raise bad_request(f"token_ids holds {t!r}: each must be an integer in [0, {vocab}), the model's vocabulary")
    return list(ids)


def _vocab_size(model: Any) -> int | None:
    try:
        return int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, TypeError):
        cfg = getattr(model, "config", None)
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        return getattr(cfg, "vocab_size", None)


def _from_sampling(engine: Any, prompt: list[int], sp: Mapping, echo: bool, loop: Any) -> tuple:
    for key, default in UNAPPLIED.items():
        value = sp.get(key)
        if value not in (None, default, [], {}):
            raise bad_request(f"sampling_params.{key}={value!r} is not applied by the local engine: leave it out")

    def opt(name, default=None):
        value = sp.get(name)
        return default if value is None else value

    n = int(opt("n", 1))
    if n < 1:
        raise bad_request(f"sampling_params.n must be >= 1, got {n}")
    dist = sampling_dist(sp.get("temperature"), sp.get("top_p"), opt)
    k = sp.get("logprobs")
    if k is not None and not (0 <= int(k) <= MAX_LOGPROBS):
        raise bad_request(f"sampling_params.logprobs must be null or in [0, {MAX_LOGPROBS}], got {k}")
    stops = opt("stop", [])
    stops = [stops] if isinstance(stops, str) else [str(s) for s in stops]
    stop_ids = [int(t) for t in opt("stop_token_ids", [])]
    ignore_eos = bool(opt("ignore_eos", False))
    eos = frozenset() if ignore_eos else frozenset(find_eos_ids(engine.model, engine.tokenizer))
    ends = frozenset(stop_ids) | eos
    max_new, min_tokens = new_token_limits(engine, len(prompt), sp.get("max_tokens"), opt)
    seed = sp.get("seed")
    req = Request(
        prompt_ids=prompt, dist=dist, n=n, max_new=max_new, min_tokens=min_tokens,
        ignore_eos=False,  # the worker's end tokens already leave EOS out when asked to ignore it
        stop=tuple(s for s in stops if s), seed=None if seed is None else int(seed), logprobs=k is not None,
        top_logprobs=max(int(k), 1) if k is not None else 0,
        skip_special_tokens=bool(opt("skip_special_tokens", True)), parse_tools=False,
        future=loop.create_future(), outputs=[None] * n,
    )
    info = {"k": None if k is None else int(k), "stop_ids": set(stop_ids), "ends": ends, "ignore_eos": ignore_eos,
            "echo": echo}
    return req, _worker_for(engine, ends), info


def _worker_for(engine: Any, ends: frozenset[int]) -> BatchWorker:
    """The batching worker whose end-of-reply tokens are `ends` (the engine's weights lock, so a weight update
    never lands mid-batch); made on first use and kept for the engine's lifetime."""
    workers = _workers.setdefault(engine, {})
    worker = workers.get(ends)
    if worker is None:
        if len(workers) >= MAX_WORKERS:
            raise bad_request(f"more than {MAX_WORKERS} distinct stop_token_ids sets: send the renderer's own")
        worker = BatchWorker(engine)
        worker.lock = engine.weights_lock()
        worker.eos_ids = set(ends)
        workers[ends] = worker
    return worker


def build_response(req: Request, results: list[RowResult], info: dict, engine: Any, request_id: str) -> dict:
    choices = [_choice(i, res, req, info, engine.tokenizer) for i, res in enumerate(results)]
    completion = sum(len(r.token_ids) for r in results)
    return {"request_id": request_id, "model": engine.model_name, "created": int(time.time()), "output_mode": "tokens",
            "usage": {"prompt_tokens": len(req.prompt_ids), "completion_tokens": completion,
                      "total_tokens": len(req.prompt_ids) + completion},
            "prompt_token_ids": list(req.prompt_ids) if info["echo"] else None, "choices": choices}


def _choice(i: int, res: RowResult, req: Request, info: dict, tokenizer: Any) -> dict:
    logprobs = None
    if info["k"] is not None:
        tops = res.top or [[] for _ in res.token_ids]
        logprobs = {"content": [_entry(t, lp, top, info["k"]) for t, lp, top in zip(res.token_ids, res.logprobs, tops)]}
    return {"index": i, "token_ids": list(res.token_ids), "finish_reason": res.finish_reason,
            "stop_reason": _stop_reason(res, req, info, tokenizer), "logprobs": logprobs}


def _entry(tid: int, lp: float, top: list[tuple[int, float]], k: int) -> dict:
    """vLLM's order: the sampled token, then the best others; max(k, 1) candidates."""
    ranks = {o: j + 1 for j, (o, _) in enumerate(top)}
    candidates = [(tid, lp)] + [(o, v) for o, v in top if o != tid]
    return {**_logprob(tid, lp, ranks.get(tid)),
            "top_logprobs": [_logprob(o, v, ranks.get(o)) for o, v in candidates[: max(k, 1)]]}


def _logprob(tid: int, value: float, rank: int | None) -> dict:
    value = LOGPROB_FLOOR if math.isnan(value) else max(float(value), LOGPROB_FLOOR)
    return {"token": f"token_id:{tid}", "token_id": tid, "logprob": value, "rank": rank}


def _stop_reason(res: RowResult, req: Request, info: dict, tokenizer: Any) -> int | str | None:
    """vLLM's: the stop token id or stop string that ended the reply; None for EOS and length."""
    if res.finish_reason != "stop" or not res.token_ids:
        return None
    last = res.token_ids[-1]
    if last in info["ends"]:
        eos = tokenizer.eos_token_id
        return last if last in info["stop_ids"] and (last != eos or info["ignore_eos"]) else None
    full = tokenizer.decode(res.token_ids, skip_special_tokens=req.skip_special_tokens)
    return next((s for s in req.stop if full.startswith(s, len(res.text))), None)
