"""Trainer callbacks: metrics file, console progress, eval schedule, final checkpoint."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from verifiers_rl.verbosity import quiet_bars_begin, quiet_bars_end


def is_train_summary(record: dict[str, Any]) -> bool:
    """HF's record at the end of every train() (train_runtime, train_loss, total_flos, ...): a summary of that call,
    not a step."""
    return "train_loss" in record and "total_flos" in record


def rewind(path: Path, step: int) -> None:
    """Drop the records a run resumed at `step` writes again (later steps), train() summaries, and a line a killed
    run left half written."""
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    kept = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        later = isinstance(rec, dict) and isinstance(rec.get("step"), int) and rec["step"] > step
        if isinstance(rec, dict) and not later and not is_train_summary(rec):
            kept.append(line)
    if len(kept) == len(lines):
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)  # whole or not at all: a crash here leaves the old file
    n = len(lines) - len(kept)
    print(f"{path.name}: continued from step {step}; dropped {n} record{'s' * (n != 1)} the earlier run wrote after "
          "it", flush=True)


class MetricsFileCallback(TrainerCallback):
    """Appends every step's log record to `<output_dir>/metrics.jsonl` (read by `vf-rl list` / `vf-rl plot`): one
    record per logged step; a resumed run continues the file from its checkpoint's step."""

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero and state.global_step > 0:  # resumed: HF loaded the checkpoint's step
            rewind(Path(args.output_dir) / "metrics.jsonl", state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # train()'s summary carries the last step's number: written, it would read as a second record of that step
        if not state.is_world_process_zero or not logs or is_train_summary(logs):
            return
        path = Path(args.output_dir) / "metrics.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"step": state.global_step, "time": time.time(),
                  **{k: v for k, v in logs.items() if isinstance(v, (int, float, str))}}
        with path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)  # NaN formats as "nan"


class ProgressBarCallback(TrainerCallback):
    """A rich progress bar over max_steps (`progress`, `task`: started by the subclass), advanced every step and
    stopped at the end of training."""

    progress: Any = None
    task: Any = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
            self.progress.stop()
            self.progress = None


class ConsoleCallback(ProgressBarCallback):
    """One line per logged step; eval results in their own line. The loss's own metrics on it are those the chosen
    loss names (``LossSpec.console``, trainer/losses/), between the entropy and the gradient norm."""

    KEYS = [("reward/all/mean", "reward"), ("loss/mean", "loss"), ("entropy/mean", "entropy")]
    KEYS_AFTER = [("optim/grad_norm", "grad"), ("seq_len/completion_mean", "len"), ("time/step", "s")]

    def __init__(self, console: Any = None, loss_keys: tuple[tuple[str, str], ...] | None = None):
        from rich.console import Console

        self.console = console or Console()
        self.loss_keys = loss_keys

    def on_train_begin(self, args, state, control, **kwargs):
        if self.loss_keys is None:
            from verifiers_rl.trainer.typed_table import resolve_loss

            self.loss_keys = resolve_loss(args)[0].console
        # In a terminal, a bar under the step lines (they print above it); in a log file, the lines alone.
        if state.is_world_process_zero and self.console.is_terminal and self.progress is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress("RL", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                     TimeRemainingColumn(), console=self.console)
            self.task = self.progress.add_task("RL", total=state.max_steps, completed=state.global_step)
            self.progress.start()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        for kind in ("val", "eval"):  # the training env's validation ([val] / eval_steps), then [eval]'s envs
            evals = {k: v for k, v in logs.items() if k.startswith(f"{kind}/") and k.endswith("/reward/mean")}
            if evals:
                parts = [f"{k[len(kind) + 1:].removesuffix('/reward/mean')} {_fmt(v)}" for k, v in evals.items()]
                self.console.print(f"[bold magenta]{kind}[/] step {state.global_step}: reward " + ", ".join(parts),
                                   soft_wrap=True)
        if "reward/all/mean" in logs:
            keys = [*self.KEYS, *(self.loss_keys or ()), *self.KEYS_AFTER]
            parts = [f"{label} {_fmt(logs[k])}" for k, label in keys if k in logs]
            self.console.print(f"[bold cyan]step {state.global_step}/{state.max_steps}[/] " + " | ".join(parts), soft_wrap=True)


def warn(message: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    # the message may name config tables ([teacher] min_reward): text, not markup
    Console().print(f"[bold yellow]warning:[/] {escape(message)}", soft_wrap=True, highlight=False)


class RLControlCallback(TrainerCallback):
    """Weight sync after each optimizer step, periodic eval, and the last step logged and checkpointed."""

    def __init__(self, trainer: Any):
        from verifiers_rl.trainer.empty_steps import EmptyStepWatch

        self.trainer = trainer
        self.empty_steps = EmptyStepWatch()
        self._bars: bool | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._bars = quiet_bars_begin()  # no "Writing model shards" bar per checkpoint unless VF_VERBOSE=1
        if state.global_step > 0:  # resumed: HF loaded the checkpoint's weights after inference was first synced
            self.trainer.sync_inference(int(state.global_step))

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.after_optimizer_step()
        # every rank sees the whole step's rollouts, so all of them stop together
        try:
            self.empty_steps.check(state.global_step, self.trainer.last_states, args,
                                   warn if state.is_world_process_zero else lambda _m: None)
        except Exception:
            quiet_bars_end(self._bars)  # the run ends here: on_train_end won't come
            self._bars = None
            raise
        # HF logs every logging_steps only: the last steps' pending_metrics would never be written

        if control.should_training_stop or state.global_step >= state.max_steps:
            control.should_log = True
        if args.eval_steps and state.global_step % int(args.eval_steps) == 0:
            self.trainer.run_eval()
        if state.global_step >= state.max_steps and args.save_strategy != "no":
            control.should_save = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        quiet_bars_end(self._bars)
        self._bars = None
        self.empty_steps.finish()  # nothing trained at all: train() raises (vf-rl exits 1)
        if state.is_world_process_zero and (Path(args.output_dir) / "metrics.jsonl").exists():
            import threading

            from verifiers_rl.plots import plot_run_safely

            # drawn in the background so train() does not wait for matplotlib; close() and exit wait for it
            thread = threading.Thread(target=plot_run_safely, args=(args.output_dir,), name="vf-plot")
            thread.start()
            self.trainer.plot_thread = thread
