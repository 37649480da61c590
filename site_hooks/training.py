"""The Training page's table of machines: ``{{ training_machines() }}``, one row per run filed under
docs/data/training_machines/ (each file checked against the training schema and its consistency checks;
a corrupt or misnamed one fails the build with its path)."""
from __future__ import annotations

from .bench import archive_table
from .macros import macro

COLUMNS = (("machine", "machine"), ("SIMD", "simd"), ("threads", "threads"), ("date", "date"),
           ("load average, start to end", "load"), ("code", "code"),
           ("Pre-RMSNorm step (ms)", "pre-rms_step_ms"), ("norms' share", "pre-rms_share"),
           ("Pre-LN step (ms)", "pre-ln_step_ms"), ("norms' share", "pre-ln_share"))


@macro("training_machines")
def training_machines_macro(ctx) -> str:
    from reference_impl.studies import training_machines

    return archive_table(ctx, training_machines, COLUMNS, "docs/data/training_machines/")
