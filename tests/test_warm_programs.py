"""Harness programs started warm (verifiers_rl/v1/warm_programs.py, warm_server.py): a fork server run by a
script's interpreter runs the script per request as `python SCRIPT ARGS` would, with the request's environment,
working directory and arguments, its exit code and output returned, its process group killed when the caller
cancels, and the modules a run imported lazily imported by the server for the next run. Real processes, this
venv's Python standing in for a uv script's interpreter (no verifiers needed)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import pytest

from verifiers_rl.v1 import warm_programs as warm

SCRIPT = '''
import json, os, sys
import email.mime.text  # a top-level import: the server imports it before any request
if "--sleep" in sys.argv:
    import time; open("pid", "w").write(str(os.getpid())); time.sleep(60)
if "CODE" in os.environ:
    import colorsys  # noqa: F401  imported at run time, as an SDK's transport is at first use
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "flag": os.environ.get("FLAG"),
                  "path0": sys.path[0], "name": __name__}))
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("CODE", "0")))
'''


@pytest.fixture
def server(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    sock = warm.server_for(sys.executable, str(script), dict(os.environ))
    assert sock is not None
    yield sock, script
    warm.stop_servers()


@pytest.mark.integration  # spawns a process
def test_a_warm_run_is_the_script_run_as_a_program(server, tmp_path):
    sock, script = server
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "FLAG": "on", "CODE": "3"}
    code, out, err = asyncio.run(warm.run_warm(sock, ["--x", "y z"], env, str(work)))
    seen = json.loads(out)
    assert code == 3 and "to stderr" in err
    assert seen == {"argv": ["--x", "y z"], "cwd": str(work), "flag": "on", "path0": str(tmp_path), "name": "__main__"}
    # the module the first run imported lazily is imported by the server for the next one
    learned = open(sock + ".modules").read().split()
    assert "colorsys" in learned
    code, _, _ = asyncio.run(warm.run_warm(sock, [], {**os.environ, "CODE": "0"}, str(work)))
    assert code == 0


@pytest.mark.integration  # spawns a process
def test_a_cancelled_run_takes_its_program_with_it(server, tmp_path):
    sock, _ = server

    async def cancel_after_start():
        task = asyncio.create_task(warm.run_warm(sock, ["--sleep"], dict(os.environ), str(tmp_path)))
        for _ in range(200):
            if (tmp_path / "pid").exists() and (tmp_path / "pid").read_text():
                break
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_after_start())
    pid = int((tmp_path / "pid").read_text())
    for _ in range(100):  # the kill is delivered at once; the process table may show it a moment later
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"program {pid} outlived its cancelled run")


def test_only_the_uv_script_form_runs_warm():
    argv = ["sh", "-c", "export ...; exec \"$@\"", "uv-script", "/venv", "/venv/bin/python", "/s/prog.py", "--a"]
    assert warm.uv_script(argv) == ("/venv", "/venv/bin/python", "/s/prog.py", ["--a"])
    assert warm.uv_script(["/venv/bin/python", "/s/prog.py"]) is None
    assert warm.uv_script(["bash", "-c", "ls"]) is None
    env = warm.activation_env("/venv", {"PATH": "/usr/bin", "HOME": "/h"})
    assert env["VIRTUAL_ENV"] == "/venv" and env["PATH"].startswith("/venv/bin:/h/.local/bin:")


LAZY = '''
import functools
import os

import pydantic


class Reply(pydantic.BaseModel):  # built at first use, as SDKs defer their response types
    model_config = pydantic.ConfigDict(defer_build=True)
    text: str


@functools.lru_cache
def fields_of(cls):  # derived from a type, memoised per process, as SDKs do with their type hints
    return tuple(cls.model_fields)


@functools.lru_cache
def home():  # reads the run's environment: the server, which does not share it, never computes it
    return os.environ.get("LAZY_HOME")
'''

FIRST_USE = '''
import json, ssl, sys
import certifi
import lazymod
built_at_start = lazymod.Reply.__pydantic_complete__
memo_at_start = lazymod.fields_of.cache_info().currsize
lazymod.Reply(text="x")  # builds it
assert lazymod.fields_of(lazymod.Reply) == ("text",)
ctx = ssl.create_default_context(cafile=certifi.where())  # as an HTTP client does for every client it makes
print(json.dumps({"built_at_start": built_at_start, "memo_at_start": memo_at_start, "home": lazymod.home(), "cas": ctx.cert_store_stats()["x509_ca"],
                  "verify": ctx.verify_mode == ssl.CERT_REQUIRED}))
'''


@pytest.mark.integration  # spawns a process
def test_what_a_run_does_at_first_use_the_next_run_finds_done(tmp_path):
    """A pydantic model built lazily is built by the server before the next fork; a CA bundle a run loaded through
    `ssl.create_default_context(cafile=...)` is loaded by the server, and the next run gets that (unused) context:
    the same certificates and settings, the key missed once only; a memoised function of a type is computed by the
    server, one of the run's environment is not (each run sees its own)."""
    (tmp_path / "lazymod.py").write_text(LAZY)
    script = tmp_path / "first_use.py"
    script.write_text(FIRST_USE)
    sock = warm.server_for(sys.executable, str(script), dict(os.environ))
    assert sock is not None
    try:
        runs = []
        for i in range(3):
            env = {**os.environ, "LAZY_HOME": f"home-{i}"}
            code, out, err = asyncio.run(warm.run_warm(sock, [], env, str(tmp_path)))
            assert code == 0, err
            runs.append(json.loads(out))
        learned = open(sock + ".modules").read().splitlines()
    finally:
        warm.stop_servers()
    assert not os.path.exists(os.path.dirname(sock))  # the socket and what it learned go with the server
    assert [r["built_at_start"] for r in runs] == [False, True, True]
    assert [r["memo_at_start"] for r in runs] == [0, 1, 1]
    assert [r["home"] for r in runs] == ["home-0", "home-1", "home-2"]
    assert runs[0]["cas"] > 0 and all(r["cas"] == runs[0]["cas"] and r["verify"] for r in runs)
    assert "model:lazymod:Reply" in learned
    assert len([line for line in learned if line.startswith("ssl:")]) == 1
