"""One TRL script, two trainers: the same `GRPOConfig`, reward function and dataset given to TRL's `GRPOTrainer` and to
`vf.RLTrainer` (the class name swapped, nothing else), alternately; prints seconds per step (`train()` wall time /
steps), their ratio per pair and the median, and the train reward of the last steps on each side.

The task is speed_vs_trl.py's `short` one (a random-init tiny model learning to write lowercase letters; the reward
a TRL-style function of `completions`), with TRL's own config defaults except the batch, the lengths and fp32 on the
CPU, so what RLTrainer reads from a GRPOConfig (trainer/config_from_trl.py) is what is measured.

`--lora`: the same with `peft_config=LoraConfig(r=8)` on the projections and lr 2e-4 (a second case, as TRL's
LoRA recipes pass it).

    python benchmarks/same_script_as_trl.py [--pairs 3] [--steps 12] [--threads 1] [--lora]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def reward(completions, **kwargs) -> list[float]:
    texts = [c[0]["content"] for c in completions]
    return [sum("a" <= ch <= "z" for ch in t) / max(len(t), 1) for t in texts]


def script(trainer_cls, model_dir: str, out: str, steps: int, seed: int, lora: bool = False
           ) -> tuple[float, list[float]]:
    """The TRL user's script: returns (seconds per step, the train rewards logged)."""
    import warnings

    from trl import GRPOConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TRL's default gradient_checkpointing's deprecation note
        args = GRPOConfig(output_dir=out, max_steps=steps, per_device_train_batch_size=32, num_generations=8,
                          max_completion_length=24, learning_rate=2e-4 if lora else 3e-3, lr_scheduler_type="constant",
                          temperature=1.0, use_cpu=True, bf16=False, gradient_checkpointing=False, logging_steps=1,
                          save_strategy="no", report_to="none", disable_tqdm=True, seed=seed)
    from datasets import Dataset

    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Write something ({i})."}]}
                              for i in range(512)])
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=8, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"])
    trainer = trainer_cls(model=model_dir, reward_funcs=reward, args=args, train_dataset=data,
                          peft_config=peft_config)
    t0 = time.perf_counter()
    trainer.train()
    dt = (time.perf_counter() - t0) / steps
    logs = trainer.state.log_history
    rewards = [h.get("reward", h.get("reward/all/mean")) for h in logs if "reward" in h or "reward/all/mean" in h]
    if hasattr(trainer, "close"):
        trainer.close()
    return dt, rewards


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--tail", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both (1: as speed_vs_trl.py)")
    p.add_argument("--lora", action="store_true", help="LoRA r=8 through peft_config on both sides")
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from trl import GRPOTrainer

    import verifiers_rl as vf
    from verifiers_rl.models.tiny import build_tiny_model

    torch.set_num_threads(a.threads)
    print("command: python " + " ".join(sys.argv), flush=True)
    ratios, ours_r, trl_r = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        model = str(build_tiny_model(f"{tmp}/tiny"))
        for pair in range(a.pairs):
            order = [("ours", vf.RLTrainer), ("trl", GRPOTrainer)][:: -1 if pair % 2 else 1]
            got = {side: script(cls, model, f"{tmp}/{side}-{pair}", a.steps, pair, a.lora) for side, cls in order}
            (so, ro), (st, rt) = got["ours"], got["trl"]
            ratios.append(so / st)
            ours_r.append(statistics.mean(ro[-a.tail:]))
            trl_r.append(statistics.mean(rt[-a.tail:]))
            print(f"pair {pair}: RLTrainer {so:.3f} s/step, GRPOTrainer {st:.3f} s/step, ratio {so / st:.2f}",
                  flush=True)
    print(f"RLTrainer / GRPOTrainer seconds per step, the same GRPOConfig and script, median of {a.pairs} pairs: "
          f"{statistics.median(ratios):.2f} (pairs: {', '.join(f'{r:.2f}' for r in ratios)})")
    print(f"train reward, last {a.tail} steps, mean over pairs: RLTrainer {statistics.mean(ours_r):.3f}, "
          f"GRPOTrainer {statistics.mean(trl_r):.3f}", flush=True)


if __name__ == "__main__":
    main()
