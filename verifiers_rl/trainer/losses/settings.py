"""A run's loss from its settings: ``RLConfig.loss`` (``[trainer.args.loss]``: ``type`` and that loss's own keys).
RLConfig's top-level ``mask_ratio_low``, ``mask_ratio_high``, ``kl_tau`` and ``beta`` are deprecated spellings of
the table's keys: set, one fills the chosen loss's key with one warning."""

from __future__ import annotations

from typing import Any

from verifiers_rl.errors import SettingError
from verifiers_rl.trainer.losses import LOSSES, MODE_LOSS, LossSpec, get_loss, loss_types
from verifiers_rl.trainer.typed_table import build_config, built_once, deprecated_keys, keep, store_back, table_of


def loss_table(loss: Any, mode: str = "rl") -> dict[str, Any]:
    """``RLConfig.loss`` as a table: None, a table with ``type``, or the config object of a loss ``mode`` trains with
    (``DAPOLossConfig(epsilon_high=0.3)`` in a notebook)."""
    table = table_of(loss, lambda: {n: get_loss(n).config for n in loss_types(mode)})
    if table is not None:
        return table
    raise SettingError("loss",
                       f"loss={loss!r} must be a table with a 'type' key (one of {', '.join(LOSSES)}) or the config "
                       f"of a loss training_mode={mode!r} trains with ({', '.join(loss_types(mode))})")


def _inputs(c: Any) -> tuple:
    return (getattr(c, "training_mode", "rl"), getattr(c, "loss", None),
            [getattr(c, k, None) for k in deprecated_keys("loss")])


def resolve_loss(c: Any) -> tuple[LossSpec, Any]:
    """The chosen loss and its config, built (so checked) from ``c`` (an RLConfig, or anything with its fields):
    once per run, kept for ``c`` (beside it: ``typed_table.built_once``) while its loss settings stay the same."""
    return built_once(c, "_built_loss", _inputs(c), lambda: _build(c))


def reference_beta(c: Any) -> float:
    """The weight of the KL to the reference (initial) policy in ``c``'s loss: > 0 needs the reference model."""
    return float(getattr(resolve_loss(c)[1], "beta", 0) or 0)


def _build(c: Any) -> tuple[LossSpec, Any]:
    mode = getattr(c, "training_mode", "rl")
    table = loss_table(getattr(c, "loss", None), mode)
    kind = table.pop("type", None) or MODE_LOSS.get(mode, "default")  # a name, or an import path
    spec = get_loss(kind)
    if spec.mode != mode:
        fits = ", ".join(loss_types(mode)) or "none"
        raise SettingError("loss", f"loss.type={kind!r} trains training_mode={spec.mode!r}, not {mode!r}; set "
                                   f"training_mode={spec.mode!r} or loss.type to one of {fits}")
    return spec, build_config("loss", kind, spec.config, table, c, LOSSES, lambda n: get_loss(n).config)


def check_loss(c: Any) -> None:
    """Build the run's loss config once (one line on a bad key or value); a config object given as ``c.loss`` is
    kept as its table."""
    spec, config = resolve_loss(c)
    store_back(c, "loss", spec.name, config)
    keep(c, "_built_loss", _inputs(c), (spec, config))  # the settings as stored back build the same
