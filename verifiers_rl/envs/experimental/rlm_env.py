"""RLMEnv: verifiers' "recursive language model" environment, local execution backend (verifiers' classic API).

The root model gets one tool, `call_bash_repl` (or `call_python_repl`): a persistent REPL in the rollout's own folder
where root tools (`llm_batch` for sub-LLMs, `tools`, `root_tools`) are shell commands or Python functions; sub-LLMs get
`tools` + `sub_tools` as ordinary tool calls. The answer set in the REPL is `state["final_answer"]` and ends the rollout
with no further model call. Failing or timed-out code (the REPL restarted) comes back as output. No HTTP interception
server or tunnel: a Unix socket; `execution_backend="sandbox"` is refused at construction.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import shutil
import uuid
from time import perf_counter
from typing import Any, Callable, Literal

from verifiers_rl.decorators import cleanup, stop, teardown
from verifiers_rl.envs.experimental.rlm_errors import (RLMCodeExecutionTimeout, RLMSessionError, RLMSetupError,
                                                       RLMWorkerError, RLMWorkerRecoveryError,
                                                       SubLLMEmptyModelResponseError)
from verifiers_rl.envs.experimental.rlm_local import LocalSession, ReplTimeout, RLMWorkerPaths
from verifiers_rl.envs.experimental.rlm_prompts import scaffold_prompt
from verifiers_rl.envs.experimental.rlm_setup import RLMSetupMixin, merge_tools
from verifiers_rl.envs.experimental.rlm_sub import (SubLLMMixin, RLMMonitorRubric, ensure_metric_state,
                                                    record_repl_time, record_root_tool, record_step)
from verifiers_rl.envs.python_env import format_cell
from verifiers_rl.envs.stateful_tool_env import StatefulToolEnv
from verifiers_rl.envs.tool_env import run_tool
from verifiers_rl.types import Messages, RolloutInput, SamplingArgs, State, TrajectoryStep
from verifiers_rl.utils.message_utils import normalize_messages
from verifiers_rl.utils.tool_schema import function_tool_def, tool_name

__all__ = ["RLMEnv", "RLMMonitorRubric", "RLMCodeExecutionTimeout", "RLMSessionError", "RLMSetupError",
           "RLMWorkerError", "RLMWorkerRecoveryError", "SubLLMEmptyModelResponseError", "RLMWorkerPaths"]

logger = logging.getLogger(__name__)

_rollout_ids: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("rlm_rollout_ids", default=None)


class RLMEnv(RLMSetupMixin, SubLLMMixin, StatefulToolEnv):
    def __init__(self, tools: list[Callable] | None = None, root_tools: list[Callable] | None = None,
                 sub_tools: list[Callable] | None = None, sub_tool_max_turns: int = 5, sub_model: str | None = None,
                 sub_prompt_verbosity: Literal["light", "medium", "heavy"] = "light",
                 root_prompt_verbosity: Literal["light", "medium", "heavy"] = "light", max_iterations: int = 50,
                 max_output_length: int = 8192, max_sub_llm_parallelism: int = 5, sub_llm_stagger_ms: int = 200,
                 sub_llm_stagger_jitter_ms: int = 50, context_key: str = "context",
                 context_dir_key: str = "context_dir", system_prompt: str | None = None,
                 repl_language: Literal["bash", "python"] = "bash",
                 execution_backend: Literal["local", "sandbox"] = "local", pip_install_packages: str = "",
                 include_sub_llm_in_trajectory: bool = False, context_warning_threshold: float = 0.80,
                 max_startup_wait_seconds: int = 120, code_execution_timeout: int = 120,
                 abort_on_code_timeout: bool = False, retain_filesystem_after_rollout: bool = False,
                 filesystem_copy_max_bytes: int | None = 1_000_000_000, **kwargs: Any):
        for label, value, allowed in (("repl_language", repl_language, ("bash", "python")),
                                      ("execution_backend", execution_backend, ("local", "sandbox")),
                                      ("sub_prompt_verbosity", sub_prompt_verbosity, ("light", "medium", "heavy")),
                                      ("root_prompt_verbosity", root_prompt_verbosity, ("light", "medium", "heavy"))):
            if value not in allowed:
                raise ValueError(f"Unsupported {label} '{value}'. Expected one of: {', '.join(allowed)}.")
        if execution_backend == "sandbox":
            raise ValueError("RLMEnv execution_backend='sandbox' needs Prime Intellect sandboxes (prime_sandboxes + "
                             "prime_tunnel), which verifiers-rl does not provide; use execution_backend='local'.")
        # verifiers 0.1.11's names for two settings (the example at 7ebf37f uses the older ones)
        max_iterations = kwargs.pop("max_turns", max_iterations)
        sub_tool_max_turns = kwargs.pop("sub_llm_max_turns", sub_tool_max_turns)
        unused = [k for k in list(kwargs) if k.startswith(("sandbox_", "interception_"))
                  or k == "local_repl_max_workers"]
        for key in unused:  # settings of verifiers' sandbox/HTTP REPL: the local REPL here has none of them
            kwargs.pop(key)
        if unused:
            logger.warning("RLMEnv: %s not used (the REPL runs locally, over a Unix socket)", ", ".join(sorted(unused)))
        self.repl_language, self.execution_backend = repl_language, execution_backend
        self.sub_prompt_verbosity, self.root_prompt_verbosity = sub_prompt_verbosity, root_prompt_verbosity
        self.sub_model, self.sub_tool_max_turns, self.max_iterations = sub_model, sub_tool_max_turns, max_iterations
        self.sub_llm_max_turns = sub_tool_max_turns
        self.shared_tools, self.root_only_tools, self.sub_only_tools = tools or [], root_tools or [], sub_tools or []
        self.max_output_length, self.max_sub_llm_parallelism = max_output_length, max_sub_llm_parallelism
        self.sub_llm_stagger_ms, self.sub_llm_stagger_jitter_ms = sub_llm_stagger_ms, sub_llm_stagger_jitter_ms
        self.context_key, self.context_dir_key, self.custom_system_prompt = context_key, context_dir_key, system_prompt
        self.pip_install_packages, self.max_startup_wait_seconds = pip_install_packages, max_startup_wait_seconds
        self.include_sub_llm_in_trajectory = include_sub_llm_in_trajectory
        self.context_warning_threshold, self.code_execution_timeout = context_warning_threshold, code_execution_timeout
        self.abort_on_code_timeout = abort_on_code_timeout
        self.retain_filesystem_after_rollout = retain_filesystem_after_rollout
        self.filesystem_copy_max_bytes = filesystem_copy_max_bytes
        self.sub_llm_api_timeout, self.sub_llm_timeout = self._compute_sub_llm_timeouts()
        self.root_tools, self.root_tool_map = merge_tools(
            [("fixed", self._build_fixed_root_tools()), ("shared", self.shared_tools), ("root", self.root_only_tools)],
            "root tools")
        self.sub_tools, self.sub_tool_map = merge_tools([("shared", self.shared_tools), ("sub", self.sub_only_tools)],
                                                         "sub-LLM tools")
        self.root_tool_names = [tool_name(t) for t in self.root_tools]
        self.sub_tool_names = [tool_name(t) for t in self.sub_tools]
        self.root_tool_defs = [function_tool_def(t) for t in self.root_tools]
        self.sub_tool_defs = [function_tool_def(t) for t in self.sub_tools]
        self._root_tool_context_var: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
            "rlm_root_tool_context", default=None)
        self._sessions: dict[str, LocalSession] = {}
        self._venv_python: str | None = None
        self.active_rollouts: dict[str, dict[str, Any]] = {}
        super().__init__(tools=[], max_turns=max_iterations, **kwargs)
        self.add_rubric(RLMMonitorRubric(root_tool_names=self.root_tool_names))
        repl = self.call_bash_repl if repl_language == "bash" else self.call_python_repl
        self.add_tool(repl, args_to_skip=["state"])

    # --- settings -------------------------------------------------------------------------------------------
    def _compute_sub_llm_timeouts(self) -> tuple[int, int]:
        """(API call timeout, whole sub-LLM request timeout), both inside the code execution timeout."""
        code = max(1, int(self.code_execution_timeout))
        floor = min(10, max(1, code - 1))  # both below `code` when it is over 1; the API call's never the longer
        if code < 10:
            logger.warning("code_execution_timeout=%ss is low; sub-LLM calls may be unreliable", code)
        return max(floor, int(code * 0.8)), max(floor, int(code * 0.9))

    def _build_fixed_root_tools(self) -> list[Callable]:
        async def llm_batch(prompts: list[str]) -> list[str]:
            """Ask sub-LLMs several prompts at once, in parallel.

            Args:
                prompts: The prompts, one string each.

            Returns:
                One answer per prompt, in the order of the prompts.
            """
            context = self._root_tool_context_var.get()
            if context is None:
                raise RuntimeError("llm_batch called outside of a tool request context.")
            answers, _ = await self._root_llm_batch(context, prompts)
            return answers

        return [llm_batch]

    def customize_worker_script(self, script: str, state: State) -> str:
        """verifiers' hook for its generated worker script; the local REPL here has none, so it is not called."""
        return script

    # --- rollout setup ---------------------------------------------------------------------------------------
    async def setup_state(self, state: State, **kwargs: Any) -> State:
        state = await StatefulToolEnv.setup_state(self, state) or state
        rollout_id = f"rlm_{uuid.uuid4().hex[:8]}"
        state["rollout_id"] = rollout_id
        python = await self._python_for_repl() if self.repl_language == "python" else None
        session = LocalSession(rollout_id, self.repl_language, python)
        self._sessions[rollout_id] = session
        tracked = _rollout_ids.get()
        if tracked is not None:
            tracked.append(rollout_id)
        try:
            self._fill_state(state, session)
            self._fill_working_folder(state, session.fs_root)
            self.active_rollouts[rollout_id] = {"client": state.get("client"), "model": state.get("model"),
                                                "sub_model": self.sub_model or state.get("model"), "state": state}

            async def handler(name: str, args: list, kw: dict) -> dict[str, Any]:
                return await self._handle_root_tool_request(state, name, args, kw)

            await asyncio.wait_for(session.start(handler, self.root_tool_names, {
                "RLM_SUB_MODEL": str(self.sub_model or state.get("model") or ""),
                "RLM_SUB_LLM_TIMEOUT": str(self.sub_llm_timeout)}), timeout=self.max_startup_wait_seconds)
        except BaseException as e:
            await self._close_session(rollout_id, remove_files=True)
            if isinstance(e, (asyncio.TimeoutError, OSError, RuntimeError)):
                raise RLMWorkerError(f"RLM REPL failed to start: {e}") from e
            raise
        state["rlm_worker_ready"], state["context_warning_sent"], state["_exec_seq"] = True, False, 0
        ensure_metric_state(state)
        return state

    # --- root tools called from the REPL ------------------------------------------------------------------------
    async def _handle_root_tool_request(self, state: State, name: str, args: list, kwargs: dict) -> dict[str, Any]:
        """Run root tool `name` for the REPL: `{"result", "print_lines"}`, or `{"error"}`."""
        if name not in self.root_tool_map:
            return {"error": f"Tool '{name}' not found"}
        context = {"state": state, "client": state.get("client"),
                   "sub_model": self.sub_model or state.get("model"),
                   "parent_turn": self.active_rollouts.get(state.get("rollout_id"), {}).get("current_turn", 0)}
        token = self._root_tool_context_var.set(context)
        try:
            record_root_tool(state, name)
            if name == "llm_batch":
                result, lines = await self._root_llm_batch(context, self._batch_prompts(args, kwargs))
                return {"result": result, "print_lines": lines}
            return {"result": await run_tool(functools.partial(self.root_tool_map[name], *args, **kwargs), {})}
        except Exception as e:
            if self._should_stop_for_error(e):
                state["_rlm_stop_error"] = e
            return {"error": str(e) or type(e).__name__}
        finally:
            self._root_tool_context_var.reset(token)

    @staticmethod
    def _batch_prompts(args: list, kwargs: dict) -> Any:
        if args and "prompts" in kwargs:
            raise ValueError("llm_batch received prompts twice.")
        if len(args) > 1:
            raise ValueError("llm_batch expects a single prompts argument.")
        prompts = args[0] if args else kwargs.pop("prompts", None)
        if prompts is None:
            raise ValueError("llm_batch requires a prompts argument.")
        if kwargs:
            raise ValueError("llm_batch does not accept extra keyword arguments: " + ", ".join(sorted(kwargs)))
        return prompts

    # --- the REPL tool ------------------------------------------------------------------------------------------
    def update_tool_args(self, tool_name: str, tool_args: dict, messages: Messages, state: State,
                         **kwargs: Any) -> dict:
        return {**tool_args, "state": state} if tool_name in ("call_bash_repl", "call_python_repl") else tool_args

    async def _execute_code(self, code: str, state: State) -> dict[str, Any]:
        session = self._sessions.get(state.get("rollout_id", ""))
        if session is None:
            raise RLMSessionError("RLM REPL session not initialized")
        state["_exec_seq"] = state.get("_exec_seq", 0) + 1
        try:
            return await session.execute(code, self.code_execution_timeout)
        except ReplTimeout as e:
            self.logger.warning("Code execution timed out after %ss", self.code_execution_timeout)
            if self.abort_on_code_timeout:
                raise RLMCodeExecutionTimeout(f"Code execution timed out after {self.code_execution_timeout}s") from e
            try:
                await session.restart()
            except Exception as err:
                raise RLMWorkerRecoveryError("Code execution timed out and the worker could not be restarted.") from err
            return {"status": "error", "stdout": "", "stderr": "", "answer": {"ready": False, "content": ""},
                    "result": f"Code execution timed out after {self.code_execution_timeout} seconds. The worker "
                              "was restarted and the REPL state was reset. Your code may be too slow - consider a "
                              "more efficient algorithm or breaking the computation into smaller steps."}

    def _format_execution_output(self, result: dict[str, Any]) -> str:
        if self.repl_language == "python":
            output = format_cell(result, result.get("execution_count", 0))
        else:
            output = f"{result.get('stdout') or ''}{result.get('stderr') or ''}" or str(result.get("result") or "")
            output = output or "(no output)"
        if len(output) > self.max_output_length:
            output = output[: self.max_output_length] + "\n... [output truncated]"
        return output

    def _maybe_add_context_warning(self, output: str, state: State, *, ready_instruction: str) -> str:
        if not self.max_seq_len or state.get("context_warning_sent"):
            return output
        main = [s for s in state.get("trajectory", []) if not (s.get("extras") or {}).get("is_sub_llm_call")]
        usage = getattr(main[-1].get("response"), "usage", None) if main else None
        used = int(getattr(usage, "prompt_tokens", 0) or 0) if usage else 0
        if used < int(self.max_seq_len * self.context_warning_threshold):
            return output
        state["context_warning_sent"] = True
        return (output + f"\n\n[CONTEXT LIMIT WARNING] You have used {used:,} of {self.max_seq_len:,} tokens "
                         f"({used / self.max_seq_len:.0%}). {ready_instruction}")

    async def _call_repl(self, code: str, state: Any, *, ready_instruction: str, show_time: bool) -> str:
        if state.get("rollout_id") in self.active_rollouts:
            self.active_rollouts[state["rollout_id"]]["current_turn"] = len(state.get("trajectory", []))
        started = perf_counter()
        result = await self._execute_code(code, state)
        stop_error = state.pop("_rlm_stop_error", None)
        if stop_error is not None:
            raise stop_error
        seconds = perf_counter() - started
        output = self._format_execution_output(result)
        state.setdefault("tool_call_timings", []).append({"turn": len(state.get("trajectory", [])),
                                                         "execution_seconds": seconds})
        record_repl_time(state, seconds)
        if show_time:
            output += f"\n[Execution time: {seconds:.2f}s]"
        answer = result.get("answer") or {}
        if answer.get("ready"):
            state["final_answer"] = str(answer.get("content", ""))
        return self._maybe_add_context_warning(output, state, ready_instruction=ready_instruction)

    async def call_bash_repl(self, code: str, state: Any) -> str:
        """Run Bash commands in a persistent shell, in the task's working folder.

        Finish with `export RLM_CONTENT=<answer> RLM_READY=1`. Root tools are shell commands.

        Args:
            code: The Bash commands to run.
        """
        return await self._call_repl(code, state, show_time=False,
                                     ready_instruction="Please finalize your answer soon by setting RLM_READY=1.")

    async def call_python_repl(self, code: str, state: Any) -> str:
        """Run Python code in a persistent interpreter, in the task's working folder.

        Finish with `answer["content"] = <answer>` and `answer["ready"] = True`. Root tools (`llm_batch(prompts)`:
        a list of strings in, a list of answers out) are Python functions.

        Args:
            code: The Python code to run.
        """
        return await self._call_repl(code, state, show_time=True, ready_instruction=(
            "Please finalize your answer soon by setting answer['ready'] = True."))

    # --- the turn loop ----------------------------------------------------------------------------------------------
    async def get_prompt_messages(self, state: State) -> Messages:
        if state["trajectory"]:
            return await super().get_prompt_messages(state)
        if state.get("rlm_system_prompt") is None:
            raise ValueError("RLM setup_state must run before get_prompt_messages")
        return normalize_messages(scaffold_prompt(state.get("prompt") or [], state["rlm_system_prompt"]),
                                  field_name="prompt")

    async def add_model_response(self, state: State, prompt_messages: Messages, response: Any) -> None:
        if not state["trajectory"]:
            state.setdefault("raw_prompt", state["prompt"])
            state["prompt"] = prompt_messages
        await super().add_model_response(state, prompt_messages, response)

    async def add_trajectory_step(self, state: State, trajectory_step: TrajectoryStep) -> None:
        record_step(state, trajectory_step)
        await super().add_trajectory_step(state, trajectory_step)

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        replies = await super().env_response(messages, state, **kwargs)
        if "final_answer" in state:
            state["final_env_response"] = replies  # the answer is in: no further model call
        return replies

    def _last_turn(self, state: State) -> TrajectoryStep | None:
        """The completion is rendered from the root model's last turn (sub-LLM steps are left out)."""
        main = [s for s in state["trajectory"] if s.get("trajectory_id") == state["trajectory_id"]]
        return main[-1] if main else None

    async def rollout(self, input: RolloutInput, client: Any, model: str,
                      sampling_args: SamplingArgs | None = None) -> State:
        token = _rollout_ids.set([])
        try:
            return await super().rollout(input, client, model, sampling_args)
        finally:  # a rollout that ended without its cleanup (a crash) still loses its REPL
            for rollout_id in _rollout_ids.get() or []:
                if rollout_id in self._sessions:
                    await self._close_session(rollout_id, remove_files=not self.retain_filesystem_after_rollout)
            _rollout_ids.reset(token)

    # --- stop conditions, cleanup, teardown -------------------------------------------------------------------------
    @stop
    async def answer_ready(self, state: State) -> bool:
        return "final_answer" in state

    @stop
    async def prompt_too_long(self, state: State) -> bool:
        if not state.get("prompt_too_long", False):
            return False
        self._ensure_final_answer(state)
        return True

    def _ensure_final_answer(self, state: State) -> None:
        """The answer is the REPL's last `RLM_CONTENT` / `answer["content"]` when the model never said ready."""
        if "final_answer" not in state:
            session = self._sessions.get(state.get("rollout_id", ""))
            state["final_answer"] = str(session.answer.get("content", "")) if session else ""

    async def _close_session(self, rollout_id: str, remove_files: bool) -> None:
        self.active_rollouts.pop(rollout_id, None)
        session = self._sessions.pop(rollout_id, None)
        if session is not None:
            await session.stop(remove_files=remove_files)

    @cleanup
    async def cleanup_rlm_state(self, state: State) -> None:
        rollout_id = state.get("rollout_id")
        if not rollout_id:
            return
        self._ensure_final_answer(state)
        await self._close_session(rollout_id, remove_files=not state.get("retain_filesystem_after_rollout", False))

    @teardown
    async def teardown_executor(self) -> None:
        """Kill every REPL still running (synchronously: this also runs at interpreter exit)."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.kill()
            if not self.retain_filesystem_after_rollout:
                shutil.rmtree(session.rollout_dir, ignore_errors=True)

