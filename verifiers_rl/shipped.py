"""Files the wheel carries beside the code: the example environments and vf-setup's run configs, copied into the package
by pyproject's force-include so nothing at run time reads the source tree. An editable install reads the site-packages
copies, refreshed by `uv run` when `environments/` or `configs/` change ([tool.uv] cache-keys).
"""

from __future__ import annotations

from pathlib import Path

DIST_NAME = "verifiers-rl"


def shipped_dir(rel: str) -> Path | None:
    """The folder `verifiers_rl/<rel>` as installed, or None when this copy of the code has none (run from a
    source tree that was never installed)."""
    here = Path(__file__).parent / rel
    if here.is_dir() and any(p.name != "__init__.py" and p.name != "__pycache__" for p in here.iterdir()):
        return here
    import importlib.metadata as md

    try:
        located = Path(str(md.distribution(DIST_NAME).locate_file(f"verifiers_rl/{rel}")))
    except md.PackageNotFoundError:
        return None
    return located if located.is_dir() else None
