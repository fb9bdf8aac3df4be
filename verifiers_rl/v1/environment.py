"""`V1Environment`: a verifiers v1 env behind the interface the trainer calls on a classic environment.

One row per task; one `rollout` is one v1 episode (`slots(task, 1)` → `run_slot`; slots are independent, so n rollouts
equal `slots(task, n)`), a multi-agent one with a state per seat. The rubric is a no-op (v1 tasks score inside their
episode) and `sampling_args` are empty (v1 sampling lives in the agent config).
"""


from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

from verifiers_rl.envs.environment import RUN_MAX_SEQ_LEN
from verifiers_rl.v1.episodes import episode_states, model_context
from verifiers_rl.v1.loading import agent_seats, load_env, require_v1, v1_available
from verifiers_rl.v1.serving import EnvServing, PolicyEndpoint


class NoRubric:
    """v1 tasks score inside their episode (`Task.score`): nothing left to do per group."""

    async def score_group(self, states: list) -> None:
        return None


class V1Environment:
    """A classic-shaped environment over verifiers' v1 `Env` `env` (built from `config`, its `EnvConfig`)."""

    def __init__(self, env: Any, config: Any, *, env_id: str | None = None, renderer_model_name: str | None = None,
                 eval_tasks: list[Any] | None = None, max_tasks: int | None = None, api_note: str | None = None,
                 warm_programs: bool = True, renderer: dict | None = None, endless_tasks: int | None = None):
        self.env, self.config = env, getattr(env, "config", None) or config
        self.api_note = api_note  # why the v1 API was chosen (vf-rl / vf-eval: envs.loading.environment_api)
        self.env_id = env_id or config.taskset.id
        self.renderer_model_name = renderer_model_name
        self.renderer = renderer  # verifiers' TrainClientConfig.renderer (a tool-capable renderer for tool use)
        if renderer:  # checked by verifiers' own config now, not at the first rollout
            model_context("http://127.0.0.1", "policy", "policy", None, renderer_config=renderer)
        self.sampling_args: dict[str, Any] = {}
        self.rubric = NoRubric()
        self.endless_note = None
        if getattr(env.taskset, "INFINITE", False) and max_tasks is None and endless_tasks:
            max_tasks = endless_tasks  # a run's draw (its steps', an eval's examples), as prime-rl streams one
            self.endless_note = (f"v1 taskset {self.env_id!r} is endless: this run takes its first {max_tasks} tasks "
                                 "(as many as it draws); [env] args.max_tasks sets another number")
        elif getattr(env.taskset, "INFINITE", False) and max_tasks is None:
            raise ValueError(f"v1 taskset {self.env_id!r} is endless: take its first N tasks with max_tasks (vf-rl: "
                             "[env] args.max_tasks = N; vf-eval: --env-args '{\"max_tasks\": N}'; a notebook: "
                             "load_v1_environment(..., max_tasks=N))")
        self.tasks = _take(env.taskset, max_tasks)
        self.seats = agent_seats(self.config, require_v1())
        # several seats (a multi-agent env): one state per seat from each rollout (envs.rollouts.generate_states)
        self.agents_per_rollout = max(1, len(self.seats))
        self.eval_tasks = list(eval_tasks) if eval_tasks is not None else self.tasks
        # harness programs can start warm where a seat runs on verifiers' subprocess runtime
        runtimes = [getattr(getattr(self.config, seat, None), "runtime", None) for seat in self.seats]
        self.warm_programs = warm_programs and any(getattr(r, "type", None) == "subprocess" for r in runtimes)
        if self.warm_programs:  # harness programs forked from a warm interpreter (v1/warm_programs.py)
            from verifiers_rl.v1.warm_programs import enable

            enable()
        self.serving = EnvServing(env)
        self.endpoint = PolicyEndpoint()
        self._announced = False
        self._lock = threading.Lock()

    def _rows(self, tasks: list[Any], n: int | None, split: str) -> Any:
        from datasets import Dataset

        return Dataset.from_list([{"example_id": i, "task": self.env_id, "prompt": _prompt(t), "answer": "",
                                   "info": {}, "v1_split": split}
                                  for i, t in enumerate(tasks if n is None or n < 0 else tasks[:n])])

    def get_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        return self._rows(self.tasks, n, "train")

    def get_eval_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        return self._rows(self.eval_tasks, n, "eval")

    def _limit(self, max_seq_len: int | None) -> None:
        """The run's context limit on each seat whose config has no `max_total_tokens` of its own."""
        if max_seq_len is None:
            return
        for seat in self.seats:
            agent = getattr(self.config, seat)
            if agent.max_total_tokens is None:
                agent.max_total_tokens = int(max_seq_len)

    def describe(self, base_url: str) -> str:
        seats = ", ".join(f"{s}: harness {getattr(getattr(self.config, s).harness, 'id', None) or 'default'} on "
                          f"runtime {getattr(getattr(self.config, s).runtime, 'type', '?')}"
                          for s in self.seats)
        why = f"; {self.api_note}" if self.api_note else ""
        return (f"verifiers runtime: real, verifiers v1 API (verifiers {v1_available()}{why}): env {self.env_id!r} "
                f"({type(self.env).__name__}; {seats}), episodes in-process via env.serving()/run_slot, "
                f"policy at {base_url.removesuffix('/v1')}/inference/v1/generate{self.endpoint.upstream(base_url)}")

    def renderer_problem(self, tokenizer: Any) -> str | None:
        """Why the configured renderer cannot render for this policy's tokenizer (a Qwen3 renderer on a model without
        its special tokens), or None: found before training, not as every rollout's error."""
        if not self.renderer:
            return None
        from renderers import create_renderer

        config = model_context("http://127.0.0.1", "policy", "policy", None, renderer_config=self.renderer)
        try:
            create_renderer(tokenizer, config.client.renderer)
        except Exception as e:
            name = getattr(tokenizer, "name_or_path", "") or "the policy"
            return (f"environment {self.env_id!r}: renderer {self.renderer.get('name', self.renderer)!r} cannot "
                    f"render for {name}'s tokenizer ({(str(e) or type(e).__name__).splitlines()[0]}): set the "
                    "renderer of this model's family, or leave it out for the one its name selects "
                    "(orchestrator.renderer in a prime-rl config, [env] args.renderer in vf-rl's)")
        return None

    def _announce(self, base_url: str) -> None:
        with self._lock:
            if self._announced:
                return
            self._announced = True
        from verifiers_rl.env_output import console_stderr

        print(self.describe(base_url), file=console_stderr())  # the trainer's line, not the env's output

    def context(self, client: Any, model: str, sampling_args: dict | None) -> Any:
        base_url, engine = self.endpoint.base_url(client)
        tokenizer_path = getattr(getattr(engine, "tokenizer", None), "name_or_path", None)
        renderer = self.renderer_model_name or tokenizer_path or self._served_root(base_url)
        if not renderer:
            raise ValueError("a v1 environment needs the policy's tokenizer: pass renderer_model_name=")
        self._announce(base_url)
        ctx = model_context(base_url, model, renderer, sampling_args, renderer_config=self.renderer)
        self._run_sampling_wins(ctx.sampling)
        return ctx

    def _run_sampling_wins(self, sampling: Any) -> None:
        """The run's sampling over a seat's own (`<seat>.sampling` in the v1 config) for each knob the run states, as
        a classic environment's sampling_args yield to the run's: verifiers merges the seat's values over the run's,
        and a trainer would then score log-probs under sampling the policy was not sampled with. The seat's other
        knobs stay; one line names what was replaced."""
        stated = set(sampling.model_dump(exclude_unset=True))
        for seat in self.seats:
            agent = getattr(self.config, seat)
            own = agent.sampling.model_dump(exclude_unset=True) if agent.sampling is not None else {}
            replaced = {k: v for k, v in own.items() if k in stated}
            if not replaced:
                continue
            agent.sampling = type(sampling)(**{k: v for k, v in own.items() if k not in stated})
            from verifiers_rl.env_output import console_stderr

            knobs = ", ".join(f"{k} = {v!r} (run: {getattr(sampling, k, None)!r})" for k, v in replaced.items())
            print(f"v1 env {self.env_id!r}, seat {seat!r}: sampling {knobs} replaced by the run's values, which the "
                  "trainer scores log-probs with (set them as the run's sampling instead)", file=console_stderr())

    def _served_root(self, base_url: str) -> str | None:
        """The base model a vLLM server was started from (its `/v1/models` root): the train client's tokenizer."""
        if self.renderer_model_name is None:
            import httpx

            try:
                cards = httpx.get(f"{base_url}/models", timeout=30).json().get("data") or []
            except (httpx.HTTPError, ValueError):
                return None
            roots = [c.get("root") for c in cards if c.get("root") and not c.get("parent")]
            self.renderer_model_name = roots[0] if roots else None
        return self.renderer_model_name

    async def run_episode(self, task: Any, ctx: Any) -> Any:
        from verifiers_rl.v1.warm_programs import in_episode

        slot = self.env.slots(task, 1)[0]
        return await self.serving.call(lambda: in_episode(self.warm_programs, self.env.run_slot(slot, ctx)))

    async def rollout(self, row: dict, client: Any, model: str, sampling_args: dict | None = None) -> dict:
        self._limit(RUN_MAX_SEQ_LEN.get())
        tasks = self.eval_tasks if row.get("v1_split") == "eval" else self.tasks
        task = tasks[int(row["example_id"])]
        episode = await self.run_episode(task, self.context(client, model, sampling_args))
        states = episode_states(episode, row, self.seats)
        if len(states) == 1:
            return states[0]
        return {**states[0], "agent_states": states}

    async def init_state(self, row: dict, client: Any = None, model: str = "", sampling_args: dict | None = None
                         ) -> dict:
        return {"example_id": row.get("example_id"), "task": row.get("task") or self.env_id,
                "prompt": row.get("prompt"), "answer": "", "info": {}, "completion": [], "trajectory": [],
                "reward": 0.0, "metrics": {}, "reward_errors": {}, "error": None, "is_completed": False,
                "is_truncated": False, "timing": {}}

    def close(self) -> None:
        self.serving.close()
        self.endpoint.close()
        if self.warm_programs:
            from verifiers_rl.v1.warm_programs import stop_servers

            stop_servers()  # restarted on demand by another v1 environment of this process


def load_v1_environment(env: str | dict, taskset_args: dict | None = None, *, path: str | Path | None = None,
                        **kwargs: Any) -> V1Environment:
    """A `V1Environment` for a taskset id or `[env]` config dict (`loading.load_env`); kwargs go to it."""
    venv, cfg = load_env(env, taskset_args, path)
    return V1Environment(venv, cfg, **kwargs)


def _take(taskset: Any, n: int | None) -> list[Any]:
    out = list(itertools.islice(taskset, None if n is None else max(n, 0)))
    if not out:
        raise ValueError("the v1 taskset yielded no tasks")
    return out


def _prompt(task: Any) -> list[dict]:
    """The task's prompt for the dataset row (logs, sample tables), as text so every row has one column type."""

    data = task.data
    msgs = [{"role": "system", "content": data.system_prompt}] if getattr(data, "system_prompt", None) else []
    prompt = data.prompt
    if isinstance(prompt, str):
        return msgs + [{"role": "user", "content": prompt}]
    out = []
    for m in prompt or []:
        d = m.model_dump(mode="json", exclude_none=True) if hasattr(m, "model_dump") else dict(m)
        out.append({"role": str(d.get("role", "user")), "content": _text(d.get("content"))})
    return msgs + out


def _text(content: Any) -> str:
    """A message's content as text: its text parts, `<image>` (or the part's type) for the others."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = content if isinstance(content, list) else [content]
    return "".join(p.get("text", "") if isinstance(p, dict) and p.get("type", "text") == "text"
                   else f"<{p.get('type', 'part')}>" if isinstance(p, dict) else str(p) for p in parts)
