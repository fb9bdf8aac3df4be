"""RLMEnv's sub-LLM plumbing and its metrics (verifiers' semantics, our code).

`llm_batch(prompts)` runs one sub-LLM call per prompt, bounded and staggered; with sub-tools a call loops up to
`sub_tool_max_turns` tool turns, then asks once more without tools. The answer is the `\\boxed{}` content when there is
one, else the whole text; a failure answers an error text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from typing import Any

from verifiers_rl.envs.experimental.rlm_errors import SubLLMEmptyModelResponseError
from verifiers_rl.envs.tool_env import run_tool, tool_calls_of
from verifiers_rl.errors import EmptyModelResponseError
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.types import Messages, State, TrajectoryStep
from verifiers_rl.utils.data_utils import extract_boxed_answer
from verifiers_rl.utils.response_utils import parse_response_message, parse_response_tokens
from verifiers_rl.utils.usage_utils import extract_usage_tokens

logger = logging.getLogger(__name__)

SUB_LLM_SYSTEM_PROMPTS = {
    "light": "You can take up to {num_turns} turns to complete the task.",
    "medium": ("Complete the task you are given. Think about which of your tools help, and take the time each "
               "step needs.\n\nYou can take up to {num_turns} turns; you will be told when one is left."),
    "heavy": ("Complete the task you are given. Think about which of your tools help, and take the time each "
              "step needs.\n\nYou can take up to {num_turns} turns; you will be told when one is left. Unless the "
              "task is trivial, use them to make sure of your answer: plan how to finish within the limit, and "
              "do not be afraid to try things out."),
}
_FINAL_ASK = ("You have used all your tool turns. From what you found, give your final answer inside "
              "\\boxed{}.")

_COUNTERS = {"sub_llm_call_count": 0, "sub_llm_total_turns": 0, "sub_llm_prompt_tokens": 0,
             "sub_llm_completion_tokens": 0, "sub_llm_total_tool_calls": 0, "sub_llm_batch_count": 0,
             "sub_llm_max_batch_size": 0, "sub_llm_mean_batch_size": 0.0, "main_rlm_turns": 0,
             "main_rlm_prompt_tokens": 0, "main_rlm_completion_tokens": 0, "repl_total_time_seconds": 0.0,
             "repl_call_count": 0, "repl_mean_time_seconds": 0.0, "root_tool_call_count": 0}


def ensure_metric_state(state: State) -> None:
    for key, zero in _COUNTERS.items():
        state.setdefault(key, zero)
    state.setdefault("root_tool_calls", {})
    state.setdefault("_rlm_sub_llm_call_ids", {})
    state.setdefault("_rlm_sub_llm_batch_counts", {})


def record_repl_time(state: State, seconds: float) -> None:
    ensure_metric_state(state)
    state["repl_total_time_seconds"] += seconds
    state["repl_call_count"] += 1
    state["repl_mean_time_seconds"] = state["repl_total_time_seconds"] / state["repl_call_count"]


def record_root_tool(state: State, name: str) -> None:
    ensure_metric_state(state)
    state["root_tool_call_count"] += 1
    state["root_tool_calls"][name] = state["root_tool_calls"].get(name, 0) + 1


def record_step(state: State, step: Any) -> None:
    """Count one trajectory step (a main-model turn, or a sub-LLM turn by its extras) in the metrics."""
    ensure_metric_state(state)
    extras = step.get("extras") or {}
    prompt_tokens, completion_tokens = extract_usage_tokens(step.get("response"))
    if not extras.get("is_sub_llm_call"):
        state["main_rlm_turns"] += 1
        state["main_rlm_prompt_tokens"] += prompt_tokens
        state["main_rlm_completion_tokens"] += completion_tokens
        return
    state["sub_llm_total_turns"] += 1
    state["sub_llm_prompt_tokens"] += prompt_tokens
    state["sub_llm_completion_tokens"] += completion_tokens
    state["sub_llm_total_tool_calls"] += int(extras.get("tool_call_count") or 0)
    batch_id, calls, batches = extras.get("batch_id"), state["_rlm_sub_llm_call_ids"], state["_rlm_sub_llm_batch_counts"]
    if not batch_id:
        state["sub_llm_call_count"] += 1
        return
    key = f"{batch_id}:{extras.get('request_id') or '_missing'}"
    if key not in calls:
        calls[key] = True
        state["sub_llm_call_count"] += 1
        batches[batch_id] = batches.get(batch_id, 0) + 1
    sizes = list(batches.values())
    state["sub_llm_batch_count"], state["sub_llm_max_batch_size"] = len(sizes), max(sizes)
    state["sub_llm_mean_batch_size"] = sum(sizes) / len(sizes)


class RLMMonitorRubric(Rubric):
    """The RLM counters of each rollout as metrics (weight 0), plus `<tool>_root_calls` per root tool."""

    def __init__(self, root_tool_names: list[str] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        for key in _COUNTERS:
            metric = self._state_metric(key)
            setattr(self, key, metric)
            self.add_metric(metric)
        for name in root_tool_names or []:
            self.add_metric(self._tool_metric(name))

    @staticmethod
    def _state_metric(key: str):
        async def metric(state: State) -> float:
            return state.get(key, 0)

        metric.__name__ = key
        return metric

    @staticmethod
    def _tool_metric(name: str):
        async def metric(state: State) -> int:
            return int((state.get("root_tool_calls") or {}).get(name, 0))

        metric.__name__ = f"{name}_root_calls"
        return metric


def _result(content: str, turns: list, tool_calls: int, max_turns_reached: bool) -> dict[str, Any]:
    prompt = sum(extract_usage_tokens(t["response"])[0] for t in turns)
    completion = sum(extract_usage_tokens(t["response"])[1] for t in turns)
    return {"final_content": content, "turns": turns, "total_prompt_tokens": prompt,
            "total_completion_tokens": completion, "tool_call_count": tool_calls, "num_turns": len(turns),
            "max_turns_reached": max_turns_reached}


class SubLLMMixin:
    """The sub-LLM half of RLMEnv (needs its settings, `get_model_response` and `_should_stop_for_error`)."""

    async def _call_sub_tool(self, tool_name: str, tool_args: dict, tool_call_id: str) -> dict:
        try:
            result = await run_tool(self.sub_tool_map[tool_name], tool_args)
            return {"role": "tool", "content": str(result), "tool_call_id": tool_call_id}
        except Exception as e:
            if self._should_stop_for_error(e):
                raise
            return {"role": "tool", "content": f"Error: {e}", "tool_call_id": tool_call_id}

    async def _call_sub_llm_api(self, state: State, client: Any, model: str, messages: Messages,
                                tools: list | None = None) -> Any | None:
        """One model call for a sub-LLM, on a throwaway state (never a continuation of the root's turns)."""
        sampling_args = dict(state.get("sampling_args") or {})
        if isinstance(sampling_args.get("extra_body"), dict):
            sampling_args["extra_body"] = dict(sampling_args["extra_body"])
        scratch = State(trajectory=[], sampling_args=sampling_args, tool_defs=list(tools or []))
        try:
            return await asyncio.wait_for(
                self.get_model_response(scratch, messages, client=client, model=model, tool_defs=list(tools or []),
                                        sampling_args=sampling_args),
                timeout=self.sub_llm_api_timeout)
        except EmptyModelResponseError as e:
            raise SubLLMEmptyModelResponseError(str(e)) from e
        except asyncio.TimeoutError:
            logger.warning("Sub-LLM API call timed out after %ss", self.sub_llm_api_timeout)
            return None

    async def _run_sub_llm(self, state: State, client: Any, model: str, messages: Messages) -> dict[str, Any]:
        """A sub-LLM call: one turn without sub-tools, else a tool loop whose last turn is the final ask."""
        current, turns, tool_calls = list(messages), [], 0
        tools = self.sub_tool_defs or None
        limit = self.sub_tool_max_turns if tools else 1
        for turn in range(limit + 1):
            final = turn == limit  # only reached with sub-tools: without them the first turn answers
            if final:
                current.append({"role": "user", "content": _FINAL_ASK})
            snapshot = [dict(m) for m in current]
            response = await self._call_sub_llm_api(state, client, model, current, None if final else tools)
            if response is None:
                return _result(f"Error: Sub-LLM API call timed out after {self.sub_llm_api_timeout}s", turns,
                               tool_calls, True)
            calls = [] if final else tool_calls_of(response.message) or []
            turns.append({"prompt_messages": snapshot, "response": response, "tool_call_count": len(calls)})
            tool_calls += len(calls)
            if final or not calls or not tools:
                return _result(response.message.get("content") or "", turns, tool_calls, final)
            current.append((await parse_response_message(response))[0])
            for call in calls:
                try:
                    args = json.loads(call.arguments or "{}")
                except ValueError:
                    args = {}
                current.append(await self._call_sub_tool(call.name, args if isinstance(args, dict) else {}, call.id))

    async def _run_sub_llm_request(self, *, state_ref: State, client: Any, sub_model: str, messages: Messages,
                                   batch_id: str, request_id: str, parent_turn: int) -> dict[str, Any]:
        system = SUB_LLM_SYSTEM_PROMPTS[self.sub_prompt_verbosity].format(num_turns=self.sub_tool_max_turns)
        result = await self._run_sub_llm(state_ref, client, sub_model,
                                         [{"role": "system", "content": system}, *messages])
        content = result["final_content"]
        boxed = extract_boxed_answer(content)
        stamp, turns = time.time(), result["turns"]
        for index, turn in enumerate(turns):
            extras = {"is_sub_llm_call": True, "parent_turn": parent_turn, "batch_id": batch_id,
                      "request_id": request_id, "sub_turn_index": index, "total_sub_turns": len(turns),
                      "timestamp": stamp, "tool_call_count": turn["tool_call_count"]}
            await self._record_sub_turn(state_ref, turn, extras, f"{batch_id}_{request_id}")
        return {"content": boxed if boxed is not None else content,
                "meta": {key: result[key] for key in ("tool_call_count", "num_turns", "max_turns_reached")}
                | {"prompt_tokens": result["total_prompt_tokens"],
                   "completion_tokens": result["total_completion_tokens"]}}

    async def _record_sub_turn(self, state: State, turn: dict, extras: dict, trajectory_id: str) -> None:
        response = turn["response"]
        if not self.include_sub_llm_in_trajectory:
            record_step(state, {"response": response, "extras": extras})
            return
        tokens = await parse_response_tokens(response, self.max_seq_len)
        step = TrajectoryStep(prompt=turn["prompt_messages"], completion=await parse_response_message(response),
                              response=response, tokens=tokens, reward=None, advantage=None,
                              is_truncated=bool(response.message.get("is_truncated")) or bool(
                                  tokens and tokens.get("is_truncated")),
                              trajectory_id=trajectory_id, extras=extras)
        await self.add_trajectory_step(state, step)

    async def _root_llm_batch(self, context: dict[str, Any], prompts: Any) -> tuple[list[str], list[str]]:
        """Answers to `prompts` (in order) and the summary lines printed in the REPL."""
        if not isinstance(prompts, list):
            raise ValueError("llm_batch expects a list of prompts.")
        client, sub_model, state = context.get("client"), context.get("sub_model"), context.get("state")
        if not client or not sub_model or state is None:
            raise RuntimeError("Sub-LLM context is not available.")
        started, batch_id = time.perf_counter(), uuid.uuid4().hex[:8]
        gate = asyncio.Semaphore(self.max_sub_llm_parallelism)
        answers: list[dict[str, Any]] = [{}] * len(prompts)

        async def one(index: int, prompt: Any) -> None:
            delay = index * self.sub_llm_stagger_ms + random.random() * max(0, self.sub_llm_stagger_jitter_ms)
            if delay > 0:
                await asyncio.sleep(delay / 1000)
            async with gate:
                t0 = time.perf_counter()
                try:
                    if not isinstance(prompt, str):
                        raise ValueError(f"llm_batch prompt at index {index} must be a string.")
                    answer = await self._run_sub_llm_request(
                        state_ref=state, client=client, sub_model=sub_model,
                        messages=[{"role": "user", "content": prompt}], batch_id=batch_id,
                        request_id=uuid.uuid4().hex[:8], parent_turn=context.get("parent_turn", 0))
                except Exception as e:
                    if self._should_stop_for_error(e):
                        raise
                    answer = {"content": f"Error in sub-LLM call: {e}", "meta": {"error": True}}
                answer["meta"]["elapsed_seconds"] = time.perf_counter() - t0
                answers[index] = answer

        await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        lines = [f"llm_batch: {len(prompts)} call(s) in {time.perf_counter() - started:.2f}s"]
        for index, answer in enumerate(answers):
            meta = answer.get("meta", {})
            if meta.get("error") or not answer:
                lines.append(f"  [{index}]: error ({meta.get('elapsed_seconds', 0.0):.2f}s)")
                continue
            mark = "⚠ max turns" if meta.get("max_turns_reached") else "✓"
            lines.append(f"  [{index}]: {meta.get('prompt_tokens', 0)} prompt tokens, "
                         f"{meta.get('completion_tokens', 0)} completion tokens, {meta.get('tool_call_count', 0)} "
                         f"tool calls, {meta.get('elapsed_seconds', 0.0):.2f}s {mark}")
        return [a.get("content", "") for a in answers], lines
