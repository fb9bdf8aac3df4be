"""Runs inside the vLLM servers the trainer launches (`--worker-extension-cls vf_worker_extension.VFWorkerExtension`,
this folder on PYTHONPATH); needs only vLLM and torch, so it runs in the server's own venv.

- Importing it registers the "gloo" weight-transfer backend (`vf_gloo_transfer`) in the worker process, before
  vLLM builds its weight-transfer engine; a vLLM without native weight transfer just goes without it.
- `vf_refresh_tied_head` (through `/collective_rpc`): on CPU, vLLM keeps a packed copy of the output head for its
  GEMM kernels. A head tied to the embeddings is never loaded by name, so after a weight update that copy still
  holds the old embeddings; rebuilding it from the (shared, updated) weight fixes the outputs.
"""

from __future__ import annotations

try:
    import vf_gloo_transfer  # noqa: F401  (registers the backend)
except ImportError:  # a vLLM without vllm.distributed.weight_transfer
    pass


class VFWorkerExtension:
    """Mixed into vLLM's worker class; `self` is the worker."""

    def vf_refresh_tied_head(self) -> bool:
        """Rebuild a tied output head's kernel copy on CPU; True when there was one to rebuild."""
        from vllm.platforms import current_platform

        model = self.model_runner.get_model()
        config = getattr(model, "config", None)
        head = getattr(model, "lm_head", None)
        method = getattr(head, "quant_method", None)
        if not (current_platform.is_cpu() and getattr(config, "tie_word_embeddings", False) and method is not None):
            return False
        method.process_weights_after_loading(head)
        return True
