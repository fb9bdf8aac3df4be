"""A local stand-in for verifiers' sandbox client (Prime sandboxes): the async methods SandboxEnv calls, each
sandbox a folder on this machine and each command a fresh jail on it (runner.py). What persists between commands
(/workspace, /tmp, and in bwrap a writable root kept in `fs/`): docs/sandbox.md.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from verifiers_rl.errors import SandboxError
from verifiers_rl.sandbox.limits import SandboxLimits
from verifiers_rl.sandbox.runner import arun
from verifiers_rl.sandbox.runtimes import WORKDIR, choose_runtime, read_only_paths


class CommandTimeoutError(SandboxError):
    """A command ran past its time limit (prime_sandboxes' name)."""


class CreateSandboxRequest(BaseModel):
    """What a sandbox is made with (the fields of verifiers' request; `model_copy` for per-rollout changes)."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)
    name: str = "sandbox-env"
    docker_image: str = "python:3.11-slim"
    start_command: str = "tail -f /dev/null"
    cpu_cores: int = 1
    memory_gb: float = 2
    disk_size_gb: float = 5
    gpu_count: int = 0
    timeout_minutes: int = 60
    environment_vars: dict[str, str] | None = None
    team_id: str | None = None
    advanced_configs: Any = None
    labels: list[str] = []


@dataclass
class Sandbox:
    id: str
    name: str
    root: Path  # holds workspace/, tmp/ and fs/ (the jail's `/` under bwrap)
    request: CreateSandboxRequest
    runtime: str | None
    image: str | None
    created_at: float

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def fs(self) -> Path | None:
        """The host folder behind the jail's writable `/`; None where commands see the host's own root (the
        process fallback) or an image's (a container engine)."""
        return self.root / "fs" if self.runtime == "bwrap" else None


@dataclass
class CommandResponse:
    stdout: str
    stderr: str
    exit_code: int


class LocalSandboxClient:
    def __init__(self, runtime: str | None = None, max_processes: int = 256, max_output_bytes: int = 1 << 20,
                 **_: Any):
        self.runtime = runtime
        self.max_processes = max_processes
        self.max_output_bytes = max_output_bytes
        self.sandboxes: dict[str, Sandbox] = {}

    async def create(self, request: CreateSandboxRequest, image: str | None = None) -> Sandbox:
        root = Path(tempfile.mkdtemp(prefix=f"vf-{request.name}-"))
        for folder in ("workspace", "tmp", "fs"):
            (root / folder).mkdir()
        runtime = self.runtime or (None if image else choose_runtime())  # as runner.prepare would decide
        box = Sandbox(id=uuid.uuid4().hex, name=request.name, root=root, request=request, runtime=runtime,
                      image=image, created_at=time.monotonic())
        self.sandboxes[box.id] = box
        return box

    def get(self, sandbox_id: str) -> Sandbox:
        box = self.sandboxes.get(sandbox_id)
        if box is None:
            raise SandboxError(f"no sandbox {sandbox_id!r} (deleted, or never created)")
        return box

    async def wait_for_creation(self, sandbox_id: str, **_: Any) -> None:
        self.get(sandbox_id)  # a folder exists as soon as it is made

    def limits(self, box: Sandbox, timeout: float | None) -> SandboxLimits:
        return SandboxLimits(timeout_s=float(timeout or 30), memory_mb=max(64, int(box.request.memory_gb * 1024)),
                             max_processes=self.max_processes, max_output_bytes=self.max_output_bytes,
                             max_file_mb=max(1, int(box.request.disk_size_gb * 1024)))

    async def execute_command(self, sandbox_id: str, command: str, working_dir: str | None = None,
                              timeout: float | None = None, env: dict[str, str] | None = None,
                              **_: Any) -> CommandResponse:
        box = self.get(sandbox_id)
        if working_dir:
            command = f"cd {shlex.quote(working_dir)} && {{ {command}\n}}"
        result = await arun(command, workdir=str(box.workspace), limits=self.limits(box, timeout),
                            env={**(box.request.environment_vars or {}), **(env or {})}, runtime=box.runtime,
                            image=box.image, extra_binds=self._binds(box),
                            root=str(box.fs) if box.fs else None)
        if result.timed_out:
            raise CommandTimeoutError(f"Command timed out after {timeout}s")
        stderr = result.stderr
        if result.output_truncated:
            stderr += f"\n[output passed {self.max_output_bytes} bytes: the command was stopped]"
        code = result.exit_code if result.exit_code is not None else -9
        return CommandResponse(stdout=result.stdout, stderr=stderr, exit_code=code)

    @staticmethod
    def _binds(box: Sandbox) -> list[tuple[str, str]]:
        return [] if box.image and box.runtime in ("docker", "podman") else [(str(box.root / "tmp"), "/tmp")]

    def _host_path(self, box: Sandbox, path: str) -> Path:
        """A sandbox path as the host file behind it, refused where `..` or a symlink the sandbox made (model
        code) would lead out of the sandbox's folder."""
        target = self._mapped_path(box, path)
        if not target.resolve().is_relative_to(box.root.resolve()):
            raise SandboxError(f"{path}: leads outside the sandbox (through '..' or a symlink)")
        return target

    def _mapped_path(self, box: Sandbox, path: str) -> Path:
        p = Path(path)
        for inside, host in ((Path(WORKDIR), box.workspace), (Path("/tmp"), box.root / "tmp")):
            if p == inside or inside in p.parents:
                return host / p.relative_to(inside)
        if not p.is_absolute():
            return box.workspace / p
        if box.fs is not None and not any(p == ro or ro in p.parents for ro in read_only_paths()):
            return box.fs / p.relative_to("/")
        if box.fs is not None:
            raise SandboxError(f"{path}: the host's system folders are read-only in a local sandbox")
        raise SandboxError(f"{path}: only /workspace and /tmp persist in a local {box.runtime} sandbox")

    async def upload_file(self, sandbox_id: str, file_path: str, local_file_path: str, **_: Any) -> None:
        target = self._host_path(self.get(sandbox_id), file_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(shutil.copyfile, local_file_path, target)

    async def download_file(self, sandbox_id: str, file_path: str, local_file_path: str, **_: Any) -> None:
        await asyncio.to_thread(shutil.copyfile, self._host_path(self.get(sandbox_id), file_path), local_file_path)

    async def delete(self, sandbox_id: str, **_: Any) -> None:
        box = self.sandboxes.pop(sandbox_id, None)
        if box is not None:
            await asyncio.to_thread(shutil.rmtree, box.root, True)

    async def bulk_delete(self, sandbox_ids: list[str], **_: Any) -> None:
        for sandbox_id in list(sandbox_ids):
            await self.delete(sandbox_id)

    def delete_all(self) -> int:
        """Synchronous teardown: remove every sandbox left; how many there were."""
        boxes = list(self.sandboxes.values())
        self.sandboxes.clear()
        for box in boxes:
            shutil.rmtree(box.root, ignore_errors=True)
        return len(boxes)

    def teardown(self, wait: bool = True) -> None:
        self.delete_all()
