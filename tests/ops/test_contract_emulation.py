"""The op contract (tests/ops/contract.py) on the CUDA glue, launchers and kernels, run on CPU threads by
the CUDA emulation: ``torch.ops.normlab_emu`` (built by reference_impl.ops.build.load_emulation_library)."""
import pytest

from reference_impl.ops.build import NativeBuildError, load_emulation_library

from .contract import Backend, ContractTests

pytestmark = pytest.mark.guards("ops.contract", "cuda.emulated", "fused.bad_input", "fused.out")


@pytest.fixture(scope="module", autouse=True)
def _emulation():
    try:
        load_emulation_library()
    except NativeBuildError as exc:  # the CUDA headers are part of the build set-up: a failure, not a skip
        pytest.fail(f"the CUDA emulation does not build: {exc}")


class TestEmulatedCudaContract(ContractTests):
    # small shapes: every block of a launch runs its threads one block after another; (19, 128) is QK-norm's
    # case, several rows to a block (version 6) with the last block partly empty
    backend = Backend("emulation", "cpu", "normlab_emu",
                      shapes=((1, 1), (3, 7), (2, 3, 33), (19, 128), (2, 1000), (1, 4104)))
