"""The marker form of the kit's pytest plugin, as a user's test file (copied to a temporary project and run
by tests/check/test_entry_points.py; its name keeps this repository's own run from collecting it)."""
# --8<-- [start:marker]
import pytest
from reference_impl.check import check_case
from reference_impl.studies.check_example_norms import gemma_rms_norm as my_rms_norm  # your function here


@pytest.mark.norm_model("gemma3_text", dtypes=("bf16",), widths=(33, 64, 127))
def test_my_norm(norm_case):
    check_case(my_rms_norm, norm_case, grads=False)
# --8<-- [end:marker]


def test_with_the_fixture(norm_check):
    """The plugin's norm_check fixture is check_norm."""
    assert norm_check(my_rms_norm, model="gemma3_text", dtypes=("bf16",), widths=(33,), grads=False).ok
