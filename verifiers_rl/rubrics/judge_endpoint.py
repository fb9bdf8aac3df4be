"""Which endpoint a JudgeRubric calls, said at start, and the one endpoint refused: the policy's own server.

The choice is verifiers' (the `judge_client`, else `AsyncOpenAI()`'s), VF_JUDGE_* first. OPENAI_BASE_URL is often set
for the model being trained, so a judge reaching the policy's server through it is refused in one line; one pointed
there on purpose (a client, or VF_JUDGE_BASE_URL) runs and the start line says so.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit, urlunsplit

from verifiers_rl import policy_servers
from verifiers_rl.rubrics.rubric import RubricSetupError

BASE_URL_VAR, API_KEY_VAR, MODEL_VAR = "VF_JUDGE_BASE_URL", "VF_JUDGE_API_KEY", "VF_JUDGE_MODEL"
OPENAI_URL_VAR, OPENAI_KEY_VAR = "OPENAI_BASE_URL", "OPENAI_API_KEY"
DEFAULT_JUDGE_MODEL = "gpt-4.1-nano"
OPENAI_API_URL = "https://api.openai.com/v1"
PASSED = "a judge_client the environment passed"
OPENAI_DEFAULT = "OpenAI's default"


class JudgeNotConfiguredError(RubricSetupError):
    pass


class JudgeIsPolicyError(RubricSetupError):
    """The judge would be the policy's own inference server (reached through OPENAI_BASE_URL)."""


@dataclass(frozen=True)
class JudgeEndpoint:
    base_url: str | None  # None: a client that does not say where it goes
    source: str  # PASSED, VF_JUDGE_BASE_URL, OPENAI_BASE_URL or OPENAI_DEFAULT
    key_source: str | None = None  # the variable the key came from (never the key)
    api_key: str = field(default="EMPTY", repr=False)

    def client(self) -> Any:
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=self.base_url, api_key=self.api_key)


def endpoint_from_settings() -> JudgeEndpoint | None:
    """The judge the settings name (the `AsyncOpenAI()` default, VF_JUDGE_* first), or None with neither a URL
    nor a key (OpenAI's API without a key cannot judge)."""
    key_source = next((v for v in (API_KEY_VAR, OPENAI_KEY_VAR) if os.environ.get(v)), None)
    url_source = next((v for v in (BASE_URL_VAR, OPENAI_URL_VAR) if os.environ.get(v)), None)
    if url_source is None and key_source is None:
        return None
    # A local judge server usually wants no key, but the client insists on one.
    return JudgeEndpoint(base_url=os.environ[url_source].strip() if url_source else OPENAI_API_URL,
                         source=url_source or OPENAI_DEFAULT, key_source=key_source,
                         api_key=os.environ[key_source] if key_source else "EMPTY")


def endpoint_of_client(client: Any) -> JudgeEndpoint:
    url = getattr(client, "base_url", None)
    return JudgeEndpoint(base_url=str(url) if url is not None else None, source=PASSED)


def shown_url(url: str | None) -> str:
    """The URL without user:password@ or a query string (where keys sometimes ride)."""
    if url is None:
        return "(a client without a base_url)"
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")) or url


def not_configured(label: str = "JudgeRubric") -> JudgeNotConfiguredError:
    return JudgeNotConfiguredError(
        f"{label}: no judge configured: pass judge_client=AsyncOpenAI(base_url=..., api_key=...) to the rubric, "
        f"or set {BASE_URL_VAR} (an OpenAI-compatible /v1 URL; else {OPENAI_URL_VAR}), {API_KEY_VAR} (default "
        f"${OPENAI_KEY_VAR}) and {MODEL_VAR} (default {DEFAULT_JUDGE_MODEL})")


def refusal(endpoint: JudgeEndpoint, model: str, extra: Iterable[tuple[str, str | None]] = (),
            label: str = "JudgeRubric", ours: bool = True) -> JudgeIsPolicyError | None:
    """The error for a judge that OPENAI_BASE_URL sends to the policy's own server, else None."""
    if endpoint.source != OPENAI_URL_VAR or endpoint.base_url is None:
        return None
    served = policy_servers.policy_at(endpoint.base_url, model, list(extra))
    if served is None:
        return None
    return JudgeIsPolicyError(
        f"{label}: {OPENAI_URL_VAR}={shown_url(endpoint.base_url)} is the policy's own inference server "
        f"({shown_url(served)}), so the model would judge itself; " + (
            f"set {BASE_URL_VAR} (with {API_KEY_VAR} and {MODEL_VAR}) to the judge's server, or unset "
            f"{OPENAI_URL_VAR}" if ours else f"set {OPENAI_URL_VAR} to the judge's server or unset it (the "
            f"verifiers package's JudgeRubric reads it), or give the environment a judge_client"))


def judge_rubrics(envs: Iterable[Any]) -> list[tuple[str, Any]]:
    """(environment name, rubric) for every judge rubric in `envs` (environments or (name, env) pairs), group
    members included, each once: anything with `judge`, `judge_client` and `judge_model` (ours or verifiers')."""
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def walk(obj: Any, label: str) -> None:
        if obj is None or id(obj) in seen:
            return
        seen.add(id(obj))
        if callable(getattr(obj, "judge", None)) and hasattr(obj, "judge_client") and hasattr(obj, "judge_model"):
            out.append((label, obj))
        members = getattr(obj, "env_map", None)
        if isinstance(members, dict):
            for name, env in members.items():
                walk(env, str(name))
        for rubric in getattr(obj, "rubrics", None) or []:
            walk(rubric, label)
        walk(getattr(obj, "rubric", None), label)

    for item in envs:
        label, env = item if isinstance(item, tuple) else (getattr(item, "env_id", None), item)
        walk(env, str(label or type(env).__name__))
    return out


_announced: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def describe(rubric: Any) -> tuple[JudgeEndpoint | None, str]:
    """(the rubric's endpoint, its model) — ours says where its endpoint came from; another JudgeRubric's client
    is described by its base_url."""
    endpoint_fn = getattr(rubric, "judge_endpoint", None)
    if callable(endpoint_fn):
        return endpoint_fn(), str(rubric.judge_model)
    client = getattr(rubric, "judge_client", None)
    if client is None:
        return None, str(rubric.judge_model)
    endpoint = endpoint_of_client(client)
    env_url = os.environ.get(OPENAI_URL_VAR)
    if env_url and endpoint.base_url and policy_servers.server_key(env_url) == policy_servers.server_key(
            endpoint.base_url):  # verifiers' own default client, AsyncOpenAI(), read it
        endpoint = JudgeEndpoint(endpoint.base_url, OPENAI_URL_VAR, OPENAI_KEY_VAR if os.environ.get(
            OPENAI_KEY_VAR) else None)
    return endpoint, str(rubric.judge_model)


def start_line(label: str, endpoint: JudgeEndpoint, model: str, own: str | None) -> str:
    key = f", key from {endpoint.key_source}" if endpoint.key_source else ""
    note = f"; this is the policy's own server ({shown_url(own)}): the model judges itself" if own else ""
    return (f"judge ({label}): {shown_url(endpoint.base_url)}, model {model} (endpoint from {endpoint.source}"
            f"{key}){note}")


def check_judges(envs: Iterable[Any], policy: Iterable[tuple[str, str | None]] = (),
                 announce: Callable[[str], None] | None = print) -> None:
    """One start line per judge (once per process unless it changed); raises for a judge that cannot run. `policy`:
    (url, model or None) pairs that serve the policy beyond `policy_servers` (a server about to start)."""
    policy = list(policy)
    for label, rubric in judge_rubrics(envs):
        endpoint, model = describe(rubric)
        if endpoint is None:
            if getattr(rubric, "funcs", None):  # reward functions that will ask it: stop now, not mid-run
                raise not_configured(f"judge ({label})")
            continue
        error = refusal(endpoint, model, policy, label=f"judge ({label})",
                        ours=callable(getattr(rubric, "judge_endpoint", None)))
        if error is not None:
            raise error
        own = policy_servers.policy_at(endpoint.base_url, model, policy) if endpoint.base_url else None
        line = start_line(label, endpoint, model, own)
        if announce is not None and _announced.get(rubric) != line:
            announce(line)
            try:
                _announced[rubric] = line
            except TypeError:  # not weak-referenceable: said again next time
                pass
