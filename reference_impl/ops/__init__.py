"""Native ops: the ``normlab`` torch library (CPU and CUDA kernels) and the rsqrt study's extensions.

- :mod:`reference_impl.ops.build`: build settings (source lists, flags, ``CUDA_HOME``) and the loader.
- :mod:`reference_impl.ops.library`: loads ``normlab``, registers its fake and autograd implementations,
  and defines the entry points :func:`fused_rms_norm`, :func:`fused_layer_norm` and :func:`fused_qk_norm`.
- :mod:`reference_impl.ops.cuda`: the CUDA kernel versions, one by one, for teaching and benchmarks.
- :mod:`reference_impl.ops.rsqrt`: reciprocal-square-root methods on CPU and GPU.
- :mod:`reference_impl.ops.cpu_first`: the CPU page's first kernel, plain C++ loops over float32 rows.
"""
from . import build as _build
from .location import configure as _configure

_configure(_build)  # an installed package: sources in reference_impl/_native, builds in a user cache

from .build import NativeBuildError  # noqa: E402
from .library import fused_layer_norm, fused_qk_norm, fused_rms_norm

__all__ = ["fused_rms_norm", "fused_layer_norm", "fused_qk_norm", "NativeBuildError"]
