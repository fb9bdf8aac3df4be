"""Peak memory of the loss at a real vocabulary: RLTrainer's chunked log-probs vs TRL GRPOTrainer's loss.

A Qwen3 with Qwen3-0.6B's vocabulary (151,936) and hidden size (1024), 2 layers, built offline, LoRA r=8 on the
projections. Each side runs its own trainer's loss and backward once on the same fixed token ids (B sequences of
`--prompt` prompt + `--completion` completion tokens), each in a fresh subprocess; the figure is the peak RSS
during loss + backward minus the RSS after loading (VmHWM reset through /proc/self/clear_refs, Linux).

- ours: `policy_token_logprobs` (the output head in chunks, loss positions only) + `compute_loss`, as
  RLTrainer runs them (trainer/step.py, StepRunner.train_on);
- TRL: `GRPOTrainer._compute_loss` (loss "dapo", beta 0) on the inputs its generation step would build;
- full: the full-logits path RLTrainer used before (all logits, then log-softmax), for reference.

    python benchmarks/loss_memory.py [--batch 8] [--prompt 128] [--completion 384] [--sides ours,trl,full]
                                     [--mmap-threshold 65536]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _model(a):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=151_936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=2,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                      max_position_embeddings=4096)
    model = Qwen3ForCausalLM(cfg)
    lora = LoraConfig(r=8, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return get_peft_model(model, lora)


def _inputs(a):
    import torch

    g = torch.Generator().manual_seed(1)
    B, P, C = a.batch, a.prompt, a.completion
    ids = torch.randint(0, 151_936, (B, P + C), generator=g)
    adv = torch.randn(B, generator=g)
    return ids, adv


def child(a) -> None:
    import torch

    model = _model(a)
    ids, adv = _inputs(a)
    B, P, C = a.batch, a.prompt, a.completion
    trainer = None
    if a.child == "trl":
        trainer = _trl_trainer(model, a)
        trainer.current_gradient_accumulation_steps = 1  # set by HF's training loop, which we skip
    model.train()
    before = _rss_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM (the peak) to the current RSS
    t0 = time.perf_counter()
    if a.child == "trl":
        inputs = {"prompt_ids": ids[:, :P], "prompt_mask": torch.ones(B, P, dtype=torch.long),
                  "completion_ids": ids[:, P:], "completion_mask": torch.ones(B, C, dtype=torch.long),
                  "advantages": adv, "num_items_in_batch": torch.tensor(float(B * C)), "old_per_token_logps": None}
        loss = trainer._compute_loss(trainer.model, inputs)
    else:
        from verifiers_rl.trainer.logprobs import policy_token_logprobs
        from verifiers_rl.trainer.loss import compute_loss, token_logprobs_and_entropy

        attn = torch.ones_like(ids)
        loss_mask = torch.zeros_like(ids, dtype=torch.bool)
        loss_mask[:, P:] = True
        if a.child == "ours":
            lp, ent = policy_token_logprobs(model, ids, attn, 1.0, mask=loss_mask, with_entropy=True)
        else:
            lp, ent = token_logprobs_and_entropy(model(input_ids=ids, attention_mask=attn).logits, ids, 1.0)
        loss = compute_loss(lp, lp.detach(), adv, loss_mask, int(loss_mask.sum())).loss
    loss.backward()
    dt = time.perf_counter() - t0
    peak = _rss_kb("VmHWM")
    print(json.dumps({"side": a.child, "delta_mb": (peak - before) / 1024, "after_load_mb": before / 1024,
                      "seconds": dt, "loss": float(loss)}))


def _trl_trainer(model, a):
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from verifiers_rl.models.tiny import build_tiny_model

    tok_dir = build_tiny_model(tempfile.mkdtemp() + "/tok")  # any tokenizer: the loss reads token ids only
    tok = AutoTokenizer.from_pretrained(tok_dir)
    config = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=a.batch, num_generations=a.batch,
                        max_completion_length=a.completion, beta=0.0, loss_type="dapo", bf16=False,
                        gradient_checkpointing=False, use_cpu=not torch.cuda.is_available(), report_to="none",
                        save_strategy="no", disable_tqdm=True)
    ds = Dataset.from_list([{"prompt": "x"}] * a.batch)
    return GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=config,
                       train_dataset=ds, processing_class=tok)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--completion", type=int, default=384)
    p.add_argument("--sides", default="ours,trl,full")
    p.add_argument("--mmap-threshold", type=int, default=0,
                   help="run every child with MALLOC_MMAP_THRESHOLD_=N: glibc then returns freed large buffers to "
                        "the OS at once instead of keeping them in its heap (which RSS counts)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a)
        return
    print("command: python " + " ".join(sys.argv), flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if a.mmap_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = str(a.mmap_threshold)
    res = {}
    for side in a.sides.split(","):
        cmd = [sys.executable, __file__, "--child", side, "--batch", str(a.batch), "--prompt", str(a.prompt),
               "--completion", str(a.completion)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not line:
            print(f"{side}: failed (exit {r.returncode})\n{r.stderr[-2000:]}")
            continue
        res[side] = json.loads(line[-1])
        d = res[side]
        print(f"{side:5s}: peak RSS during loss+backward - RSS after loading = {d['delta_mb']:8.0f} MB "
              f"(after loading {d['after_load_mb']:.0f} MB, {d['seconds']:.2f} s)", flush=True)
    print(f"V=151936, hidden 1024, 2 layers, LoRA r=8, {a.batch} x ({a.prompt} prompt + {a.completion} completion)"
          f" tokens{f', MALLOC_MMAP_THRESHOLD_={a.mmap_threshold}' if a.mmap_threshold else ''}")
    if "ours" in res and "trl" in res:
        print(f"memory ratio ours / TRL: {res['ours']['delta_mb'] / res['trl']['delta_mb']:.3f}")
    if "ours" in res and "full" in res:
        print(f"memory ratio chunked / full logits: {res['ours']['delta_mb'] / res['full']['delta_mb']:.3f}")


if __name__ == "__main__":
    main()
