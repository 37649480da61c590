"""Environment variables set for the length of a ``with`` block (the CPU kernels read theirs on every
call: ``NORMLAB_CPU_ISA``, ``NORMLAB_CPU_TILE``, ``NORMLAB_STREAM_BYTES``, ``NORMLAB_CPU_PREFETCH``, ``NORMLAB_CPU_PLAIN``)."""
from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def set_env(**values):
    """Set each name to its value (``None`` removes it), and restore every one afterwards."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
