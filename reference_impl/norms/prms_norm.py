"""pRMSNorm, partial RMSNorm (Zhang and Sennrich, arXiv:1910.07467, section 4): the RMS from the first
``k = int(d * p)`` features, applied to all ``d``. Math: :func:`reference_impl.variants.partial_rms_norm`."""
from __future__ import annotations

import numpy as np

from .. import variants as _va
from ._bounds import rms_like
from .spec import BadInput, NormSpec, set_param, common_bad, gain, randn


def _inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0), "weight": gain(shape[-1], dtype, g)}


def _oracle(x, weight, p, eps):
    k = int(x.shape[-1] * p)
    ms = np.mean(x[..., :k] ** 2, -1, keepdims=True)
    return x / np.sqrt(ms + eps) * weight


def _bound(inputs, params):
    x = inputs["x"]
    k = int(x.shape[-1] * params["p"])
    return rms_like(_oracle(x.double().numpy(), inputs["weight"].double().numpy(), **params), k, x.dtype)


SPECS = (NormSpec(
    name="prms_norm", title="pRMSNorm: the RMS of the first k = int(d p) features",
    source="Zhang and Sennrich, arXiv:1910.07467, section 4",
    reference=lambda x, weight, p, eps: _va.partial_rms_norm(x, weight, p, eps),
    oracle=_oracle, bound=_bound, make_inputs=_inputs, params={"p": 0.5, "eps": 1e-8},
    formulas=("prms.forward", "prms.mean_square"), conventions=("reference", "eps inside"),
    shapes=((0, 8), (1, 2), (3, 7), (2, 3, 33), (4, 129)), grads=("x", "weight"),
    bad_inputs=common_bad(("weight",))[:-2] + (
        BadInput("p of zero", set_param("p", 0.0), ValueError, r"\(0, 1\]"),
        BadInput("p keeping no feature", set_param("p", 1e-9), ValueError, "at least one")),
),)
