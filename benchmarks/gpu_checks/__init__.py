"""The checks of benchmarks/gpu_check.py, one module each (common.py: what they share)."""
