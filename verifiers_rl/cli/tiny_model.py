"""`vf-tiny-model DIR`: build the offline tiny model (byte-level tokenizer + random-init Qwen3)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vf-tiny-model", description="Write a small random-init Qwen3 model with a "
                                "byte-level tokenizer and chat template to DIR (no download needed).")
    p.add_argument("dir", metavar="DIR", help="output directory")
    p.add_argument("--layers", type=int, default=4, help="number of decoder layers (default 4)")
    p.add_argument("--hidden", type=int, default=128, help="hidden size (default 128)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads (default 2)")
    p.add_argument("--intermediate", type=int, default=384, help="MLP size (default 384)")
    p.add_argument("--max-positions", type=int, default=4096, help="context length (default 4096)")
    p.add_argument("--tie-embeddings", action="store_true", help="tie the output head to the input embeddings")
    p.add_argument("--seed", type=int, default=0, help="init seed (default 0)")
    p.add_argument("--force", action="store_true", help="write into DIR even if it is not empty")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = Path(args.dir)
    if out.exists() and not out.is_dir():
        print(f"vf-tiny-model: {out} exists and is not a directory; pick another path.", file=sys.stderr)
        return 2
    if out.is_dir() and any(out.iterdir()) and not args.force:
        print(f"vf-tiny-model: {out} is not empty; pass --force to write into it anyway.", file=sys.stderr)
        return 2
    from verifiers_rl.models.tiny import build_tiny_model, shape_problem

    problem = shape_problem(args.layers, args.hidden, args.heads, args.kv_heads, args.intermediate,
                            args.max_positions)
    if problem:
        print(f"vf-tiny-model: --{problem[0].replace('_', '-')}: {problem[1]}.", file=sys.stderr)
        return 2

    path = build_tiny_model(out, num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                            num_kv_heads=args.kv_heads, intermediate_size=args.intermediate,
                            max_position_embeddings=args.max_positions, tie_word_embeddings=args.tie_embeddings,
                            seed=args.seed)
    print(f"wrote tiny model ({_count_params(path):,} parameters) to {path.resolve()}")
    return 0


def _count_params(path: Path) -> int:
    # Count from the safetensors header so we don't load the model again.
    import json
    import math
    import struct

    total = 0
    for f in sorted(path.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


if __name__ == "__main__":
    sys.exit(main())
