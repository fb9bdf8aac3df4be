"""Runs inside the vLLM servers the trainer launches (`--worker-extension-cls`), needing only vLLM and torch.

Importing it registers the "gloo" weight-transfer backend. `vf_refresh_tied_head`: on CPU vLLM keeps a packed copy of
the output head for its GEMM kernels, and a tied head is never loaded by name, so a weight update leaves that copy
holding the old embeddings until rebuilt.
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
