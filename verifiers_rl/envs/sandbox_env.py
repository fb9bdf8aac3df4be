"""SandboxEnv: a StatefulToolEnv with a `bash` tool in a sandbox made per rollout (verifiers' classic signature, state
and metrics), on this machine instead of Prime's hosted sandboxes.

Each `bash` call is a fresh jail on the rollout's sandbox (/workspace and /tmp persist), with `environment_vars` as its
only environment; runtime: docs/sandbox.md. Prime's scheduling keywords are accepted and unused.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TypedDict

from verifiers_rl.decorators import cleanup, teardown
from verifiers_rl.envs.stateful_tool_env import StatefulToolEnv
from verifiers_rl.errors import SandboxError
from verifiers_rl.rubrics.rubric import Rubric
from verifiers_rl.sandbox.client import CommandTimeoutError, CreateSandboxRequest, LocalSandboxClient
from verifiers_rl.sandbox.runtimes import choose_for_image
from verifiers_rl.types import Messages, State

__all__ = ["SandboxEnv", "SandboxState", "SandboxMonitorRubric", "SandboxCreationError", "SandboxNotReadyError",
           "CreateSandboxRequest", "CommandTimeoutError"]


class SandboxState(TypedDict):
    ready: bool
    ready_wait_time: float
    command_execution_times: list[float]


class SandboxCreationError(SandboxError): ...


class SandboxNotReadyError(SandboxError): ...


class SandboxMonitorRubric(Rubric):
    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.add_metric(self.sandbox_ready_wait_time)
        self.add_metric(self.sandbox_command_execution_time)

    async def sandbox_ready_wait_time(self, state: State) -> float:
        return state["sandbox_state"]["ready_wait_time"]

    async def sandbox_command_execution_time(self, state: State) -> float:
        times = state["sandbox_state"]["command_execution_times"]
        return sum(times) / len(times) if times else 0.0


def format_output(stdout: str, stderr: str) -> str:
    """verifiers' bash reply: stdout, then "stderr:" and stderr, or "(no output)"."""
    out, err = stdout.strip(), (stderr or "").strip()
    if err:
        out = f"{out}\nstderr:\n{err}" if out else f"stderr:\n{err}"
    return out or "(no output)"


class SandboxEnv(StatefulToolEnv):
    def __init__(self, sandbox_name: str = "sandbox-env", docker_image: str = "python:3.11-slim",
                 start_command: str = "tail -f /dev/null", cpu_cores: int = 1, memory_gb: int = 2,
                 disk_size_gb: int = 5, gpu_count: int = 0, timeout_minutes: int = 60,
                 timeout_per_command_seconds: int = 30, environment_vars: dict[str, str] | None = None,
                 team_id: str | None = None, advanced_configs: Any = None, labels: list[str] | None = None,
                 max_retries: int = 5, base_delay: float = 0.5, backoff_factor: float = 2.0,
                 max_backoff_seconds: float = 30.0, jitter: float = 1e-3,
                 stop_errors: list[type[Exception]] | None = None, sandbox_client_max_workers: int | None = None,
                 sandbox_client_max_connections: int = 100, sandbox_client_max_keepalive_connections: int = 50,
                 runtime: str | None = None, max_processes: int = 256, max_output_bytes: int = 1 << 20,
                 **kwargs: Any):
        super().__init__(stop_errors=stop_errors if stop_errors is not None else [SandboxError], **kwargs)
        self.add_rubric(SandboxMonitorRubric())
        self.timeout_per_command_seconds = timeout_per_command_seconds
        self.runtime, self.image, note = choose_for_image(docker_image, runtime)
        if note:
            print(note, file=sys.stderr)
        if start_command.strip() not in ("", "tail -f /dev/null", "sleep infinity"):
            self.logger.warning("SandboxEnv: start_command is not run by the local sandbox (each command is a "
                                "fresh jail; only /workspace and /tmp persist)")
        self.sandbox_client = LocalSandboxClient(runtime=self.runtime, max_processes=max_processes,
                                                 max_output_bytes=max_output_bytes)
        self.sandbox_request = CreateSandboxRequest(
            name=sandbox_name, docker_image=docker_image, start_command=start_command, cpu_cores=cpu_cores,
            memory_gb=memory_gb, disk_size_gb=disk_size_gb, gpu_count=gpu_count, timeout_minutes=timeout_minutes,
            environment_vars=environment_vars, team_id=team_id, advanced_configs=advanced_configs,
            labels=labels or [])
        self.active_sandboxes: set[str] = set()
        self.add_tool(self.bash, args_to_skip=["sandbox_id", "working_dir", "sandbox_state"])

    async def _wait_for_sandbox_ready(self, sandbox_state: SandboxState, sandbox_id: str) -> None:
        began = time.monotonic()
        try:
            await self.sandbox_client.wait_for_creation(sandbox_id)
        except Exception as e:
            raise SandboxNotReadyError(e) from e
        sandbox_state["ready"] = True
        sandbox_state["ready_wait_time"] = time.monotonic() - began

    async def bash(self, command: str, sandbox_id: str, sandbox_state: SandboxState,
                   working_dir: str | None = None) -> str:
        """Execute `command` inside persistent sandbox container."""
        if not sandbox_state["ready"]:
            await self._wait_for_sandbox_ready(sandbox_state, sandbox_id)
        began = time.monotonic()
        try:
            result = await self.sandbox_client.execute_command(sandbox_id, command, working_dir=working_dir,
                                                               timeout=self.timeout_per_command_seconds)
        except CommandTimeoutError:
            sandbox_state["command_execution_times"].append(self.timeout_per_command_seconds)
            return f"Error: Command timed out after {self.timeout_per_command_seconds}s"
        except Exception as e:
            raise SandboxError(str(e)) from e
        sandbox_state["command_execution_times"].append(time.monotonic() - began)
        return format_output(result.stdout, result.stderr)

    async def post_rollout(self, state: State) -> None:
        """Override: runs before the sandbox is deleted (read what the reward needs into `state` here)."""

    @cleanup
    async def destroy_sandbox(self, state: State) -> None:
        await self.post_rollout(state)
        sandbox_id = state.get("sandbox_id")
        if sandbox_id is None:
            return
        try:
            await self.sandbox_client.delete(sandbox_id)
        except Exception as e:  # noqa: BLE001 -- as verifiers: a failed delete is a warning
            self.logger.warning(f"Failed to delete sandbox {sandbox_id}: {e}")
        self.active_sandboxes.discard(sandbox_id)

    def get_sandbox_request(self, state: State) -> CreateSandboxRequest:
        """The request for this rollout's sandbox; override to change it per rollout."""
        return self.sandbox_request.model_copy()

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        request = self.get_sandbox_request(state)
        try:
            sandbox = await self.sandbox_client.create(request, image=self.image)
        except Exception as e:
            raise SandboxCreationError(e) from e
        self.active_sandboxes.add(sandbox.id)
        state["sandbox_id"] = sandbox.id
        state["sandbox_state"] = {"ready": False, "ready_wait_time": 0.0, "command_execution_times": []}
        updated = await super().setup_state(state, **kwargs)
        return updated if updated is not None else state

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Messages, state: State,
                         **kwargs: Any) -> dict[str, Any]:
        updated = dict(tool_args)
        if tool_name == "bash":
            updated.update(sandbox_id=state["sandbox_id"], sandbox_state=state["sandbox_state"],
                           working_dir=state.get("working_dir"))
        return updated

    async def bulk_delete_sandboxes(self, global_ids: list[str]) -> None:
        await self.sandbox_client.bulk_delete(global_ids)
        self.active_sandboxes.difference_update(global_ids)

    @teardown
    async def teardown_sandboxes(self) -> None:
        if self.active_sandboxes:
            self.logger.info(f"Deleting {len(self.active_sandboxes)} remaining sandboxes")
        self.sandbox_client.delete_all()
        self.active_sandboxes.clear()

    @teardown
    async def teardown_sandbox_client(self) -> None:
        self.sandbox_client.teardown()
