"""The two test tiers: `unit` (in-process, quick: `uv run pytest -m unit`) and `integration` (the rest).

A test is `integration` when its module is listed below, when it carries `@pytest.mark.integration` (a mixed
module marks its process-spawning tests one by one), or when it is marked `vllm`, `slow` or `network`; every other
test is `unit`. A new test therefore lands in `unit`, and if it spawns a process (subprocess, fork, multiprocessing,
torchrun) it fails there, naming what it ran: the tier's promise (no process, no server) is checked, not hoped.
"""

from __future__ import annotations

import multiprocessing.util
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

# Whole modules whose every test spawns processes (servers, torchrun, CLIs, venvs); a mixed module marks its tests.
INTEGRATION_MODULES = frozenset(
    {
        "test_benchmark_scripts.py",
        "test_cli_runs.py",
        "test_coexistence.py",
        "test_config_side_effects.py",
        "test_multiprocess.py",
        "test_multiprocess_vllm.py",
        "test_packaging.py",
        "test_peer_suite.py",
        "test_process_group_exit.py",
        "test_real_verifiers.py",
        "test_sandbox_escapes.py",
        "test_sft_processes.py",
        "test_sharding_devices.py",
        "test_v1_envs.py",
        "test_verifiers_own_envs.py",
        "test_vf_eval.py",
        "test_vllm.py",
        "test_vllm_extra.py",
        "test_vllm_sampling.py",
    }
)
# Marks that already say "not quick, not in-process".
INTEGRATION_MARKS = ("integration", "vllm", "slow", "network")

# The commands the unit test running now has spawned; None while an integration test (or nothing) runs.
_spawned: list[str] | None = None


def is_integration(item: pytest.Item) -> bool:
    return item.path.name in INTEGRATION_MODULES or any(item.get_closest_marker(m) for m in INTEGRATION_MARKS)


# Seconds each test file took in a whole `uv run pytest --durations=0` run, and each test of 10 s or more
# (`tests/file.py::test` lines), for the order only (regenerate with `python tests/tiers.py LOG [LOG ...] >
# tests/durations.txt` after a time changes much; give each venv's run, as .ci/run runs some files in another).
DURATIONS = Path(__file__).with_name("durations.txt")
LONG_TEST = 10.0  # seconds: a test this long gets its own durations.txt line


def file_seconds(text: str) -> dict[str, float]:
    """A durations.txt (`seconds  tests/file.py` and `seconds  tests/file.py::test` lines) as a dict."""
    return {path: float(sec) for sec, path in (line.split() for line in text.splitlines() if line.strip())}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    known = file_seconds(DURATIONS.read_text()) if DURATIONS.exists() else {}
    guess: dict[Any, float] = {}  # a file not in durations.txt: 5 s an integration test, 25 s one marked slow
    for item in items:
        integration = is_integration(item)
        item.add_marker(pytest.mark.integration if integration else pytest.mark.unit)
        guess[item.path] = guess.get(item.path, 0) + 5 * integration + 20 * bool(item.get_closest_marker("slow"))
    root = Path(__file__).parent.parent

    def file_key(item: pytest.Item) -> float:
        # A file recorded at 0 s only skipped in that run (a venv without its extra): the guess orders it there.
        return -(known.get(_relative(item.path, root)) or guess[item.path])

    # The longest files first (each file's tests kept together, in order): pytest-xdist hands out files in this
    # order (--dist loadfile), so the long ones start early and the many short ones fill in at the end. A run that
    # hands out single tests (--dist load / loadgroup: .ci/run's extra venvs) gets its long tests first instead,
    # each recorded one by its own time, so no worker is left with a long test while the other idles.
    if config.getoption("dist", "no") in ("load", "loadgroup"):
        items.sort(key=lambda item: (-known.get(item.nodeid, 0.0), file_key(item)))  # nodeid: as --durations names it
    else:
        items.sort(key=file_key)


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def durations_by_test(log: str) -> dict[str, float]:
    """The seconds pytest's `--durations=N` report gives each test (setup, call, teardown summed)."""
    seconds: dict[str, float] = {}
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith("s") and parts[1] in ("setup", "call", "teardown"):
            seconds[parts[2]] = seconds.get(parts[2], 0.0) + float(parts[0][:-1])
    return seconds


def durations_lines(logs: list[str]) -> list[str]:
    """durations.txt's lines from runs' `--durations=0` output: each file's seconds (summed over its tests), then
    each long test's; a test in two logs (two venvs) counts at its longer time."""
    tests: dict[str, float] = {}
    for log in logs:
        for test, sec in durations_by_test(log).items():
            tests[test] = max(sec, tests.get(test, 0.0))
    files: dict[str, float] = {}
    for test, sec in tests.items():
        path = test.split("::")[0]
        files[path] = files.get(path, 0.0) + sec
    long = {t: s for t, s in tests.items() if s >= LONG_TEST}
    ordered = [kv for part in (files, long) for kv in sorted(part.items(), key=lambda kv: -kv[1])]
    return [f"{sec:8.1f}  {path}" for path, sec in ordered]


if __name__ == "__main__":  # python tests/tiers.py LOG [LOG ...]: durations.txt from --durations=0 runs' output
    import sys

    print("\n".join(durations_lines([Path(a).read_text() for a in sys.argv[1:]])))


# What libraries run on their own to look something up (ctypes.util.find_library: `ldconfig -p`, uncached; platform:
# `uname -p`; matplotlib's first font cache on a new machine: `fc-list`): whichever test first imports such a library
# would fail, depending on what ran before it.
LIBRARY_LOOKUPS = {"ldconfig", "uname", "fc-list"}


def _program(what: object) -> str:
    first = what[0] if isinstance(what, (list, tuple)) and what else what
    first = os.fsdecode(first) if isinstance(first, (str, bytes, os.PathLike)) else str(first)
    return os.path.basename(first.split()[0]) if first.split() else ""


def _note(what: object) -> None:
    if _spawned is not None and _program(what) not in LIBRARY_LOOKUPS:
        _spawned.append(str(what)[:200])


def _watch(owner: object, name: str, describe) -> None:
    original = getattr(owner, name)

    def watched(*args, **kwargs):
        _note(describe(args, kwargs))
        return original(*args, **kwargs)

    setattr(owner, name, watched)


def install_spawn_watch() -> None:
    """Wrap every way a test process starts another: subprocess (and asyncio's, built on it), fork, posix_spawn,
    multiprocessing's spawn/forkserver. The spawn still happens; the unit test fails after it."""
    _watch(subprocess.Popen, "_execute_child", lambda a, k: a[1])  # (self, args, ...)
    _watch(os, "fork", lambda a, k: "os.fork()")
    _watch(os, "posix_spawn", lambda a, k: a[1] if len(a) > 1 else a)
    _watch(os, "posix_spawnp", lambda a, k: a[1] if len(a) > 1 else a)
    _watch(multiprocessing.util, "spawnv_passfds", lambda a, k: a[1] if len(a) > 1 else a)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a unit test's setup: its session and module fixtures' spawns count as its own."""
    global _spawned
    _spawned = None if is_integration(item) else []


@pytest.fixture(autouse=True)
def unit_tests_spawn_nothing():
    """A unit test that started a process fails, with the command; integration tests are not watched."""
    global _spawned
    try:
        yield
    finally:
        spawned, _spawned = _spawned, None
    if spawned:
        pytest.fail(
            f"a unit test spawned {len(spawned)} process(es), first: {spawned[0]}; mark it "
            "@pytest.mark.integration or list its module in tests/tiers.py INTEGRATION_MODULES",
            pytrace=False,
        )
