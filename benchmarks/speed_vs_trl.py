"""Seconds per step as the user sees it, RLTrainer vs TRL's GRPOTrainer: `train()` wall time / steps.

Alternating pairs in one process (the order flips every pair so a change in machine load hits both alike), on
two workloads, same model, environment, batch, group size, max_tokens, learning rate,
steps, fp32 on CPU, no checkpoints and logging every step on both sides, RLTrainer with `max_async_level` <= 1:

- `short`: the random-init tiny model learning to write lowercase letters (`letters_env`), full fine-tuning,
  32 rollouts = 4 prompts x 8, 24 new tokens, lr 3e-3;
- `digits`: a second full fine-tuning workload: prompts of 60-110 tokens (`digits_env`), 64 rollouts = 4 x 16,
  16 new tokens, lr 2e-3;
- `lora`: reverse-text (offline), LoRA r=8 on the projections, 64 rollouts = 8 x 8, 48 new tokens, lr 2e-4
  (`--model` a warm-started model, default the tiny model);
- `wide`: a wider, deeper random model (6 layers x 256, 8 heads) and a small batch, full fine-tuning: 16 rollouts =
  4 x 4, 48 new tokens (mostly cut at max_tokens), lr 1e-3, reward = share of the letters of "etaoin shrdlu";
- `mid` and `long`, two more shapes that no change was tuned on: 4 layers x 384 (6 heads), 24 rollouts = 3 x 8,
  32 new tokens, reward = share of vowels; 3 layers x 192 (6 heads), 16 rollouts = 8 x 2 (little prompt to share),
  64 new tokens, prompts of 60-120 tokens, reward = share of digits.

Prints per pair the two times and their ratio, then the median ratio and the train reward of the last
`--tail` steps on each side (mean over pairs +- s.e.).

    python benchmarks/speed_vs_trl.py [--workload short|digits|lora|wide|mid|long|both|all] [--pairs 5] [--steps 12]
                                      [--model DIR] [--threads N] [--local-async]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

WORKLOADS = {
    "short": dict(full=True, batch_size=32, group=8, max_tokens=24, lr=3e-3),
    "digits": dict(full=True, batch_size=64, group=16, max_tokens=16, lr=2e-3),
    "lora": dict(full=False, batch_size=64, group=8, max_tokens=48, lr=2e-4),
    "wide": dict(full=True, batch_size=16, group=4, max_tokens=48, lr=1e-3),
    "mid": dict(full=True, batch_size=24, group=8, max_tokens=32, lr=1e-3),
    "long": dict(full=True, batch_size=16, group=2, max_tokens=64, lr=2e-3),
}
WIDE_MODEL = dict(num_layers=6, hidden_size=256, num_heads=8, num_kv_heads=4, intermediate_size=768)
MODELS = {"wide": WIDE_MODEL,  # workloads on a model of their own (the rest: the tiny model)
          "mid": dict(num_layers=4, hidden_size=384, num_heads=6, num_kv_heads=2, intermediate_size=1024),
          "long": dict(num_layers=3, hidden_size=192, num_heads=6, num_kv_heads=3, intermediate_size=512)}


def letters_env(chars: str = "abcdefghijklmnopqrstuvwxyz", rows: list[str] | None = None):
    """A short-completion task for a random-init byte-level model: reward = fraction of the completion's
    characters in `chars` (lowercase letters: starts near 26/256 and is learnt in tens of steps)."""
    from datasets import Dataset

    import verifiers_rl as vf

    allowed = set(chars)

    def share(completion) -> float:
        text = "".join(str(m.get("content") or "") for m in completion) if isinstance(completion, list) else completion
        return sum(ch in allowed for ch in text) / max(len(text), 1)

    rows = rows or [f"Write something ({i})." for i in range(512)]
    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": q, "answer": ""} for q in rows]),
                            rubric=vf.Rubric(funcs=[share]))


def workload_env(name: str):
    """The environment a workload trains on (speed_vs_ref.py's runs use it too)."""
    if name == "lora":
        from verifiers_rl.envs.loading import load_environment

        return load_environment("reverse-text", dataset_source="offline", num_eval_examples=16)
    if name == "digits":
        return digits_env()
    if name == "wide":
        return letters_env("etaoin shrdlu", [f"Tell me about item number {i} in a few words, please."
                                             for i in range(512)])
    if name == "mid":
        things = ["city", "river", "tool", "animal", "song", "color", "planet", "book"]
        return letters_env("aeiou ", [f"Name a {things[i % 8]} and describe it briefly, number {i}."
                                      for i in range(512)])
    if name == "long":
        return letters_env("0123456789 ", [f"Here is some context: {' '.join(['lorem ipsum dolor'] * (1 + i % 3))}. "
                                           f"Reply with numbers {i}." for i in range(512)])
    return letters_env()


def digits_env():
    """The second full fine-tuning workload: longer prompts of varied length (a system prompt, then a list of
    words), reward = share of digits in the reply."""
    words = ["apple", "river", "mountain", "sky", "keyboard", "elephant", "tea", "orbit", "lantern", "quartz"]
    rows = [f"Answer with digits only. Count the words: {' '.join(words[(i + j) % 10] for j in range(3 + i % 9))}"
            for i in range(512)]
    return letters_env("0123456789", rows)


def run_ours(model_dir: str, env, w: dict, steps: int, out: str, seed: int, bf16: bool = False,
             local_async: bool = False) -> tuple[float, list[float]]:
    import verifiers_rl as vf

    args = vf.RLConfig(output_dir=out, max_steps=steps, batch_size=w["batch_size"], rollouts_per_example=w["group"],
                       micro_batch_size=w["batch_size"], max_tokens=w["max_tokens"], max_seq_len=256,
                       max_prompt_len=128, learning_rate=w["lr"], lr_scheduler_type="constant",
                       use_lora=not w["full"], temperature=1.0, save_strategy="no", seed=seed,
                       sample_log_interval=0, logging_steps=1, report_to="none", bf16=bf16,
                       local_async=local_async)
    trainer = vf.RLTrainer(model_dir, env, args)
    t0 = time.perf_counter()
    trainer.train()
    dt = time.perf_counter() - t0
    trainer.close()
    rec = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    return dt / steps, [r["reward/all/mean"] for r in rec if "reward/all/mean" in r]


def run_trl(model_dir: str, env, w: dict, steps: int, out: str, seed: int, bf16: bool = False
            ) -> tuple[float, list[float]]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rows = [{"prompt": r["prompt"], "answer": r["answer"]} for r in env.get_dataset().to_list()]
    rewards: list[float] = []

    def env_reward(prompts, completions, answer, **kw) -> list[float]:
        states = [{"prompt": p, "completion": c, "answer": x, "task": "default", "info": {}, "trajectory": []}
                  for p, c, x in zip(prompts, completions, answer)]
        env.rubric.score_group_sync(states)
        out_ = [float(s["reward"]) for s in states]
        rewards.append(sum(out_) / len(out_))
        return out_

    peft_config = None
    if not w["full"]:
        from peft import LoraConfig

        peft_config = LoraConfig(r=8, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"])
    config = GRPOConfig(
        output_dir=out, max_steps=steps, learning_rate=w["lr"], lr_scheduler_type="constant",
        per_device_train_batch_size=w["batch_size"], gradient_accumulation_steps=1, num_generations=w["group"],
        max_completion_length=w["max_tokens"], temperature=1.0, top_p=1.0, beta=0.0, loss_type="dapo",
        scale_rewards="none", num_iterations=1, seed=seed, bf16=bf16, gradient_checkpointing=False,
        use_cpu=not torch.cuda.is_available(), logging_steps=1, save_strategy="no", report_to="none",
        disable_tqdm=True, dataloader_num_workers=0, shuffle_dataset=True)
    trainer = GRPOTrainer(model=model, reward_funcs=env_reward, args=config, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, peft_config=peft_config)
    t0 = time.perf_counter()
    trainer.train()
    return (time.perf_counter() - t0) / steps, rewards


def _mean_se(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    se = (statistics.stdev(xs) / len(xs) ** 0.5) if len(xs) > 1 else float("nan")
    return m, se


def bench(name: str, model_dir: str, env, a) -> None:
    w = WORKLOADS[name]
    ratios, ours_s, trl_s, ours_r, trl_r = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(a.pairs):
            order = [("ours", run_ours), ("trl", run_trl)]
            if pair % 2:
                order.reverse()
            got = {}
            for side, fn in order:
                extra = {"local_async": True} if side == "ours" and a.local_async else {}
                got[side] = fn(model_dir, env, w, a.steps, f"{tmp}/{name}-{side}-{pair}", a.seed + pair, **extra)
            (so, ro), (st, rt) = got["ours"], got["trl"]
            ours_s.append(so)
            trl_s.append(st)
            ours_r.append(sum(ro[-a.tail:]) / len(ro[-a.tail:]))
            trl_r.append(sum(rt[-a.tail:]) / len(rt[-a.tail:]))
            ratios.append(so / st)
            print(f"[{name}] pair {pair}: RLTrainer {so:.3f} s/step, TRL {st:.3f} s/step, ratio {so / st:.2f}",
                  flush=True)
    (mo, eo), (mt, et) = _mean_se(ours_r), _mean_se(trl_r)
    print(f"\n[{name}] {'full' if w['full'] else 'LoRA r=8'}{', local_async' if a.local_async else ''}, {a.steps} steps, batch {w['batch_size']} = "
          f"{w['batch_size'] // w['group']} x {w['group']}, max_tokens {w['max_tokens']}, lr {w['lr']}, "
          f"model {model_dir}")
    print(f"[{name}] median s/step: RLTrainer {statistics.median(ours_s):.3f}, TRL {statistics.median(trl_s):.3f}")
    print(f"[{name}] RLTrainer / TRL seconds per step, median of {a.pairs} alternating pairs: "
          f"{statistics.median(ratios):.2f}  (pairs: {', '.join(f'{r:.2f}' for r in ratios)})")
    print(f"[{name}] train reward, last {a.tail} steps: RLTrainer {mo:.3f} +- {eo:.3f}, TRL {mt:.3f} +- {et:.3f}\n",
          flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="both", choices=["short", "digits", "lora", *MODELS, "both", "all"],
                   help="both: short and lora; all: short, digits and lora")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--tail", type=int, default=3, help="train reward averaged over the last N steps")
    p.add_argument("--model", help="model dir for the lora workload (default: the tiny model)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads for both trainers (0: torch's default). On a loaded machine the "
                        "default OpenMP threads of a main-thread generate stall on each other: 1 compares fairly")
    p.add_argument("--local-async", action="store_true",
                   help="RLTrainer with local_async=True: the local engine generates step k+1 on a copy of the policy "
                        "while step k trains (one step off-policy; not the default)")
    a = p.parse_args()
    if a.threads:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)  # before torch loads: worker threads read it too
        import torch

        torch.set_num_threads(a.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print("command: python " + " ".join(sys.argv), flush=True)

    from verifiers_rl.models.tiny import build_tiny_model

    envs = {name: workload_env(name) for name in WORKLOADS}
    names = {"both": ["short", "lora"], "all": ["short", "digits", "lora"]}.get(a.workload, [a.workload])
    with tempfile.TemporaryDirectory() as tmp:
        tiny = str(build_tiny_model(f"{tmp}/tiny"))
        for name in names:
            model = tiny
            if name == "lora" and a.model:
                model = a.model
            elif name in MODELS:
                model = str(build_tiny_model(f"{tmp}/{name}", **MODELS[name]))
            bench(name, model, envs[name], a)


if __name__ == "__main__":
    main()
