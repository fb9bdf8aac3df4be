"""(a) plans: every shipped config in configs/vf-rl/ through `vf-rl @ CONFIG --dry-run --gpus 1` (in this process:
`verifiers_rl.cli.rl.main`, as `python -m verifiers_rl.cli.rl` runs it), then the launch plan on this machine's
GPUs (`plan_launch`, what `vf-rl @ CONFIG` prints first)."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from .common import REPO, CheckFailed, Ctx, Outcome


def _dry_run(cfg: Path, out: Path, extra: list[str]) -> tuple[int, str]:
    """(exit code, output) of the dry run, in this process; the environment is put back afterwards."""
    from verifiers_rl.cli.rl import main

    saved = dict(os.environ)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = main(["@", str(cfg), "--dry-run", *extra, "--output-dir", str(out)])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return int(rc or 0), buf.getvalue().strip()


def _plan_here(cfg: Path, out: Path, gpus: int) -> str:
    """The launch plan against `gpus` GPUs: its lines, or the one-line error vf-rl would stop with."""
    from verifiers_rl.config.schema import load_run
    from verifiers_rl.errors import ConfigError
    from verifiers_rl.plan.launch import plan_launch

    try:
        resolved, _ = load_run(["@", str(cfg), "--output-dir", str(out)], check_environments=False)
        plan = plan_launch(resolved.cfg, gpus, allow_cpu=False, output_dir=out, source=str(cfg), args=resolved.args)
    except ConfigError as e:
        return "stops: " + str(e).splitlines()[0]
    return " | ".join(plan.lines) + f" | {plan.world_size} training process(es), backend {plan.backend}"


def _gpus_refused(line: str) -> bool:
    """The dry run's error is about the --gpus option itself (an unknown key or option), not a GPU count."""
    return "unknown" in line and ("error: gpus:" in line or "--gpus" in line)


def check(ctx: Ctx) -> Outcome:
    import torch

    configs = sorted((REPO / "configs" / "vf-rl").glob("*.toml"))
    if not configs:
        raise CheckFailed("no configs/vf-rl/*.toml")
    gpus = torch.cuda.device_count() if ctx.cuda else 1
    where = f"{gpus} GPU(s) here" if ctx.cuda else "1 simulated GPU (--cpu-smoke: no CUDA here)"
    gpus_option: str | None = None
    resolved, stopped, planned, broken = 0, 0, 0, []
    for cfg in configs:
        out = ctx.scratch / "plans" / cfg.stem
        rel = cfg.relative_to(REPO)
        print(f"  $ python -m verifiers_rl.cli.rl @ {rel} --dry-run --gpus {gpus}")
        rc, text = _dry_run(cfg, out, [] if gpus_option else ["--gpus", str(gpus)])
        last = text.splitlines()[-1] if text else ""
        if rc != 0 and gpus_option is None and _gpus_refused(last):
            gpus_option = last
            print(f"    --gpus refused: {last}  (dry runs go on without it)")
            rc, text = _dry_run(cfg, out, [])
            last = text.splitlines()[-1] if text else ""
        if rc == 0:
            resolved += 1
            print("\n".join("    | " + ln for ln in text.splitlines()))
        elif rc == 2 and last.startswith("error:") and "GPU" in last and "Traceback" not in text:
            stopped += 1  # a config that asks for more GPUs than given: one line, as documented
            print(f"    dry run stops: {last}")
        else:
            broken.append(f"{cfg.stem}: dry run exit {rc}: {last}")
            print(f"    dry run FAILED (exit {rc}): {last}")
        try:
            line = _plan_here(cfg, out, gpus)
            planned += 1
            print(f"    plan on {where}: {line}")
        except Exception as e:  # anything but the one-line ConfigError is a bug
            broken.append(f"{cfg.stem}: plan: {type(e).__name__}: {e}")
            print(f"    plan FAILED: {type(e).__name__}: {e}")
    summary = (f"{resolved}/{len(configs)} dry runs resolved ({stopped} stopped with one line), "
               f"{planned}/{len(configs)} plans made on {where}; "
               f"--gpus: {'refused (' + gpus_option + ')' if gpus_option else 'accepted'}")
    if broken:
        raise CheckFailed(summary + "; " + broken[0] + (f" (+{len(broken) - 1} more)" if len(broken) > 1 else ""))
    return Outcome("PASS", summary)
