"""The teacher of `training_mode = "opd" | "sft"`: a model loaded in-process, or a server reached by URL.

- opd: the teacher scores the policy's sampled sequences, in-process or by a vLLM server's ``prompt_logprobs``
  (token ids in, ``max_tokens=1``); both must share one vocabulary, since the token ids are the policy's.
- sft: the teacher generates the rollouts through the environment (the local engine, or any OpenAI-compatible URL).
"""


from __future__ import annotations

import asyncio
from typing import Any

PROBE_TEXT = "The quick brown fox: 12 + 30 = 42. ¿Qué? 東京 <tool_call>"


def vocab_problem(student_tokenizer: Any, teacher_tokenizer: Any, teacher: str) -> str | None:
    """One line when the two tokenizers do not map the same strings to the same ids (opd compares log-probs of
    the policy's token ids under the teacher), else None."""
    if student_tokenizer.get_vocab() == teacher_tokenizer.get_vocab():
        return None
    ns, nt = len(student_tokenizer), len(teacher_tokenizer)
    return (f"teacher_model: {teacher!r} has another vocabulary than the policy ({nt} vs {ns} tokens): "
            "training_mode='opd' scores the policy's token ids with the teacher; use a teacher with the policy's "
            "tokenizer, or training_mode='sft' (it re-tokenizes the teacher's replies)")


class Teacher:
    """``Teacher(args, student_tokenizer, device)``; ``args`` an RLConfig with ``teacher_model`` or ``teacher_url``."""

    def __init__(self, args: Any, student_tokenizer: Any, device: Any):
        self.args = args
        self.url = args.teacher_url.rstrip("/") if args.teacher_url else None
        self.model = self.tokenizer = self.engine = None
        if self.url is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from verifiers_rl.trainer.model_loading import from_pretrained

            dtype = torch.bfloat16 if args.bf16 else torch.float32
            self.tokenizer = from_pretrained(AutoTokenizer, args.teacher_model)
            self.model = from_pretrained(AutoModelForCausalLM, args.teacher_model, dtype=dtype)
            self.model = self.model.to(device).eval().requires_grad_(False)
            self.name = "teacher"
        else:
            self.name = args.teacher_model_name or self._served_name()
        if args.training_mode == "opd":
            problem = self._vocab_problem(student_tokenizer)
            if problem:
                raise ValueError(problem)

    # --- set-up ---------------------------------------------------------------------------------------------------
    def _get(self, route: str, body: dict | None = None, root: bool = False) -> Any:
        """One JSON request to the teacher server (GET without a body); the base URL's `/v1` is left out for
        `root` routes (vLLM's /tokenize)."""
        import json
        import urllib.request

        from verifiers_rl.inference.clients import env_api_key

        base = self.url[: -len("/v1")] if root and self.url.endswith("/v1") else self.url
        data = json.dumps(body).encode() if body is not None else None
        key = env_api_key(self.args.teacher_api_key_var)
        req = urllib.request.Request(base + route, data=data, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def _served_name(self) -> str:
        from verifiers_rl.network import check_server

        problem = check_server(self.url)
        if problem:
            raise ValueError(f"teacher_url: {problem}")
        try:
            return str(self._get("/models")["data"][0]["id"])
        except Exception as e:
            raise ValueError(f"teacher_url: {self.url}/models named no model ({type(e).__name__}); set "
                             "teacher_model_name") from None

    def _vocab_problem(self, student_tokenizer: Any) -> str | None:
        if self.tokenizer is not None:
            return vocab_problem(student_tokenizer, self.tokenizer, self.args.teacher_model)
        # A server: compare how both tokenize a probe text (vLLM's /tokenize); a server without it is trusted.
        try:
            got = self._get("/tokenize", {"model": self.name, "prompt": PROBE_TEXT, "add_special_tokens": False},
                            root=True)["tokens"]
        except Exception:
            return None
        want = student_tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
        if list(got) == list(want):
            return None
        return (f"teacher_url: the teacher {self.name!r} tokenizes text differently from the policy (a probe gave "
                f"{len(got)} vs {len(want)} tokens): training_mode='opd' needs the policy's tokenizer; use such a "
                "teacher, or training_mode='sft'")

    # --- opd: scoring -------------------------------------------------------------------------------------------
    def logprobs(self, input_ids: Any, attention_mask: Any, mask: Any) -> Any:
        """In-process: the teacher's ``[B, T]`` log-probs at ``mask`` positions (0 elsewhere), temperature 1."""
        import torch

        from verifiers_rl.trainer.logprobs import policy_token_logprobs

        with torch.no_grad():
            lp, _ = policy_token_logprobs(self.model, input_ids, attention_mask, 1.0, mask=mask)
        return lp

    def score(self, sequences: list[list[int]]) -> list[list[float]]:
        """By URL: each sequence's per-token log-probs under the teacher (0.0 for the first token), from vLLM's
        ``prompt_logprobs``; requests run concurrently (``max_concurrent`` at most)."""
        return asyncio.run(self._score_all(sequences))

    def _openai(self) -> Any:
        from verifiers_rl.inference.clients import openai_client

        return openai_client(self.url, self.args.teacher_api_key_var, self.args.generation_timeout,
                             max_retries=2)  # openai's default

    async def _score_all(self, sequences: list[list[int]]) -> list[list[float]]:
        # a client per call: asyncio.run gives each step its own event loop, and httpx's pool belongs to the loop
        # that opened it
        client = self._openai()
        limit = asyncio.Semaphore(max(1, min(self.args.max_concurrent, 64)))

        async def one(ids: list[int]) -> list[float]:
            async with limit:
                resp = await client.completions.create(model=self.name, prompt=ids, max_tokens=1, temperature=1.0,
                                                       extra_body={"prompt_logprobs": 0})
            return _prompt_logprobs(resp, ids, self.url)

        try:
            return list(await asyncio.gather(*(one(s) for s in sequences)))
        finally:
            await client.close()

    # --- sft: generation ----------------------------------------------------------------------------------------
    def chat_client(self, max_model_len: int | None) -> Any:
        """What environments call for the teacher's rollouts: the local engine on the in-process model, or an
        AsyncOpenAI client of the URL."""
        if self.url is not None:
            return self._openai()
        from verifiers_rl.inference.local_engine import LocalEngine

        self.engine = LocalEngine(self.model, self.tokenizer, model_name=self.name, max_model_len=max_model_len)
        return self.engine.client

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if callable(close):
            close()


def _prompt_logprobs(resp: Any, ids: list[int], url: str) -> list[float]:
    """vLLM's ``choices[0].prompt_logprobs`` (one ``{token_id: {logprob, ...}}`` per position, None first) → the
    log-prob of each actual token."""
    choice = resp.choices[0]
    entries = getattr(choice, "prompt_logprobs", None)
    if entries is None:
        entries = (getattr(choice, "model_extra", None) or {}).get("prompt_logprobs")
    if not entries or len(entries) != len(ids):
        raise RuntimeError(f"teacher_url: {url} returned no prompt_logprobs for a sequence of {len(ids)} tokens; "
                           "opd by URL needs a vLLM server (it scores prompts with prompt_logprobs)")
    out = [0.0]
    for tok, entry in zip(ids[1:], entries[1:]):
        hit = (entry or {}).get(str(tok)) or (entry or {}).get(tok)
        if hit is None:
            raise RuntimeError(f"teacher_url: prompt_logprobs at {url} lack token {tok}; is it the policy's tokenizer?")
        out.append(float(hit["logprob"] if isinstance(hit, dict) else hit.logprob))
    return out
