"""The local engine's batching: requests queued per event loop, grouped by sampling distribution, run as
shared decode calls (`local_decode`, one at a time), results handed back to each caller. A batch decodes on the
event loop's own thread by default (`decode_in_loop_thread`: one OpenMP team), else in a worker thread."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Dist:
    """The sampling distribution: requests with equal Dist share one decode call."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Request:
    prompt_ids: list[int]
    dist: Dist
    n: int
    max_new: int
    min_tokens: int
    ignore_eos: bool
    stop: tuple[str, ...]
    seed: int | None
    logprobs: bool
    top_logprobs: int
    skip_special_tokens: bool
    parse_tools: bool
    future: asyncio.Future
    outputs: list = field(default_factory=list)


@dataclass
class Row:
    req: Request
    index: int  # choice index within the request


@dataclass
class RowResult:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: list[float] | None
    top: list[list[tuple[int, float]]] | None


def find_eos_ids(model, tokenizer) -> set[int]:
    ids: set[int] = set()
    e = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(e, int):
        ids.add(e)
    elif e:
        ids.update(int(x) for x in e)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


GATHER_POLL_S = 0.002
GATHER_GAP_S = 0.1


class BatchWorker:
    """Serves `submit`ted requests of one engine. Reads the engine's `model` (once per batch, so set_model()
    applies from the next one), `tokenizer`, `max_batch_size` and `batch_wait_s`; counts `generate_calls`."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.lock = threading.Lock()  # one decode at a time, whichever loop or thread asks
        self._loops: dict[asyncio.AbstractEventLoop, tuple[asyncio.Queue, asyncio.Task]] = {}
        self.eos_ids = find_eos_ids(engine.model, engine.tokenizer)
        pad = engine.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids) if self.eos_ids else 0

    def submit(self, req: Request) -> None:
        self._queue_for(asyncio.get_running_loop()).put_nowait(req)

    def _queue_for(self, loop) -> asyncio.Queue:
        entry = self._loops.get(loop)
        if entry is None or entry[1].done():
            # forget workers of loops that are gone (asyncio.run per call would otherwise pile them up)
            for old in [lp for lp in self._loops if lp.is_closed()]:
                del self._loops[old]
            queue: asyncio.Queue = asyncio.Queue()
            task = loop.create_task(self._serve(queue), name="verifiers_rl-local-engine")
            entry = (queue, task)
            self._loops[loop] = entry
        return entry[0]

    async def _serve(self, queue: asyncio.Queue) -> None:
        while True:
            batch = [await queue.get()]
            await self._gather_callers(queue)
            while not queue.empty():
                batch.append(queue.get_nowait())
            groups: dict[Dist, list[Request]] = {}
            for req in batch:
                if not req.future.done():  # skip callers that were cancelled meanwhile
                    groups.setdefault(req.dist, []).append(req)
            for dist, reqs in groups.items():
                await self._serve_group(dist, [Row(r, i) for r in reqs for i in range(r.n)])

    async def _gather_callers(self, queue: asyncio.Queue) -> None:
        """Let concurrent callers (asyncio.gather) join this batch: yield to the loop until a few turns bring no
        new request, for at most `batch_wait_s` (callers started together arrive within a turn or two)."""
        wait = self.engine.batch_wait_s
        if wait <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline, idle = loop.time() + wait, 0
        while idle < 3 and loop.time() < deadline:
            n = queue.qsize()
            await asyncio.sleep(0)
            idle = idle + 1 if queue.qsize() == n else 0
        await self._gather_rollouts(queue)

    async def _gather_rollouts(self, queue: asyncio.Queue) -> None:
        """Wait for the engine's `rollouts_in_flight` that have not asked yet, while they keep arriving (at most
        `batch_gather_s`, GATHER_GAP_S without one): a batch per arrival would pay a prefill and a decode each."""
        limit = self.engine.batch_gather_s
        if limit <= 0 or self.engine.rollouts_in_flight <= 1:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        last, seen = loop.time(), queue.qsize()
        while queue.qsize() + 1 < self.engine.rollouts_in_flight and loop.time() < deadline:
            await asyncio.sleep(GATHER_POLL_S)
            if queue.qsize() != seen:
                last, seen = loop.time(), queue.qsize()
            elif loop.time() - last > GATHER_GAP_S:
                return

    async def _serve_group(self, dist: Dist, rows: list[Row]) -> None:
        size = self.engine.max_batch_size
        for start in range(0, len(rows), size):
            chunk = [row for row in rows[start : start + size] if not row.req.future.done()]
            if not chunk:
                continue
            try:
                if self.engine.decode_in_loop_thread:
                    # the caller's thread: one OpenMP team (a second thread's team spins on the same cores)
                    results = self.run_batch(dist, chunk)
                else:
                    results = await asyncio.to_thread(self.run_batch, dist, chunk)
            except asyncio.CancelledError:
                raise
            except BaseException as e:  # noqa: BLE001 - every waiter must hear about the failure
                for row in chunk:
                    if not row.req.future.done():
                        row.req.future.set_exception(e)
                continue
            for row, res in zip(chunk, results):
                row.req.outputs[row.index] = res
                if not row.req.future.done() and all(o is not None for o in row.req.outputs):
                    row.req.future.set_result(row.req.outputs)

    def run_batch(self, dist: Dist, rows: list[Row]) -> list[RowResult]:
        from verifiers_rl.inference.local_sampling import Sampler, StopCriteria, row_generators

        model = self.engine.model  # captured once: set_model() mid-batch applies to the next batch
        device = next(model.parameters()).device
        input_ids, attention = self._left_padded(rows)
        input_ids, attention = input_ids.to(device), attention.to(device)
        prompt_mask = attention.bool()
        reqs = [r.req for r in rows]
        seeds = [(id(r.req), r.req.seed, r.index) if r.req.seed is not None else None for r in rows]
        min_tokens = [q.min_tokens for q in reqs]
        sampler = Sampler(prompt_mask, temperature=dist.temperature, top_p=dist.top_p, top_k=dist.top_k,
                          min_p=dist.min_p, repetition_penalty=dist.repetition_penalty, eos_ids=self.eos_ids,
                          min_tokens=min_tokens,
                          rng_groups=[] if dist.greedy else row_generators(seeds, device),
                          top_logprobs=max((q.top_logprobs for q in reqs if q.logprobs), default=0))
        stopper = StopCriteria(self.engine.tokenizer, input_ids.shape[1], eos_ids=self.eos_ids,
                               max_new=[q.max_new for q in reqs], min_tokens=min_tokens,
                               ignore_eos=[q.ignore_eos for q in reqs], stops=[q.stop for q in reqs],
                               skip_special_tokens=[q.skip_special_tokens for q in reqs], device=device)
        out = self._generate(model, input_ids, attention, sampler, stopper, rows)
        return self._results(rows, out[:, input_ids.shape[1] :].tolist(), sampler, stopper)

    def _left_padded(self, rows: list[Row]):
        import torch
        from torch.nn.utils.rnn import pad_sequence

        ids = [torch.tensor(r.req.prompt_ids, dtype=torch.long) for r in rows]
        input_ids = pad_sequence(ids, batch_first=True, padding_value=self.pad_id, padding_side="left")
        return input_ids, pad_sequence([torch.ones_like(t) for t in ids], batch_first=True, padding_side="left")

    def _generate(self, model, input_ids, attention, sampler, stopper, rows: list[Row]):
        import torch

        from verifiers_rl.inference.local_decode import decode

        with self.lock:
            was_training = bool(getattr(model, "training", False))
            model.eval()
            try:
                with torch.inference_mode():
                    self.engine.generate_calls += 1
                    return decode(model, input_ids, attention, sampler, stopper,
                                  max(r.req.max_new for r in rows), self.pad_id)
            finally:
                if was_training:
                    model.train()

    def _results(self, rows: list[Row], gen: list[list[int]], sampler, stopper) -> list[RowResult]:
        import torch

        from verifiers_rl.inference.local_sampling import final_text

        B = len(rows)
        lps = torch.stack(sampler.chosen_lp, 1).tolist() if sampler.chosen_lp else [[] for _ in range(B)]
        top_vals = torch.stack(sampler.top_vals, 1).tolist() if sampler.top_vals else None
        top_ids = torch.stack(sampler.top_ids, 1).tolist() if sampler.top_ids else None
        results = []
        for i, r in enumerate(rows):
            q = r.req
            length = stopper.lengths[i] or min(len(gen[i]), q.max_new)
            reason = stopper.reasons[i]
            ids = gen[i][:length]
            text = final_text(self.engine.tokenizer, ids, eos_ids=self.eos_ids, ignore_eos=q.ignore_eos, stop=q.stop,
                              min_tokens=q.min_tokens, skip_special_tokens=q.skip_special_tokens, reason=reason)
            top = None
            if top_ids is not None and q.top_logprobs:
                k = q.top_logprobs
                top = [list(zip(top_ids[i][t][:k], top_vals[i][t][:k])) for t in range(length)]
            results.append(RowResult(ids, text, reason, lps[i][:length] if q.logprobs else None, top))
        return results
