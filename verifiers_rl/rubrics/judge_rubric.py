"""JudgeRubric: reward functions that ask a judge model (any OpenAI-compatible endpoint) for a verdict.

Reward functions receive `judge` and call `await judge(prompt, completion, answer, state)`: the judge's reply text,
cached in `state["judge_response"]` per judge prompt so several functions share one call. The endpoint is
judge_endpoint.py's; a failing call raises JudgeError, scored 0 and counted like any failing reward function.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any

from verifiers_rl.clients.openai_chat_completions_client import chat_completion_args
from verifiers_rl.parsers.parser import Parser
from verifiers_rl.record import get_field
from verifiers_rl.rubrics.judge_endpoint import (  # noqa: F401  (names this module has always offered)
    API_KEY_VAR, BASE_URL_VAR, DEFAULT_JUDGE_MODEL, MODEL_VAR, OPENAI_API_URL, JudgeEndpoint, JudgeIsPolicyError,
    JudgeNotConfiguredError, endpoint_from_settings, endpoint_of_client, not_configured, refusal)
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.types import Messages, State
from verifiers_rl.utils.async_utils import maybe_await

DEFAULT_JUDGE_PROMPT = """Decide whether the response answers the question with the same answer as the \
reference answer.

Question:
```
{question}
```

Reference answer:
```
{answer}
```

Response:
```
{response}
```

Reply with exactly one word: "yes" if the response is correct, "no" if it is not."""


class JudgeError(RuntimeError):
    """The judge call failed (endpoint down, rate limit, timeout, bad reply)."""


def _question_text(prompt: Messages | str) -> str:
    """The last prompt message's text (a plain-string prompt as is)."""
    if not isinstance(prompt, list):
        return str(prompt)
    if not prompt:
        return ""
    last = prompt[-1]
    content = get_field(last, "content")
    if content is None:
        return ""
    if isinstance(content, list):  # content parts: their text
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


class JudgeRubric(Rubric):
    def __init__(self, parser: Parser | None = None, parallelize_scoring: bool = False,
                 judge_client: Any | None = None, judge_model: str | None = None,
                 judge_sampling_args: dict[str, Any] | None = None, judge_prompt: str = DEFAULT_JUDGE_PROMPT):
        super().__init__(parser=parser)
        self.parallelize_scoring = parallelize_scoring
        self.judge_model = judge_model or os.environ.get(MODEL_VAR) or DEFAULT_JUDGE_MODEL
        self.judge_prompt = judge_prompt
        self.judge_sampling_args = judge_sampling_args or {}
        self._owns_client = judge_client is None
        self._endpoint = endpoint_from_settings() if judge_client is None else None
        self.judge_client = judge_client if judge_client is not None else self._settings_client()
        # A client we made is used only on the event loop it first served: its pooled connections belong
        # to that loop, and sync callers (asyncio.run per batch) bring a new loop each time.
        self._loop_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        for name in ("judge", "judge_client", "judge_model", "judge_prompt", "judge_sampling_args"):
            self.add_class_object(name, getattr(self, name))

    def _settings_client(self) -> Any | None:
        return self._endpoint.client() if self._endpoint is not None else None

    def judge_endpoint(self) -> JudgeEndpoint | None:
        """Where the judge calls go and why (the client passed, or the settings read at construction; with
        none then, the settings now); None when nothing names a judge."""
        if not self._owns_client:
            return endpoint_of_client(self.judge_client)
        return self._endpoint or endpoint_from_settings()

    def _client(self) -> Any:
        if self.judge_client is None:  # settings may have appeared since construction
            self._endpoint = endpoint_from_settings()
            self.judge_client = self._settings_client()
            if self.judge_client is None:
                raise not_configured()
            self.class_objects["judge_client"] = self.judge_client
        if not self._owns_client:
            return self.judge_client
        error = refusal(self._endpoint, self.judge_model)  # a policy server may have started since the check
        if error is not None:
            raise error
        loop = asyncio.get_running_loop()
        client = self._loop_clients.get(loop)
        if client is None:
            client = self.judge_client if not self._loop_clients else self._settings_client()
            self._loop_clients[loop] = client
        return client

    async def judge(self, prompt: Messages, completion: Messages, answer: str, state: State | None = None) -> str:
        """The judge's reply to `judge_prompt` filled with the question, `answer` and the parsed response."""
        response = self.parser.parse_answer(completion)
        text = self.judge_prompt.format(question=_question_text(prompt), answer=answer, response=response)
        cache = state.get("judge_response") if state is not None else None
        if isinstance(cache, dict) and text in cache:
            return cache[text]
        reply = await self._ask(text)
        if state is not None:
            if not isinstance(cache, dict):
                cache = {}
            cache[text] = reply
            state["judge_response"] = cache
        return reply

    async def _ask(self, text: str) -> str:
        client = self._client()
        create = client.chat.completions.create
        kwargs = {"model": self.judge_model, "messages": [{"role": "user", "content": text}],
                  **chat_completion_args(self.judge_sampling_args)}
        try:
            if _is_sync_openai(client):  # a blocking client must not stall the event loop
                result = await asyncio.to_thread(create, **kwargs)
            else:
                result = await maybe_await(create, **kwargs)
            return str(result.choices[0].message.content)
        except Exception as e:
            where = getattr(client, "base_url", None)
            raise JudgeError(f"judge model {self.judge_model!r}{f' at {where}' if where else ''} failed: "
                             f"{type(e).__name__}: {e}") from e


def _is_sync_openai(client: Any) -> bool:
    from openai import OpenAI

    return isinstance(client, OpenAI)
