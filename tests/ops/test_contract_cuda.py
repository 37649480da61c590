"""The op contract (tests/ops/contract.py) on a GPU: ``torch.ops.normlab`` with CUDA tensors. Skipped
(reported as skipped) without a CUDA device; scripts/gpu_check.sh runs it on a machine with one."""
import pytest
import torch

import reference_impl.ops  # noqa: F401  (loads the library, and the CUDA kernels when a GPU is present)

from .contract import Backend, ContractTests, PythonLayerContractTests

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.guards("ops.contract", "cuda.opcheck", "fused.out"),
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="no CUDA device here: run scripts/gpu_check.sh on a machine with a GPU"),
]


class TestCudaContract(ContractTests, PythonLayerContractTests):
    backend = Backend("cuda", "cuda", "normlab",
                      shapes=((1, 1), (3, 7), (2, 3, 33), (4, 1000), (2, 4097), (2, 16392), (1, 65536)))
