"""Which inference runtime a trainer uses and how new weights reach it: `InferencePlan`.

`plan_inference` is the one decision; `inference_plan_for(args, ...)` reads an RLConfig's settings for it (a
notebook's `RLTrainer`), `plan_launch` (launch.py) reads a vf-rl config's."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from verifiers_rl.errors import VLLMLaunchError
from verifiers_rl.plan.transfer import resolve_transfer

INFERENCE_BACKENDS = ("auto", "local", "vllm")  # [inference] backend and RLConfig.inference_backend


def resolve_backend(asked: str, *, server_given: bool, can_start_server: bool = False) -> str:
    """What 'auto' means, for every caller: vLLM when a server is given, or when the caller starts one unasked
    (`can_start_server`: vf-rl on GPUs with vLLM; never a script's RLTrainer); else the local engine."""
    if asked != "auto":
        return asked
    return "vllm" if server_given or can_start_server else "local"


@dataclass
class InferencePlan:
    """backend 'local': the in-process engine, generating with the policy itself (`shared`) or a copy refreshed after
    each step (`snapshot`). backend 'vllm': servers at `urls` (never started or stopped by us), or one started here
    (`start_server`); new weights by `weight_sync`."""

    backend: str
    weight_sync: str
    urls: list[str] = field(default_factory=list)
    start_server: bool = False
    host: str = "127.0.0.1"
    port: int | None = None
    transfer_host: str | None = None
    colocated: bool = False
    server_gpus: list[int] = field(default_factory=list)  # a script's trainer: where the server it starts goes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def joining(self, url: str) -> "InferencePlan":
        """The plan of a training process other than rank 0 when this plan starts a server: rank 0 starts it (one
        server for all ranks), the others send their requests to it at `url`."""
        return replace(self, urls=[url], start_server=False, colocated=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "InferencePlan":
        return cls(**data)


STARTED_SERVER_KEYS = ("args", "env", "python", "gpu_memory_utilization")
"""[inference] settings that shape a server vf-rl starts, and reach no server it is given or finds running."""


def found_server_note(url: str, given: list[str]) -> str | None:
    """One warning line when a server found answering at the port is used and `given` start-only settings were
    set: they do not reach it."""
    if not given:
        return None
    return (f"warning: a server already answers at {url} and is used as it was started: [inference] "
            f"{', '.join(given)} shape a server vf-rl starts and do not apply to it (stop it to start one with them)")


def running_server(host: str, port: int | None) -> list[str]:
    """[the URL] when a server already answers at host:port, where a plan would start one: it is used as a given
    server (never stopped by us), the one place that choice is made."""
    from verifiers_rl.plan.hardware import health_ok

    url = f"http://{host}:{port}"
    return [url] if port and health_ok(url) else []


def plan_inference(*, backend: str, urls: list[str], host: str, port: int | None, local_async: bool,
                   use_lora: bool, transfer: str, transfer_host: str | None, cuda: bool, vllm_in_trainer: bool,
                   server_given: bool = False, colocated: bool = False) -> InferencePlan:
    """backend 'auto' by `resolve_backend`, with no server started unasked (vf-rl decides that before calling).
    Raises VLLMLaunchError (one line) for a weight transfer these servers can't take."""
    backend = resolve_backend(backend, server_given=bool(urls or port or server_given))
    if backend == "local":
        return InferencePlan("local", "snapshot" if local_async else "shared")
    reach = list(urls) or ([f"http://{host}:{port}"] if port else [])
    try:
        sync = resolve_transfer(transfer, use_lora=use_lora, cuda=cuda, vllm_in_trainer=vllm_in_trainer,
                                urls=reach, transfer_host=transfer_host, shared_gpu=not urls and colocated)
    except ValueError as e:
        raise VLLMLaunchError(str(e)) from None
    return InferencePlan("vllm", sync, list(urls), start_server=not urls, host=host, port=port,
                         transfer_host=transfer_host, colocated=colocated and not urls)


def inference_plan_for(args: Any, *, cuda: bool, server_config: Any = None, trainer_devices: list[int] | None = None,
                       visible: int = 0) -> InferencePlan:
    """The plan for an RLTrainer built in a script or notebook; a server it starts with no GPUs named goes where
    vf-rl would put it (`server_beside`)."""
    from verifiers_rl.plan.gpus import plan_gpus, server_beside
    from verifiers_rl.plan.hardware import vllm_importable

    get = server_config.get if isinstance(server_config, dict) else (lambda k: getattr(server_config, k, None))
    colocate = get("colocate")
    urls = list(args.vllm_server_urls or [])
    backend = args.inference_backend
    vllm = resolve_backend(backend, server_given=bool(args.vllm_server_port or server_config is not None)) == "vllm"
    if not urls and vllm:
        urls = running_server(args.vllm_server_host, args.vllm_server_port)
        note = urls and found_server_note(urls[0], [k for k in STARTED_SERVER_KEYS if get(k)])
        if note:
            print(note, flush=True)
    starts = not urls and vllm
    server_gpus: list[int] = []
    if starts and get("gpus") is not None:  # the server config names its GPUs: shared or not is decided here
        colocate = plan_gpus(get("gpus"), get("trainer_gpus"), available=visible or None, colocate=colocate).colocated
    elif starts and cuda and visible:
        server_gpus, colocate = server_beside(list(trainer_devices or [0]), visible, colocate)
    plan = plan_inference(
        backend=backend, urls=urls, host=args.vllm_server_host,
        port=args.vllm_server_port, local_async=bool(args.local_async), use_lora=bool(args.use_lora),
        transfer=args.vllm_weight_transfer, transfer_host=args.vllm_weight_transfer_host, cuda=cuda,
        vllm_in_trainer=vllm_importable(), server_given=server_config is not None, colocated=bool(colocate))
    if plan.start_server:
        plan.server_gpus = server_gpus
    return plan


def inference_plan_for_model(args: Any, model: Any, server_config: Any = None) -> InferencePlan:
    """`inference_plan_for` with where `model` lives: its GPU, or under torchrun each local rank's
    (cuda:LOCAL_RANK), among the visible ones."""
    import os

    from verifiers_rl.plan.hardware import gpu_count

    params = next(iter(model.parameters()), None)
    cuda = params is not None and params.is_cuda
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    devices = list(range(local_world)) if local_world > 1 else [params.device.index or 0] if cuda else []
    return inference_plan_for(args, cuda=cuda, server_config=server_config, trainer_devices=devices,
                              visible=gpu_count() if cuda else 0)
