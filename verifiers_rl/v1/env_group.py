"""Several verifiers v1 environments trained as one (several `[[env]]`, prime-rl's several train sources): what
the classic `EnvGroup` does for classic members. Each row carries its member's name (`task`, which the data order
and the per-member metrics read) and its index among that member's tasks; a rollout runs on its member."""

from __future__ import annotations

from typing import Any, Sequence

from verifiers_rl.v1.environment import NoRubric, V1Environment


class V1EnvGroup:
    def __init__(self, envs: Sequence[V1Environment], env_names: Sequence[str],
                 ratios: Sequence[float] | None = None):
        if len(envs) != len(env_names) or len(envs) < 2:
            raise ValueError("V1EnvGroup: two or more environments, one name each")
        agents = {e.agents_per_rollout for e in envs}
        if len(agents) > 1:
            raise ValueError(f"V1EnvGroup: members with {sorted(agents)} agents per rollout; a run trains members "
                             "with the same number of agents (each group's baseline is one agent's)")
        self.envs, self.env_names = list(envs), list(env_names)
        for env in self.envs[1:]:  # one HTTP server per engine: the engine batches on one loop
            env.endpoint.close()
            env.endpoint = self.envs[0].endpoint
        self.ratios = [float(r) for r in ratios] if ratios is not None else None
        self.env_map = dict(zip(self.env_names, self.envs))
        self.agents_per_rollout = agents.pop()
        self.env_id = "+".join(self.env_names)
        self.sampling_args: dict[str, Any] = {}
        self.rubric = NoRubric()  # each member's tasks score inside their episodes

    def _rows(self, split: str, n: int) -> Any:
        from datasets import Dataset

        rows: list[dict] = []
        for name, env in self.env_map.items():
            ds = env.get_dataset() if split == "train" else env.get_eval_dataset()
            rows += [{**r, "task": name, "v1_index": r["example_id"], "example_id": len(rows) + i}
                     for i, r in enumerate(ds.to_list())]
        return Dataset.from_list(rows if n is None or n < 0 else rows[:n])

    def get_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        return self._rows("train", n)

    def get_eval_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        return self._rows("eval", n)

    def _member(self, row: dict) -> tuple[V1Environment, dict]:
        """The row's member, and the row as that member numbers it."""
        return self.env_map[row["task"]], {**row, "example_id": row["v1_index"]}

    async def rollout(self, row: dict, client: Any, model: str, sampling_args: dict | None = None) -> dict:
        env, own = self._member(row)
        state = await env.rollout(own, client, model, sampling_args)
        for s in [state, *(state.get("agent_states") or [])]:
            s["example_id"], s["task"] = row["example_id"], row["task"]
        return state

    async def init_state(self, row: dict, client: Any = None, model: str = "", sampling_args: dict | None = None
                         ) -> dict:
        env, own = self._member(row)
        return {**await env.init_state(own, client, model, sampling_args), "example_id": row["example_id"]}

    def close(self) -> None:
        for env in self.envs:
            env.close()
