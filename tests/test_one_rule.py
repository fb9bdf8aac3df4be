"""One rule, one definition: each rule below is written in one function (its characteristic expression appears
nowhere else in the package) and the modules that apply it call that function. Read from the source (AST)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable

PKG = Path(__file__).resolve().parents[1] / "verifiers_rl"


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ast.parse(path.read_text(), str(path))
    return out


MODULES = _modules()


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _innermost(tree: ast.Module) -> dict[int, str]:
    """id(node) -> the name of the innermost function holding it ("<module>" for module level)."""
    owner: dict[int, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            owner[id(child)] = inner
            visit(child, inner)

    visit(tree, "<module>")
    return owner


def where(pred: Callable[[ast.AST], bool], modules: dict[str, ast.Module] = MODULES) -> set[tuple[str, str]]:
    """(module, function) pairs where a node satisfying `pred` is written."""
    found = set()
    for mod, tree in modules.items():
        owner = _innermost(tree)
        found |= {(mod, owner[id(n)]) for n in ast.walk(tree) if pred(n)}
    return found


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def calls(scope: ast.AST, name: str) -> bool:
    return any(_called(n) == name for n in ast.walk(scope))


def callers(name: str) -> set[str]:
    return {mod for mod, tree in MODULES.items() if calls(tree, name)}


def _named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def _reads_key(node: ast.AST, key: str) -> bool:
    """`x.get(key, ...)`, `x[key]` or `x.key`."""
    if isinstance(node, ast.Call) and _called(node) == "get" and node.args:
        return isinstance(node.args[0], ast.Constant) and node.args[0].value == key
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == key
    return isinstance(node, ast.Attribute) and node.attr == key


def _mentions(node: ast.AST, test: Callable[[ast.AST], bool]) -> bool:
    return any(test(n) for n in ast.walk(node))


# --- 1. "this rollout carries no loss" ------------------------------------------------------------------------------
def _prompt_over_limit(n: ast.AST) -> bool:
    return isinstance(n, ast.Compare) and isinstance(n.ops[0], ast.Gt) and _named(n.comparators[0], "max_prompt_len")


def _truncated_masked(n: ast.AST) -> bool:
    return isinstance(n, ast.BoolOp) and isinstance(n.op, ast.And) and \
        _mentions(n, lambda x: _named(x, "mask_truncated_completions")) and \
        _mentions(n, lambda x: _reads_key(x, "is_truncated"))


def test_the_no_loss_rule_is_batching_drop_reason():
    home = {("verifiers_rl.trainer.batching", "drop_reason")}
    assert where(_prompt_over_limit) == home
    assert where(_truncated_masked) == home
    assert {"verifiers_rl.trainer.batching", "verifiers_rl.trainer.empty_steps",
            "verifiers_rl.trainer.teacher_samples"} <= callers("drop_reason")
    # the `prompt_too_long` step metric, wherever the step is built, counts with the same rule
    metric = [f for tree in MODULES.values() for f in _functions(tree)
              if any(isinstance(d, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "prompt_too_long"
                                                      for k in d.keys) for d in ast.walk(f))]
    assert metric and all(calls(f, "drop_reason") for f in metric), [f.name for f in metric]


# --- 2. the importance-ratio mask -------------------------------------------------------------------------------------
def _out_of_window(n: ast.AST) -> bool:
    return isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) and \
        isinstance(n.left, ast.Compare) and isinstance(n.left.ops[0], ast.Lt) and \
        isinstance(n.right, ast.Compare) and isinstance(n.right.ops[0], ast.Gt)


def test_the_ratio_mask_is_one_function():
    assert where(_out_of_window) == {("verifiers_rl.trainer.importance", "ratio_mask")}
    assert "verifiers_rl.trainer.loss" in callers("ratio_mask")
    # the token export reports what the chosen loss left out (LossOutputs.no_gradient), with no window of its own
    assert "verifiers_rl.trainer.token_export" not in callers("ratio_mask")


# --- 3. min / max metric merging --------------------------------------------------------------------------------------
def _min_and_max(n: ast.AST) -> bool:
    items = n.keys if isinstance(n, ast.Dict) else n.elts if isinstance(n, (ast.Tuple, ast.List, ast.Set)) else []
    names = {k.value for k in items if isinstance(k, ast.Constant)}
    return {"min", "max"} <= names


def test_metric_extremes_merge_by_one_rule():
    assert where(_min_and_max) == {("verifiers_rl.trainer.metrics", "extreme")}
    assert {"verifiers_rl.trainer.metrics", "verifiers_rl.trainer.distributed"} <= callers("extreme")


# --- 4. a missing reward counts as 0 ----------------------------------------------------------------------------------
def _reward_or_zero(n: ast.AST) -> bool:
    if isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or):
        last = n.values[-1]
        return _reads_key(n.values[0], "reward") and isinstance(last, ast.Constant) and last.value == 0
    # float(x.get("reward", 0.0)): the same rule with a default
    return _called(n) == "float" and bool(n.args) and isinstance(n.args[0], ast.Call) and \
        _reads_key(n.args[0], "reward") and len(n.args[0].args) == 2


READERS = ["evaluation", "launching.stats", "rubrics.rubric_group", "utils.save_utils", "envs.real_runtime",
           "envs.experimental.gym_env", "v1.episodes", "trainer.batching", "trainer.rollout_metrics",
           "trainer.teacher_samples", "trainer.wandb_extras", "trainer.eval_metrics"]


def test_a_missing_reward_is_read_in_one_place():
    assert where(_reward_or_zero) <= {("verifiers_rl.rewards", "reward_of")}
    assert {f"verifiers_rl.{m}" for m in READERS} <= callers("reward_of")


# --- 5. zero_truncated_completions: the rewards advantages use are the rewards the buffer filters on -----------------
def _zero_truncated(n: ast.AST) -> bool:
    return isinstance(n, ast.BoolOp) and _mentions(n, lambda x: _named(x, "zero_truncated_completions")) and \
        _mentions(n, lambda x: _reads_key(x, "is_truncated"))


def test_training_rewards_are_one_function_for_advantages_and_buffer():
    assert where(_zero_truncated) == {("verifiers_rl.rewards", "training_reward")}
    buffer = MODULES["verifiers_rl.trainer.buffer"]
    pools_and_filter = [f for f in _functions(buffer) if f.name in ("is_constant", "_update_pools")]
    assert len(pools_and_filter) == 2 and all(calls(f, "training_reward") for f in pools_and_filter)
    # every function computing advantages (the step, the W&B table) reads the same training rewards
    users = [f for mod, tree in MODULES.items() if not mod.startswith("verifiers_rl.trainer.advantage")
             for f in _functions(tree) if calls(f, "advantages_for")]
    assert users and all(calls(f, "training_reward") for f in users), [f.name for f in users]


def test_the_checks_see_what_they_look_for():
    """Each check above finds its expression in a copy written elsewhere: they can fail."""
    code = ("def f(s, args, ratio, m):\n"
            "    a = s.get('reward') or 0.0\n"
            "    b = float(s.get('reward', 0.0))\n"
            "    c = args.mask_truncated_completions and s.get('is_truncated')\n"
            "    d = n > args.max_prompt_len\n"
            "    e = (ratio < 0.1) | (ratio > 8)\n"
            "    g = kind in ('min', 'max')\n"
            "    h = 0.0 if (args.zero_truncated_completions and s['is_truncated']) else 1\n")
    copy = {"elsewhere": ast.parse(code)}
    for pred in (_reward_or_zero, _truncated_masked, _prompt_over_limit, _out_of_window, _min_and_max,
                 _zero_truncated):
        assert where(pred, copy) == {("elsewhere", "f")}, pred.__name__
    assert len([n for n in ast.walk(copy["elsewhere"]) if _reward_or_zero(n)]) == 2


def test_zero_truncated_rewards_are_what_the_buffer_filters_on():
    """A group whose only reward is a truncated rollout's: with zero_truncated_completions it trains with zero
    advantage everywhere, and the buffer drops it as constant (before, it filtered on the raw rewards and kept it)."""
    import asyncio

    import torch

    from verifiers_rl.rewards import training_reward
    from verifiers_rl.trainer.advantages import compute_advantages
    from verifiers_rl.trainer.buffer import BufferConfig, DifficultyBuffer
    from verifiers_rl.trainer.data_order import DataOrder

    def group(i):  # example 0: one truncated rollout scores 1, the rest 0; others: a real spread
        if i == 0:
            return [{"reward": 1.0, "is_truncated": True}] + [{"reward": 0.0, "is_truncated": False}] * 3
        return [{"reward": float(j), "is_truncated": False} for j in range(4)]

    async def generate(indices):
        return [group(i) for i in indices]

    for zero, filtered in ((True, 1), (False, 0)):
        cfg = BufferConfig(online_difficulty_filtering=True, oversampling_factor=1.0, zero_truncated_completions=zero)
        buf = DifficultyBuffer(DataOrder([range(4)], None, seed=0, shuffle=False), cfg, seed=0)
        groups, metrics = asyncio.run(buf.fill(0, 2, generate))
        assert metrics["buffer/filtered_groups"] == filtered and len(groups) == 2
        rewards = torch.tensor([training_reward(s, zero) for s in group(0)])
        assert bool((compute_advantages(rewards, 4, "none") == 0).all()) == zero
