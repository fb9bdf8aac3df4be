"""The package's shape: small modules, short functions, no import cycles (between modules, and between the
subpackages `verifiers_rl.trainer`, `.inference`, `.config`, ...), imports inside functions counted."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "verifiers_rl"


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text(), str(path))
    return out


def _imports(mods: dict[str, ast.Module]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, tree in mods.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("verifiers_rl"):
                graph[name] |= {t for t in [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                                if t in mods}
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in mods}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_modules_are_small_and_functions_short():
    long_modules, long_functions = [], []
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        if len(text.splitlines()) > 500:
            long_modules.append(str(path))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long_functions.append(f"{path}:{node.name}")
    assert not long_modules and not long_functions, (long_modules, long_functions)


def test_no_import_cycles_between_modules_or_subpackages():
    mods = _modules()
    graph = _imports(mods)
    assert not _cycles(graph)

    def sub(m: str) -> str:
        return m.split(".")[1] if "." in m else m

    subs: dict[str, set[str]] = defaultdict(set)
    for a, targets in graph.items():
        if a == "verifiers_rl":  # the package's lazy export table names every subpackage
            continue
        subs[sub(a)] |= {sub(b) for b in targets if sub(b) != sub(a)}
    assert not _cycles(subs)


# --- one decision in one place: the plan ------------------------------------------------------------------------------
# The settings that choose the inference backend, the weight transfer and the process / GPU layout. The config layer
# defines, validates, documents and translates them; only `verifiers_rl.plan` decides with them.
RL_SETTINGS = {"inference_backend", "vllm_server_urls", "vllm_server_host", "vllm_server_port",
               "vllm_weight_transfer", "vllm_weight_transfer_host", "local_async"}
SECTION_SETTINGS = {"backend", "urls", "gpus", "colocate", "processes"}  # of [inference] / [trainer]
ALLOWED = ("verifiers_rl.plan", "verifiers_rl.config", "verifiers_rl.trainer.config")


def _is_section(node: ast.AST, aliases: set[str]) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in ("inference", "trainer")) or \
        (isinstance(node, ast.Name) and node.id in aliases)


def _setting_reads(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, setting) for each read of a deciding setting: `x.inference_backend`, `args["local_async"]`,
    `targs.get("vllm_server_urls")`, `cfg.inference.gpus`, and `inf.gpus` after `inf = cfg.inference`."""
    aliases = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and _is_section(n.value, set())
               for t in n.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if node.attr in RL_SETTINGS or (node.attr in SECTION_SETTINGS and _is_section(node.value, aliases)):
                found.append((node.lineno, node.attr))
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant):
            key = node.args[0].value
        if key in RL_SETTINGS:
            found.append((node.lineno, str(key)))
    return found


def test_only_the_plan_reads_the_settings_that_decide_where_things_run():
    offenders = [f"{name}:{line} reads {key}" for name, tree in _modules().items()
                 if not name.startswith(ALLOWED) for line, key in _setting_reads(tree)]
    assert not offenders, "decide it in verifiers_rl/plan: " + "; ".join(offenders)


def test_the_setting_check_sees_reads():
    """The check above can fail: it finds each form of read."""
    code = ("def f(args, cfg, targs):\n    inf = cfg.inference\n    a = args.inference_backend\n"
            "    b = targs.get('local_async')\n    c = cfg.trainer.gpus\n    d = inf.colocate\n"
            "    e = targs['vllm_server_urls']\n    g = self.gpus\n")
    assert [k for _, k in _setting_reads(ast.parse(code))] == [
        "inference_backend", "local_async", "gpus", "colocate", "vllm_server_urls"]


def _top_level_imports(tree: ast.Module) -> set[str]:
    """Modules a module imports when it is imported: its body's imports (not those inside functions or under
    `if TYPE_CHECKING:`), each with its parents (importing a.b.c runs a, a.b, a.b.c)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return {".".join(n.split(".")[:i]) for n in names for i in range(1, n.count(".") + 2)}


def test_the_config_package_imports_without_torch_or_transformers():
    """`import verifiers_rl.config.<any>` (the schema, loading, checks, docs, hosted translation) runs no import of
    torch, transformers, peft, trl or datasets: followed through every verifiers_rl module it imports at load."""
    mods = _modules()
    heavy = {"torch", "transformers", "peft", "trl", "datasets", "accelerate", "vllm"}
    seen: dict[str, str] = {}
    frontier = {m: m for m in mods if m.startswith("verifiers_rl.config")}
    while frontier:
        seen.update(frontier)
        nxt = {}
        for mod, root in frontier.items():
            for name in _top_level_imports(mods[mod]):
                assert name.split(".")[0] not in heavy, f"{root} imports {name} (through {mod})"
                if name in mods and name not in seen:
                    nxt[name] = root
        frontier = nxt
    assert "verifiers_rl.config.schema" in seen and len(seen) > 10
