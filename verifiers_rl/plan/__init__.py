"""The run plan: every decision about where things run, made once.

- `hardware.py`: what this machine has (visible GPUs, a Python with vLLM, a server answering at a port).
- `gpus.py`: which GPUs the vLLM server and the trainer see: the one layout rule, for vf-rl and a script alike.
- `transfer.py`: how new weights reach vLLM.
- `inference.py`: which inference runtime a trainer uses, and what 'auto' means (`resolve_backend`).
- `launch.py`: a vf-rl run against this machine (`RunPlan`), written to `configs/plan.json` for every process.

Only this package reads the settings that choose the backend, the weight transfer and the process/GPU layout
(`tests/test_structure.py` checks it); the config layer defines and validates them.
"""
