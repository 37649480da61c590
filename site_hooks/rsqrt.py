"""The rsqrt page's table of machines: ``{{ rsqrt_machines() }}``, one row per CPU run filed under
docs/data/rsqrt_machines/ (each file checked against the rsqrt_cpu schema and its consistency checks; a
corrupt, misnamed or --quick file fails the build with its path)."""
from __future__ import annotations

from .bench import archive_table
from .macros import macro

COLUMNS = (("machine", "machine"), ("SIMD", "simd"), ("cores", "cores"), ("date", "date"),
           ("load average, start to end", "load"), ("code", "code"),
           ("one exact rsqrt, SQRTSS + DIVSS (ns)", "exact_ns"), ("one RSQRTSS (ns)", "rsqrtss_ns"),
           ("RSQRTPS against SQRTPS + DIVPS, in cache", "speedup_cache"))


@macro("rsqrt_machines")
def rsqrt_machines_macro(ctx) -> str:
    from reference_impl.studies import rsqrt_machines

    return archive_table(ctx, rsqrt_machines, COLUMNS, "docs/data/rsqrt_machines/")
