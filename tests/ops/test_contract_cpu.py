"""The op contract (tests/ops/contract.py) on the CPU kernels: ``torch.ops.normlab`` with CPU tensors."""
import pytest

import reference_impl.ops  # noqa: F401  (loads the library)

from .contract import Backend, ContractTests, PythonLayerContractTests

pytestmark = pytest.mark.guards("ops.contract", "fused.bad_input", "fused.out", "fused.param_grad_fp32")


class TestCpuContract(ContractTests, PythonLayerContractTests):
    backend = Backend("cpu", "cpu", "normlab", shapes=((1, 1), (3, 7), (2, 3, 33), (4, 1000), (2, 4099)))
