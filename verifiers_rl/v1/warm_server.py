"""A fork server for one harness program (a PEP 723 script a v1 harness runs per episode), run by the script's own
interpreter: `python warm_server.py SOCKET SCRIPT`. It imports the script's top-level modules once, then forks a
child per request that runs the script as `__main__` with the request's argv, environment and working directory,
in its own session (so the caller can kill its process group), its stdout and stderr captured.

Why: verifiers' `null` harness starts its chat program, a fresh Python that imports openai, httpx and anyio, for
every episode (about 1-2 s of imports here); a forked child starts with them imported. The caller's side is
`v1/warm_programs.py`. Standard library only: this file runs in the script's environment, not in ours.

Protocol, one connection per run: request `{"args": [...], "env": {...}, "cwd": "..."}` + newline; replies
`{"pid": N}` + newline once the child runs, then `{"exit": code, "stdout": "...", "stderr": "..."}` + newline.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import signal
import socket
import sys
import tempfile
import traceback


def preload(script: str) -> list[str]:
    """Import the modules the script imports at its top level (those that import here); their names."""
    tree = ast.parse(open(script, encoding="utf-8").read())
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    done = []
    for name in dict.fromkeys(names):
        try:
            importlib.import_module(name)
            done.append(name)
        except Exception:  # noqa: BLE001 - the child imports it (and reports it) as the script would
            pass
    return done


def learn(path: str) -> None:
    """Import the modules earlier runs imported lazily (listed in `path` by `run_child`): the next forks start with
    them too (an HTTP client's transport, an SDK's resources, imported at first use)."""
    try:
        names = open(path, encoding="utf-8").read().split()
    except OSError:
        return
    for name in names:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the child imports it as it did before
                pass


def _die_with_parent() -> None:
    """SIGTERM when the process that started us dies (Linux), so no fork server outlives the trainer."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - elsewhere the caller's atexit stops us
        pass


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def run_child(conn: socket.socket, script: str, code_obj: object, learned: str) -> None:
    """In the forked child: run the script for the request on `conn`, reply, exit; the modules the run imported
    are appended to `learned` for the server to import before its next fork."""
    code = 1
    before = set(sys.modules)
    try:
        request = json.loads(_read_line(conn))
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = [script, *request["args"]]
        try:
            # as `python SCRIPT` runs it, from the code object compiled once in the server
            exec(code_obj, {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__})
            code = 0
        except SystemExit as e:
            code = _exit_code(e)
        except BaseException:  # noqa: BLE001 - as an uncaught exception ends a script: traceback, code 1
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        new = [m for m in list(sys.modules) if m not in before and not m.startswith("__")]
        if new:
            with open(learned, "a", encoding="utf-8") as f:
                f.write("\n".join(new) + "\n")
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
        conn.sendall(json.dumps({"exit": code, "stdout": texts[0], "stderr": texts[1]}).encode() + b"\n")
    finally:
        os._exit(0)


def serve(sock_path: str, script: str) -> None:
    _die_with_parent()
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it (not this file's folder)
    sys.dont_write_bytecode = False  # what this server imports is compiled once, for its next start too
    learned = sock_path + ".modules"
    loaded = preload(script)
    code_obj = compile(open(script, encoding="utf-8").read(), script, "exec")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(256)
    print(json.dumps({"ready": True, "preloaded": loaded}), flush=True)
    while True:
        conn, _ = server.accept()
        learn(learned)
        if os.fork() == 0:
            server.close()
            run_child(conn, script, code_obj, learned)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
