"""The run plan: every decision about where things run (hardware, GPU layout, weight transfer, inference backend, the
vf-rl `RunPlan` written to `configs/plan.json`), made once. Only this package reads the settings that choose them
(`tests/test_structure.py` checks it); the config layer defines and validates them.
"""
