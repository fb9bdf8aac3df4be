"""transformers' `TrainingArguments` fields (name, annotation, default, help) read from its source file: importing it
(torch, peft) is slow, and vf-rl's own process only checks `[trainer.args]` before launching the trainer. The enums
its annotations name are rebuilt from source, so values meet the same choices. `None` when the source does not read
as expected: the caller imports the class then. tests/test_trainer_args_source.py compares both.
"""

from __future__ import annotations

import ast
import builtins
import enum
import functools
import importlib.util
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MAX_HOPS = 3  # re-exports followed to find the class an annotation names
_TYPING = {n: getattr(typing, n) for n in ("Any", "Literal", "Optional", "Union", "List", "Dict", "Tuple", "Callable")}
_BUILTINS = {n: getattr(builtins, n) for n in ("int", "float", "str", "bool", "list", "dict", "tuple", "set", "bytes",
                                                "object", "type")}


UNREAD = type("Unread", (), {"__repr__": lambda self: "<not a literal in the source>"})()


@dataclass(frozen=True)
class SourceField:
    name: str
    type: Any
    default: Any
    help: str


def _package_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _class_def(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _imported_from(tree: ast.Module, path: Path, name: str) -> Path | str | None:
    """The file a relative `from .x import name` reads it from; the package, for an absolute import."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and any(a.name == name and a.asname is None for a in node.names)):
            continue
        if node.level == 0:
            return node.module or ""
        base = path.parents[node.level - 1]
        target = base.joinpath(*(node.module or "").split(".")) if node.module else base
        for candidate in (target.with_suffix(".py"), target / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _str_value(node: ast.AST | None) -> str | None:
    """A string constant, or `"a" + "b"`; None for anything else (an f-string, a call)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _str_value(node.left), _str_value(node.right)
        return None if left is None or right is None else left + right
    return None


def _named_class(name: str, path: Path, hops: int = 0) -> Any:
    """The class `name` as seen from `path`: an `Enum` rebuilt with its string members, or a stand-in class (a value
    check treats a class that is not a builtin as any value, as it does the real one)."""
    tree = _tree(path)
    node = _class_def(tree, name) if tree is not None else None
    if node is None:
        source = _imported_from(tree, path, name) if tree is not None and hops < _MAX_HOPS else None
        if source is None:
            raise LookupError(name)
        if isinstance(source, str):  # another package's class (accelerate's ParallelismConfig)
            return type(name, (), {"__module__": source})
        return _named_class(name, source, hops + 1)
    if any(ast.unparse(b).endswith("Enum") for b in node.bases):
        members = {s.targets[0].id: _str_value(s.value) for s in node.body if isinstance(s, ast.Assign)
                   and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) and _str_value(s.value) is not None}
        if not members:
            raise LookupError(name)
        return enum.Enum(name, members)  # type: ignore[misc]
    return type(name, (), {"__module__": "transformers"})


def _annotation(node: ast.expr, path: Path, classes: dict[str, Any]) -> Any:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    scope: dict[str, Any] = {**_BUILTINS, **_TYPING, "None": None}
    for name in names - set(scope):
        if name not in classes:
            classes[name] = _named_class(name, path)
        scope[name] = classes[name]
    return eval(compile(ast.Expression(node), str(path), "eval"), {"__builtins__": {}}, scope)  # noqa: S307


def _field_kwargs(value: ast.expr | None) -> dict[str, ast.expr] | None:
    """The keyword arguments of a `field(...)` default; None for a plain default."""
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
        return {k.arg: k.value for k in value.keywords if k.arg}
    return None


def _default(value: ast.expr | None, classes: dict[str, Any]) -> Any:
    """The field's default as TOML would spell it (an enum member: its value); UNREAD for what is not a literal
    (`optim`'s default depends on the torch version)."""
    kw = _field_kwargs(value)
    if kw is not None:
        if "default_factory" in kw:
            factory = kw["default_factory"]
            empty = {"list": [], "dict": {}}.get(ast.unparse(factory))
            return empty if empty is not None else _default(getattr(factory, "body", None), classes)
        value = kw.get("default")
    if value is None:
        return None if kw is None else UNREAD  # a field(default_factory=f) whose f this does not read
    try:
        return ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id in classes:
        member = getattr(classes[value.value.id], value.attr, None)
        return member.value if isinstance(member, enum.Enum) else UNREAD
    return UNREAD


def _help(value: ast.expr | None) -> str:
    meta = (_field_kwargs(value) or {}).get("metadata")
    items = zip(meta.keys, meta.values) if isinstance(meta, ast.Dict) else ()
    return next((_str_value(v) or "" for k, v in items if isinstance(k, ast.Constant) and k.value == "help"), "")


def _init_field(value: ast.expr | None) -> bool:
    init = (_field_kwargs(value) or {}).get("init")
    return not (isinstance(init, ast.Constant) and init.value is False)


@functools.lru_cache(maxsize=1)
def training_args_fields() -> tuple[SourceField, ...] | None:
    """TrainingArguments' init fields in declaration order, or None (read it by importing it instead)."""
    package = _package_dir()
    if package is None:
        return None
    path = package / "training_args.py"
    tree = _tree(path)
    node = _class_def(tree, "TrainingArguments") if tree is not None else None
    if node is None or node.bases or [ast.unparse(d) for d in node.decorator_list] != ["dataclass"]:
        return None  # a base class or another decorator would add fields this does not read
    classes: dict[str, Any] = {}
    out = []
    try:
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            if "ClassVar" in ast.unparse(stmt.annotation) or not _init_field(stmt.value):
                continue
            tp = _annotation(stmt.annotation, path, classes)
            out.append(SourceField(stmt.target.id, tp, _default(stmt.value, classes), _help(stmt.value)))
    except Exception:  # an annotation or a class this reader does not follow: read the class by importing it
        return None
    return tuple(out) if len(out) >= 20 else None


# The module an integration's callback needs (transformers' is_<name>_available: its callback raises without it).
_INTEGRATION_MODULES = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",), "mlflow": ("mlflow",),
                        "comet_ml": ("comet_ml",), "clearml": ("clearml",), "dvclive": ("dvclive",),
                        "swanlab": ("swanlab",), "trackio": ("trackio",), "codecarbon": ("codecarbon",),
                        "neptune": ("neptune",), "azure_ml": ("azureml",), "flyte": ("flytekit",),
                        "dagshub": ("dagshub",)}


@functools.lru_cache(maxsize=1)
def reporting_integrations() -> tuple[str, ...] | None:
    """The names `report_to` takes (transformers' INTEGRATION_TO_CALLBACK keys, read from its source); None when
    that source does not read as expected (nothing is checked then)."""
    package = _package_dir()
    tree = _tree(package / "integrations" / "integration_utils.py") if package is not None else None
    for node in tree.body if tree is not None else ():
        if (isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["INTEGRATION_TO_CALLBACK"]
                and isinstance(node.value, ast.Dict)):
            names = [_str_value(k) for k in node.value.keys]
            return tuple(n for n in names if n) or None
    return None


def report_to_problem(report_to: Any) -> str | None:
    """What transformers' Trainer would refuse in `report_to` at its construction, after the model and the data have
    loaded (an unknown integration, one whose package is not installed), as a line; None when it is fine."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    known = reporting_integrations()
    for name in names:
        if name in ("none", "all"):
            continue
        if known is not None and name not in known:
            from verifiers_rl.config.sections import close_match

            close = close_match(str(name), list(known))
            hint = f" (did you mean {close!r}?)" if close else ""
            return f"{name!r} is not an integration transformers reports to{hint}; one of 'none', 'all', " + \
                ", ".join(repr(k) for k in known)
        modules = _INTEGRATION_MODULES.get(name, ())
        if modules and not any(importlib.util.find_spec(m) is not None for m in modules):
            return (f"{name!r} needs the {modules[0]} package, which is not installed here: pip install "
                    f"{modules[0]}, or drop {name!r} from report_to")
    return None


def scheduler_problem(name: str) -> str | None:
    """What transformers refuses in `lr_scheduler_type` when the trainer is built (a name not in its SchedulerType,
    read from its source), as a line; None when it is one, or when that source does not read."""
    field = next((f for f in training_args_fields() or () if f.name == "lr_scheduler_type"), None)
    kinds = [a for a in typing.get_args(field.type) if isinstance(a, type) and issubclass(a, enum.Enum)] if field \
        else []
    known = [str(m.value) for m in kinds[0]] if kinds else []
    if not known or name in known:
        return None
    from verifiers_rl.config.sections import close_match

    close = close_match(str(name), known)
    hint = f" (did you mean {close!r}?)" if close else ""
    return f"{name!r} is not a transformers scheduler{hint}; one of " + ", ".join(repr(k) for k in known)
