"""The pieces of `vf-rl @ config.toml` (verifiers_rl.launch is the entry point and re-exports their public names).

- planning.py: the processes a plan runs (the plan itself is plan/launch.py's).
- preview.py: the plan as `vf-rl --dry-run --gpus N` prints it.
- prepare.py: the files a launch writes and the process settings.
- supervisor.py: starts the processes, tees their output, keeps run.json current, stops every child.
- pipeline.py: the trainer process: tiny model → SFT warm-up → eval → RL → eval.
- stats.py: the paired before/after comparison of held-out rewards.
- output_dir.py: an earlier run's output dir, refused or cleared (--clean-output-dir).
- ranks.py: under torchrun, the tiny model and the warm-up built once, by local rank 0.
"""
