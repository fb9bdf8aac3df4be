"""What the local engine's decode call samples and where each row stops (semantics: `local_engine`). `Sampler` and
`StopCriteria` keep HF's LogitsProcessor / StoppingCriteria call forms, so tests drive them inside HF `generate`.

torch and transformers are imported at module level: only the batching worker imports this module, when it runs
a batch (so `import verifiers_rl` stays fast).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

from verifiers_rl.inference.truncation import truncate
from verifiers_rl.plan.sampling import Truncation

# (rows, generator): rows is None for "every row of the batch"
RngGroups = list[tuple[torch.Tensor | None, torch.Generator]]


def filter_scores(x: torch.Tensor, *, temperature: float, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """Temperature, then the truncation (min-p, top-k, top-p: vLLM's order, the rule the trainer scores with) on
    (B, V) float scores; filtered tokens become -inf."""
    return truncate(x / temperature, Truncation(top_k=max(top_k, 0), top_p=top_p, min_p=min_p))


def sample(lp: torch.Tensor, rng_groups: RngGroups) -> torch.Tensor:
    """One token per row from log-probs `lp` (B, V), drawing each row's uniform from its group's generator."""
    # inverse CDF: one uniform per row, not a noise draw per vocabulary entry; float64 so rare tokens keep their mass
    u = torch.empty(lp.shape[0], dtype=torch.float64, device=lp.device)
    for idx, g in rng_groups:
        if idx is None:
            u.uniform_(generator=g)
        else:
            u[idx] = u[idx].uniform_(generator=g)
    cdf = lp.double().exp_().cumsum_(-1)
    # the first token whose cumulative mass passes u · total: a token of zero mass never does
    pick = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
    return pick.clamp_(max=lp.shape[-1] - 1)


def row_generators(seeds: Sequence[tuple[Hashable, int, int] | None], device: Any = "cpu") -> RngGroups:
    """Generators for a batch's rows, `seeds[i]` (request key, seed, choice index) or None: one per seeded request
    (vLLM: a seed makes that request reproducible on its own), one for the unseeded rows from torch's global RNG."""
    by_req: dict[Hashable, list[int]] = {}
    unseeded: list[int] = []
    for i, s in enumerate(seeds):
        (by_req.setdefault(s[0], []) if s is not None else unseeded).append(i)
    rng_groups: RngGroups = []
    for idx in by_req.values():
        _, seed, first_choice = seeds[idx[0]]
        g = torch.Generator(device=device)
        # A request split over two batches must not repeat its samples in the second one.
        g.manual_seed((seed * 1_000_003 + first_choice) % (2**63) if first_choice else seed % (2**63))
        rng_groups.append((torch.tensor(idx, device=device), g))
    if unseeded:
        g = torch.Generator(device=device)
        g.manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
        rng_groups.append((None if len(unseeded) == len(seeds) else torch.tensor(unseeded, device=device), g))
    return rng_groups


class Sampler(LogitsProcessor):
    """Samples every row's next token and records its logprob (and the top `top_logprobs`).

    `prompt_mask` (B, P) marks the real prompt tokens. As an HF logits processor (`__call__`) it returns a one-hot
    score row, so a greedy `generate` picks exactly our token. Greedy: argmax of the penalized scores, logprob of
    the raw logits."""

    def __init__(self, prompt_mask: torch.Tensor, *, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 min_p: float = 0.0, repetition_penalty: float = 1.0, eos_ids: Collection[int] = (),
                 min_tokens: Sequence[int] | None = None, rng_groups: RngGroups | None = None, top_logprobs: int = 0):
        B, self.prompt_len = prompt_mask.shape
        device = prompt_mask.device
        self.prompt_mask = prompt_mask
        self.temperature, self.top_p, self.top_k, self.min_p = temperature, top_p, top_k, min_p
        self.repetition_penalty = repetition_penalty
        self.greedy = temperature <= 0.0
        self.eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=device)
        min_tokens = list(min_tokens) if min_tokens is not None else [0] * B
        self.min_tokens = torch.tensor(min_tokens, device=device)
        self.max_min_tokens = max(min_tokens, default=0)
        if rng_groups is None:
            rng_groups = [] if self.greedy else row_generators([None] * B, device)
        self.rng_groups = rng_groups
        self.want_top = top_logprobs
        self.chosen_lp: list[torch.Tensor] = []
        self.top_vals: list[torch.Tensor] = []
        self.top_ids: list[torch.Tensor] = []
        self.seen: torch.Tensor | None = None
        self.eos_cols: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        choice = self.choose(input_ids, scores)
        out = torch.full_like(scores, float("-inf"), dtype=torch.float32)
        out.scatter_(1, choice[:, None], 0.0)
        return out

    def choose(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """The next token of every row [B] from the last position's scores [B, V]; records the chosen logprobs."""
        step = input_ids.shape[1] - self.prompt_len
        raw = scores.float()
        x = self._penalize(input_ids, raw, step) if self.repetition_penalty != 1.0 else raw
        if self.eos.numel() and step < self.max_min_tokens:
            if self.eos_cols is None:
                self.eos_cols = torch.zeros(x.shape[-1], dtype=torch.bool, device=x.device)
                self.eos_cols[self.eos[self.eos < x.shape[-1]]] = True
            x = x.masked_fill((step < self.min_tokens)[:, None] & self.eos_cols, float("-inf"))
        if self.greedy:
            choice = x.argmax(dim=-1)
            lp = torch.log_softmax(raw, dim=-1)
        else:
            x = filter_scores(x, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p)
            lp = torch.log_softmax(x, dim=-1)
            choice = sample(lp, self.rng_groups)
        self.chosen_lp.append(lp.gather(1, choice[:, None]).squeeze(1))
        if self.want_top:
            vals, ids = torch.topk(lp, min(self.want_top, lp.shape[-1]), dim=-1)
            self.top_vals.append(vals)
            self.top_ids.append(ids)
        return choice

    def _penalize(self, input_ids: torch.Tensor, x: torch.Tensor, step: int) -> torch.Tensor:
        # vLLM-style: penalize tokens seen in the prompt (not padding) or the output so far.
        if self.seen is None:
            counts = torch.zeros(x.shape, dtype=torch.long, device=x.device)
            counts.scatter_add_(1, input_ids[:, : self.prompt_len], self.prompt_mask.long())
            self.seen = counts > 0
        if step > 0:
            self.seen.scatter_(1, input_ids[:, -1:], True)
        p = self.repetition_penalty
        return torch.where(self.seen, torch.where(x > 0, x / p, x * p), x)


class StopCriteria(StoppingCriteria):
    """Finishes rows on EOS (unless ignored), at their own max_tokens, or on a stop string; records each row's
    length and finish reason ("stop" or "length"). `decode(ids, skip_special_tokens=...)` is the tokenizer's."""

    def __init__(self, tokenizer: Any, prompt_len: int, *, eos_ids: Collection[int], max_new: Sequence[int],
                 min_tokens: Sequence[int], ignore_eos: Sequence[bool], stops: Sequence[Sequence[str]],
                 skip_special_tokens: Sequence[bool], device: Any = "cpu"):
        B = len(max_new)
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len
        # `eos_token_id`: an HF `generate` driven by this object pads the rows it finishes (stop strings, per-row
        # max_tokens), as our decode loop does.
        self.eos_token_id = self.eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=device)
        self.max_new = torch.tensor(list(max_new), device=device)
        self.ignore_eos = torch.tensor(list(ignore_eos), dtype=torch.bool, device=device)
        self.min_tokens = list(min_tokens)
        self.stops = list(stops)
        self.skip = list(skip_special_tokens)
        # decoding a tail of this many tokens is enough to see a stop string complete
        self.windows = [4 * max(map(len, s)) + 8 if s else 0 for s in self.stops]
        self.stop_idx = [i for i in range(B) if self.stops[i]]
        self.done = torch.zeros(B, dtype=torch.bool, device=device)
        self.lengths = [0] * B
        self.reasons = ["length"] * B

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        step = input_ids.shape[1] - self.prompt_len
        last = input_ids[:, -1]
        hit_eos = torch.isin(last, self.eos) & ~self.ignore_eos if self.eos.numel() else torch.zeros_like(self.done)
        hit_len = step >= self.max_new
        newly = (hit_eos | hit_len) & ~self.done
        new_eos = hit_eos & newly
        stop_rows = self._stop_string_rows(input_ids, step, newly) if self.stop_idx else []
        if stop_rows:
            newly[stop_rows] = True
        if bool(newly.any()):
            for i in newly.nonzero().flatten().tolist():
                self.lengths[i] = step
                self.reasons[i] = "stop" if (i in stop_rows or bool(new_eos[i])) else "length"
            self.done |= newly
        return self.done.clone()

    def _stop_string_rows(self, input_ids: torch.Tensor, step: int, newly: torch.Tensor) -> list[int]:
        busy = (self.done | newly).tolist()
        rows = []
        for i in self.stop_idx:
            # as vLLM: stop strings count from the min_tokens-th token on
            if not busy[i] and step >= self.min_tokens[i]:
                gen = input_ids[i, max(self.prompt_len, input_ids.shape[1] - self.windows[i]) :].tolist()
                now = self.tokenizer.decode(gen, skip_special_tokens=self.skip[i])
                before = self.tokenizer.decode(gen[:-1], skip_special_tokens=self.skip[i])
                if any(now.count(s) > before.count(s) for s in self.stops[i]):
                    rows.append(i)
        return rows


def final_text(tokenizer: Any, ids: list[int], *, eos_ids: Collection[int], ignore_eos: bool, stop: Sequence[str],
               min_tokens: int, skip_special_tokens: bool, reason: str) -> str:
    """A row's content: its tokens decoded without the final EOS, cut before the stop string that ended it."""
    body = ids[:-1] if ids and ids[-1] in eos_ids and not ignore_eos else ids
    text = tokenizer.decode(body, skip_special_tokens=skip_special_tokens)
    if stop and reason == "stop":
        # Cut before the earliest stop string that ends after the min_tokens boundary (as checked live).
        early = ids[: max(min_tokens - 1, 0)]
        floor = len(tokenizer.decode(early, skip_special_tokens=skip_special_tokens)) if early else 0
        cuts = []
        for s in stop:
            pos = text.find(s)
            while pos != -1 and pos + len(s) <= floor:
                pos = text.find(s, pos + 1)
            if pos != -1:
                cuts.append(pos)
        if cuts:
            text = text[: min(cuts)]
    return text
