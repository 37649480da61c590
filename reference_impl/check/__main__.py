"""``python -m reference_impl.check pkg.mod:fn --model gemma3_text`` (see :mod:`reference_impl.check.cli`)."""
from .cli import main

raise SystemExit(main())
