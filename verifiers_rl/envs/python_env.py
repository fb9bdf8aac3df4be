"""PythonEnv: SandboxEnv whose one tool is `python`, a persistent Python REPL per rollout (verifiers' classic
behaviour).

A cell past `timeout_per_command_seconds` restarts the REPL. The jail has no network, so `pip_install_packages` are not
installed: the ones missing are named in one line at construction.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from typing import Any, TypedDict

from verifiers_rl.decorators import cleanup, teardown
from verifiers_rl.envs.sandbox_env import SandboxEnv, SandboxState
from verifiers_rl.errors import SandboxError
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.sandbox.limits import SandboxLimits
from verifiers_rl.sandbox.python_repl import PythonRepl, ReplDead, ReplTimeout
from verifiers_rl.types import Messages, State

__all__ = ["PythonEnv", "PythonWorkerState", "PythonMonitorRubric", "PythonWorkerNotReadyError",
           "PythonWorkerRequestError", "PythonWorkerDeadError"]

_IMPORT_NAMES = {"scikit-learn": "sklearn", "pillow": "PIL", "beautifulsoup4": "bs4", "pyyaml": "yaml",
                 "opencv-python": "cv2"}


class PythonWorkerState(TypedDict):
    ready: bool
    execution_count: int
    ready_wait_time: float


class PythonWorkerNotReadyError(SandboxError): ...


class PythonWorkerRequestError(SandboxError): ...


class PythonWorkerDeadError(SandboxError): ...


class PythonMonitorRubric(Rubric):
    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.add_metric(self.python_ready_wait_time)

    async def python_ready_wait_time(self, state: State) -> float:
        return state["python_state"]["ready_wait_time"]


def missing_packages(spec: str) -> list[str]:
    """The pip names in `spec` ("numpy sympy scipy") this Python cannot import."""
    missing = []
    for name in spec.split():
        module = _IMPORT_NAMES.get(name.lower(), name.split("==")[0].split(">=")[0].replace("-", "_"))
        if importlib.util.find_spec(module) is None:
            missing.append(name)
    return missing


def format_cell(reply: dict[str, Any], count: int) -> str:
    """A REPL cell's reply as verifiers shows it: stdout, "stderr:" and stderr, then the traceback or "Out[N]: <repr
    of a trailing expression>", or "(no output)". RLMEnv's Python REPL shares it."""
    parts = [stdout] if (stdout := (reply.get("stdout") or "").rstrip()) else []
    if (stderr := (reply.get("stderr") or "").rstrip()):
        parts.append(f"stderr:\n{stderr}")
    result = reply.get("result")
    if reply.get("status") == "error" and result:
        parts.append(str(result).rstrip())
    elif reply.get("status") == "ok" and result is not None:
        parts.append(f"Out[{count}]: {result}")
    return "\n".join(parts) or "(no output)"


class PythonEnv(SandboxEnv):
    """Sandbox-backed environment exposing a persistent Python REPL."""

    def __init__(self, pip_install_packages: str = "numpy sympy scipy", max_startup_wait_seconds: int = 30,
                 **kwargs: Any):
        self.max_startup_wait_seconds = max_startup_wait_seconds
        self.pip_install_packages = pip_install_packages
        kwargs.setdefault("sandbox_name", "python-env")
        kwargs.setdefault("docker_image", "python:3.11-slim")
        super().__init__(**kwargs)
        self.add_rubric(PythonMonitorRubric())
        self.add_tool(self.python, args_to_skip=["sandbox_id", "sandbox_state", "python_state"])
        self.remove_tool(self.bash)  # the model sees only `python`
        self.repls: dict[str, PythonRepl] = {}
        missing = missing_packages(pip_install_packages) if self.image is None else []
        if missing:
            print(f"PythonEnv: pip_install_packages not installed in the jail (it has no network): "
                  f"{' '.join(missing)} missing from {sys.executable}; install them there to offer them",
                  file=sys.stderr)

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        state = await super().setup_state(state, **kwargs)
        state["python_state"] = {"ready": False, "execution_count": 0, "ready_wait_time": 0.0}
        return state

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Messages, state: State,
                         **kwargs: Any) -> dict[str, Any]:
        updated = super().update_tool_args(tool_name, tool_args, messages, state, **kwargs)
        if tool_name == "python":
            updated.update(sandbox_id=state["sandbox_id"], sandbox_state=state["sandbox_state"],
                           python_state=state["python_state"])
        return updated

    def _repl(self, sandbox_id: str) -> PythonRepl:
        repl = self.repls.get(sandbox_id)
        if repl is None:
            box = self.sandbox_client.get(sandbox_id)
            limits: SandboxLimits = self.sandbox_client.limits(box, self.timeout_per_command_seconds)
            repl = PythonRepl(str(box.workspace), limits, runtime=self.runtime, image=self.image,
                              env=box.request.environment_vars)
            self.repls[sandbox_id] = repl
        return repl

    async def python(self, code: str, sandbox_id: str, sandbox_state: SandboxState,
                     python_state: PythonWorkerState) -> str:
        """Execute `code` inside persistent Python REPL."""
        if not sandbox_state["ready"]:
            await self._wait_for_sandbox_ready(sandbox_state, sandbox_id)
        repl = self._repl(sandbox_id)
        if not python_state["ready"]:
            try:
                python_state["ready_wait_time"] = await asyncio.to_thread(repl.start, self.max_startup_wait_seconds)
            except ReplDead as e:
                raise PythonWorkerNotReadyError(str(e)) from e
            python_state["ready"] = True
        try:
            reply = await asyncio.to_thread(repl.execute, code, float(self.timeout_per_command_seconds))
        except ReplTimeout as e:
            sandbox_state["command_execution_times"].append(self.timeout_per_command_seconds)
            return f"Error: {e}"
        except ReplDead as e:
            return f"Error: the Python process died ({e}); its variables are lost"
        count = reply.get("execution_count") or python_state.get("execution_count", 0) + 1
        python_state["execution_count"] = count
        return format_cell(reply, count)

    @cleanup
    async def destroy_sandbox(self, state: State) -> None:
        repl = self.repls.pop(state.get("sandbox_id", ""), None)
        if repl is not None:
            await asyncio.to_thread(repl.close)
        await super().destroy_sandbox(state)

    @teardown
    async def teardown_sandboxes(self) -> None:
        for repl in list(self.repls.values()):
            repl.close()
        self.repls.clear()
        await super().teardown_sandboxes()
