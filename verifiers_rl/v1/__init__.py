"""Training on verifiers **v1** environments (verifiers 0.4.x) with this package's trainer, through an adapter with the
classic environment interface (`V1Environment`). Nothing here imports `verifiers` at module level: importing this
package without verifiers 0.4 loads nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["V1Environment", "load_v1_environment", "v1_available"]


def __getattr__(name: str) -> Any:
    if name == "v1_available":
        from verifiers_rl.v1.loading import v1_available

        return v1_available
    if name in ("V1Environment", "load_v1_environment"):
        from verifiers_rl.v1 import environment

        return getattr(environment, name)
    raise AttributeError(name)
