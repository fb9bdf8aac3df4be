"""Where `loss.type` and `advantage.type` go, followed from the TOML to the step: the modules whose functions
receive the setting (its table, its type, or the config built from it), in the order it enters them. A module
entered again from another one after the setting left it is a return; calls inside a module are not crossings.

In vf-rl's process: `config/loading.py` (the TOML and the command line) → `trainer/typed_table.py` (the type's
spec, its keys → its config) → the type's own module (its config checks its values, when it has checks). In the
trainer: `typed_table` → the type's module → the function at the step.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import verifiers_rl as vf
from verifiers_rl.config.resolution import load_run

ROOT = os.path.dirname(vf.__file__)
REPO = Path(__file__).resolve().parent.parent
CASES = {
    "loss": ("dapo", "DAPOLossConfig", ["trainer.losses.trl_types"], "trainer.losses.trl_functions"),
    # rloo's config has nothing to check (no __post_init__): its module is not entered
    "advantage": ("rloo", "RLOOAdvantageConfig", [], "trainer.advantages"),
}


def _module(frame) -> str | None:
    """The package module a frame runs in (frames outside it, e.g. a dataclass's generated __init__, skipped)."""
    while frame is not None and not frame.f_code.co_filename.startswith(ROOT):
        frame = frame.f_back
    return None if frame is None else os.path.relpath(frame.f_code.co_filename, ROOT)[:-3].replace("/", ".")


class Path_:
    """A profile hook recording each module the setting enters: a call, from another module, of a function whose
    arguments hold the value (the type string, a table with that type, or its config object)."""

    def __init__(self, value: str, config_class: str):
        self.value, self.config_class, self.entered, self.returns = value, config_class, [], []

    def holds(self, v) -> bool:
        if isinstance(v, str):
            return v == self.value
        if isinstance(v, dict):
            return v.get("type") == self.value
        return type(v).__name__ == self.config_class

    def __call__(self, frame, event, arg) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(ROOT):
            return
        code = frame.f_code
        args = [frame.f_locals.get(n) for n in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]]
        if not any(self.holds(v) for v in args):
            return
        module, caller = _module(frame), _module(frame.f_back)
        if self.entered and (module == self.entered[-1] or (caller == module and module in self.entered)):
            return  # still there, or a call inside the module it is in
        if module in self.entered:
            self.returns.append(module)
        self.entered.append(module)

    def follow(self, fn):
        sys.setprofile(self)
        try:
            return fn()
        finally:
            sys.setprofile(None)


@pytest.mark.parametrize("section", sorted(CASES))
def test_vf_rl_reads_the_type_in_four_modules_without_returning(section):
    value, config_class, own, _ = CASES[section]
    path = Path_(value, config_class)
    argv = ["@", str(REPO / "configs/vf-rl/reverse-text.toml"), f"--trainer.args.{section}.type", value]
    run, _ = path.follow(lambda: load_run(argv, check_environments=False, preview=True))
    assert path.entered == ["config.loading", "trainer.typed_table", *own], path.entered
    assert not path.returns and len(path.entered) <= 4
    assert run.rl_kwargs[section] == {"type": value}


class Holding(Path_):
    """The same hook, counting calls whose arguments hold the setting anywhere inside (the merged config)."""

    def holds(self, v, depth: int = 0) -> bool:
        if depth > 6:
            return False
        if isinstance(v, dict):
            return v.get("type") == self.value or any(self.holds(x, depth + 1) for x in v.values())
        if isinstance(v, (list, tuple)):
            return any(self.holds(x, depth + 1) for x in v)
        return super().holds(v)


def test_the_config_that_holds_the_loss_passes_each_module_once():
    """Counted as the merged config that holds it (the issue's first walk, 11 modules and 12 returns then): read
    (config/loading.py), resolved into a run (config/resolution.py: shorthands, format, sections, RLConfig), built
    (typed_table), checked by its type; none entered again. A hosted file also passes its translator."""
    path = Holding("dapo", "DAPOLossConfig")
    argv = ["@", str(REPO / "configs/vf-rl/reverse-text.toml"), "--trainer.args.loss.type", "dapo"]
    path.follow(lambda: load_run(argv, check_environments=False, preview=True))
    assert path.entered == ["config.resolution", "config.loading", "trainer.typed_table",
                            "trainer.losses.trl_types"], path.entered
    assert not path.returns and len(path.entered) <= 4


@pytest.mark.integration  # trains in-process under a profile hook: many seconds
def test_a_run_takes_the_built_types_to_the_step(tiny_model_dir, tmp_path):
    """An RLConfig and a one-step run: each setting is read once, where the RLConfig is made; the step gets what
    was built."""
    from test_trainer import make_config, make_env

    paths = {section: Path_(value, config_class) for section, (value, config_class, _, _) in CASES.items()}

    def both(frame, event, arg):
        for path in paths.values():
            path(frame, event, arg)

    sys.setprofile(both)
    try:
        args = make_config(tmp_path, max_steps=1, **{section: {"type": case[0]} for section, case in CASES.items()})
        trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), args)
        trainer.train()
        trainer.close()
    finally:
        sys.setprofile(None)
    for section, (_, _, own, step) in CASES.items():
        assert paths[section].entered == ["trainer.typed_table", *own, step], (section, paths[section].entered)
        assert not paths[section].returns


def test_the_path_sees_a_return():
    """A module the setting left, entered again from another one, is a return: the check can fail."""
    from verifiers_rl.trainer import typed_table
    from verifiers_rl.value_check import type_error

    path = Path_("dapo", "DAPOLossConfig")

    def there_and_back():
        type_error({"type": "dapo"}, dict)
        typed_table.loss_table({"type": "dapo"})
        type_error({"type": "dapo"}, dict)

    path.follow(there_and_back)
    assert path.entered == ["value_check", "trainer.typed_table", "value_check"] and path.returns == ["value_check"]


@pytest.mark.integration  # trains two steps in-process
def test_the_trainer_process_of_a_vf_rl_run_builds_its_rlconfig_once(tiny_model_dir, tmp_path, monkeypatch):
    """vf-rl's worker checks the config it is handed (building the RLConfig) and trains with that same RLConfig
    when the plan leaves its precision as it is: the loss is built once in that process too. Here the worker's
    steps run in this process (`load_run` on the resolved config, the plan, `launching.pipeline.run`)."""
    from rich.console import Console
    from two_steps import _write_run

    from verifiers_rl.cli import rl as rl_cli
    from verifiers_rl.launching.pipeline import run
    from verifiers_rl.plan.launch import plan_launch
    from verifiers_rl.trainer import typed_table

    out = _write_run(tiny_model_dir, tmp_path, monkeypatch, 'loss = { type = "dapo" }')
    assert rl_cli.main(["@", "run.toml", "--output-dir", str(out), "--dry-run"]) == 0
    built = []
    build = typed_table._build_loss
    monkeypatch.setattr(typed_table, "_build_loss", lambda c: built.append(c) or build(c))
    resolved, _ = load_run(["@", str(out / "configs" / "rl.toml")])
    plan = plan_launch(resolved.cfg, 0, output_dir=resolved.output_dir, args=resolved.args)
    result = run(resolved.cfg, resolved.rl_kwargs, Console(quiet=True), plan, resolved.args)
    assert result["output_dir"] == resolved.output_dir and len(built) == 1
    steps = [line for line in (out / "metrics.jsonl").read_text().splitlines() if '"loss/mean"' in line]
    assert len(steps) == 2
