"""A fork server for one harness program (a PEP 723 script a v1 harness runs per episode), run by the script's own
interpreter: `python warm_server.py SOCKET SCRIPT`. It imports the script's top-level modules once, then forks a
child per request that runs the script as `__main__` with the request's argv, environment and working directory,
in its own session (so the caller can kill its process group), its stdout and stderr captured.

Why: verifiers' `null` harness starts its chat program, a fresh Python that imports openai, httpx and anyio, for
every episode (about 1-2 s of imports here); a forked child starts with them imported. What a run does at first
use the server then does before its next fork (`learn`): the modules it imported lazily, the pydantic models it
built lazily, the CA bundles it loaded through `ssl.create_default_context`. The caller's side is
`v1/warm_programs.py`. Standard library only: this file runs in the script's environment, not in ours.

Protocol, one connection per run: request `{"args": [...], "env": {...}, "cwd": "..."}` + newline; replies
`{"pid": N}` + newline once the child runs, then `{"exit": code, "stdout": "...", "stderr": "..."}` + newline.
"""

from __future__ import annotations

import ast
import builtins
import gc
import importlib
import json
import os
import signal
import socket
import ssl
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
    """Do before the next fork what earlier runs did lazily (listed in `path` by `run_child`), so the next children
    start with it done: import the modules they imported at first use (an HTTP client's transport, an SDK's
    resources) and build the pydantic models they built at first use (SDKs defer them: openai's response types
    cost about 35 ms a run here)."""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return
    for name in lines:
        if name.startswith("model:"):
            _build_model(name[len("model:"):])
        elif name.startswith("ssl:"):
            _premake_ssl(tuple(json.loads(name[len("ssl:"):])))
        elif name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the child imports it as it did before
                pass


def _build_model(ref: str) -> None:
    module, _, qualname = ref.partition(":")
    name, _, params = qualname.partition("[")
    obj = sys.modules.get(module)
    for part in name.split("."):
        obj = getattr(obj, part, None)
    if params and obj is not None:  # a parametrised generic model, e.g. `ParsedChoice[object]`: make it here too
        args = [getattr(sys.modules.get(module), p, None) or getattr(builtins, p, None)
                for p in params.rstrip("]").replace(" ", "").split(",")]
        try:
            obj = obj[tuple(args) if len(args) > 1 else args[0]] if None not in args else None
        except Exception:  # noqa: BLE001 - not one we can name: the child builds it
            obj = None
    rebuild = getattr(obj, "model_rebuild", None)
    if rebuild is not None and not getattr(obj, "__pydantic_complete__", True):
        try:
            rebuild()
        except Exception:  # noqa: BLE001 - the child builds it as it did before
            pass


_SSL_POOL: dict = {}  # (cafile, capath) → an unused context made by create_default_context with those arguments
_ssl_missed: list = []  # the pool keys a run asked for and did not find (learned for the next fork)


def _premake_ssl(key: tuple) -> None:
    """Load a CA bundle once (an HTTP client loads it for every client it makes: about 45 ms a run here)."""
    if key not in _SSL_POOL:
        try:
            _SSL_POOL[key] = _ORIGINAL_SSL_CONTEXT(cafile=key[0], capath=key[1])
        except Exception:  # noqa: BLE001 - the child makes it (and reports it) as it would have
            pass


def _create_default_context(purpose=ssl.Purpose.SERVER_AUTH, *, cafile=None, capath=None, cadata=None):
    """`ssl.create_default_context`, handing out a context the server made with the same arguments (once each per
    run: what the call would return, made earlier). Only for a CA file or directory named by the caller: the
    defaults depend on the environment (SSL_CERT_FILE) the server and the run do not share."""
    if purpose == ssl.Purpose.SERVER_AUTH and cadata is None and (cafile or capath):
        made = _SSL_POOL.pop((cafile, capath), None)
        if made is not None:
            return made
        _ssl_missed.append((cafile, capath))
    return _ORIGINAL_SSL_CONTEXT(purpose, cafile=cafile, capath=capath, cadata=cadata)


_ORIGINAL_SSL_CONTEXT = ssl.create_default_context


def unbuilt_models() -> set:
    """The pydantic model classes loaded but not built yet (none when pydantic is not loaded)."""
    main = sys.modules.get("pydantic.main")
    if main is None:
        return set()
    out, stack = set(), [main.BaseModel]
    while stack:
        for cls in stack.pop().__subclasses__():
            stack.append(cls)
            if cls.__dict__.get("__pydantic_complete__") is False and "<" not in cls.__qualname__:
                out.add(cls)
    return out


def learned_lines(modules_before: set, unbuilt_before: set) -> list[str]:
    """What this run did lazily: the modules it imported, the models it built."""
    modules = [m for m in list(sys.modules) if m not in modules_before and not m.startswith("__")]
    models = [f"model:{c.__module__}:{c.__qualname__}" for c in unbuilt_before
              if c.__dict__.get("__pydantic_complete__") is True]
    return modules + models + [f"ssl:{json.dumps(list(key), separators=(',', ':'))}" for key in _ssl_missed]


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
    before, unbuilt = set(sys.modules), unbuilt_models()
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
        new = learned_lines(before, unbuilt)
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
    ssl.create_default_context = _create_default_context  # before the imports: `from ssl import ...` gets it too
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
        gc.freeze()  # what the server holds stays out of the children's collections: no copy-on-write of it
        if os.fork() == 0:
            server.close()
            run_child(conn, script, code_obj, learned)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
