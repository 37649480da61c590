"""The five-line test the "Check your implementation" page shows, run as it is shown."""
# --8<-- [start:five_lines]
from reference_impl.check import check_norm
from user_norms import gemma_rms_norm  # your function: gemma_rms_norm(x, weight, eps) -> y


def test_my_rms_norm_matches_gemma3():
    check_norm(gemma_rms_norm, model="gemma3_text")
# --8<-- [end:five_lines]
