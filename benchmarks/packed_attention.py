"""Forward + backward of the trainer's log-probs on one micro-batch: padded rows, prompt-packed rows with a dense
[L, L] mask, and prompt-packed rows attending by segment (`trainer/segment_attention.py`). Prints milliseconds
(and peak GPU memory on CUDA) per layout, and the largest log-prob and relative gradient difference against the
padded rows.

A random-init Qwen3 built offline; `--preset quickstart` is the quickstart's tiny model and batch (8 prompts of
~58 tokens x 8 rollouts of 30-48), `--preset qwen3-0.6b` four layers of Qwen3-0.6B's shape with its vocabulary,
bf16, 8 prompts of 512 x 8 rollouts of 128-512 (for a GPU).

    python benchmarks/packed_attention.py [--preset quickstart|qwen3-0.6b] [--repeats 8]
"""

from __future__ import annotations

import argparse
import random
import time

PRESETS = {
    "quickstart": dict(model=dict(num_hidden_layers=4, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                                  intermediate_size=384, vocab_size=260), dtype="float32",
                       groups=8, rollouts=8, prompt=(58, 58), completion=(30, 48)),
    "qwen3-0.6b": dict(model=dict(num_hidden_layers=4, hidden_size=1024, num_attention_heads=16,
                                  num_key_value_heads=8, intermediate_size=3072, vocab_size=151936, head_dim=128),
                       dtype="bfloat16", groups=8, rollouts=8, prompt=(512, 512), completion=(128, 512)),
}


def _batch(groups: int, rollouts: int, prompt: tuple[int, int], completion: tuple[int, int], vocab: int, device):
    import torch

    random.seed(0)
    g = torch.Generator().manual_seed(0)
    rows, prompt_lens = [], []
    for _ in range(groups):
        p = torch.randint(3, vocab, (random.randint(*prompt),), generator=g)
        for _ in range(rollouts):
            c = torch.randint(3, vocab, (random.randint(*completion),), generator=g)
            rows.append(torch.cat([p, c]))
            prompt_lens.append(len(p))
    T = max(map(len, rows))
    ids = torch.zeros((len(rows), T), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for b, r in enumerate(rows):
        ids[b, :len(r)], attn[b, :len(r)] = r, 1
    loss = attn.bool().clone()
    for b, p in enumerate(prompt_lens):
        loss[b, :p] = False
    return ids.to(device), attn.to(device), loss.to(device), prompt_lens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quickstart")
    ap.add_argument("--repeats", type=int, default=8)
    args = ap.parse_args()

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from verifiers_rl.trainer import logprobs

    p = PRESETS[args.preset]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**p["model"], attn_implementation="sdpa")).to(
        device, getattr(torch, p["dtype"]))
    ids, attn, loss, prompt_lens = _batch(p["groups"], p["rollouts"], p["prompt"], p["completion"],
                                          p["model"]["vocab_size"], device)
    by_segments = logprobs._by_segments

    def once(layout: str):
        logprobs._by_segments = (lambda inner, text: False) if layout == "packed, dense mask" else by_segments
        kw = {} if layout == "padded" else {"prompt_lens": prompt_lens, "pad_id": 0}
        try:
            lp, _ = logprobs.policy_token_logprobs(model, ids, attn, 1.0, mask=loss, **kw)
            (lp[loss].float().sum() / 1000).backward()
        finally:
            logprobs._by_segments = by_segments
        grads = torch.cat([q.grad.float().flatten() for q in model.parameters() if q.grad is not None])
        model.zero_grad()
        return lp.detach().float(), grads

    print(f"{args.preset}: {p['model']['num_hidden_layers']} layers x {p['model']['hidden_size']}, {p['dtype']}, "
          f"{device}; {len(prompt_lens)} rows = {p['groups']} prompts x {p['rollouts']}, {int(attn.sum())} tokens "
          f"({ids.numel()} padded)")
    from verifiers_rl.trainer.prefix_packing import pack_shared_prompts

    for dense in (True, False):  # whether the trainer's cost estimate would pack this micro-batch
        packs = pack_shared_prompts(ids, attn, prompt_lens, hidden_size=p["model"]["hidden_size"], pad_id=0,
                                    dense_mask=dense) is not None
        how = "a dense mask" if dense else "attention by segment"
        print(f"  with {how}, the trainer's cost estimate {'packs' if packs else 'keeps padded rows'}")
    layouts = ["padded", "packed, dense mask", "packed, by segment"]
    ref = once("padded")
    times: dict[str, list[float]] = {k: [] for k in layouts}
    peaks: dict[str, float] = {}
    for k in layouts:  # warm-up and the differences against the padded rows
        lp, g = once(k)
        diff = float((lp - ref[0])[loss].abs().max())
        print(f"  {k:20s} log-prob max diff {diff:.1e}, gradient relative diff "
              f"{float((g - ref[1]).norm() / ref[1].norm()):.1e}")
    for _ in range(args.repeats):  # alternating, so a change in machine load hits all alike
        for k in layouts:
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            once(k)
            if device == "cuda":
                torch.cuda.synchronize()
                peaks[k] = torch.cuda.max_memory_allocated() / 2**30
            times[k].append(time.perf_counter() - t0)
    base = sorted(times["padded"])[len(times["padded"]) // 2]
    for k in layouts:
        med = sorted(times[k])[len(times[k]) // 2]
        mem = f", peak {peaks[k]:.2f} GiB" if k in peaks else ""
        print(f"  {k:20s} {med * 1000:8.1f} ms (median of {args.repeats}), {med / base:.2f}x padded{mem}")


if __name__ == "__main__":
    main()
