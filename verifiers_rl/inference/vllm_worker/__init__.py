"""Code the vLLM server imports (this folder goes on the server's PYTHONPATH); it needs only torch and vLLM."""

from pathlib import Path

WORKER_PATH = str(Path(__file__).resolve().parent)
WORKER_EXTENSION = "vf_worker_extension.VFWorkerExtension"
