"""vf-sft: supervised fine-tuning from one TOML.

    vf-sft @ sft.toml [--trainer.max-steps 200] [--trainer.use-lora] [--debug]

Data: `[data] path = "rows.jsonl"` (columns prompt + completion, or messages; optional tools / tool_defs and
chat_template_kwargs), a hub dataset id, or `[data] env_id = "reverse-text"` with
`completion_format = "<reversed_text>\\n{answer}\\n</reversed_text>"`. `[data.loss_mask]` roles that carry loss
(assistant = true); `[val] fraction = 0.1` (or `path`) and `interval`; `[trainer] packing = true`.
Several processes (torchrun, DDP) as in vf-rl: `[trainer] gpus = N` on GPUs, `[trainer] processes = N` on the CPU.
The output dir is a valid `model` (full) or starting adapter (LoRA) for vf-rl.
"""

from __future__ import annotations

import sys

from verifiers_rl.cli.common import fail, note_offline_hub, quiet_library_bars, take_debug_flag


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    argv = take_debug_flag(list(given))
    if not argv or argv[0] in ("-h", "--help"):
        print((__doc__ or "").strip())
        return 0
    note_offline_hub()
    from verifiers_rl.config.loading import ConfigError, parse_args
    from verifiers_rl.errors import NetworkError
    from verifiers_rl.sft.config import load_rows, split_rows, validate_sft_config
    from verifiers_rl.sft.data import SFTDataError
    from verifiers_rl.sft.launch import check_rows, relaunch, under_torchrun, world_size
    from verifiers_rl.trainer.run_settings import check_wandb_reachable

    try:
        files, raw, options = parse_args(argv)
        if not files:
            raise ConfigError("no config file: run vf-sft @ path/to/sft.toml")
        if options.get("output_dir"):
            raw.setdefault("trainer", {})["output_dir"] = options["output_dir"]
        cfg = validate_sft_config(raw)
        check_wandb_reachable(cfg.trainer.report_to, "trainer.report_to", need_key=True)  # not wandb's retries
        rows = load_rows(cfg.data)
        bad = [sorted(r) for r in rows[:1] if not ({"prompt", "completion"} <= set(r) or "messages" in r)]
        if bad:
            raise ConfigError(f"data: rows need 'prompt' + 'completion' or 'messages' columns; found {bad[0]}")
        rows, val_rows = split_rows(cfg, rows)
        if cfg.val is not None and not (rows and val_rows):
            raise ConfigError(f"val: {len(rows)} training and {len(val_rows)} validation rows; both need some")
        if not under_torchrun():
            from verifiers_rl.plan.hardware import gpu_count

            processes = world_size(cfg.trainer, gpu_count())
            if processes > 1:  # checked here, trained by the ranks (sft/launch.py)
                check_rows(cfg, rows, val_rows)
                return relaunch(processes, given, cfg.trainer.output_dir)
    except (ConfigError, SFTDataError) as e:
        fail(str(e))
    except NetworkError as e:
        fail(str(e), code=1)
    from rich.console import Console

    from verifiers_rl.sft.launch import rank
    from verifiers_rl.sft.trainer import run_sft

    console = Console()
    quiet_library_bars()
    try:
        out, loss = run_sft(cfg.model, rows, cfg.trainer.settings(), console=console,
                            loss_roles=cfg.data.loss_mask.roles(), on_mismatch=cfg.data.on_template_mismatch,
                            val_rows=val_rows, val_interval=cfg.val.interval if cfg.val else None)
    except NetworkError as e:
        fail(str(e), code=1)
    except (SFTDataError, ConfigError) as e:  # a row it cannot train on; a setting the model refuses (LoRA targets)
        fail(str(e))
    if rank()[0] == 0:
        console.print(f"SFT done: loss {loss:.4f}; model in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
