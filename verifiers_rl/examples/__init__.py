"""The six example environments shipped with the package: the repository's `environments/<name>/`, copied into
the wheel here by pyproject's force-include (one source). Each is importable as `verifiers_rl.examples.<name>`,
under a name of its own so that an installed community module `<name>` neither hides it nor is hidden by it;
`load_environment("verifiers-rl/<name>")` loads it from any directory.
"""

from __future__ import annotations

from pathlib import Path

from verifiers_rl.shipped import shipped_dir


def example_dirs() -> dict[str, Path]:
    """{module name: its folder} of the shipped examples."""
    root = shipped_dir("examples")
    if root is None:
        return {}
    return {d.name: d for d in sorted(root.iterdir()) if (d / f"{d.name}.py").is_file()}


# Search each example's own folder, so `verifiers_rl.examples.reverse_text` is <root>/reverse_text/reverse_text.py.
__path__ = [str(d) for d in example_dirs().values()]
