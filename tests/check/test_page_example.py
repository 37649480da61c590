"""The five-line test the "Check your implementation" page shows, run as it is shown."""
# --8<-- [start:five_lines]
from reference_impl.check import check_norm
from reference_impl.studies.check_example_norms import gemma_rms_norm as my_rms_norm  # your function here


def test_my_rms_norm_matches_gemma3():
    check_norm(my_rms_norm, model="gemma3_text")
# --8<-- [end:five_lines]
