"""A vf-rl run resolved against this machine: `RunPlan` (where inference and training run, how weights move, the
training processes, the vLLM server's settings), made once at launch and read by every process from
`configs/plan.json` (the user's `configs/rl.toml` is never rewritten)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from verifiers_rl.errors import ConfigError, VLLMLaunchError
from verifiers_rl.plan.gpus import (DEFAULT_COLOCATED_GPU_MEMORY, data_parallel_size, default_colocate, gpu_ids,
                                   plan_gpus, server_arg, visible_devices)
from verifiers_rl.plan.inference import (STARTED_SERVER_KEYS, InferencePlan, found_server_note, plan_inference,
                                         resolve_backend, running_server)
from verifiers_rl.plan.sampling import lora_layout_line, lora_server_args, sampling_plan

PLAN_FILE = "plan.json"
CPU_CONFIG = "configs/vf-rl/quickstart.toml"


@dataclass
class RunPlan:
    lines: list[str]                        # what the console says first
    inference: InferencePlan
    server_gpus: list[int] = field(default_factory=list)
    trainer_gpus: list[int] = field(default_factory=list)
    gpus_visible: int = 0
    world_size: int = 1                     # training processes
    launcher: list[str] = field(default_factory=list)   # the command that starts them (before the worker module)
    trainer_env: dict[str, str] = field(default_factory=dict)
    server: dict[str, Any] | None = None    # VLLMServerConfig fields of the server the trainer starts
    precision: dict[str, str] = field(default_factory=dict)  # plan/precision.py's Precision: train, server_dtype
    sampling: dict[str, Any] = field(default_factory=dict)   # plan/sampling.py's SamplingPlan: what the sampler gets

    # what the console and the tests ask most
    @property
    def backend(self) -> str:
        return self.inference.backend

    @property
    def urls(self) -> list[str]:
        return self.inference.urls

    @property
    def start_server(self) -> bool:
        return self.inference.start_server

    @property
    def colocated(self) -> bool:
        return self.inference.colocated

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunPlan":
        data = dict(data)
        data["inference"] = InferencePlan.from_dict(data["inference"])
        return cls(**data)


def write_plan(plan: RunPlan, output_dir: str | Path) -> Path:
    path = Path(output_dir) / "configs" / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_dict(), indent=2) + "\n")
    return path


def read_plan(path: str | Path) -> RunPlan:
    return RunPlan.from_dict(json.loads(Path(path).read_text()))


def _plural(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


def _are(n: int) -> str:
    return "are" if n != 1 else "is"


def _requested(cfg: Any) -> tuple[str, list[str], str | None]:
    """(backend asked for: [inference] or the trainer args, the vLLM server URLs given, a note on a server found
    running at the port that leaves start-only settings unused)."""
    inf = cfg.inference
    targs = cfg.trainer.args
    backend = inf.backend if inf.backend != "auto" else str(targs.get("inference_backend") or "auto")
    given = targs.get("vllm_server_urls")
    server_urls = list(inf.urls) or ([given] if isinstance(given, str) else list(given or []))
    port = targs.get("vllm_server_port")
    if not server_urls and (port or backend == "vllm"):  # a server already answering where one would start: used
        server_urls = running_server(str(targs.get("vllm_server_host") or inf.host), port or inf.port)
        if server_urls:
            return backend, server_urls, found_server_note(
                server_urls[0], [k for k in STARTED_SERVER_KEYS if getattr(inf, k)])
    return backend, server_urls, None


def _server_given(cfg: Any, server_urls: list[str]) -> bool:
    """URLs, or a port the trainer connects to (or starts a server at): 'auto' means vLLM."""
    return bool(server_urls or cfg.trainer.args.get("vllm_server_port"))


def gpus_asked(cfg: Any) -> list[str]:
    """The GPU settings a config states itself (the defaults ask for nothing), e.g. ['trainer.gpus = 2']."""
    asked = []
    for name, section in (("inference", cfg.inference), ("trainer", cfg.trainer)):
        if "gpus" in section.model_fields_set and gpu_ids(section.gpus, f"{name}.gpus") > 0:
            asked.append(f"{name}.gpus = {section.gpus!r}")
    return asked


def _no_gpu_block(asked: list[str], source: str | None) -> str:
    source = source or "this config"
    return (f"this config asks for GPUs ({'; '.join(asked)})\n"
            "  this machine has none (torch sees no CUDA device): a run written for GPUs would take hours on the CPU\n"
            f"  for a CPU run: vf-rl @ {CPU_CONFIG}   (or pass --allow-cpu to run {source} on the CPU anyway)")


def _inference(cfg: Any, args: Any, backend: str, urls: list[str], *, cuda: bool, colocated: bool) -> InferencePlan:
    """The trainer args' own inference settings (the built RLConfig's: its defaults are declared there only), with
    what [inference] and the hardware decided."""
    t = cfg.trainer.args
    from verifiers_rl.plan.hardware import vllm_importable

    try:
        return plan_inference(
            backend=backend, urls=urls, host=str(t.get("vllm_server_host") or cfg.inference.host),
            port=t.get("vllm_server_port") or cfg.inference.port, local_async=bool(args.local_async),
            use_lora=bool(args.use_lora), transfer=str(args.vllm_weight_transfer),
            transfer_host=t.get("vllm_weight_transfer_host"), cuda=cuda,
            vllm_in_trainer=cuda and vllm_importable(), colocated=colocated)
    except VLLMLaunchError as e:
        raise ConfigError(f"trainer.args.vllm_weight_transfer: {e}") from None


def _cpu_plan(cfg: Any, args: Any, backend: str, server_urls: list[str]) -> RunPlan:
    backend = resolve_backend(backend, server_given=_server_given(cfg, server_urls))  # no server unasked on a CPU
    if server_urls and backend != "local":
        line = f"no GPU found: training on the CPU; inference: vLLM server(s) at {', '.join(server_urls)}"
    elif backend == "vllm":
        line = ("no GPU found: training on the CPU; inference: a vLLM server on the CPU, started by the trainer "
                "(inference.backend = 'vllm')")
    else:
        backend, server_urls = "local", []
        line = "no GPU found: running on the CPU with the local engine (in-process generation)"
    return RunPlan([line], _inference(cfg, args, backend, server_urls, cuda=False, colocated=False))


def _check_visible(cfg: Any, n_inf: int, n_tr: int, server_ids: list[int], trainer_ids: list[int],
                   start_server: bool, colocated: bool, gpus_visible: int) -> None:
    """A one-line ConfigError when the GPUs asked for are not all visible."""
    inf = cfg.inference
    if start_server and not colocated and not isinstance(inf.gpus, list) \
            and not isinstance(cfg.trainer.gpus, list) and n_inf + n_tr > gpus_visible:
        raise ConfigError(f"inference.gpus + trainer.gpus: {n_inf + n_tr} GPUs asked (inference {n_inf} + trainer "
                          f"{n_tr}) but only {gpus_visible} {_are(gpus_visible)} visible; lower them (or set "
                          "CUDA_VISIBLE_DEVICES)")
    if server_ids and max(server_ids) >= gpus_visible:
        raise ConfigError(f"inference.gpus: GPU {max(server_ids)} asked but only {_plural(gpus_visible)} "
                          f"{_are(gpus_visible)} visible; lower it (or set CUDA_VISIBLE_DEVICES)")
    if trainer_ids and max(trainer_ids) >= gpus_visible:
        raise ConfigError(f"trainer.gpus: {_plural(n_tr)} asked (devices {', '.join(map(str, trainer_ids))}) but "
                          f"only {_plural(gpus_visible)} {_are(gpus_visible)} visible; lower it (or set "
                          "CUDA_VISIBLE_DEVICES)")


def _describe(cfg: Any, lines: list[str], server_ids: list[int], trainer_ids: list[int], start_server: bool,
              colocated: bool) -> None:
    """Add the line saying where the server and the trainer run."""
    where = f"trainer on GPU {', '.join(map(str, trainer_ids))}" if trainer_ids else "trainer on the CPU"
    if colocated:
        share = cfg.inference.gpu_memory_utilization or DEFAULT_COLOCATED_GPU_MEMORY
        lines.insert(0, f"inference: a vLLM server on GPU {server_ids[0]}, started by the trainer and sharing the GPU "
                     f"with it (the server takes {share:g} of its memory: inference.gpu_memory_utilization)")
    elif start_server:
        lines.insert(0, f"inference: a vLLM server on GPU {', '.join(map(str, server_ids)) or '(none)'}, started by "
                     f"the trainer; {where}")
    else:
        lines.append(where)


def _gpu_backend(cfg: Any, backend: str, server_urls: list[str], has_vllm: Callable[[], bool],
                 lines: list[str]) -> tuple[str, list[str], bool]:
    """(backend, urls, start a server) on a machine with GPUs."""
    if server_urls and backend != "local":
        lines.append(f"inference: vLLM server(s) at {', '.join(server_urls)}")
        return "vllm", server_urls, False
    given = _server_given(cfg, server_urls)
    if resolve_backend(backend, server_given=given, can_start_server=not given and backend == "auto"
                       and has_vllm()) == "vllm":
        return "vllm", [], True
    lines.append("inference: local engine (in-process generation with the policy), as [inference] asks"
                 if backend == "local" else "inference: local engine (no Python with vLLM found: set "
                 "inference.python, $VF_VLLM_PYTHON, or install vllm)")
    return "local", [], False


def _gpu_plan(cfg: Any, args: Any, gpus_visible: int, backend: str, server_urls: list[str],
              has_vllm: Callable[[], bool]) -> RunPlan:
    inf = cfg.inference
    n_inf = gpu_ids(inf.gpus, "inference.gpus")
    n_tr = gpu_ids(cfg.trainer.gpus, "trainer.gpus")
    lines: list[str] = []
    backend, urls, start_server = _gpu_backend(cfg, backend, server_urls, has_vllm, lines)
    colocate = inf.colocate if start_server else False
    try:  # the bounds are checked below, naming the keys
        layout = plan_gpus(inf.gpus if start_server else None, cfg.trainer.gpus, colocate=colocate if
                           colocate is not None else default_colocate(inf.gpus, cfg.trainer.gpus, gpus_visible))
    except VLLMLaunchError as e:
        key = "inference.colocate" if colocate else "inference.gpus / trainer.gpus"
        raise ConfigError(f"{key}: {e}") from None
    server_ids, trainer_ids, colocated = list(layout.inference), list(layout.trainer), layout.colocated
    if start_server and not server_ids:
        raise ConfigError("inference.gpus = 0: the vLLM server started for this run needs a GPU of its own here; "
                          "give it one (inference.gpus = 1), or set inference.backend = 'local' (generation in the "
                          "trainer's process)")
    _check_visible(cfg, n_inf, n_tr, server_ids, trainer_ids, start_server, colocated, gpus_visible)
    _describe(cfg, lines, server_ids, trainer_ids, start_server, colocated)
    inference = _inference(cfg, args, backend, urls, cuda=bool(trainer_ids), colocated=colocated)
    return RunPlan(lines, inference, server_ids, trainer_ids, gpus_visible)


def plan_launch(cfg: Any, gpus_visible: int, has_vllm: Callable[[], bool] | None = None, *,
                allow_cpu: bool = True, output_dir: str | Path | None = None, source: str | None = None,
                args: Any) -> RunPlan:
    """The run against this machine. `args` is the built RLConfig, read so that its defaults are declared there only.
    A ConfigError when fewer GPUs are present than asked (with `allow_cpu=False`, when there are none)."""
    backend, server_urls, found_note = _requested(cfg)
    if gpus_visible == 0:
        asked = gpus_asked(cfg)
        if asked and not allow_cpu:
            raise ConfigError(_no_gpu_block(asked, source))
        plan = _cpu_plan(cfg, args, backend, server_urls)
    else:
        if has_vllm is None:
            from verifiers_rl.plan.hardware import vllm_available

            def has_vllm() -> bool:
                return vllm_available(cfg.inference.python)
        plan = _gpu_plan(cfg, args, gpus_visible, backend, server_urls, has_vllm)
    plan.gpus_visible = gpus_visible
    if found_note:
        plan.lines.insert(0, found_note)
    _processes(plan, cfg)
    _precision(plan, cfg, args)
    if plan.start_server:
        plan.server = server_settings(cfg, plan, output_dir, use_lora=bool(args.use_lora))
    sampling = sampling_plan(args, start_server=plan.start_server)
    plan.sampling = sampling.to_dict()
    plan.lines.append(sampling.line())
    return plan


def _precision(plan: RunPlan, cfg: Any, args: Any) -> None:
    """The run's precision (plan/precision.py), one line before launch for a choice vLLM can't serve."""
    from verifiers_rl.plan.precision import plan_precision

    t = cfg.trainer.args
    asked = server_arg(cfg.inference.args, "dtype")
    cuda = bool(plan.trainer_gpus)
    use_lora = bool(args.use_lora)
    try:
        precision = plan_precision(bf16=t.get("bf16"), fp16=bool(t.get("fp16", False)), use_lora=use_lora,
                                   cuda=cuda, server_dtype=asked, vllm_server=plan.start_server,
                                   server_cuda=bool(plan.server_gpus) or cuda)
    except ValueError as e:
        raise ConfigError(str(e) if str(e).startswith("inference.") else f"trainer.args.{e}") from None
    plan.precision = precision.to_dict()
    if cuda:
        plan.lines.append(precision.describe(use_lora, cuda))


def _world_size(plan: RunPlan, cfg: Any) -> int:
    """Training processes: one per trainer GPU; `[trainer] processes` on a machine without GPUs."""
    asked = cfg.trainer.processes if cfg is not None else None
    if plan.trainer_gpus:
        if asked is not None and asked != len(plan.trainer_gpus):
            raise ConfigError(f"trainer.processes: {asked} asked but training runs one process per trainer GPU "
                              f"({len(plan.trainer_gpus)}); drop trainer.processes or set trainer.gpus = {asked}")
        return len(plan.trainer_gpus)
    return asked or 1


RANK_LOGS = Path("trainer") / "torchrun"  # under logs/: torchrun's <run id>/attempt_0/<rank>/{stdout,stderr}.log


def torchrun_command(nproc: int) -> list[str]:
    """torchrun on this machine (the command before `-m module args`): a free rendezvous port, no restarts (a
    failed rank ends the run, and torchrun stops the others), failures noticed within a second."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
            "--max_restarts", "0", "--monitor_interval", "0.5"]


def _processes(plan: RunPlan, cfg: Any = None) -> None:
    """How many training processes and the command that starts them (torchrun when more than one: it starts
    exactly the processes asked for, on the CPU too, and ends them all when one fails)."""
    plan.world_size = _world_size(plan, cfg)
    plan.launcher = torchrun_command(plan.world_size) if plan.world_size > 1 else [sys.executable]
    plan.trainer_env = {"PYTHONUNBUFFERED": "1"}
    if plan.gpus_visible:
        try:  # "" trains on the CPU
            plan.trainer_env["CUDA_VISIBLE_DEVICES"] = visible_devices(plan.trainer_gpus)
        except VLLMLaunchError as e:
            raise ConfigError(str(e)) from None
    if plan.world_size > 1:
        fsdp = cfg is not None and cfg.trainer.args.get("fsdp")
        sharding = "FSDP2 (trainer.args fsdp)" if fsdp else "DDP (full weights on each; trainer.args fsdp shards)"
        plan.lines.append(f"training: {plan.world_size} processes (torchrun), each generating its share of a "
                          f"step's groups; {sharding}")


def server_settings(cfg: Any, plan: RunPlan, output_dir: str | Path | None, *, use_lora: bool = False
                    ) -> dict[str, Any]:
    """[inference] + the planned GPUs → the VLLMServerConfig fields of the server the trainer starts, its devices
    named as the parent names them (the trainer process that starts it sees only its own)."""
    inf = cfg.inference
    args = dict(inf.args)
    env: dict[str, str] = dict(inf.env)
    gpus: int | None = None
    try:
        if plan.server_gpus:
            env["CUDA_VISIBLE_DEVICES"] = visible_devices(plan.server_gpus)
        replicas = data_parallel_size(len(plan.server_gpus), args)
        if plan.colocated:  # one GPU, the trainer's: the colocated layout caps the server's memory
            gpus = 1
        elif len(plan.server_gpus) > 1 and replicas > 1:
            args["data_parallel_size"] = replicas
        args = lora_server_args(args, replicas, use_lora)
    except (VLLMLaunchError, ValueError) as e:
        raise ConfigError(str(e)) from None
    layout_line = lora_layout_line(replicas, use_lora)
    if layout_line:
        plan.lines.append(layout_line)
    if not plan.gpus_visible and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        # vLLM on the CPU reserves most of the machine's memory for its KV cache by default: 1 GiB unless told
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if plan.precision.get("server_dtype") and not any(str(k).lstrip("-").replace("-", "_") == "dtype" for k in args):
        args["dtype"] = plan.precision["server_dtype"]
    log_path = str(Path(output_dir) / "logs" / "inference.log") if output_dir is not None else None
    return {"python": inf.python, "host": inf.host, "port": inf.port, "args": args, "gpus": gpus,
            "trainer_gpus": gpus, "colocate": plan.colocated, "env": env, "log_path": log_path,
            "gpu_memory_utilization": inf.gpu_memory_utilization}
