"""The persistent Python REPL that runs INSIDE a jail (python_repl.py starts it with `python -I -u -c <this file>`).

One JSON `{"code"}` per stdin line, one JSON reply per request on the process's original stdout. The cell's fd 1 and 2
point at files in the jail's /tmp, so no output can break the protocol. Standard library only.
"""

import ast
import contextlib
import json
import os
import signal
import sys
import traceback

MAX_BYTES = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
OUT, ERR = "/tmp/.vf_cell_stdout", "/tmp/.vf_cell_stderr"


def _read(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    text = data[:MAX_BYTES].decode("utf-8", errors="replace")
    return text + ("\n... [output truncated]" if len(data) > MAX_BYTES else "")


def _run_cell(code: str, namespace: dict) -> tuple[str, object]:
    try:
        tree = ast.parse(code, mode="exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if tree.body:
            exec(compile(tree, "<cell>", "exec"), namespace, namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace, namespace)
            return "ok", None if value is None else repr(value)
        return "ok", None
    except BaseException as e:  # noqa: BLE001 -- SystemExit and KeyboardInterrupt in a cell are the cell's error
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # the cell's frames only
        return "error", "".join(traceback.format_exception(type(e), e, tb))


def main() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past the size limit: an OSError in the cell
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    namespace: dict = {"__name__": "__main__"}
    count = 0
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        count += 1
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, path in ((1, OUT), (2, ERR)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        status, result = _run_cell(request.get("code", ""), namespace)
        with contextlib.suppress(OSError):
            sys.stdout.flush()
            sys.stderr.flush()
        reply = {"status": status, "stdout": _read(OUT), "stderr": _read(ERR), "result": result,
                 "execution_count": count}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
