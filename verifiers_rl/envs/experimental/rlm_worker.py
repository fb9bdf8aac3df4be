"""The processes an RLMEnv rollout runs next to the model, standard library only (run as a script, it never imports
verifiers_rl, so it starts in milliseconds).

    python rlm_worker.py tool NAME [ARG ...] [--json [PAYLOAD]] [--lines]   one root-tool call (behind each bash tool)
    python rlm_worker.py python-repl                                        the persistent Python REPL

Both reach the environment over the rollout's Unix socket ($RLM_TOOL_SOCKET), one JSON line each way. Tool arguments
follow verifiers' bash helper (positionals JSON-decoded when they can be; `--lines`: one `llm_batch` prompt per stdin
line). The REPL runs each `{"code"}` line in one namespace holding `answer`, `extra_data` and the root tools.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import socket
import sys
import traceback


def call_tool(name: str, args: list, kwargs: dict) -> tuple[object, list[str]]:
    """Ask the environment to run root tool `name`; its result and the lines it wants printed."""
    path = os.environ.get("RLM_TOOL_SOCKET", "")
    if not path:
        raise RuntimeError("RLM_TOOL_SOCKET is not set: root tools only work inside an RLM REPL")
    request = json.dumps({"tool": name, "args": list(args), "kwargs": dict(kwargs)}) + "\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(request.encode("utf-8"))
        conn.shutdown(socket.SHUT_WR)
        chunks = list(iter(lambda: conn.recv(65536), b""))
    if not chunks:
        raise RuntimeError(f"no reply from the environment for tool {name!r}")
    reply = json.loads(b"".join(chunks).decode("utf-8"))
    if reply.get("error"):
        raise RuntimeError(reply["error"])
    return reply.get("result"), list(reply.get("print_lines") or [])


# --- the shell command behind each bash tool function --------------------------------------------------
def _decode(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _split_cli(argv: list[str]) -> tuple[list[str], bool, bool, str | None]:
    positional, use_json, use_lines, payload = [], False, False, None
    while argv:
        token = argv.pop(0)
        if token == "--json":
            use_json = True
            if argv and not argv[0].startswith("--"):
                payload = argv.pop(0)
        elif token == "--lines":
            use_lines = True
        else:
            positional.append(token)
    return positional, use_json, use_lines, payload


def _json_payload(payload: str | None) -> object:
    raw = payload if payload is not None else ("" if sys.stdin.isatty() else sys.stdin.read().strip())
    if not raw:
        raise RuntimeError("Missing JSON payload.")
    try:
        return json.loads(raw)
    except ValueError as e:
        raise RuntimeError(f"Invalid JSON payload: {e}") from e


def _args_kwargs(data: object) -> tuple[list, dict]:
    if isinstance(data, dict) and ("args" in data or "kwargs" in data):
        args, kwargs = data.get("args", []), data.get("kwargs", {})
    elif isinstance(data, dict):
        args, kwargs = [], data
    elif isinstance(data, list):
        args, kwargs = data, {}
    else:
        args, kwargs = [data], {}
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise RuntimeError("JSON args must be a list and kwargs an object.")
    return args, kwargs


def _as_prompts(data: object) -> list:
    if isinstance(data, dict):
        for key in ("prompts", "messages"):
            if key in data:
                return data[key]
        return [data["prompt"]] if "prompt" in data else [data]
    return data if isinstance(data, list) else [data]


def _batch_prompts(positional: list[str], use_json: bool, use_lines: bool, payload: str | None) -> list:
    if use_json:
        if positional:
            raise RuntimeError("llm_batch --json does not accept extra args.")
        data = _json_payload(payload)
        if isinstance(data, dict) and "prompts" not in data and ("args" in data or "kwargs" in data):
            args, kwargs = _args_kwargs(data)
            return kwargs["prompts"] if "prompts" in kwargs else args
        return _as_prompts(data)
    if use_lines:
        return sys.stdin.read().splitlines()
    if len(positional) == 1 and positional[0].strip()[:1] in ("[", "{"):
        data = _decode(positional[0].strip())
        return [positional[0]] if isinstance(data, str) else _as_prompts(data)
    if positional:
        return list(positional)
    raw = "" if sys.stdin.isatty() else sys.stdin.read().strip()
    return _as_prompts(_decode(raw)) if raw else []


def _show(value: object) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _show_batch(results: list, lines: list[str]) -> None:
    per_item: dict[int, str] = {}
    for line in lines:
        text = str(line).strip()
        head, sep, rest = text.partition("]:")
        if sep and head.startswith("[") and head[1:].isdigit():
            per_item[int(head[1:])] = rest.strip()
        else:
            _show(text)
    for index, item in enumerate(results):
        meta = f" ({per_item[index]})" if index in per_item else ""
        sys.stdout.write(("\n" if index else "") + f"----- llm_batch[{index}]{meta} -----\n")
        _show(item)


def tool_main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("Error: Tool name not provided\n")
        return 1
    name, (positional, use_json, use_lines, payload) = argv[0], _split_cli(argv[1:])
    try:
        if name == "llm_batch":
            args, kwargs = [_batch_prompts(positional, use_json, use_lines, payload)], {}
        elif use_json:
            if positional:
                raise RuntimeError("--json does not accept extra args.")
            args, kwargs = _args_kwargs(_json_payload(payload))
        else:
            args, kwargs = [_decode(a) for a in positional], {}
        result, lines = call_tool(name, args, kwargs)
        if name == "llm_batch" and isinstance(result, list):
            _show_batch(result, lines)
            return 0
        for line in lines:
            _show(line)
        _show(result)
        return 0
    except Exception as e:
        sys.stderr.write(f"Error: {e}\n")
        return 1


# --- the Python REPL ------------------------------------------------------------------------------------
def _root_tool(name: str):
    def tool(*args, **kwargs):
        result, lines = call_tool(name, list(args), kwargs)
        for line in lines:
            print(line)
        return result

    tool.__name__ = name
    return tool


def _run_cell(code: str, namespace: dict, count: int) -> dict:
    out, err = io.StringIO(), io.StringIO()
    reply = {"status": "ok", "stdout": "", "stderr": "", "result": None, "execution_count": count}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            tree = ast.parse(code, mode="exec")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            if tree.body:
                exec(compile(tree, "<cell>", "exec"), namespace, namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace, namespace)
                if value is not None:
                    reply["result"] = repr(value)
    except BaseException as e:  # SystemExit / KeyboardInterrupt in a cell must not end the REPL
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # the cell's frames only
        reply["status"], reply["result"] = "error", "".join(traceback.format_exception(type(e), e, tb))
    reply["stdout"], reply["stderr"] = out.getvalue(), err.getvalue()
    answer = namespace.get("answer")
    reply["answer"] = answer if isinstance(answer, dict) else {"ready": False, "content": ""}
    try:
        json.dumps(reply["answer"])
    except (TypeError, ValueError):
        reply["answer"] = {"ready": bool(answer.get("ready")), "content": str(answer.get("content", ""))}
    return reply


def python_repl_main() -> int:
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    requests = sys.stdin
    sys.stdin = io.StringIO("")  # code that reads stdin sees end of input, never the request channel
    sys.stdout = io.StringIO()
    namespace: dict = {"__name__": "__main__", "answer": {"ready": False, "content": ""},
                       "extra_data": os.getcwd()}
    for name in json.loads(os.environ.get("RLM_ROOT_TOOL_NAMES", "[]")):
        namespace[name] = _root_tool(name)
    channel.write(json.dumps({"ready": True}) + "\n")
    channel.flush()
    count = 0
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("shutdown"):
            break
        count += 1
        channel.write(json.dumps(_run_cell(request.get("code", ""), namespace, count)) + "\n")
        channel.flush()
    return 0


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "tool":
        sys.exit(tool_main(sys.argv[2:]))
    if mode == "python-repl":
        sys.exit(python_repl_main())
    sys.stderr.write("usage: rlm_worker.py tool NAME [ARGS...] | python-repl\n")
    sys.exit(2)
