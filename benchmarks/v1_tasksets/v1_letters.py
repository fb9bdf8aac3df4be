"""v1_letters: a verifiers v1 taskset written for verifiers-rl's learning benchmark (benchmarks/v1_learning.py).

Each task asks for a few lowercase words about a numbered item, in one turn. Nothing is downloaded: the prompts are
generated. Reward `letters`: the share of the reply's characters that are lowercase ASCII letters (partial credit:
a random-init byte-level model starts near 0.1 with rewards that differ within a group, so RL has a signal from the
first step). Metric `chars`: the reply's length. `split` = "train" (items 0..n-1) or "eval" (items 10000.., never
trained on). Loaded by id `v1_letters` with this directory on sys.path.
"""

from __future__ import annotations

import string

import verifiers.v1 as vf

LOWER = frozenset(string.ascii_lowercase)
THINGS = ("lamp", "river", "stone", "maple", "garden", "window", "candle", "harbor", "forest", "kettle")


class LettersTask(vf.Task[vf.TaskData]):
    @vf.stop
    async def one_turn(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1

    @vf.reward(weight=1.0)
    async def letters(self, trace: vf.Trace) -> float:
        reply = trace.last_reply or ""
        return sum(ch in LOWER for ch in reply) / max(len(reply), 1)

    @vf.metric
    async def chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or ""))


class LettersConfig(vf.TasksetConfig):
    split: str = "train"
    n: int = 512


class LettersTaskset(vf.Taskset[LettersTask, LettersConfig]):
    def load(self):
        start = 0 if self.config.split == "train" else 10_000
        for i in range(start, start + self.config.n):
            data = vf.TaskData(prompt=f"Describe the {THINGS[i % len(THINGS)]} number {i} in lowercase words.",
                               system_prompt="Answer in lowercase letters only.")
            yield LettersTask(data, self.config.task)


__all__ = ["LettersTaskset"]
