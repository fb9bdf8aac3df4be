"""The importance ratio trainer/sampler and its window, defined once: the default loss trains inside the window
(trainer/loss.py) and hands the tokens outside it to the token export as `LossOutputs.no_gradient`."""

from __future__ import annotations

import torch


def log_importance_ratio(trainer_lp: torch.Tensor, sampling_lp: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """``trainer_lp - sampling_lp`` on loss tokens, 0 elsewhere: off-mask positions (prompts, env responses) may hold
    placeholder log-probs, and a zero there keeps ``exp`` from overflowing into ``inf * 0 = NaN``."""
    return torch.where(loss_mask, trainer_lp - sampling_lp, torch.zeros_like(trainer_lp))


def ratio_mask(ratio: torch.Tensor, loss_mask: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """True on the loss tokens whose importance ratio is outside ``[low, high]`` (``mask_ratio_low`` /
    ``mask_ratio_high``): verifiers' trust-region mask, no policy-gradient term there."""
    return loss_mask & ((ratio < low) | (ratio > high))
