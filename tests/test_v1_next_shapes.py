"""The v1 adapter against verifiers 0.4.1's shapes, as its pre-release wheel (0.4.1.dev86, read from PyPI) defines
them: `Branch.token_ids` / `sampled_mask` / `logprobs` numpy arrays, `Trace.dropped` a reason or None ("leave out
of reward means and training batches"), `Trace.record_reward` raising on a non-finite reward. The episodes here are
FAKES that mirror the fields the adapter reads (SimpleNamespace objects, named as such); 0.4.1 is not released,
and CI's v1 venv tests the locked 0.4.0 (tests/test_v1_envs.py). Runs in the main venv: the adapter's episode code
imports no verifiers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import torch

from verifiers_rl.envs.turn_tokens import rollout_tokens
from verifiers_rl.evaluation import summarize
from verifiers_rl.trainer.advantages import advantages_for
from verifiers_rl.trainer.typed_table import resolve_advantage
from verifiers_rl.trainer.batching import build_samples, drop_reason
from verifiers_rl.v1.episodes import episode_states


def fake_trace(reward: float, *, dropped: bool = False, numpy: bool = True) -> SimpleNamespace:
    """A 0.4.1-shaped trace (fake): one branch of 3 prompt tokens and 2 sampled ones."""
    ids, mask, lps = [5, 6, 7, 40, 41], [False, False, False, True, True], [0.0, 0.0, 0.0, -1.5, -0.25]
    if numpy:
        ids, mask, lps = np.array(ids, dtype=np.int64), np.array(mask), np.array(lps, dtype=np.float32)
    branch = SimpleNamespace(token_ids=ids, sampled_mask=mask, logprobs=lps, trainable=True)
    return SimpleNamespace(agent=SimpleNamespace(name="agent", trainable=True), branches=[branch], reward=reward,
                           metrics={"exact": reward}, rewards={}, errors=[], ok=True, is_truncated=False,
                           stop_condition="one_turn", num_turns=1, dropped="no reward signal" if dropped else None,
                           messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])


def states_of(traces: list[SimpleNamespace]) -> list[dict]:
    out = []
    for i, trace in enumerate(traces):
        episode = SimpleNamespace(traces=[trace], errors=[], ok=True, id=f"ep{i}")
        (state,) = episode_states(episode, {"example_id": i // 2, "prompt": [{"role": "user", "content": "q"}]},
                                  seats=[])
        state["tokens"] = rollout_tokens(state)
        out.append(state)
    return out


def test_numpy_branches_become_plain_python_numbers():
    (state,) = states_of([fake_trace(1.0)])
    tokens = state["trajectory"][0]["tokens"]
    assert tokens["prompt_ids"] == [5, 6, 7] and tokens["completion_ids"] == [40, 41]
    assert all(type(t) is int for t in tokens["prompt_ids"] + tokens["completion_ids"])
    assert all(type(x) is float for x in tokens["completion_logprobs"]) and tokens["completion_mask"] == [1, 1]
    json.dumps(state["tokens"])  # the token export writes these: numpy scalars would not serialize
    assert state["tokens"]["input_ids"] == [5, 6, 7, 40, 41]


def test_a_dropped_trace_trains_no_token_and_counts_in_no_reward_mean():
    # two groups of two: group 0 = (1.0, dropped 0.0), group 1 = (0.0, 1.0)
    states = states_of([fake_trace(1.0), fake_trace(0.0, dropped=True), fake_trace(0.0, numpy=False),
                        fake_trace(1.0, numpy=False)])
    assert [s["dropped"] for s in states] == [False, True, False, False]
    assert drop_reason(states[1]) == "dropped" and drop_reason(states[0]) is None
    summary = summarize(states)
    assert summary["reward/mean"] == 2 / 3 and summary["dropped/rollouts"] == 1  # (1 + 0 + 1) / 3
    assert summary["metrics/exact"] == 2 / 3
    rewards = torch.tensor([s["reward"] for s in states])
    kept = [not s["dropped"] for s in states]
    adv = advantages_for(rewards, 2, resolve_advantage(SimpleNamespace(advantage=None)), kept)
    # group 0's baseline is its one kept rollout (advantage 0), not the mean with the dropped one (+0.5)
    assert adv.tolist() == [0.0, 0.0, -0.5, 0.5]
    samples = build_samples(states, adv.tolist(), max_seq_len=64)
    assert [sum(s.loss_mask) for s in samples] == [2, 0, 2, 2]


def test_a_seat_that_plays_twice_in_an_episode_trains_each_trace_with_the_episodes_mean_reward():
    """verifiers' code_golf runs its one seat twice per episode: one state, one sample per trace, reward the mean."""
    first, second = fake_trace(1.0), fake_trace(0.0, numpy=False)
    second.branches[0].token_ids = [5, 6, 7, 40, 41, 9, 50]  # a second attempt from the same prompt: its own sample
    second.branches[0].sampled_mask = [False, False, False, True, True, False, True]
    second.branches[0].logprobs = [0.0, 0.0, 0.0, -1.0, -1.0, 0.0, -2.0]
    episode = SimpleNamespace(traces=[first, second], errors=[], ok=True, id="ep")
    (state,) = episode_states(episode, {"example_id": 0, "prompt": []}, seats=[])
    assert state["error"] is None and state["reward"] == 0.5 and state["metrics"] == {"exact": 0.5}
    assert len(state["trajectory"]) == 2 and state["num_turns"] == 2
    state["tokens"] = rollout_tokens(state)
    samples = build_samples([state], [0.25], max_seq_len=64)
    assert [sum(s.loss_mask) for s in samples] == [2, 3] and {s.advantage for s in samples} == {0.25}


def test_a_non_finite_reward_counts_as_a_failing_reward_function_as_on_the_classic_path():
    """verifiers 0.4.1's Trace.record_reward raises `reward 'x' must be finite, got nan` (scoring stops, the trace
    is not ok): counted in errors/reward_funcs with the reward it had, not as an errored rollout."""
    trace = fake_trace(0.0)
    trace.ok = False
    trace.errors = [SimpleNamespace(type="ValueError", message="reward 'letters' must be finite, got nan")]
    (state,) = states_of([trace])
    assert state["error"] is None and state["reward"] == 0.0
    assert state["reward_errors"] == {"letters": "ValueError: reward 'letters' must be finite, got nan"}
    summary = summarize([state])
    assert summary["errors/reward_funcs"] == 1 and summary["errors/rollouts"] == 0
    assert drop_reason(state) is None  # its tokens train, with reward 0, as a classic rollout's would
