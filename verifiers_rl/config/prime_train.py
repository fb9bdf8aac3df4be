"""`prime train` configs (prime-rl's RL config, recognised by its `[orchestrator]` table) translated to the same
`vf-rl` run, following `prime_train_table` (docs/hosted.md): keys that size the hosted deployment are set aside in
one line, any unknown key is an error. `translate` also returns `origin` (vf-rl key path → prime-rl key path), so a
later error names the key the user wrote.
"""

from __future__ import annotations

import copy
import math
import sys
from typing import Any

from verifiers_rl.config.loading import ConfigError, pop_path
from verifiers_rl.config.prime_optim import prime_optimizer, prime_resume, prime_schedule
from verifiers_rl.config.prime_train_table import (ALGO_MODES, DEFAULT_MICRO_BATCH, DEPRECATED, IGNORED,
                                                   PRIME_RL_DEFAULTS, RULES)


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


class _Reader:
    """The config being read: `take` pops a key; what is left at the end is ignored (IGNORED) or an error."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = copy.deepcopy(raw)
        self.asked: list[str] = []  # every key read, there or not: what a misspelt key is compared with

    def take(self, path: str, default: Any = None) -> Any:
        self.asked.append(path)
        found, value = pop_path(self.raw, path)
        return value if found else default

    def table(self, path: str) -> dict[str, Any]:
        value = self.take(path, {})
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: must be a table, got {value!r}")
        return value


def _leaves(node: Any, prefix: str) -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}.{k}" if prefix else k)]
    if isinstance(node, list) and any(isinstance(x, dict) for x in node):
        return [leaf for i, x in enumerate(node) for leaf in _leaves(x, f"{prefix}.{i}")]
    return [] if isinstance(node, dict) else [prefix]


def _ignored(path: str) -> bool:
    parts = path.split(".")
    return any(len(parts) >= len(pat) and all(p in ("*", q) for p, q in zip(pat, parts))
               for pat in (pattern.split(".") for pattern in IGNORED))


def _known_keys() -> list[str]:
    """The prime-rl keys the table translates (`trainer.optim.betas1 / betas2` is two), list indices as N."""
    out = []
    for rule in RULES:
        first, *more = rule.key.strip("[]").split(" / ")
        out += [first, *(f"{first.rpartition('.')[0]}.{m}".lstrip(".") for m in more)]
    return out


def _unsupported(path: str, known: list[str] = ()) -> ConfigError:
    """A key this translation does not read: a misspelling of a key it reads (same table, a close name) says so,
    anything else is not supported yet."""
    import re

    from verifiers_rl.config.sections import close_match

    parent, _, name = re.sub(r"\.\d+(?=\.|$)", ".N", path).rpartition(".")
    siblings = [k.rpartition(".")[2] for k in [*_known_keys(), *known] if k.rpartition(".")[0] == parent]
    close = close_match(name, siblings, cutoff=0.8)
    if close and close != name:
        prefix = path.rpartition(".")[0]
        return ConfigError(f"{path}: unknown key (did you mean {prefix + '.' if prefix else ''}{close}?)")
    return ConfigError(f"{path}: not supported yet by the local trainer")


def _rest(where: str, table: dict[str, Any], allowed: tuple[str, ...] = ()) -> None:
    """An error naming the first key of `table` this translation does not read (outside `allowed`)."""
    left = [k for k in table if k not in allowed]
    if left:
        raise _unsupported(f"{where}.{left[0]}", [f"{where}.{a}" for a in allowed])


class Translation:
    """The vf-rl raw config being built, remembering which hosted key each value came from (`origin`)."""

    def __init__(self) -> None:
        self.raw: dict[str, Any] = {"trainer": {"args": {}}}
        self.origin: dict[str, str] = {}
        self.ignored: list[str] = []  # prime train: keys set aside (IGNORED), named in one line

    def arg(self, key: str, value: Any, source: str) -> None:
        if value is not None:
            self.raw["trainer"]["args"][key] = value
            self.origin[f"trainer.args.{key}"] = source

    def put(self, key: str, value: Any, source: str) -> None:
        self.raw[key] = value
        self.origin[key] = source


def _first(r: _Reader, *paths: str) -> tuple[Any, str]:
    found = [(v, p) for p in paths if (v := r.take(p)) is not None]
    return found[0] if found else (None, paths[0])


def _run_size(r: _Reader, o: Translation) -> None:
    o.arg("run_name", *_first(r, "name", "run.name"))
    model = r.table("model")
    # prime-rl's shared [model] is optional: each part may name its own (the orchestrator's may be a served variant
    # of the trainer's, e.g. an FP8 copy); the policy is the weights the trainer trains
    name, where = _first(r, "trainer.model.name", "orchestrator.model.name")
    name, where = (model.pop("name"), "model.name") if "name" in model else (name, where)
    if not isinstance(name, str):
        raise ConfigError('model.name: required key is missing (the policy: [model] name = "<hub id or dir>", or '
                          'trainer.model.name)')
    o.put("model", name, where)
    _rest("model", model)
    steps, where = _first(r, "max_steps", "orchestrator.max_steps", "trainer.max_steps")
    o.arg("max_steps", steps, where)
    # a sample's length is the orchestrator's (the trainer's is its packing budget); no prompt budget of its own:
    # any prompt that leaves room for a token trains
    seq_len, where = _first(r, "orchestrator.seq_len", "seq_len", "trainer.model.seq_len")
    o.arg("max_seq_len", seq_len, where)
    if isinstance(seq_len := 2048 if seq_len is None else seq_len, int) and seq_len > 1:
        o.arg("max_prompt_len", seq_len - 1, where)
    if r.take("orchestrator.token_batch_size") is not None:
        raise ConfigError("orchestrator.token_batch_size: not supported yet by the local trainer (set "
                          "orchestrator.batch_size, in rollouts)")
    batch = r.take("orchestrator.batch_size", PRIME_RL_DEFAULTS["batch_size"])
    o.arg("batch_size", batch, "orchestrator.batch_size")
    if isinstance(batch, int) and batch >= 1:
        o.arg("micro_batch_size", math.gcd(batch, DEFAULT_MICRO_BATCH), "orchestrator.batch_size")


def _sampling(table: dict[str, Any], where: str) -> dict[str, Any]:
    out = {}
    for key, target in (("max_completion_tokens", "max_tokens"), ("temperature", "temperature")):
        if key in table:
            out[target] = (table.pop(key), f"{where}.{key}")
    extra = dict(table.pop("extra_body", None) or {})
    if "chat_template_kwargs" in extra:
        out["chat_template_kwargs"] = (extra.pop("chat_template_kwargs"), f"{where}.extra_body.chat_template_kwargs")
    _rest(f"{where}.extra_body", extra)
    _rest(where, table)
    return out


def _teacher(algo: dict[str, Any], where: str) -> dict[str, Any] | None:
    """A prime-rl frozen model reference (base_url, name, api_key_var) → vf-rl's [teacher]."""
    if algo.get("type") == "opd":
        ref, key = algo.pop("teacher", None), f"{where}.teacher"
        if not isinstance(ref, dict):
            raise ConfigError(f"{key}: required for algo 'opd' (a served teacher: base_url, name)")
    else:
        sampling = algo.pop("sampling", {}) or {}
        ref, key = sampling.pop("source", "policy"), f"{where}.sampling.source"
        _rest(f"{where}.sampling", sampling)
        if ref == "policy":
            if algo.get("type") == "sft":
                raise ConfigError(f"{key}: algo 'sft' here trains on a teacher's rollouts: set it to the teacher "
                                  "(base_url, name)")
            return None
    if not isinstance(ref, dict) or "base_url" not in ref:
        raise ConfigError(f"{key}: a frozen model reference needs base_url (and name)")
    ref = dict(ref)
    teacher = {"url": ref.pop("base_url"), "name": ref.pop("name", None), "api_key_var": ref.pop("api_key_var", None)}
    _rest(key, ref, ("wait_for_ready_timeout", "timeout", "headers", "skip_model_check"))
    return {k: v for k, v in teacher.items() if v is not None}


def _algo(r: _Reader, sources: list[dict[str, Any]], o: Translation) -> None:
    algo = r.table("orchestrator.algo")
    for i, s in enumerate(sources):
        own = s.pop("algo", None)
        if own is not None and own != algo:
            raise ConfigError(f"orchestrator.train.source.{i}.algo: differs from orchestrator.algo; the local "
                              "trainer runs one algorithm per run (set it once, in [orchestrator.algo])")
    kind = algo.get("type", "grpo")
    if kind not in ALGO_MODES:
        raise ConfigError(f"orchestrator.algo.type: {kind!r} is not supported by the local trainer (grpo, max_rl, "
                          "rae, opd, sft; docs/training.md says why)")
    penalty = algo.pop("length_penalty", None)
    if penalty is not None and kind != "grpo":
        raise ConfigError(f"orchestrator.algo.length_penalty: applies to type 'grpo', not {kind!r}")
    if kind == "max_rl":
        o.arg("advantage", {"type": "max_rl"}, "orchestrator.algo.type")
    elif kind == "rae":
        o.arg("advantage", {"type": "rae", "decay": algo.pop("decay", 0.95)}, "orchestrator.algo.type")
    elif penalty is not None:
        o.arg("advantage", {"length_penalty": penalty}, "orchestrator.algo.length_penalty")
    teacher = _teacher(algo, "orchestrator.algo")
    algo.pop("type", None)
    _rest("orchestrator.algo", algo)
    if ALGO_MODES[kind] != "rl":
        o.put("training_mode", ALGO_MODES[kind], "orchestrator.algo.type")
    if teacher:
        o.put("teacher", teacher, "orchestrator.algo")


def _env(source: dict[str, Any], where: str, renderer: dict[str, Any] | None) -> dict[str, Any]:
    """One prime-rl source (its `env` block: taskset, seats, an Env package's id) → a vf-rl v1 env table."""
    env = copy.deepcopy(source.pop("env", None) or {})
    taskset = env.pop("taskset", None) or {}
    if not isinstance(taskset, dict) or not taskset.get("id"):
        raise ConfigError(f"{where}.env.taskset.id: required key is missing (the v1 taskset: "
                          f"[{where.rsplit('.', 1)[0]}.env.taskset] id = \"...\")")
    tid = taskset.pop("id")
    args: dict[str, Any] = {**env, "taskset": taskset}
    if renderer:
        args["renderer"] = dict(renderer)
    out = {"id": tid, "api": "v1", "args": args}
    if source.get("name") is not None:
        out["name"] = source.pop("name")
    return out


def _gate(source: dict[str, Any], where: str) -> bool:
    """A source's curriculum → whether groups with all-zero advantages are dropped (vf-rl's difficulty filter)."""
    curriculum = source.pop("curriculum", None) or {}
    sampler = curriculum.pop("sampler", {"type": "standard"})
    if sampler.get("type", "standard") != "standard":
        raise ConfigError(f"{where}.curriculum.sampler: {sampler.get('type')!r} is not supported yet by the local "
                          "trainer")
    gates = curriculum.pop("gates", {}) or {}
    _rest(f"{where}.curriculum", curriculum)
    for name, gate in gates.items():
        window = (gate.get("reject_min", 0.0), gate.get("reject_max", 0.0))
        if gate.get("type") != "advantage_range" or window != (0.0, 0.0) or set(gate) - {"type", "reject_min",
                                                                                           "reject_max"}:
            raise ConfigError(f"{where}.curriculum.gates.{name}: only {{type = 'advantage_range'}} with the "
                              "default reject range [0, 0] is supported yet")
    return bool(gates)


def _train(r: _Reader, o: Translation) -> None:
    sources = r.take("orchestrator.train.source") or []
    if not isinstance(sources, list) or not sources:
        raise ConfigError("orchestrator.train.source: required key is missing (at least one "
                          "[[orchestrator.train.source]] with env.taskset.id)")
    renderer = r.table("orchestrator.renderer") or None
    _algo(r, sources, o)
    group = r.take("orchestrator.group_size", PRIME_RL_DEFAULTS["group_size"])
    shared = _sampling(r.table("orchestrator.train.sampling"), "orchestrator.train.sampling")
    zero = r.take("orchestrator.train.filter_zero_advantages", True)  # prime-rl's default: on
    if o.raw.get("training_mode", "rl") == "rl":
        o.arg("filter_zero_advantages", zero, "orchestrator.train.filter_zero_advantages")
    envs, gated, seen = [], [], {}
    for i, s in enumerate(sources):
        where = f"orchestrator.train.source.{i}"
        if (own := s.pop("group_size", group)) != group:
            raise ConfigError(f"{where}.group_size: {own} differs from orchestrator.group_size "
                              f"{group}; the local trainer uses one group size per run")
        for target, (value, key) in _sampling(s.pop("sampling", {}) or {}, f"{where}.sampling").items():
            if seen.setdefault(target, value) != value:
                raise ConfigError(f"{key}: differs from another source's; the local trainer samples all envs "
                                  "alike (set it once, in [orchestrator.train.sampling])")
            shared[target] = (value, key)
        gated.append(_gate(s, where))
        env = _env(s, where, renderer)
        ratio = s.pop("ratio", 1.0)
        if len(sources) > 1:
            env["ratio"] = ratio
        if s.pop("serve", None) is not None:
            o.ignored.append(f"{where}.serve")
        _rest(where, s)
        envs.append(env)
    if any(gated) and not all(gated):
        raise ConfigError("orchestrator.train.source: a curriculum gate on some sources only; the local trainer "
                          "filters all envs alike (gate every source, or none)")
    o.arg("rollouts_per_example", group, "orchestrator.group_size")
    for target, (value, where) in shared.items():
        o.arg(target, value, where)
    if all(gated):
        o.arg("online_difficulty_filtering", True, "orchestrator.train.source.0.curriculum.gates")
    o.put("env", envs[0] if len(envs) == 1 else envs,
          "orchestrator.train.source.0" if len(envs) == 1 else "orchestrator.train.source")
    for i in range(len(envs)):  # the id is the taskset's
        o.origin["env.id" if len(envs) == 1 else f"env.{i}.id"] = f"orchestrator.train.source.{i}.env.taskset.id"


def _loss(r: _Reader, o: Translation) -> None:
    loss = r.table("trainer.loss")
    kind = loss.pop("type", "default")
    if kind != "default":
        raise ConfigError(f"trainer.loss.type: {kind!r} is not supported yet by the local trainer (default)")
    default = 1e-3 if o.raw.get("training_mode", "rl") in ("rl", "opd") else None  # prime-rl's default loss's
    o.arg("loss", {"kl_tau": kl_tau} if (kl_tau := loss.pop("kl_tau", default)) is not None else None,
          "trainer.loss.kl_tau")
    for key, default in (("dppo_mask_low", 0.2), ("dppo_mask_high", 0.2), ("adv_tau", 1.0)):
        if loss.pop(key, default) != default:
            raise ConfigError(f"trainer.loss.{key}: not supported yet by the local trainer (its loss masks tokens by "
                              "importance ratio: trainer.args.loss.mask_ratio_low / mask_ratio_high in a vf-rl config)")
    _rest("trainer.loss", loss)


def _optim(r: _Reader, o: Translation) -> None:
    optim = r.table("trainer.optim")
    for key, value in prime_optimizer(optim, "trainer.optim").items():
        o.arg(key, value, "trainer.optim.type" if key == "optim" else "trainer.optim.mu")
    o.arg("learning_rate", optim.pop("lr", PRIME_RL_DEFAULTS["learning_rate"]), "trainer.optim.lr")
    o.arg("weight_decay", optim.pop("weight_decay", PRIME_RL_DEFAULTS["weight_decay"]), "trainer.optim.weight_decay")
    norm = optim.pop("max_norm", PRIME_RL_DEFAULTS["max_grad_norm"])
    o.arg("max_grad_norm", 0.0 if norm is None else norm, "trainer.optim.max_norm")
    o.arg("adam_beta1", optim.pop("betas1", None), "trainer.optim.betas1")
    o.arg("adam_beta2", optim.pop("betas2", None), "trainer.optim.betas2")
    _rest("trainer.optim", optim)
    _scheduler(r.table("trainer.scheduler"), o)


def _scheduler(sched: dict[str, Any], o: Translation) -> None:
    args = o.raw["trainer"]["args"]
    lr = args.get("learning_rate", PRIME_RL_DEFAULTS["learning_rate"])
    settings = prime_schedule(sched, "trainer.scheduler", lr, args.get("max_steps"))
    _rest("trainer.scheduler", sched)
    for key, value in settings.items():
        source = {"warmup_steps": "warmup_steps", "lr_scheduler_kwargs": "decay_steps"}.get(key, "type")
        o.arg(key, value, f"trainer.scheduler.{source}")


def _activation_checkpointing(r: _Reader, o: Translation) -> None:
    ac = r.take("trainer.model.ac", {})  # prime-rl checkpoints activations unless told not to (ac = None)
    if not isinstance(ac, dict):
        raise ConfigError(f"trainer.model.ac: must be a table, got {ac!r}")
    o.arg("gradient_checkpointing", True, "trainer.model.ac")
    if ac.get("mode", "full") != "full" or ac.get("freq", 1) != 1:
        _warn("trainer.model.ac: this trainer checkpoints every layer whole (transformers' gradient_checkpointing); "
              "mode and freq are not applied")
    _rest("trainer.model.ac", ac, allowed=("mode", "freq", "targets"))


def _lora(r: _Reader, o: Translation) -> None:
    _activation_checkpointing(r, o)
    lora = r.take("trainer.model.lora")
    o.arg("use_lora", lora is not None, "trainer.model.lora")
    if lora is None:
        return
    lora = dict(lora)
    for key, target in (("rank", "lora_rank"), ("alpha", "lora_alpha"), ("dropout", "lora_dropout"),
                        ("target_modules", "lora_target_modules"), ("modules_to_save", "lora_modules_to_save")):
        value = lora.pop(key, PRIME_RL_DEFAULTS["lora_rank"] if key == "rank" else None)
        if key == "alpha" and isinstance(value, float) and value.is_integer():
            value = int(value)
        o.arg(target, value or None if key == "modules_to_save" else value, f"trainer.model.lora.{key}")
    _rest("trainer.model.lora", lora)


def _eval(r: _Reader, o: Translation, renderer: dict[str, Any] | None) -> None:
    ev = r.take("orchestrator.eval")
    if ev is None:
        return
    ev = dict(ev)
    if "eval_base_model" in ev:  # the deprecated spelling, inverted
        ev.setdefault("skip_first_step", not ev.pop("eval_base_model"))
    out: dict[str, Any] = {"interval": ev.pop("interval", PRIME_RL_DEFAULTS["eval_interval"]),
                           "num_examples": ev.pop("num_examples", -1),
                           "rollouts_per_example": ev.pop("group_size", 1),
                           "before": not ev.pop("skip_first_step", False), "after": False, "env": []}
    sampling = dict(ev.pop("sampling", {}) or {})
    if sampling.get("temperature") is not None:
        out["temperature"] = sampling.pop("temperature")
    if (tokens := sampling.pop("max_completion_tokens", None)) is not None:
        out["max_tokens"] = tokens
    _rest("orchestrator.eval.sampling", sampling)
    for i, s in enumerate(ev.pop("source", []) or []):
        where = f"orchestrator.eval.source.{i}"
        s = dict(s)
        if s.pop("interval", out["interval"]) != out["interval"]:
            raise ConfigError(f"{where}.interval: differs from orchestrator.eval.interval; the local trainer "
                              "evaluates every env at one interval")
        # the local eval samples all envs alike (orchestrator.eval.sampling): a source's own is not read
        own = dict(s.pop("sampling", {}) or {})
        _eval_tokens(own, f"{where}.sampling", out.get("max_tokens") or o.raw["trainer"]["args"].get("max_tokens"))
        _rest(f"{where}.sampling", own)
        if s.pop("serve", None) is not None:
            o.ignored.append(f"{where}.serve")
        item = _env(s, where, renderer)
        for key, target in (("num_examples", "num_examples"), ("group_size", "rollouts_per_example")):
            if key in s:
                item[target] = s.pop(key)
        _rest(where, s)
        out["env"].append(item)
    _rest("orchestrator.eval", ev, ("retrigger_on_resume",))
    o.put("eval", out, "orchestrator.eval")
    for k in ("interval", "num_examples", "temperature", "env"):
        o.origin[f"eval.{k}"] = f"orchestrator.eval.{k}"
    o.origin["eval.max_tokens"] = "orchestrator.eval.sampling.max_completion_tokens"
    o.origin["eval.rollouts_per_example"] = "orchestrator.eval.group_size"
    o.origin["eval.before"] = "orchestrator.eval.skip_first_step"


def _eval_tokens(sampling: dict[str, Any], where: str, evals: int | None) -> None:
    """An eval source's own `max_completion_tokens`: the local eval samples every env alike (`evals`, the eval's or
    else the training one), so it may only repeat it."""
    tokens = sampling.pop("max_completion_tokens", None)
    if tokens is not None and tokens != evals:
        raise ConfigError(f"{where}.max_completion_tokens: {tokens} differs from orchestrator.eval.sampling's "
                          f"({evals}); the local eval samples every env alike: set it there, or remove it")


def _logging(r: _Reader, o: Translation) -> None:
    wandb = r.take("monitors.wandb")
    if "wandb" in r.raw:  # the command line's --wandb (a table) / --no-wandb (off: None once composed)
        flag = r.take("wandb")
        wandb = None if flag in (None, False) else {**(wandb or {}), **(flag if isinstance(flag, dict) else {})}
    if wandb is not None:
        o.arg("wandb", dict(wandb), "monitors.wandb")
    ckpt = r.take("ckpt")
    # prime-rl saves only every ckpt.interval; a local run keeps its last step's checkpoint either way
    o.arg("save_steps", o.raw["trainer"]["args"].get("max_steps"), "ckpt.interval")
    if isinstance(ckpt, dict):
        o.arg("save_steps", ckpt.pop("interval", None), "ckpt.interval")
        o.arg("save_total_limit", ckpt.pop("keep_last", None), "ckpt.keep_last")
        o.arg("save_keep_interval", ckpt.pop("keep_interval", None), "ckpt.keep_interval")
        _rest("ckpt", ckpt, ("output_dir",))
    o.arg("resume_from_checkpoint", prime_resume(r.take("resume")), "resume")


def _deprecated(r: _Reader, o: Translation) -> None:
    for key, why in DEPRECATED.items():
        if pop_path(r.raw, key, keep=True)[0]:
            _warn(f"{key} is deprecated: {why}")
    r.take("orchestrator.trajectory_strategy")
    buffer = r.take("orchestrator.buffer")
    for key, value in (buffer or {}).items():
        if key not in ("online_difficulty_filtering", "easy_threshold", "hard_threshold", "easy_fraction",
                       "hard_fraction", "seed"):
            raise ConfigError(f"orchestrator.buffer.{key}: not supported by the local trainer")
        o.arg(key, value, f"orchestrator.buffer.{key}")


def translate(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A `prime train` raw config → (vf-rl raw config, origin: vf-rl key path → prime-rl key path)."""
    r, o = _Reader(raw), Translation()
    _deprecated(r, o)
    _run_size(r, o)
    renderer = r.raw.get("orchestrator", {}).get("renderer")
    _train(r, o)
    _loss(r, o)
    _optim(r, o)
    _lora(r, o)
    o.arg("ddp_timeout", r.take("trainer.dist_timeout_seconds"), "trainer.dist_timeout_seconds")
    o.arg("enable_token_export", r.take("trainer.enable_token_export"), "trainer.enable_token_export")
    _eval(r, o, renderer if isinstance(renderer, dict) else None)
    _logging(r, o)
    for leaf in _leaves(r.raw, ""):
        if not _ignored(leaf):
            raise _unsupported(leaf, r.asked)
        o.ignored.append(leaf)
    if o.ignored:
        names = sorted({".".join(x.split(".")[:2]) for x in o.ignored})
        print(f"prime train config: set aside (they size or place the hosted run; the local run sizes itself): "
              f"{', '.join(names)}", file=sys.stderr, flush=True)
    return o.raw, o.origin
