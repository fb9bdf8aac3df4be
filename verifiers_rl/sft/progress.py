"""The SFT console: one rich progress bar with the latest loss, instead of transformers' printed log dicts."""

from __future__ import annotations

from typing import Any

from verifiers_rl.trainer.callbacks import ProgressBarCallback


class SFTProgress(ProgressBarCallback):
    """A bar over max_steps showing the loss and learning rate of the last log, and one summary line per
    `report_every` logs (kept in non-interactive logs, where a bar shows nothing)."""

    def __init__(self, console: Any, label: str = "SFT"):
        self.console = console
        self.label = label

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=self.console,
                                 transient=False)
        self.task = self.progress.add_task(self.label, total=state.max_steps, info="")
        self.progress.start()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "eval_loss" in logs and state.is_world_process_zero:  # [val]: one line per validation
            self.console.print(f"{self.label} step {state.global_step}/{state.max_steps}: val loss "
                               f"{float(logs['eval_loss']):.4f}", highlight=False)
            return
        key = "loss" if "loss" in (logs or {}) else "train_loss"  # train_loss: the run's mean, logged at the end
        if self.progress is None or not logs or key not in logs:
            return
        info = f"{'loss' if key == 'loss' else 'mean loss'} {float(logs[key]):.4f}"
        if "learning_rate" in logs:
            info += f" · lr {float(logs['learning_rate']):.2g}"
        self.progress.update(self.task, info=info)
        if key == "loss" and not self.console.is_terminal:  # a log: the bar is drawn once at the end
            self.console.print(f"{self.label} step {state.global_step}/{state.max_steps}: {info}", highlight=False)
