"""The pieces of `vf-rl @ config.toml` (verifiers_rl.launch is the entry point and re-exports their public names):
planning, preview (`--dry-run`), prepare (files and process settings), supervisor (starts and stops every child),
pipeline (the trainer process: tiny model → SFT warm-up → eval → RL → eval), stats, output_dir and ranks.
"""
