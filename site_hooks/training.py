"""The Training page's table of machines: ``{{ training_machines() }}``, one row per run filed under
docs/data/training_machines/ (each file checked against the training schema and its consistency checks;
a corrupt or misnamed one fails the build with its path)."""
from __future__ import annotations

from .macros import MacroError, macro

COLUMNS = (("machine", "machine"), ("SIMD", "simd"), ("threads", "threads"), ("date", "date"),
           ("load average, start to end", "load"), ("code", "code"),
           ("Pre-RMSNorm step (ms)", "pre-rms_step_ms"), ("norms' share", "pre-rms_share"),
           ("Pre-LN step (ms)", "pre-ln_step_ms"), ("norms' share", "pre-ln_share"))


@macro("training_machines")
def training_machines_macro(ctx) -> str:
    from reference_impl.studies import training_machines as tm
    from reference_impl.studies.schemas import DataFileError

    try:
        files = tm.archived()
    except DataFileError as exc:
        raise MacroError(f"{ctx.src_path}: {exc}") from exc
    if not files:
        raise MacroError(f"{ctx.src_path}: docs/data/training_machines/ holds no machine file")
    lines = ["| " + " | ".join(h for h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for _, data in files:
        row = tm.machine_row(data)
        lines.append("| " + " | ".join(str(row[k]).replace("|", "\\|") for _, k in COLUMNS) + " |")
    return "\n".join(lines)
