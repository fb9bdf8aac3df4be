"""The private transformers / accelerate internals RLTrainer relies on live in trainer/hf_hooks.py, and each still
exists, with the parameters we pass, in the installed versions (a release that moves one fails the first test in
one line naming it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from verifiers_rl.trainer import hf_hooks

PKG = Path(__file__).resolve().parents[1] / "verifiers_rl"


def test_every_wrapped_hook_exists_in_the_installed_transformers_and_accelerate():
    import accelerate
    import transformers

    missing = hf_hooks.missing_hooks()
    assert not missing, (f"transformers {transformers.__version__} / accelerate {accelerate.__version__} moved hooks "
                         f"that trainer/hf_hooks.py wraps: {missing}")


def test_a_missing_or_changed_hook_is_named(monkeypatch):
    """The check above can fail: a hook that is gone and one whose parameters differ are both reported."""
    hooks = {**hf_hooks.HOOKS,
             ("transformers.Trainer", "_no_such_hook"): ("self",),
             ("transformers.Trainer", "_save"): ("self", "output_dir"),  # the real one also takes state_dict
             ("accelerate.Accelerator", "_no_such_attribute"): None}
    monkeypatch.setattr(hf_hooks, "HOOKS", hooks)
    missing = hf_hooks.missing_hooks()
    assert missing == ["transformers.Trainer._save (parameters now ('self', 'output_dir', 'state_dict'))",
                       "transformers.Trainer._no_such_hook (gone)",
                       "accelerate.Accelerator._no_such_attribute (no longer set by __init__)"]
    with pytest.raises(RuntimeError) as err:
        hf_hooks.check_hooks()
    assert "_no_such_hook (gone)" in str(err.value) and "\n" not in str(err.value)


def test_rltrainer_overrides_private_trainer_hooks_only_in_hf_hooks():
    from transformers import Trainer

    from verifiers_rl.trainer.rl_trainer import RLTrainer

    wrapped = {name for owner, name in hf_hooks.HOOKS if owner == "transformers.Trainer"}
    overrides = [(cls.__name__, name) for cls in RLTrainer.__mro__ if cls.__module__.startswith("verifiers_rl")
                 for name in vars(cls) if name.startswith("_") and not name.startswith("__") and hasattr(Trainer, name)]
    assert overrides, "RLTrainer overrides no private hook: the check below would see nothing"
    assert all(cls == "TrainerHooks" and name in wrapped for cls, name in overrides), overrides


def _private_internals(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) for each use of accelerate / transformers internals: `<...>accelerator._x`, an assignment to
    `<...>.prepare_model`, and the Trainer attributes HOOKS lists."""
    attrs = {name for (_owner, name), params in hf_hooks.HOOKS.items() if params is None}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
        if (base.endswith("accelerator") and node.attr.startswith("_")) or node.attr in attrs or \
                (node.attr == "prepare_model" and isinstance(node.ctx, ast.Store)):
            found.append((node.lineno, node.attr))
    return found


def test_no_module_but_hf_hooks_touches_accelerate_or_trainer_internals():
    offenders = [f"{path.relative_to(PKG)}:{line} {name}" for path in PKG.rglob("*.py") if path.name != "hf_hooks.py"
                 for line, name in _private_internals(ast.parse(path.read_text()))]
    assert not offenders, "wrap it in trainer/hf_hooks.py: " + "; ".join(offenders)
    sample = "def f(trainer):\n    trainer.accelerator._models.append(1)\n    trainer.accelerator.prepare_model = g\n"
    assert sorted(_private_internals(ast.parse(sample))) == [(2, "_models"), (3, "prepare_model")]
