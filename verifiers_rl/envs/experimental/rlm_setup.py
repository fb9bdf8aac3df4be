"""RLMEnv's rollout setup: the state's RLM fields and system prompt, the rollout's working folder, the Python
REPL's interpreter, the tool documentation the prompt carries, and the one merged tool list per role."""

from __future__ import annotations

import sys
from typing import Any, Callable

from verifiers_rl.envs.experimental.rlm_local import LocalSession, copy_context_directory, write_builtin_context
from verifiers_rl.envs.experimental.rlm_prompts import make_venv, root_prompt, tool_docs
from verifiers_rl.types import State
from verifiers_rl.utils.tool_schema import tool_name

_FIXED_TOOL_NAMES = frozenset({"llm_batch"})


def merge_tools(groups: list[tuple[str, list[Callable]]], context: str) -> tuple[list[Callable], dict]:
    """One tool list, deduplicated by name; two different tools of one name (or a fixed name reused) fail."""
    merged: dict[str, Callable] = {}
    for group, tools in groups:
        for tool in tools:
            name = tool_name(tool)
            if group != "fixed" and name in _FIXED_TOOL_NAMES:
                raise ValueError(f"Tool '{name}' is reserved and cannot be overridden.")
            if name in merged and merged[name] is not tool:
                raise ValueError(f"Tool name collision in {context}: '{name}' is defined by both "
                                 f"{merged[name]!r} and {tool!r}. Rename or remove one.")
            merged.setdefault(name, tool)
    return list(merged.values()), dict(merged)


class RLMSetupMixin:
    """What RLMEnv.setup_state fills in (RLMEnv's attributes: tools, context keys, REPL language, packages)."""

    def _fill_state(self, state: State, session: LocalSession) -> None:
        state["rlm_rollout_dir"], state["rlm_fs_root"] = session.rollout_dir, session.fs_root
        state["rlm_control_dir"], state["rlm_paths"] = session.control_dir, session.paths.to_dict()
        state["retain_filesystem_after_rollout"] = self.retain_filesystem_after_rollout
        base = self.custom_system_prompt or root_prompt(self.repl_language, self.root_prompt_verbosity)
        docs = {"rlm_packages_docs": self._generate_packages_documentation(),
                "rlm_root_tools_docs": self._generate_root_tools_documentation(),
                "rlm_sub_tools_docs": self._generate_sub_tools_documentation()}
        state.update(docs, rlm_system_prompt=base + "".join(docs.values()))
        shared, _ = merge_tools([("shared", self.shared_tools)], "shared tools")
        state["rlm_shared_tools"] = [tool_name(t) for t in shared]
        state["rlm_root_tools"], state["rlm_sub_tools"] = list(self.root_tool_names), list(self.sub_tool_names)

    def _fill_working_folder(self, state: State, fs_root: str) -> None:
        info = state.get("info") if isinstance(state.get("info"), dict) else {}
        source, has_data = None, False
        if info.get(self.context_dir_key):
            source, has_data = str(info[self.context_dir_key]), True
            self._copy_context_directory(source, fs_root)
        elif info.get(self.context_key) is not None:
            has_data = True
            self._write_builtin_context(info[self.context_key], fs_root)
        state["rlm_fs_source"], state["rlm_fs_has_data"] = source, has_data

    def _copy_context_directory(self, src: str, dst: str) -> None:
        copy_context_directory(src, dst, self.filesystem_copy_max_bytes)

    def _write_builtin_context(self, data: Any, fs_root: str) -> None:
        write_builtin_context(data, fs_root)

    async def _python_for_repl(self) -> str:
        """The interpreter of the Python REPL: this one, or a uv venv when extra packages are asked for."""
        packages = self.pip_install_packages.split()
        if not packages:
            return sys.executable
        if self._venv_python is None:
            self._venv_python = await make_venv(packages, max(self.max_startup_wait_seconds, 30 * len(packages)))
        return self._venv_python

    # --- tool documentation -----------------------------------------------------------------------------------
    def _generate_packages_documentation(self) -> str:
        packages = self.pip_install_packages.split()
        if self.repl_language != "python" or not packages:
            return ""
        listed = "\n".join(f"- `{p}`" for p in packages)
        return f"\n## Installed Packages\n\nThese Python packages are installed in the REPL:\n{listed}\n"

    def _generate_root_tools_documentation(self) -> str:
        return tool_docs(self.root_tool_defs, "root", self.repl_language) if self.root_tools else ""

    def _generate_sub_tools_documentation(self) -> str:
        return tool_docs(self.sub_tool_defs, "sub", self.repl_language) if self.sub_tools else ""
