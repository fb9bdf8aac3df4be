"""A GPU plan read without GPUs: `vf-rl @ x.toml --dry-run --gpus N` plans the run for N GPUs and prints each
process with its `CUDA_VISIBLE_DEVICES`, the vLLM server's command, the weight transfer, the precision and the
memory estimate. Nothing starts and no GPU is touched."""

from __future__ import annotations

import os
import shlex
from types import SimpleNamespace
from typing import Any, Callable

from verifiers_rl.plan.gpus import DEFAULT_COLOCATED_GPU_MEMORY
from verifiers_rl.plan.launch import RunPlan, plan_launch

PARENT_DEVICES = "VF_PARENT_CUDA_VISIBLE_DEVICES"  # the caller's CUDA_VISIBLE_DEVICES, kept while a dry run hides GPUs


def rl_args_view(cfg: Any, plan: RunPlan, output_dir: str = "") -> Any:
    """The trainer's RLConfig values the server's launch reads (defaults + [trainer.args], the plan's precision),
    without building an RLConfig (which would look at this machine's devices)."""
    from verifiers_rl.config.trainer_args import preview_class
    from verifiers_rl.trainer.config_fields import field_default

    cls = preview_class()  # RLConfig's fields without importing transformers
    if cls is None:
        from verifiers_rl.trainer.config import RLConfig as cls
    values = {name: field_default(f) for name, f in cls.__dataclass_fields__.items()}
    values.update({k.replace("-", "_"): v for k, v in cfg.trainer.args.items()})
    if plan.precision:
        values["bf16"], values["fp16"] = plan.precision["train"] == "bf16", plan.precision["train"] == "fp16"
    values["output_dir"] = output_dir
    return SimpleNamespace(**values)


def add_memory_line(plan: RunPlan, cfg: Any, gpu_gb: float | None = None) -> None:
    """The estimate of a training GPU's memory against its share (plan/memory.py), as the plan's last line (the
    launch and the dry run); nothing without trainer GPUs."""
    if not plan.trainer_gpus:
        return
    from verifiers_rl.plan.hardware import gpu_memory_gb
    from verifiers_rl.plan.memory import estimate_line, model_shape
    from verifiers_rl.trainer.typed_table import reference_beta

    a = rl_args_view(cfg, plan)
    gpu_gb = gpu_gb or gpu_memory_gb()
    share = 1.0 - (cfg.inference.gpu_memory_utilization or DEFAULT_COLOCATED_GPU_MEMORY) if plan.colocated else 1.0
    line, _ = estimate_line(
        model_shape(str(cfg.model)), str(cfg.model), use_lora=bool(a.use_lora), half=bool(a.bf16 or a.fp16),
        micro_batch=int(a.micro_batch_size), seq_len=int(a.max_seq_len), checkpointing=bool(a.gradient_checkpointing),
        lora_rank=int(a.lora_rank), reference=not a.use_lora and reference_beta(a) > 0, share=share, gpu_gb=gpu_gb)
    plan.lines.append(line)


def served_model(cfg: Any) -> str:
    """What the server is started with: the config's model (a [tiny_model] when it builds one)."""
    tiny = getattr(cfg, "tiny_model", None)
    return str(getattr(tiny, "path", None) or cfg.model)


def server_command(cfg: Any, plan: RunPlan, output_dir: str, python: str | None = None) -> tuple[list[str], str]:
    """(the vLLM server's command line, its CUDA_VISIBLE_DEVICES) as the trainer would start it."""
    from verifiers_rl.inference.vllm_backend import server_launch_config
    from verifiers_rl.inference.vllm_server import VLLMServerConfig, build_command, build_env, free_port
    from verifiers_rl.plan.memory import model_shape

    args = rl_args_view(cfg, plan, output_dir)
    shape = model_shape(served_model(cfg))
    server = server_launch_config(VLLMServerConfig(**plan.server), plan.inference, args, served=served_model(cfg),
                                  max_positions=shape.max_positions if shape else None, cuda=bool(plan.trainer_gpus))
    if python is None:
        from verifiers_rl.errors import VLLMLaunchError
        from verifiers_rl.plan.hardware import find_vllm_python

        try:
            python = find_vllm_python(server.python)
        except VLLMLaunchError:
            python = server.python or "python"
    layout = server.layout(plan.gpus_visible or None)
    env = build_env(server, python, layout, base={})
    return build_command(server, python, server.port or free_port(), layout), env.get("CUDA_VISIBLE_DEVICES", "")


def _with_parent_devices(fn: Callable[[], Any]) -> Any:
    """Run `fn` with the caller's CUDA_VISIBLE_DEVICES back in place (the dry run blanked it for itself)."""
    if PARENT_DEVICES not in os.environ:
        return fn()
    hidden, parent = os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ[PARENT_DEVICES]
    try:
        _set_devices(None if parent == "<unset>" else parent)
        return fn()
    finally:
        _set_devices(hidden)


def _set_devices(value: str | None) -> None:
    if value is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = value


def preview_lines(resolved: Any, gpus: int, gpu_memory_gb: float | None = None,
                  has_vllm: Callable[[], bool] | None = None) -> list[str]:
    """The plan of `resolved` (a loaded vf-rl config) on a machine with `gpus` GPUs, as console lines."""
    cfg, out = resolved.cfg, str(resolved.output_dir)

    def make() -> tuple[RunPlan, tuple[list[str], str] | None]:
        plan = plan_launch(cfg, gpus, has_vllm, output_dir=out, args=resolved.args)
        add_memory_line(plan, cfg, gpu_memory_gb or 80.0)
        return plan, server_command(cfg, plan, out) if plan.start_server else None

    plan, server = _with_parent_devices(make)
    lines = [f"GPU plan for {gpus} GPU{'s' if gpus != 1 else ''} (dry run: nothing starts):", *plan.lines]
    worker = [*plan.launcher, "-m", "verifiers_rl.launch", "worker", f"{out}/configs/rl.toml"]
    devices = plan.trainer_env.get("CUDA_VISIBLE_DEVICES")
    lines.append(f"trainer ({plan.world_size} process{'es' if plan.world_size > 1 else ''}): "
                 f"CUDA_VISIBLE_DEVICES={devices if devices is not None else '(unchanged)'} {shlex.join(worker)}")
    if server is not None:
        cmd, server_devices = server
        lines.append(f"vLLM server (started by the trainer): CUDA_VISIBLE_DEVICES={server_devices or '(unchanged)'} "
                     f"{shlex.join(cmd)}")
    sync = plan.inference.weight_sync
    lines.append(f"weight transfer: {sync}" + (" (servers at " + ", ".join(plan.urls) + ")" if plan.urls else ""))
    return lines
