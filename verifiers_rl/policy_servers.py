"""Where this process serves the model it trains or evaluates: the URLs a judge taken from OPENAI_BASE_URL must not
reach (rubrics/judge_endpoint.py). Imports nothing of the package, so inference/ and rubrics/ can both use it.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "0.0.0.0", "::1", "::", "ip6-localhost"}
_lock = threading.Lock()
_served: list[tuple[tuple[str, int, str], str, str | None]] = []  # (server key, url as given, model or None)


def server_key(url: str) -> tuple[str, int, str]:
    """(host, port, path) that two spellings of one server share: local host names as one, the scheme's default
    port filled in, a trailing "/" or "/v1" dropped (vLLM's root and its OpenAI base are the same server)."""
    parts = urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
    host = (parts.hostname or "").lower()
    if host in _LOCAL_HOSTS or host == socket.gethostname().lower():
        host = "localhost"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a malformed port: compared as written
        port = -1
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return host, port, path


def add(url: str, model: str | None = None) -> None:
    """`url` serves the policy (`model`: only that model name there is the policy; None: every model)."""
    with _lock:
        _served.append((server_key(url), url, model))


def remove(url: str) -> None:
    key = server_key(url)
    with _lock:
        _served[:] = [e for e in _served if e[0] != key]


def policy_at(url: str, model: str | None, extra: list[tuple[str, str | None]] = ()) -> str | None:
    """The policy URL that `url` + `model` would reach (registered, or one of `extra`), else None."""
    key = server_key(url)
    with _lock:
        entries = [*_served, *((server_key(u), u, m) for u, m in extra)]
    for k, served_url, served_model in entries:
        if k == key and (served_model is None or served_model == model):
            return served_url
    return None
