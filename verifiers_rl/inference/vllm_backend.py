"""The trainer's vLLM backend, an `Inference` (runtime.py): `VLLMBackend.start(plan, server_config, model, args)`
connects to the plan's `urls` (running servers, never launched or stopped by us) or launches one from
`server_config` (its model defaults to the policy's base model); `syncer` is the plan's weight sync.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from verifiers_rl import policy_servers
from verifiers_rl.errors import ModelServerError
from verifiers_rl.inference.vllm_client import VLLMClient
from verifiers_rl.inference.vllm_server import VLLMLaunchError, VLLMServer, VLLMServerConfig
from verifiers_rl.inference.vllm_sync import FullWeightReload, LoRAHotSwap
from verifiers_rl.inference.runtime import Inference
from verifiers_rl.inference.weight_transfer import NativeWeightTransfer
from verifiers_rl.plan.gpus import DEFAULT_COLOCATED_GPU_MEMORY, server_arg
from verifiers_rl.plan.transfer import NATIVE

logger = logging.getLogger(__name__)
SYNC_DIR_ENV_VAR = "VF_VLLM_SYNC_DIR"


def policy_source(model: Any) -> str | None:
    """The directory or hub id the policy's base weights came from."""
    peft_config = getattr(model, "peft_config", None)
    if peft_config:
        cfg = next(iter(peft_config.values()))
        base = getattr(cfg, "base_model_name_or_path", None)
        if base:
            return str(base)
    cfg = getattr(model, "config", None)
    name = getattr(cfg, "_name_or_path", None) or getattr(model, "name_or_path", None)
    return str(name) if name else None


def _server_dtype(args: Any, asked: Any, cuda: bool) -> str:
    """The server's --dtype: the trainer's precision (plan/precision.py); one line for one vLLM can't serve."""
    from verifiers_rl.plan.precision import plan_precision

    try:
        return plan_precision(bf16=bool(args.bf16), fp16=bool(getattr(args, "fp16", False)),
                              use_lora=bool(args.use_lora), cuda=cuda, server_dtype=asked,
                              vllm_server=True).server_dtype
    except ValueError as e:
        raise VLLMLaunchError(str(e)) from None


class VLLMBackend(Inference):
    def __init__(self, client: VLLMClient, syncer: Any, servers: list[VLLMServer], sync_dir: Path,
                 own_sync_dir: bool):
        self.client = client
        self.syncer = syncer
        self.servers = servers
        self.sync_dir = sync_dir
        self._own_sync_dir = own_sync_dir
        self.base_url = client.roots[0] if getattr(client, "roots", None) else None
        for root in getattr(client, "roots", None) or []:  # a judge from OPENAI_BASE_URL may not call them
            policy_servers.add(root)

    @classmethod
    def start(cls, plan: Any, server_config: VLLMServerConfig | dict | None, model: Any, args: Any, *,
              is_main: bool = True) -> "VLLMBackend":
        """Connect to the plan's servers (or start one), then bring them to `model`'s weights."""
        if isinstance(server_config, dict):
            server_config = VLLMServerConfig(**server_config)
        cfg = server_config or VLLMServerConfig()
        if args.use_lora and getattr(args, "lora_modules_to_save", None):
            raise VLLMLaunchError("lora_modules_to_save is not supported by vLLM's LoRA hot-swap; remove it or "
                                  "use inference_backend='local'")
        servers: list[VLLMServer] = []
        urls = list(plan.urls)  # a server already answering at the plan's port is among them (the plan's choice)
        base_name = None
        if not urls:
            server = _start_server(_launch_config(cfg, plan, model, args))
            servers.append(server)
            urls, base_name = [server.url], server.served_model_name

        def status(idx: int) -> str | None:
            return servers[idx].exit_note() if idx < len(servers) else None

        client = VLLMClient(urls, timeout=args.generation_timeout, server_status=status)
        try:
            if not servers:
                base_name = _served_base_model(client)
                if is_main:  # one check per run (several training processes share the servers)
                    _check_logprobs_mode(client, base_name, args)
            client.max_tokens_caps = _max_tokens_caps(client, args)
            explicit = cfg.sync_dir or os.environ.get(SYNC_DIR_ENV_VAR)
            sync_dir, own = (Path(explicit), False) if explicit else (Path(args.output_dir) / ".vllm-sync", True)
            syncer = _syncer(plan, client, base_name, sync_dir, is_main, args.generation_timeout)
            # Bring the servers to the policy now: a policy resumed from an adapter (non-zero B) or changed in
            # memory would otherwise roll out step 0 with other weights. Fails fast if the sync route is missing.
            syncer.sync(model, 0)
        except BaseException:
            for s in servers:
                s.stop()
            raise
        if is_main:
            print(f"vLLM: weight sync by {_SYNC_NAMES[plan.weight_sync]}", flush=True)
        return cls(client, syncer, servers, sync_dir, own and is_main)  # rank 0 writes it, rank 0 cleans it

    def server_pids(self) -> list[int]:
        return [s.pid for s in self.servers if s.pid]

    def close(self) -> None:
        """Close the sync, stop the servers launched here, remove the sync directory but, for servers given by URL,
        the adapter they serve (vLLM reads it at the first request naming it; its engine dies if it is gone)."""
        self.syncer.close()
        for root in getattr(self.client, "roots", None) or []:
            policy_servers.remove(root)
        launched = bool(self.servers)
        for s in self.servers:
            s.stop()
        self.servers = []
        if not self._own_sync_dir:
            return
        served = getattr(self.syncer, "latest", None) if not launched else None
        if served is None:
            shutil.rmtree(self.sync_dir, ignore_errors=True)
            return
        for path in self.sync_dir.iterdir() if self.sync_dir.is_dir() else []:
            if path.name != served.name:
                shutil.rmtree(path, ignore_errors=True)


_SYNC_NAMES = {"lora": "LoRA adapter hot-swap", "nccl": "vLLM's native weight transfer over NCCL",
               "gloo": "vLLM's native weight transfer over gloo (TCP)",
               "ipc": "vLLM's native weight transfer over CUDA IPC (the server shares the trainer's GPU)",
               "disk": "safetensors + reload_weights"}


def _start_server(cfg: VLLMServerConfig) -> VLLMServer:
    server = VLLMServer(cfg)
    if cfg.weight_transfer in ("nccl", "ipc"):  # both sides' torch/NCCL builds must match, or the group hangs
        from verifiers_rl.inference.weight_transfer import check_nccl_compat

        problem = check_nccl_compat(server.python)
        if problem:
            raise VLLMLaunchError(f"vllm_weight_transfer={cfg.weight_transfer!r}: {problem}")
    logger.info("starting vLLM: %s (log: %s)", " ".join(server.command()), server.log_path)
    print(f"vLLM: starting {server.url} with {server.python} (log: {server.log_path})", flush=True)
    server.start()
    print(f"vLLM: server up in {server.startup_s:.0f} s", flush=True)
    return server


def _syncer(plan: Any, client: VLLMClient, base_name: str, sync_dir: Path, is_main: bool, timeout: float) -> Any:
    """The plan's weight sync: LoRA hot-swap, vLLM's native transfer (bounded by `timeout`: generation_timeout),
    or a reload from disk."""
    if plan.weight_sync == "lora":
        return LoRAHotSwap(client, sync_dir, base_model_name=base_name, is_main_process=is_main)
    if plan.weight_sync in NATIVE:
        return NativeWeightTransfer(client, base_name, plan.weight_sync,
                                    master_address=plan.transfer_host or "127.0.0.1", is_main_process=is_main,
                                    timeout=timeout)
    return FullWeightReload(client, sync_dir, served_model_name=base_name, is_main_process=is_main)


def _launch_config(cfg: VLLMServerConfig, plan: Any, model: Any, args: Any) -> VLLMServerConfig:
    served = cfg.model or policy_source(model)
    if not served:
        raise VLLMLaunchError("vLLM backend: can't tell which model to serve; pass the model to RLTrainer as a "
                              "path or hub id, or set the server config's model")
    if os.path.isdir(served):
        served = str(Path(served).resolve())
    params = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    ctx = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return server_launch_config(cfg, plan, args, served=served, max_positions=ctx,
                                cuda=bool(params is not None and params.is_cuda), lora_rank=adapter_rank(model))


def adapter_rank(model: Any) -> int | None:
    """The largest LoRA rank of the adapter(s) a PEFT model carries (a PeftModel passed in or loaded from an adapter
    directory has its own rank, not lora_rank's), per-module ranks included; None without one."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict):
        return None
    ranks = [int(r) for c in configs.values() for r in [getattr(c, "r", 0) or 0,
                                                         *(getattr(c, "rank_pattern", None) or {}).values()]]
    return max(ranks, default=0) or None


def server_launch_config(cfg: VLLMServerConfig, plan: Any, args: Any, *, served: str, max_positions: int | None,
                         cuda: bool, lora_rank: int | None = None) -> VLLMServerConfig:
    """The server the trainer starts, from its config, the plan and the trainer's args (also what
    `vf-rl --dry-run --gpus N` shows: plan/preview.py); `lora_rank`: the loaded adapter's, when it carries one."""
    from dataclasses import replace

    server_args = dict(cfg.args)
    asked = server_arg(server_args, "dtype")
    dtype = _server_dtype(args, asked, cuda=cuda)
    if asked is None:
        server_args["dtype"] = dtype  # the trainer's precision: logprobs that match
    if not any(k.replace("_", "-").lstrip("-") == "max-model-len" for k in server_args):
        # RLConfig.max_tokens=None means "up to max_seq_len minus the prompt": the server's context is max_seq_len
        server_args["max_model_len"] = min(args.max_seq_len, max_positions) if max_positions else args.max_seq_len
    if server_arg(server_args, "enable_scale_out") is None:
        server_args["enable_scale_out"] = True  # vLLM's /inference/v1/generate: what v1 environments call
    if cfg.gpus is None and getattr(plan, "server_gpus", None):  # a script's trainer: planned beside it
        cfg = replace(cfg, gpus=list(plan.server_gpus), trainer_gpus=list(plan.server_gpus) if plan.colocated
                      else None, colocate=plan.colocated)
        share = cfg.gpu_memory_utilization or DEFAULT_COLOCATED_GPU_MEMORY
        print(f"vLLM: the server shares GPU {plan.server_gpus[0]} with the trainer (it takes {share:g} of its memory:"
              " VLLMServerConfig gpu_memory_utilization)" if plan.colocated else
              f"vLLM: the server runs on GPU {plan.server_gpus[0]}, beside the trainer (VLLMServerConfig gpus)",
              flush=True)
    if cfg.colocate is None:  # the plan decided it: the server lays itself out as planned, not again
        cfg = replace(cfg, colocate=bool(plan.colocated))
    return replace(
        cfg, model=served, args=server_args, host=cfg.host if cfg.host != "127.0.0.1" else plan.host,
        port=cfg.port or plan.port, enable_lora=cfg.enable_lora or bool(args.use_lora),
        max_lora_rank=max(cfg.max_lora_rank, lora_rank or int(args.lora_rank)) if args.use_lora else cfg.max_lora_rank,
        timeout=args.vllm_server_timeout,
        weight_transfer=plan.weight_sync if plan.weight_sync in NATIVE else cfg.weight_transfer,
        log_path=cfg.log_path or os.path.join(args.output_dir, "logs", "vllm-server.log"))


def _served_base_model(client: VLLMClient) -> str:
    try:
        data = client.get_json(0, "/v1/models")
    except Exception as e:
        raise ModelServerError(f"vLLM server {client.roots[0]} did not list its models (GET /v1/models: "
                               f"{type(e).__name__}: {e})") from None
    models = [m for m in data.get("data", []) if not m.get("parent")]
    if not models:
        raise VLLMLaunchError(f"vLLM server {client.roots[0]} serves no base model")
    return str(models[0]["id"])


def _server_context(client: VLLMClient, idx: int) -> int | None:
    """Server `idx`'s context (`max_model_len` in its /v1/models), or None when it does not say."""
    try:
        models = client.get_json(idx, "/v1/models").get("data", [])
        return max(int(m["max_model_len"]) for m in models if not m.get("parent") and m.get("max_model_len"))
    except Exception:  # noqa: BLE001 - not reported: the server's own limits apply
        return None


def _max_tokens_caps(client: VLLMClient, args: Any) -> list[int | None]:
    """Per server, the max_tokens of a request that names none (RLConfig.max_tokens None: up to max_seq_len minus the
    prompt): max_seq_len, or the server's context where that is shorter (vLLM refuses a max_tokens above it). Left
    out, a server run by hand generated up to its own context, which the trainer then cut to max_seq_len, or stopped
    at its checkpoint's `max_new_tokens` (vLLM's default --generation-config auto reads it). None (the server's limits
    apply) when the server does not say its context. A max_tokens above a server's context is one line: vLLM refuses
    every such request."""
    caps: list[int | None] = []
    for idx, root in enumerate(client.roots):
        context = _server_context(client, idx)
        if context is not None and args.max_tokens is not None and args.max_tokens > context:
            raise VLLMLaunchError(f"max_tokens={args.max_tokens} is above the context of vLLM server {root} "
                                  f"(max_model_len {context}): it refuses every such request; lower max_tokens, or "
                                  "serve a longer context (--max-model-len)")
        caps.append(None if context is None else min(args.max_seq_len, context))
    return caps


def _check_logprobs_mode(client: VLLMClient, model: str, args: Any) -> None:
    """Refuse a server that reports raw log-probs (no `--logprobs-mode processed_logprobs`) when that changes the
    importance ratios: asked to sample with top_k = 1, a processed-log-probs server gives log-prob 0."""
    from verifiers_rl.plan.sampling import truncation_of

    t = args.temperature
    if t <= 0 or (t == 1.0 and not truncation_of(t, args.top_k, args.top_p, args.min_p).active):
        return  # raw and processed log-probs are the same distribution
    probe = {"model": model, "prompt": "The", "max_tokens": 1, "temperature": 1.0, "top_k": 1, "logprobs": 1}
    for idx, root in enumerate(client.roots):
        try:
            lp = client.post(idx, "/v1/completions", probe, what="logprobs check", timeout=60.0, retries=0)[
                "choices"][0]["logprobs"]["token_logprobs"][0]
        except Exception:  # noqa: BLE001 - not a check to fail a run on: the server's errors come with its requests
            continue
        if lp < -1e-3:
            raise VLLMLaunchError(f"vLLM server {root} returns raw log-probs (it was started without --logprobs-mode "
                                  f"processed_logprobs): the trainer's importance ratios at temperature {t:g} would "
                                  "be off; restart it with that flag (docs/vllm.md)")
