"""(g) fsdp: FSDP2 on one GPU. `torchrun --nproc_per_node 1` runs a small script (written to a temp file) that
builds an RLTrainer with `fsdp="full_shard"`, `fsdp_config={"version": 2}` (as verifiers_rl/trainer/sharding.py
reads them) on the tiny model and reverse-text, reports whether the parameters are DTensors and on which device,
then trains one step and reports again (accelerate applies FSDP2 itself on GPUs, when training starts).
PASS when the parameters are DTensors on cuda. A refusal (one process: the trainer's one-line error) is printed."""

from __future__ import annotations

import json
import sys

from .common import CheckFailed, CheckSkipped, Ctx, Outcome, REPO, run_logged

WORKER = r'''
import json, os, sys
sys.path.insert(0, {repo!r})
import torch
import verifiers_rl as vf
from verifiers_rl.models.tiny import build_tiny_model

out, smoke = sys.argv[1], sys.argv[2] == "1"
cuda = torch.cuda.is_available()


def params_report(trainer, when):
    from torch.distributed.tensor import DTensor
    model = getattr(trainer, "model_wrapped", None) or trainer.model
    ps = list(model.parameters())
    n = sum(isinstance(p, DTensor) for p in ps)
    devices = sorted({{str(p.device) for p in ps}})
    kinds = sorted({{type(model).__name__, type(trainer.model).__name__}})
    print("FSDP_REPORT " + json.dumps({{"when": when, "dtensor": n, "params": len(ps), "devices": devices,
                                         "model": kinds}}), flush=True)


rank = int(os.environ.get("RANK", "0"))
model = build_tiny_model(os.path.join(out, "tiny"), num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                         intermediate_size=128)
env = vf.load_environment("reverse-text", dataset_source="offline", num_eval_examples=8)
try:
    args = vf.RLConfig(output_dir=os.path.join(out, "run"), max_steps=1, batch_size=8, rollouts_per_example=4,
                       micro_batch_size=8, max_tokens=16, max_seq_len=128, max_prompt_len=64, use_lora=False,
                       fsdp="full_shard", fsdp_config={{"version": 2}}, bf16=cuda, learning_rate=1e-4,
                       save_strategy="no", report_to="none", sample_log_interval=0, disable_tqdm=True)
    trainer = vf.RLTrainer(str(model), env, args)
except Exception as e:
    print("FSDP_REFUSED " + (type(e).__name__ + ": " + str(e)).splitlines()[0], flush=True)
    sys.exit(3)
print(f"FSDP_WORLD {{args.world_size}} device {{args.device}} is_fsdp_enabled "
      f"{{getattr(trainer, 'is_fsdp_enabled', None)}}", flush=True)
params_report(trainer, "built")
trainer.train()
params_report(trainer, "after 1 step")
trainer.close()
print("FSDP_TRAINED", flush=True)
'''


def check(ctx: Ctx, timeout: float) -> Outcome:
    out = ctx.scratch / "fsdp"
    out.mkdir(parents=True, exist_ok=True)
    script = out / "fsdp_worker.py"
    script.write_text(WORKER.format(repo=str(REPO)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
           "--max_restarts", "0", str(script), str(out), "1" if ctx.smoke else "0"]
    print("  $ torchrun --standalone --nproc_per_node 1 fsdp_worker.py (fsdp='full_shard', fsdp_config={'version': 2})")
    rc, lines = run_logged(cmd, timeout=timeout, env=ctx.child_env(),
                           keep=lambda ln: ln.startswith("FSDP_") or "Error" in ln or "error" in ln or "step 1" in ln)
    refused = next((ln[len("FSDP_REFUSED "):] for ln in lines if ln.startswith("FSDP_REFUSED ")), None)
    if refused:
        raise CheckFailed(f"RLTrainer refused FSDP with one process: {refused}")
    reports = [json.loads(ln[len("FSDP_REPORT "):]) for ln in lines if ln.startswith("FSDP_REPORT ")]
    trained = any(ln.startswith("FSDP_TRAINED") for ln in lines)
    if not reports:
        tail = next((ln for ln in reversed(lines) if ln.strip()), "")
        raise CheckFailed(f"torchrun exit {rc} before the trainer was built: {tail[:240]}")
    sharded = [r for r in reports if r["dtensor"]]
    on_cuda = [r for r in sharded if all(d.startswith("cuda") for d in r["devices"])]
    figures = "; ".join(f"{r['when']}: {r['dtensor']}/{r['params']} DTensor on {','.join(r['devices'])}"
                        for r in reports) + f"; trained 1 step: {'yes' if trained else f'no (exit {rc})'}"
    if not ctx.cuda:
        if not sharded:
            raise CheckFailed(f"parameters are not DTensors: {figures}")
        raise CheckSkipped(f"no CUDA (gloo on the CPU): {figures}")
    if on_cuda and trained:
        return Outcome("PASS", figures)
    raise CheckFailed(figures)
