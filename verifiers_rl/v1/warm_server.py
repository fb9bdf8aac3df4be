"""A fork server for one harness program (a PEP 723 script a v1 harness runs per episode), run by the script's own
interpreter: `python warm_server.py SOCKET SCRIPT`. Standard library only; the caller's side is `v1/warm_programs.py`.

It imports the script's top-level modules once, then forks a child per request that runs the script as `__main__` with
the request's argv, env and cwd, in its own session (so the caller can kill its process group). Protocol, one connection
per run: `{"args", "env", "cwd"}` in; `{"pid"}` once the child runs, then `{"exit", "stdout", "stderr"}`.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import functools
import gc
import importlib
import json
import os
import signal
import socket
import ssl
import sys
import pickle
import tempfile
import traceback
import types


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
        with contextlib.suppress(Exception):  # the child imports it (and reports it) as the script would
            importlib.import_module(name)
            done.append(name)
    return done


def learn(path: str, offset: int = 0) -> int:
    """Do before the next fork what earlier runs did lazily (listed in `path` by `run_child`, read from `offset`):
    import modules, build pydantic models (SDKs defer them), premake CA-bundle SSL contexts, replay memoised calls.
    Returns the offset read to (whole lines only: a child may be writing the next one)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    data = data[:data.rfind(b"\n") + 1]
    for name in data.decode("utf-8", errors="replace").splitlines():
        if name.startswith("model:"):
            _build_model(name[len("model:"):])
        elif name.startswith("ssl:"):
            _premake_ssl(tuple(json.loads(name[len("ssl:"):])))
        elif name.startswith("memo:"):
            _replay_memo(name[len("memo:"):])
        elif name not in sys.modules:
            with contextlib.suppress(Exception):  # the child imports it as it did before
                importlib.import_module(name)
    return offset + len(data)


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
        with contextlib.suppress(Exception):  # the child builds it as it did before
            rebuild()


_SSL_POOL: dict = {}  # (cafile, capath) → an unused context made by create_default_context with those arguments
_ssl_missed: list = []  # the pool keys a run asked for and did not find (learned for the next fork)


def _premake_ssl(key: tuple) -> None:
    """Load a CA bundle once (an HTTP client loads it for every client it makes)."""
    if key not in _SSL_POOL:
        with contextlib.suppress(Exception):  # the child makes it (and reports it) as it would have
            _SSL_POOL[key] = _ORIGINAL_SSL_CONTEXT(cafile=key[0], capath=key[1])


def _create_default_context(purpose=ssl.Purpose.SERVER_AUTH, *, cafile=None, capath=None, cadata=None):
    """`ssl.create_default_context`, handing out (once per run) a context the server premade with the same
    arguments. Only for a named CA file or directory: the defaults read an environment (SSL_CERT_FILE) the server
    and the run do not share."""
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
    return (modules + models + [f"ssl:{json.dumps(list(key), separators=(',', ':'))}" for key in _ssl_missed]
            + memo_lines())


# SDKs memoise per process what they derive from types (openai's TypeAdapters), which each child would pay again: a
# child's `_Memo` records lru_cache misses with a type argument, and the server replays them before its next fork.

_MEMOS: dict = {}  # "module:name" → the original lru_cache function
_memo_missed: list = []  # (key, args, kwargs) of the calls a child's run missed
_recording = False  # true in a child only
_scanned: set = set()
MEMO_MAX_BYTES = 65536


def _is_type(value) -> bool:
    return isinstance(value, type) or hasattr(value, "__origin__")  # a class, or a typing form (List[int], ...)


class _Memo:
    """A module-level lru_cache function, recording (in a child) the calls that missed its cache."""

    __slots__ = ("_fn", "_key")

    def __init__(self, fn, key: str) -> None:
        self._fn, self._key = fn, key

    def __call__(self, *args, **kwargs):
        if not _recording:
            return self._fn(*args, **kwargs)
        misses = self._fn.cache_info().misses
        result = self._fn(*args, **kwargs)
        if self._fn.cache_info().misses != misses and any(_is_type(a) for a in args):
            _memo_missed.append((self._key, args, kwargs))
        return result

    def __get__(self, obj, objtype=None):  # as the lru_cache wrapper binds, when it sits on a class
        return self if obj is None else types.MethodType(self, obj)

    def __getattr__(self, name):
        return getattr(self._fn, name)


def wrap_memos() -> None:
    """Wrap the module-level lru_cache functions of the third-party modules loaded since the last call."""
    stdlib = getattr(sys, "stdlib_module_names", ())
    found: dict = {}
    for name, module in list(sys.modules.items()):
        if name in _scanned or name.partition(".")[0] in stdlib or module is None:
            continue
        _scanned.add(name)
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if isinstance(value, functools._lru_cache_wrapper):
                found.setdefault(id(value), (value, f"{name}:{attr}"))
    if not found:
        return
    proxies = {i: _Memo(fn, key) for i, (fn, key) in found.items()}
    _MEMOS.update({key: fn for fn, key in found.values()})
    for module in list(sys.modules.values()):  # every module that imported one holds the same object
        d = getattr(module, "__dict__", None)
        if isinstance(d, dict):
            for attr, value in list(d.items()):
                if id(value) in proxies and isinstance(value, functools._lru_cache_wrapper):
                    d[attr] = proxies[id(value)]


def memo_lines() -> list[str]:
    lines = []
    for call in _memo_missed:
        try:
            blob = pickle.dumps(call, protocol=4)
        except Exception:  # noqa: BLE001 - not one the server can make: the child computed it
            continue
        if len(blob) <= MEMO_MAX_BYTES:
            lines.append("memo:" + base64.b64encode(blob).decode())
    return list(dict.fromkeys(lines))


def _replay_memo(blob: str) -> None:
    with contextlib.suppress(Exception):  # the next child computes it as it did before
        key, args, kwargs = pickle.loads(base64.b64decode(blob))
        fn = _MEMOS.get(key)
        if fn is not None:
            fn(*args, **kwargs)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def run_child(conn: socket.socket, script: str, code_obj: object, learned: str, unbuilt: set) -> None:
    """In the forked child: run the script for the request on `conn`, reply, exit. What the run did lazily
    (`learned_lines`) is appended to `learned`, for the server to do before its next fork."""

    global _recording
    code = 1
    before = set(sys.modules)
    _recording = True
    try:
        data = b""
        while not data.endswith(b"\n"):  # the request line
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        request = json.loads(data)
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
    # SIGTERM when the process that started us dies (Linux), so no fork server outlives the trainer; elsewhere the
    # caller's atexit stops us
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
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
    wrap_memos()
    offset, unbuilt = 0, unbuilt_models()
    while True:
        conn, _ = server.accept()
        read_to = learn(learned, offset)
        if read_to != offset:  # something new was built or imported: walk the models again
            wrap_memos()
            offset, unbuilt = read_to, unbuilt_models()
        gc.freeze()  # what the server holds stays out of the children's collections: no copy-on-write of it
        if os.fork() == 0:
            server.close()
            run_child(conn, script, code_obj, learned, unbuilt)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
