"""``python -m reference_impl.studies.engines``: see :mod:`reference_impl.studies.engines`."""
import os
import sys

if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
    raise SystemExit("triton was imported before TRITON_INTERPRET=1 could be set (Liger's kernels need it)")
os.environ.setdefault("TRITON_INTERPRET", "1")

from .cli import main  # noqa: E402

raise SystemExit(main())
