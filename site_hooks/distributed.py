"""The distributed page's table of machines: ``{{ distributed_machines() }}``, one row per run filed under
docs/data/distributed_machines/ (each file checked against the distributed schema and its consistency
checks; a corrupt, misnamed or smoke-run file fails the build with its path)."""
from __future__ import annotations

from .bench import archive_table
from .macros import macro

COLUMNS = (("machine", "machine"), ("SIMD", "simd"), ("cores", "cores"), ("date", "date"),
           ("load average, start to end", "load"), ("code", "code"),
           ("2 ranks: `sharded_rms_norm` (µs)", "p2_ours_us"), ("DTensor (µs)", "p2_dtensor_us"),
           ("ratio", "p2_ratio"),
           ("4 ranks: `sharded_rms_norm` (µs)", "p4_ours_us"), ("DTensor (µs)", "p4_dtensor_us"),
           ("ratio", "p4_ratio"))


@macro("distributed_machines")
def distributed_machines_macro(ctx) -> str:
    from reference_impl.studies import distributed_machines

    return archive_table(ctx, distributed_machines, COLUMNS, "docs/data/distributed_machines/")
