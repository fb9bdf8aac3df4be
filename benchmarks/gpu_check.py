"""One run on a GPU machine that shows verifiers-rl works there: plans, the quickstart CLI, RL steps, the local
engine's speed, the speed against TRL, a 4B model's training memory, FSDP2. Each check is independent (a failure is
one FAIL line, its traceback goes to the log) and has a time budget; a summary table closes the run.

    python benchmarks/gpu_check.py [--cpu-smoke] [--only NAME[,NAME]] [--budget SECONDS] [--log FILE]

On the GPU machine run it through scripts/gpu-check.sh (installs the wheels of scripts/gpu-wheels.sh and the working
tree into a scratch folder, prints the versions): its header says how to call it on the device. Everything printed
goes, line by line, to $OUT/gpu-check.log (./gpu-check-out/ when OUT is unset), the results to gpu-check.json beside
it. --cpu-smoke runs every check at toy sizes on the CPU (targets not
applied; what needs CUDA is reported as SKIP after its code path ran).

Checks (in the order they run):
  plans       configs/vf-rl/*.toml: `vf-rl @ CONFIG --dry-run --gpus 1`, and the launch plan on this machine's GPUs
  quickstart  `vf-rl @ configs/vf-rl/quickstart.toml` cut to 20 warm-up / 3 RL steps: exit 0, finite metrics, device
  rl-steps    2-step RLTrainer runs on a Qwen3-0.6B-shaped random model, bf16: LoRA, LoRA + checkpointing, full
  sampling    1-step LoRA runs, bf16, a model whose generation_config carries top_k 2: the trainer's log-probs of the
              sampled tokens equal the sampler's untruncated, with top_p 0.9 and with top_k 5
  engine      local engine vs HF generate tokens/s, 64 prompts x 128 tokens, 0.6B shape, bf16 (target >= 2x)
  memory-4b   peak memory of one LoRA training step of a Qwen3-4B-shaped model as alphabet-sort.toml trains it
  fsdp        torchrun --nproc_per_node 1: RLTrainer with fsdp="full_shard", FSDP2: parameters are DTensors on cuda
  trl         seconds per step vs TRL's GRPOTrainer, same model/batch/settings, median of 3 pairs (target <= 0.5x)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (name, estimated seconds, cap) on a GPU and in --cpu-smoke
CHECKS = {
    "plans": ((25, 90), (30, 90)),
    "quickstart": ((60, 180), (40, 150)),
    "rl-steps": ((60, 150), (30, 120)),
    "sampling": ((50, 120), (30, 100)),
    "engine": ((30, 90), (10, 60)),
    "memory-4b": ((30, 120), (10, 60)),
    "fsdp": ((30, 120), (25, 90)),
    "trl": ((100, 200), (40, 120)),
}
SUMMARY_ORDER = ["plans", "quickstart", "rl-steps", "sampling", "engine", "trl", "memory-4b", "fsdp"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="every check at toy sizes on the CPU (< 4 minutes)")
    p.add_argument("--only", help=f"comma-separated checks to run: {', '.join(CHECKS)}")
    p.add_argument("--budget", type=float, help="seconds for the whole run (default 450; --cpu-smoke 230)")
    p.add_argument("--log", help="log file (default $OUT/gpu-check.log, OUT defaulting to ./gpu-check-out)")
    p.add_argument("--scratch", help="folder for models and runs (default: a new temp folder, removed at the end)")
    return p


def _setup_paths() -> None:
    repo = str(HERE.parent)
    for path in (str(HERE), repo):
        if path not in sys.path:
            sys.path.insert(0, path)
    os.environ["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                         if p and p != repo])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _device(ctx) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no weight-loading bars in the log

    ctx.cuda = bool(torch.cuda.is_available()) and not ctx.smoke
    if ctx.cuda:
        torch.cuda.init()
        ctx.gpu_name = torch.cuda.get_device_name()
        total = torch.cuda.get_device_properties(0).total_memory / 2**30
        print(f"GPU: {ctx.gpu_name} ({total:.1f} GiB), {torch.cuda.device_count()} visible; torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}, bf16 {torch.cuda.is_bf16_supported()}")
    else:
        ctx.gpu_name = "CPU (--cpu-smoke)" if ctx.smoke else "CPU: no CUDA device"
        print(f"device: {ctx.gpu_name}; torch {torch.__version__}" + (
            "" if ctx.smoke else "  (no CUDA: the checks will run on the CPU at full size; use --cpu-smoke)"))


def _call(name: str, ctx, cap: float):
    import importlib

    mod = importlib.import_module("gpu_checks." + {"plans": "plans", "quickstart": "quickstart", "rl-steps": "rl_steps",
                                   "sampling": "sampling", "engine": "engine", "memory-4b": "memory", "fsdp": "fsdp",
                                   "trl": "trl_speed"}[name])
    if name in ("quickstart", "fsdp"):  # child processes: their own timeout, a little inside the check's
        return mod.check(ctx, timeout=max(10.0, cap - 5))
    return mod.check(ctx)


class Runner:
    def __init__(self, ctx, tee):
        self.ctx, self.tee = ctx, tee
        self.results: dict[str, object] = {}
        self.current: tuple[str, float] | None = None
        self.t0 = time.monotonic()

    def _alarm(self, signum, frame):
        raise _timeout()

    def run(self, name: str) -> None:
        from gpu_checks.common import CheckFailed, CheckSkipped, Outcome

        est, cap = CHECKS[name][1 if self.ctx.smoke else 0]
        left = self.ctx.remaining()
        print(f"\n=== {name} (budget {min(cap, left):.0f} s; {left:.0f} s left in the run) ===", flush=True)
        if left < est:
            self._record(name, Outcome("SKIP", f"time: {left:.0f} s left, the check needs about {est} s"))
            return
        cap = min(cap, left)
        self.ctx.check_deadline = time.monotonic() + cap
        self.current = (name, time.monotonic() + cap + 60)
        signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, cap)
        t = time.monotonic()
        try:
            out = _call(name, self.ctx, cap)
        except CheckSkipped as e:
            out = Outcome("SKIP", str(e))
        except CheckFailed as e:
            out = Outcome("FAIL", str(e))
        except BaseException as e:  # noqa: BLE001 - every check is independent; Ctrl-C still ends the run below
            if isinstance(e, KeyboardInterrupt):
                raise
            reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            out = Outcome("FAIL", ("timed out after %.0f s" % cap) if type(e).__name__ == "CheckTimeout" else reason)
            self.tee.log_only(f"--- traceback ({name}) ---\n{traceback.format_exc()}--- end traceback ---\n")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.current = None
        try:
            from gpu_checks.common import cuda_reset

            cuda_reset()  # what a failed check left on the GPU is freed before the next one
        except Exception as e:  # noqa: BLE001
            print(f"  (could not free CUDA memory: {type(e).__name__}: {e})")
        for tb in self.ctx.notes.pop("tracebacks", []):
            self.tee.log_only(f"--- traceback ({name}) ---\n{tb}--- end traceback ---\n")
        out.seconds = time.monotonic() - t
        self._record(name, out)

    def _record(self, name: str, out) -> None:
        self.results[name] = out
        print(f"{out.status} {name} [{self.ctx.gpu_name}] ({out.seconds:.0f} s): {out.summary}", flush=True)

    def summary(self, note: str = "") -> None:
        print(f"\n=== summary on {self.ctx.gpu_name}{note} ===")
        for name in SUMMARY_ORDER:
            out = self.results.get(name)
            if out is not None:
                print(f"{out.status:4s}  {name:10s} {out.seconds:6.0f} s  {out.summary}")
        counts = {s: sum(o.status == s for o in self.results.values()) for s in ("PASS", "FAIL", "SKIP")}
        print(f"total {time.monotonic() - self.t0:.0f} s; " + ", ".join(f"{v} {k}" for k, v in counts.items()),
              flush=True)
        data = {"gpu": self.ctx.gpu_name, "smoke": self.ctx.smoke, "total_s": round(time.monotonic() - self.t0, 1),
                "checks": {k: {**vars(v), "seconds": round(v.seconds, 1)} for k, v in self.results.items()}}
        (self.tee.path.parent / "gpu-check.json").write_text(json.dumps(data, indent=2) + "\n")

    def watchdog(self) -> None:
        """A check stuck where the alarm cannot reach it (inside a C call): summary, then exit 124."""
        while True:
            time.sleep(2)
            cur = self.current
            if cur is not None and time.monotonic() > cur[1]:
                from gpu_checks.common import Outcome

                self.results[cur[0]] = Outcome("FAIL", "hung past its budget (watchdog)", cur[1] - self.t0)
                self.summary(" (stopped by the watchdog)")
                self.tee.close()
                os._exit(124)


def _timeout():
    from gpu_checks.common import CheckTimeout

    return CheckTimeout()


def main() -> int:
    args = _parser().parse_args()
    names = [n.strip() for n in args.only.split(",")] if args.only else list(CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        print(f"gpu_check.py: --only: unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECKS)}",
              file=sys.stderr)
        return 2
    _setup_paths()
    from gpu_checks.common import Ctx, Tee

    out_dir = Path(os.environ.get("OUT") or "gpu-check-out")
    tee = Tee(Path(args.log) if args.log else out_dir / "gpu-check.log")
    import faulthandler

    faulthandler.enable(file=tee.log)  # a crash's stacks go straight to the log file
    budget = args.budget or (230.0 if args.cpu_smoke else 450.0)
    scratch = Path(args.scratch) if args.scratch else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    ctx = Ctx(smoke=args.cpu_smoke, scratch=scratch, deadline=time.monotonic() + budget)
    ctx.check_deadline = ctx.deadline
    print(f"gpu_check.py {' '.join(sys.argv[1:])}: checks {', '.join(names)}; budget {budget:.0f} s; scratch "
          f"{scratch}; log {tee.path}", flush=True)
    runner = Runner(ctx, tee)
    threading.Thread(target=runner.watchdog, daemon=True).start()
    try:
        _device(ctx)
        for name in [n for n in CHECKS if n in names]:
            runner.run(name)
    finally:
        runner.summary()
        if not args.scratch:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
        tee.close()
    return 0 if all(o.status != "FAIL" for o in runner.results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
