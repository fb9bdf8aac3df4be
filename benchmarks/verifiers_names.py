"""Which of verifiers' names do environment files use, and does this package define each of them?

Scans every environment folder under the given roots (e.g. a checkout of prime-environments, or verifiers'
own `environments/`), collects what its Python files take from verifiers — `vf.Name` / `vf.sub.Name`
attribute uses after `import verifiers as vf`, and `from verifiers.path import Name` — and resolves each name
against the `ours` runtime (`import verifiers` answered by verifiers_rl). Prints the share of environments
whose every name resolves, and the missing names by how many environments use them.

    uv run python benchmarks/verifiers_names.py PATH/TO/prime-environments/environments [...]
"""

from __future__ import annotations

import argparse
import ast
import importlib
from collections import Counter
from pathlib import Path


def used_names(source: str) -> set[str]:
    """Dotted names taken from verifiers: 'verifiers.Name', 'verifiers.utils.data_utils.Name', ..."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    aliases: dict[str, str] = {}
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "verifiers" or a.name.startswith("verifiers."):
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "verifiers"
                    out.add(a.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                (node.module == "verifiers" or node.module.startswith("verifiers.")):
            for a in node.names:
                out.add(f"{node.module}.{a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts = []
            cur: ast.AST = node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in aliases:
                parts.reverse()
                # the longest prefix that is a module path plus one attribute is resolved by `resolves`
                out.add(".".join([aliases[cur.id], *parts]))
    return out


def resolves(dotted: str) -> bool:
    """True when `dotted` is a module, or a name in the longest importable module prefix (attributes past the
    first non-module object, like `vf.State.get`, are the object's own business)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception:  # noqa: BLE001 -- the module exists but does not import: the name is not usable
            return False
        for attr in parts[cut:]:
            try:
                obj = getattr(obj, attr)
            except Exception:  # noqa: BLE001 -- a lazy export whose module does not import
                return False
            if not isinstance(obj, type(importlib)):
                return True
        return True
    return False


def environments(roots: list[Path]) -> list[Path]:
    return sorted(d for r in roots for d in r.iterdir() if d.is_dir() and any(d.rglob("*.py")))


def main(argv: list[str]) -> int:
    from verifiers_rl import verifiers_runtime

    verifiers_runtime.activate("ours")
    envs = environments([Path(a) for a in argv])
    missing_by_name: Counter[str] = Counter()
    ok = 0
    for env in envs:
        names: set[str] = set()
        for f in env.rglob("*.py"):
            if "test" in f.parts[-1] and f.parts[-1].startswith("test"):
                continue
            names |= used_names(f.read_text(errors="replace"))
        missing = sorted(n for n in names if not resolves(n))
        ok += not missing
        missing_by_name.update(missing)
        print(f"{env.name:40s} {'ok' if not missing else 'missing: ' + ', '.join(missing)}")
    share = ok / max(1, len(envs))
    print(f"\n{ok} of {len(envs)} environments ({share:.0%}) use only names this package defines")
    if missing_by_name:
        print("missing names (environments using them):")
        for name, n in missing_by_name.most_common(30):
            print(f"  {n:3d}  {name}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="+", help="folders of environment folders, e.g. prime-environments/environments")
    raise SystemExit(main(ap.parse_args().roots))
