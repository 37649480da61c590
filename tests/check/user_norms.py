"""A user's RMSNorm in the Gemma 3 order and two subtly wrong variants (their code is on the "Check your
implementation" page, embedded from reference_impl/studies/check_example_norms.py). Each takes ``(x, weight, eps)``
with ``weight`` Gemma's stored offset (the gain is ``1 + weight``)."""
from reference_impl.studies.check_example_norms import eps_outside, gemma_rms_norm, rounds_before_gain

__all__ = ["gemma_rms_norm", "rounds_before_gain", "eps_outside"]
