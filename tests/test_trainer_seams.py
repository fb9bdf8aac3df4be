"""RLTrainer's rooms talk through public names: no module reaches into a trainer's private attributes (callbacks
included), and rl_trainer.py stays the thin subclass (its setup, step, eval and checkpoints live beside it)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "verifiers_rl"


def _private_trainer_uses(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) for each `<x>trainer._name` / `tr._name` (self.trainer._x, trainer._x, ...)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
            if base in ("trainer", "tr") or base.endswith("_trainer"):
                found.append((node.lineno, node.attr))
    return found


def test_no_module_uses_a_trainers_private_names():
    offenders = [f"{path.relative_to(PKG)}:{line} {name}" for path in PKG.rglob("*.py")
                 for line, name in _private_trainer_uses(ast.parse(path.read_text()))]
    assert not offenders, "give RLTrainer a public name for it: " + "; ".join(offenders)
    sample = "def on_step_end(self, trainer):\n    self.trainer._after_step()\n    x = trainer._last\n"
    assert sorted(_private_trainer_uses(ast.parse(sample))) == [(2, "_after_step"), (3, "_last")]


def test_rl_trainer_stays_thin():
    lines = len((PKG / "trainer" / "rl_trainer.py").read_text().splitlines())
    assert lines < 250, f"trainer/rl_trainer.py has {lines} lines: move the logic to setup/step/evaluation/checkpoints"
