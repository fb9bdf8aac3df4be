"""SFT warm-up: teach the answer format on an environment's own data before RL (TRL's SFTTrainer).

Each row is the environment's prompt plus one assistant message, the answer in `completion_format`; the loss covers
the completion only. A finished warm-up writes `warmup.json`, and a run with the same settings reuses it.
"""


from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


MARKER = "warmup.json"


def finished_warmup(out: Path, settings: dict[str, Any]) -> bool:
    m = out / MARKER
    return m.exists() and json.loads(m.read_text()).get("settings") == settings


def sft_rows(env: Any, completion_format: str, num_examples: int) -> list[dict[str, Any]]:
    ds = env.get_dataset()
    ds = ds.select(range(min(num_examples, len(ds)))) if num_examples > 0 else ds
    return [{"prompt": row["prompt"],
             "completion": [{"role": "assistant", "content": completion_format.format(answer=row["answer"])}]}
            for row in ds.to_list()]


def run_warmup(model: str, env: Any, output_dir: str | Path, *, completion_format: str, max_steps: int,
               learning_rate: float, batch_size: int, lr_scheduler_type: str = "cosine",
               num_examples: int = -1, seed: int = 0, max_length: int = 512, logging_steps: int = 50,
               micro_batch_size: int | None = None, console: Any = None) -> Path:
    """Full fine-tune `model` on the env's data; returns the output dir (a loadable HF model dir).
    `micro_batch_size` sizes its forwards, not what it learns: not part of the settings a finished one is reused by."""
    out = Path(output_dir)
    settings = {"model": str(model), "completion_format": completion_format, "max_steps": max_steps,
                "learning_rate": learning_rate, "batch_size": batch_size, "lr_scheduler_type": lr_scheduler_type,
                "num_examples": num_examples, "seed": seed, "env": getattr(env, "env_id", None)}
    if finished_warmup(out, settings):
        if console:
            console.print(f"warm-up: reusing the finished SFT model in {out}")
        return out
    t0 = time.perf_counter()
    from verifiers_rl.sft.trainer import SFTSettings, run_sft

    work = out.with_name(out.name + ".tmp")
    rows = sft_rows(env, completion_format, num_examples)
    if console:
        console.print(f"warm-up: SFT on the environment's data ({len(rows)} examples), {max_steps} steps "
                      f"(batch {batch_size}, lr {learning_rate})")
    _, loss = run_sft(model, rows, SFTSettings(
        output_dir=str(work), max_steps=max_steps, learning_rate=learning_rate, batch_size=batch_size,
        micro_batch_size=micro_batch_size,
        lr_scheduler_type=lr_scheduler_type, max_length=max_length, seed=seed, save_steps=max_steps + 1,
        logging_steps=logging_steps), console=console, label="warm-up", header=False)
    (work / MARKER).write_text(json.dumps({"settings": settings, "train_loss": loss,
                                         "seconds": time.perf_counter() - t0}, indent=2))
    if out.exists():
        import shutil

        shutil.rmtree(out)
    work.rename(out)  # complete or absent: a killed warm-up is never reused
    if console:
        console.print(f"warm-up: done in {time.perf_counter() - t0:.0f} s, mean loss {loss:.3f} → {out}")
    return out
