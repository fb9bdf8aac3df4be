"""Network failures as one line: the model hub (probed once, before anything loads, so an unreachable hub costs
seconds instead of minutes of library retries) and inference servers (one request with a deadline before the
rollouts). No heavy imports: the console scripts call this first."""

from __future__ import annotations

import os
import socket
import threading
from contextlib import contextmanager
from typing import Callable, Iterator
from urllib.parse import urlsplit

from verifiers_rl.verbosity import env_flag

PROBE_TIMEOUT_S = 3.0
SERVER_TIMEOUT_S = 10.0
# Set by `go_offline_if_hub_unreachable` (inherited by the processes vf-rl starts): why we went offline.
UNREACHABLE_ENV = "VF_HUB_UNREACHABLE"


def hub_url() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hub_offline() -> bool:
    return env_flag("HF_HUB_OFFLINE")


def _connect_error(url: str, timeout: float) -> str | None:
    """Why a TCP connection to `url`'s host can't be made within `timeout` (DNS included), or None. Behind a proxy
    (HTTPS_PROXY / HTTP_PROXY / ALL_PROXY, the host not in NO_PROXY), as the libraries connect: to the proxy."""
    from urllib.request import getproxies_environment, proxy_bypass_environment

    parts = urlsplit(url)
    proxies = getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not proxy_bypass_environment(parts.hostname or ""):
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    result: list[str | None] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(None)
        except socket.gaierror:
            result.append(f"cannot resolve {host}")
        except ConnectionRefusedError:
            result.append("connection refused")
        except (TimeoutError, socket.timeout):
            result.append(f"no answer within {timeout:.0f} s")
        except OSError as e:
            result.append(e.strerror or type(e).__name__)

    # getaddrinfo has no timeout of its own: a thread bounds the whole probe.
    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return result[0] if result else f"no answer within {timeout:.0f} s"


_probed: dict[str, str | None] = {}


def hub_unreachable(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the hub can't be reached (probed once per process and endpoint), or None (also when offline)."""
    if hub_offline():
        return None
    url = hub_url()
    if url not in _probed:
        _probed[url] = _connect_error(url, timeout)
    return _probed[url]


def go_offline_if_hub_unreachable(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """When the hub can't be reached, set HF_HUB_OFFLINE=1 for this process and the ones it starts (before
    transformers / datasets are imported: they read it once) and return a note saying so; else None."""
    why = hub_unreachable(timeout)
    if why is None:
        return None
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ[UNREACHABLE_ENV] = f"{hub_url()} ({why})"
    return (f"the model hub {hub_url()} cannot be reached ({why}): working offline (HF_HUB_OFFLINE=1), "
            "models and datasets come from the local cache")


def push_to_hub_problem(push_to_hub: bool) -> str | None:
    """One line when push_to_hub is on and the hub cannot be reached (transformers' Trainer creates the repo in its
    __init__: a bare ConnectError), else None."""
    if not push_to_hub:
        return None
    if hub_offline():
        why = hub_state()
    elif reason := hub_unreachable():
        why = f"the model hub {hub_url()} cannot be reached ({reason})"
    else:
        return None
    return (f"push_to_hub=True, but {why}; set push_to_hub=False and upload the output dir later (`hf upload`), or "
            "train where the hub can be reached")


WANDB_OFF_MODES = ("offline", "disabled", "dryrun")


def wandb_url(env: dict[str, str] | None = None) -> str:
    """The W&B server a run logs to: WANDB_BASE_URL, else `wandb login --host`'s settings file, else wandb's default
    (read from the installed wandb, which moves it: api.wandb.ai, then CoreWeave's)."""
    import configparser

    env = dict(os.environ) if env is None else env
    if env.get("WANDB_BASE_URL"):
        return env["WANDB_BASE_URL"].rstrip("/")
    settings = configparser.ConfigParser()
    folder = env.get("WANDB_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".config", "wandb")
    settings.read(os.path.join(folder, "settings"))
    if settings.get("default", "base_url", fallback=None):
        return settings.get("default", "base_url").rstrip("/")
    try:
        from wandb.sdk.lib.urls import DEFAULT_BASE_URL
    except ImportError:  # an older wandb
        return "https://api.wandb.ai"
    return DEFAULT_BASE_URL


def wandb_needs_key(env: dict[str, str]) -> bool:
    """Whether W&B, on and online, finds no key here (WANDB_API_KEY, an identity token file, a `wandb login` netrc
    entry): a command cannot answer wandb's prompt for one."""
    if env.get("WANDB_MODE") in WANDB_OFF_MODES or env.get("WANDB_API_KEY") or env.get("WANDB_IDENTITY_TOKEN_FILE"):
        return False
    netrc = env.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        with open(netrc, errors="replace") as f:
            return "wandb" not in f.read()
    except OSError:
        return True


def wandb_unreachable(env: dict[str, str] | None = None, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why W&B, logging online, cannot reach its server ("W&B's server URL cannot be reached (why)"; wandb.init
    would retry for some 100 s, then raise, after the model and the environments have loaded), else None."""
    env = dict(os.environ) if env is None else env
    if env.get("WANDB_MODE") in WANDB_OFF_MODES:
        return None
    url = wandb_url(env)
    why = _connect_error(url, timeout)
    if why is None:
        return None
    return f"W&B's server {url} cannot be reached ({why})"


def hub_state() -> str:
    why = os.environ.get(UNREACHABLE_ENV)
    if why:  # "URL (reason)"
        url, _, reason = why.partition(" (")
        return f"the model hub {url} cannot be reached" + (f" ({reason}" if reason else "")
    if hub_offline():
        return "HF_HUB_OFFLINE=1 is set"
    return f"the model hub {hub_url()} cannot be reached"


_HUB_MARKERS = ("OfflineModeIsEnabled", "LocalEntryNotFoundError", "couldn't connect to", "Couldn't reach",
                "offline mode", "Connection refused", "Failed to establish a new connection", "ConnectError",
                "Max retries exceeded", "Name or service not known", "Temporary failure in name resolution")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def is_hub_failure(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a failed / forbidden trip to the hub."""
    for e in _chain(exc):
        text = f"{type(e).__name__}: {e}"
        if any(m.lower() in text.lower() for m in _HUB_MARKERS):
            return True
    return False


@contextmanager
def hub_failures_as(message: Callable[[], str]) -> Iterator[None]:
    """Re-raise a failed trip to the hub inside the block as NetworkError(message()), one line."""
    from verifiers_rl.errors import NetworkError

    try:
        yield
    except NetworkError:
        raise
    except Exception as e:
        if is_hub_failure(e):
            raise NetworkError(message()) from e
        raise


def check_model_path(name: str) -> None:
    """Raise ModelNotFoundError when `name` is a path (absolute, ./, ../, ~, or more than one '/') that does not
    exist: transformers would take it for a hub id and call it an invalid one."""
    from pathlib import Path

    from verifiers_rl.errors import ModelNotFoundError

    path = Path(name).expanduser()
    if not path.exists() and (path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1):
        raise ModelNotFoundError(f"model {name!r}: no such directory (a hub id is 'name' or 'owner/name')")


def check_model_reachable(name: str) -> None:
    """Before a run starts, without transformers: `name` is a local dir, or a hub id the hub or the cache can give;
    else ModelNotFoundError / NetworkError, one line."""
    from pathlib import Path

    from verifiers_rl.errors import NetworkError

    check_model_path(name)
    if Path(name).expanduser().exists() or not (hub_offline() or hub_unreachable()):
        return
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except Exception:  # not a valid repo id: the loader's own error, later, says so
        return
    if not isinstance(cached, str):
        raise NetworkError(model_hub_message(name))


def model_hub_message(model: str) -> str:
    return (f"model {model!r}: not a local dir and not in the Hugging Face cache, and {hub_state()}; pass a local "
            "model dir (vf-tiny-model DIR builds an offline one), or download it where the hub is reachable "
            "(then HF_HUB_OFFLINE=1 reads it from the cache)")


def dataset_hub_message(env_id: str, takes_dataset_source: bool) -> str:
    fix = ("pass dataset_source=offline to it ([env] args = { dataset_source = \"offline\" } in vf-rl, "
           "-a '{\"dataset_source\": \"offline\"}' in vf-eval)"
           if takes_dataset_source else "run where the hub is reachable once (the dataset is then cached)")
    return f"environment {env_id!r}: its dataset is not in the local cache and {hub_state()}; {fix}"


# --- inference servers ---------------------------------------------------------------------------------------------


def check_server(base_url: str, timeout: float = SERVER_TIMEOUT_S) -> str | None:
    """One GET of `<base_url>/models` with a deadline: None when the server answers (any HTTP status), else one
    line saying what failed and what to do."""
    import urllib.error
    import urllib.request

    base_url = base_url.rstrip("/")
    url = base_url + "/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # it answered (an auth error or a missing route is the client's business)
    except (TimeoutError, socket.timeout):
        return (f"inference server {base_url}: accepted the connection but did not answer within {timeout:.0f} s; "
                "check that it is an OpenAI-compatible server and that it finished starting (its log)")
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return (f"inference server {base_url}: no answer within {timeout:.0f} s; check that it is an "
                    "OpenAI-compatible server and that it finished starting (its log)")
        why = getattr(reason, "strerror", None) or str(reason)
        return (f"inference server {base_url}: cannot connect ({why}); start it (e.g. vllm serve MODEL) or fix "
                "the URL")
