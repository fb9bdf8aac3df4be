"""The local engine's OpenAI-facing layer: chat-completions arguments → a `Request` for the batching worker
(validated, with vLLM's errors), and its results → a vLLM-shaped `ChatCompletion` body."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from verifiers_rl.inference.local_worker import Dist, Request, RowResult
from verifiers_rl.inference.tool_calls import parse_hermes_tool_calls


class LocalEngineError(ValueError):
    """Raised for requests the local engine cannot serve."""


def bad_request(message: str) -> Exception:
    # Same exception type a vLLM server's HTTP 400 gives through the openai client, so env code that handles
    # e.g. "maximum context length" errors works unchanged.
    try:
        import openai

        try:  # openai 3 is built on httpx2; earlier releases on httpx
            import httpx2 as httpx
        except ImportError:
            import httpx

        request = httpx.Request("POST", "http://local-engine/v1/chat/completions")
        response = httpx.Response(400, request=request)
        return openai.BadRequestError(message, response=response, body={"message": message})
    except Exception:  # pragma: no cover - openai and its HTTP library are always present here
        return LocalEngineError(message)


_warned_media: set[str] = set()


def _placeholder(part: Any) -> str:
    """A media part as a marker such as `<image>` (logged once per kind): the local engine's models read text only,
    and multimodal environments still run end to end."""
    kind = str(part.get("type", "media") if isinstance(part, Mapping) else "media").removesuffix("_url")
    kind = kind.removeprefix("input_") or "media"
    if kind not in _warned_media:
        _warned_media.add(kind)
        logging.getLogger("verifiers_rl.inference.local_engine").warning(
            "the local engine's model reads text only: %s parts are given to it as '<%s>'", kind, kind)
    return f"<{kind}>"


def _text_content(content: list) -> str:
    parts = []
    for part in content:
        if hasattr(part, "model_dump"):
            part = part.model_dump(exclude_none=True)
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, Mapping) and part.get("type") == "text":
            parts.append(part.get("text", ""))
        else:
            parts.append(_placeholder(part))
    return "".join(parts)


def _template_tool_calls(tool_calls) -> list[dict]:
    calls = []
    for tc in tool_calls:
        if hasattr(tc, "model_dump"):
            tc = tc.model_dump(exclude_none=True)
        tc = dict(tc)
        fn = dict(tc.get("function") or {})
        args = fn.get("arguments")
        if isinstance(args, str):
            # chat templates render arguments as a mapping
            with contextlib.suppress(json.JSONDecodeError):
                fn["arguments"] = json.loads(args) if args.strip() else {}
        tc["function"] = fn
        calls.append(tc)
    return calls


def normalize_messages(messages) -> list[dict]:
    out = []
    for m in messages:
        if hasattr(m, "model_dump"):
            m = m.model_dump(exclude_none=True)
        if not isinstance(m, Mapping):
            raise bad_request(f"each message must be a dict or an openai message object, got {type(m).__name__}")
        m = dict(m)
        if "role" not in m:
            raise bad_request(f"message without a 'role': {m!r}")
        content = m.get("content")
        if isinstance(content, list):
            m["content"] = _text_content(content)
        elif content is None:
            m["content"] = ""
        if m.get("tool_calls"):
            m["tool_calls"] = _template_tool_calls(m["tool_calls"])
        out.append(m)
    return out


def normalize_tools(tools) -> list[dict] | None:
    if not tools:
        return None
    return [t.model_dump(exclude_none=True) if hasattr(t, "model_dump") else dict(t) for t in tools]


def template_problem(tokenizer: Any, envs: list[Any]) -> str | None:
    """Why the local engine cannot serve these environments with this tokenizer, or None: chat messages need a
    chat template (transformers raises on each request otherwise, and every rollout would error)."""
    if any(getattr(t, "chat_template", None) for t in (tokenizer, getattr(tokenizer, "tokenizer", None))):
        return None
    if all(getattr(e, "message_type", "chat") != "chat" for e in envs):
        return None
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    return (f"{name}'s tokenizer has no chat template, and the environment sends chat messages, which the local "
            "engine renders with it: set the tokenizer's chat_template (or put a chat_template.jinja beside the "
            "model), or train a model whose tokenizer has one")


_ENCODED_MAX = 4096


def encode(tokenizer, msgs, tools, chat_kwargs) -> list[int]:
    """The chat template's token ids for these messages. A GRPO group sends the same prompt once per rollout:
    the ids are remembered on the tokenizer, by (template, messages, tools, template arguments)."""
    try:
        template = getattr(tokenizer, "chat_template", None)
        template = template if template is None or isinstance(template, str) else json.dumps(template, sort_keys=True)
        key = (template, json.dumps([msgs, tools, chat_kwargs], sort_keys=True))
        cache = tokenizer.__dict__.setdefault("_verifiers_rl_chat_ids", {})
    except (TypeError, ValueError, AttributeError):  # not JSON, or no instance dict: no caching
        return list(_encode(tokenizer, msgs, tools, chat_kwargs))
    ids = cache.get(key)
    if ids is None:
        if len(cache) >= _ENCODED_MAX:
            cache.clear()
        ids = cache[key] = _encode(tokenizer, msgs, tools, chat_kwargs)
    return list(ids)


def _encode(tokenizer, msgs, tools, chat_kwargs) -> list[int]:
    try:
        out = tokenizer.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=True, **chat_kwargs)
    except Exception as e:
        raise bad_request(f"could not apply the chat template to these messages: {e}") from e
    if isinstance(out, Mapping) or hasattr(out, "keys"):
        out = out["input_ids"]  # transformers 5 returns a BatchEncoding
    if hasattr(out, "tolist"):
        out = out.tolist()
    if out and isinstance(out[0], list):
        out = out[0]
    return [int(t) for t in out]


def engine_context(engine: Any) -> int | None:
    """The context a request may fill: the model's max_position_embeddings, capped by the engine's
    `max_model_len` (the run's max_seq_len) when set; what `/v1/models` reports as `max_model_len`."""
    cfg = getattr(engine.model, "config", None)
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    ctx = getattr(cfg, "max_position_embeddings", None)
    cap = getattr(engine, "max_model_len", None)
    if cap:
        ctx = min(ctx, cap) if ctx else cap
    return ctx


def sampling_dist(temperature, top_p, opt) -> Dist:
    """The distribution to sample from; `opt(name, default)` reads top_k, min_p and repetition_penalty."""
    temperature = 1.0 if temperature is None else float(temperature)
    top_p = 1.0 if top_p is None else float(top_p)
    top_k = int(opt("top_k", 0) or 0)
    min_p = float(opt("min_p", 0.0) or 0.0)
    rep = float(opt("repetition_penalty", 1.0) or 1.0)
    if temperature < 0 or not (0 < top_p <= 1) or not (0 <= min_p <= 1) or rep <= 0:
        raise bad_request(
            f"invalid sampling parameters: temperature={temperature}, top_p={top_p}, min_p={min_p}, "
            f"repetition_penalty={rep} (need temperature >= 0, 0 < top_p <= 1, 0 <= min_p <= 1, penalty > 0)")
    if temperature == 0:
        return Dist(0.0, 1.0, 0, 0.0, rep)
    return Dist(temperature, top_p, max(top_k, 0), min_p, rep)


def new_token_limits(engine: Any, prompt_len: int, requested, opt) -> tuple[int, int]:
    """(max_new, min_tokens): max_tokens clamped to the room left in the context; without it, the rest of
    `max_model_len` (or `default_max_tokens` when the engine has no cap)."""
    ctx = engine_context(engine)
    default_max = engine.default_max_tokens if not getattr(engine, "max_model_len", None) else ctx
    room = ctx - prompt_len if ctx else None
    if room is not None and room <= 0:
        raise bad_request(f"This model's maximum context length is {ctx} tokens. However, your messages resulted "
                          f"in {prompt_len} tokens. Shorten the conversation or use a model with a longer context.")
    if requested is not None and int(requested) < 1:
        raise bad_request(f"max_tokens must be >= 1, got {requested}")
    max_new = int(requested) if requested is not None else default_max
    if room is not None:
        max_new = min(max_new, room)
    return max_new, min(int(opt("min_tokens", 0) or 0), max_new)


def make_request(engine: Any, *, messages, tools=None, n: int | None = 1, temperature: float | None = 1.0,
                 top_p: float | None = 1.0, max_tokens: int | None = None, max_completion_tokens: int | None = None,
                 stop: str | list[str] | None = None, logprobs: bool | None = False, top_logprobs: int | None = None,
                 seed: int | None = None, extra_body: Mapping | None = None, **other) -> Request:
    """Validate a chat-completions call into a Request (vLLM's errors, as `openai.BadRequestError`)."""
    extra = dict(extra_body or {})
    if other.get("stream"):
        raise bad_request("the local engine does not stream; call create() without stream=True")

    def opt(name, default=None):
        # extra_body wins over a top-level keyword of the same name, as it would on the wire
        if extra.get(name) is not None:
            return extra[name]
        if other.get(name) is not None:
            return other[name]
        return default

    for name in ("presence_penalty", "frequency_penalty"):  # vLLM applies them; silently sampling without is wrong
        if float(opt(name, 0.0) or 0.0) != 0.0:
            raise bad_request(f"{name}={opt(name)}: the local engine does not apply it; leave it at 0, or serve the "
                              "model with vLLM (inference_backend = 'vllm'; vf-eval -b URL)")
    n = 1 if n is None else int(n)
    if n < 1:
        raise bad_request(f"n must be >= 1, got {n}")
    dist = sampling_dist(temperature, top_p, opt)
    if isinstance(stop, str):
        stop = [stop]
    stop_t = tuple(s for s in (stop or []) if s)
    n_top = int(top_logprobs or 0)
    if n_top < 0:
        raise bad_request("top_logprobs must be >= 0")
    chat_kwargs = dict(opt("chat_template_kwargs", {}) or {})
    msgs = normalize_messages(messages)
    tool_list = normalize_tools(tools)
    prompt_ids = encode(engine.tokenizer, msgs, tool_list, chat_kwargs)
    requested = max_completion_tokens if max_completion_tokens is not None else max_tokens
    max_new, min_tokens = new_token_limits(engine, len(prompt_ids), requested, opt)
    return Request(prompt_ids=prompt_ids, dist=dist, n=n, max_new=max_new, min_tokens=min_tokens,
                   ignore_eos=bool(opt("ignore_eos", False)), stop=stop_t, seed=None if seed is None else int(seed),
                   logprobs=bool(logprobs), top_logprobs=n_top,
                   skip_special_tokens=bool(opt("skip_special_tokens", True)),
                   parse_tools=bool(tool_list) and other.get("tool_choice") != "none",
                   future=asyncio.get_running_loop().create_future(), outputs=[None] * n)


class TokenTexts:
    """Each token's text and exact bytes for logprob entries, cached per token id."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        from verifiers_rl.models.tiny import bytes_to_unicode

        dec = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
        byte_level = type(dec).__name__ == "ByteLevel"
        self._byte_dec = {ch: b for b, ch in bytes_to_unicode().items()} if byte_level else None
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, tid: int) -> tuple[str, list[int]]:
        info = self._cache.get(tid)
        if info is None:
            tok = self.tokenizer.convert_ids_to_tokens(tid)
            if tok is None:
                info = ("", [])
            elif (self._byte_dec is not None and tid not in self.tokenizer.all_special_ids
                  and all(c in self._byte_dec for c in tok)):
                raw = bytes(self._byte_dec[c] for c in tok)
                info = (raw.decode("utf-8", errors="replace"), list(raw))
            else:
                text = self.tokenizer.decode([tid], skip_special_tokens=False)
                info = (text, list(text.encode("utf-8")))
            self._cache[tid] = info
        return info


def _logprobs_block(res: RowResult, tokens: TokenTexts) -> dict:
    entries = []
    for t, (tid, lp) in enumerate(zip(res.token_ids, res.logprobs)):
        tok, raw = tokens(tid)
        tops = []
        if res.top is not None:
            for oid, olp in res.top[t]:
                otok, oraw = tokens(oid)
                tops.append({"token": otok, "logprob": olp, "bytes": oraw})
        entries.append({"token": tok, "logprob": lp, "bytes": raw, "top_logprobs": tops})
    return {"content": entries, "refusal": None}


def _choice(i: int, res: RowResult, parse_tools: bool, tokens: TokenTexts) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": res.text}
    finish = res.finish_reason
    parsed = parse_hermes_tool_calls(res.text) if parse_tools else None
    if parsed and parsed.tool_calls:
        message.update(content=parsed.content, tool_calls=parsed.tool_calls)
        finish = "tool_calls"
    return {"index": i, "message": message, "finish_reason": finish,
            "logprobs": _logprobs_block(res, tokens) if res.logprobs is not None else None, "token_ids": res.token_ids}


def build_response(req: Request, results: list[RowResult], model_name: str, tokens: TokenTexts) -> dict:
    """A vLLM-shaped chat.completion body (`return_token_ids`: prompt and per-choice token ids)."""
    choices = [_choice(i, res, req.parse_tools, tokens) for i, res in enumerate(results)]
    completion_tokens = sum(len(r.token_ids) for r in results)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model_name, "choices": choices,
            "usage": {"prompt_tokens": len(req.prompt_ids), "completion_tokens": completion_tokens,
                      "total_tokens": len(req.prompt_ids) + completion_tokens},
            "prompt_token_ids": req.prompt_ids}
