"""No module of the package imports another module's private (`_name`) names: what one module needs from another
is public there, so a private helper can change without breaking a caller it does not know about."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "verifiers_rl"


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("verifiers_rl"):
            found += [f"{path.name}:{node.lineno} imports {node.module}.{a.name}"
                      for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_names():
    found = [line for p in sorted(PACKAGE.rglob("*.py")) for line in _private_imports(p)]
    assert not found, "\n".join(found)


def test_the_check_sees_a_private_import_inside_a_function(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from verifiers_rl.config.sections import close_match\n\n\n"
                     "def f():\n    from verifiers_rl.config.sections import _hidden, __all__\n")
    assert _private_imports(probe) == ["probe.py:5 imports verifiers_rl.config.sections._hidden"]
