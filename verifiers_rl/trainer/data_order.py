"""Which examples each step trains on: `DataOrder`, an endless stream of example indices, each environment's rows in
a seeded shuffle per epoch; several environments (an `EnvGroup` with ratios) share it by smooth weighted round-robin.
Position p depends only on the seed, so a resumed run replays a straight run's data.
"""


from __future__ import annotations

import random
from typing import Sequence

from verifiers_rl.envs.dataset_format import group_member


class DataOrder:
    def __init__(self, env_rows: Sequence[Sequence[int]], ratios: Sequence[float] | None, seed: int,
                 shuffle: bool = True):
        if not env_rows or any(len(r) == 0 for r in env_rows):
            raise ValueError("an environment's training dataset is empty")
        ratios = list(ratios) if ratios is not None else [1.0] * len(env_rows)
        if len(ratios) != len(env_rows) or any(r <= 0 for r in ratios):
            raise ValueError(f"env ratios {ratios} must be {len(env_rows)} positive numbers")
        total = sum(ratios)
        self.weights = [r / total for r in ratios]
        self.env_rows = [list(r) for r in env_rows]
        self.seed, self.shuffle = seed, shuffle
        self._envs: list[int] = []            # env of each stream slot, computed lazily in order
        self._credit = [0.0] * len(env_rows)
        self._count: list[int] = []           # per slot: how many earlier slots went to the same env
        self._seen = [0] * len(env_rows)
        self._epoch_cache: dict[tuple[int, int], list[int]] = {}

    @classmethod
    def for_env(cls, env: object, dataset: object, seed: int, shuffle: bool = True) -> "DataOrder":
        """Rows grouped by environment for an EnvGroup (its `env_names`, `ratios`; a row's member: `group_member`),
        else one stream."""
        names = getattr(env, "env_names", None)
        if names and len(names) > 1:
            cols, size = dataset.column_names, len(dataset)  # type: ignore[attr-defined, arg-type]
            tasks = list(dataset["task"]) if "task" in cols else [None] * size  # type: ignore[index]
            infos = list(dataset["info"]) if "info" in cols and None in tasks else [None] * size  # type: ignore[index]
            tasks = [group_member({"task": t, "info": i}) for t, i in zip(tasks, infos)]
            rows = [[i for i, t in enumerate(tasks) if t == n] for n in names]
            return cls(rows, getattr(env, "ratios", None), seed, shuffle)
        return cls([range(len(dataset))], None, seed, shuffle)  # type: ignore[arg-type]

    def _extend(self, upto: int) -> None:
        while len(self._envs) <= upto:
            if len(self.weights) == 1:
                e = 0
            else:  # smooth weighted round-robin: deterministic, proportional in every window
                self._credit = [c + w for c, w in zip(self._credit, self.weights)]
                e = max(range(len(self._credit)), key=lambda i: self._credit[i])
                self._credit[e] -= 1.0
            self._envs.append(e)
            self._count.append(self._seen[e])
            self._seen[e] += 1

    def _epoch(self, env: int, epoch: int) -> list[int]:
        key = (env, epoch)
        if key not in self._epoch_cache:
            order = list(self.env_rows[env])
            if self.shuffle:
                random.Random((self.seed * 1_000_003 + epoch) * 31 + env).shuffle(order)
            if len(self._epoch_cache) > 8:
                self._epoch_cache.clear()
            self._epoch_cache[key] = order
        return self._epoch_cache[key]

    def at(self, pos: int) -> int:
        """The dataset row at stream position `pos`."""
        self._extend(pos)
        env, k = self._envs[pos], self._count[pos]
        n = len(self.env_rows[env])
        return self._epoch(env, k // n)[k % n]

    def env_of(self, pos: int) -> int:
        self._extend(pos)
        return self._envs[pos]

    def slice(self, start: int, count: int) -> list[int]:
        return [self.at(p) for p in range(start, start + count)]
