"""OpenAI-compatible clients: a server URL, a named endpoint from `configs/endpoints.py`, or the local engine."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any


def load_endpoints(path: str | Path = "configs/endpoints.py") -> dict[str, dict[str, Any]]:
    """`ENDPOINTS = {"name": {"model": ..., "url": ..., "key": "ENV_VAR_WITH_API_KEY"}}` from the workspace
    (`base_url` / `api_key` accepted too)."""
    path = Path(path)
    if not path.exists():
        return {}
    spec = importlib.util.spec_from_file_location("vf_workspace_endpoints", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(getattr(module, "ENDPOINTS", {}))


_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def endpoint_url_and_key(name: str, ep: Any, path: str | Path) -> tuple[str, str | None]:
    """An ENDPOINTS entry in verifiers' form (`url`, `key`: an env var name) or the tutorial's (`base_url`,
    `api_key`); one line naming the entry when it has no URL."""
    from verifiers_rl.errors import ConfigError

    if not isinstance(ep, dict):
        raise ConfigError(f"{path}: ENDPOINTS[{name!r}] must be a dict with url (or base_url), model and key")
    url = ep.get("url") or ep.get("base_url")
    if not url:
        raise ConfigError(f"{path}: ENDPOINTS[{name!r}] has no url (or base_url); add the server's /v1 URL")
    return str(url), ep.get("key") or ep.get("api_key")


def env_api_key(api_key_var: str | None) -> str:
    """The key in the named env var; "EMPTY" without one (vLLM accepts any key)."""
    return (os.environ.get(api_key_var, "") if api_key_var else "") or "EMPTY"


def openai_client(base_url: str, api_key_var: str | None = None, timeout: float = 600.0,
                  max_retries: int = 3) -> Any:
    """AsyncOpenAI against `base_url`, its key from the named env var (`env_api_key`)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=base_url, api_key=env_api_key(api_key_var), timeout=timeout, max_retries=max_retries)


def resolve_model(model: str, base_url: str | None, api_key_var: str | None,
                  endpoints_path: str | Path = "configs/endpoints.py",
                  endpoints: dict[str, dict[str, Any]] | None = None) -> tuple[Any, str, Any]:
    """Returns (client, model_name, engine_or_None). A URL or a named endpoint gives a server client;
    otherwise `model` is a local dir, hub id or PEFT adapter dir served by the local engine. `endpoints`: the
    endpoints file as already loaded (else it is read here)."""
    if base_url:
        return openai_client(base_url, api_key_var), model, None
    endpoints = load_endpoints(endpoints_path) if endpoints is None else endpoints
    if model in endpoints:
        url, key = endpoint_url_and_key(model, endpoints[model], endpoints_path)
        client = openai_client(url, api_key_var or key)
        if key and not api_key_var and key not in os.environ and not _ENV_NAME.match(key):
            client = client.with_options(api_key=key)  # not a variable's name: the key itself
        return client, endpoints[model].get("model", model), None
    from verifiers_rl.inference.local_engine import LocalEngine

    engine = LocalEngine.from_pretrained(model)
    return engine.client, model, engine
