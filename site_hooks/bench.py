"""Macros of the Performance page that read the CPU benchmark's structured sections (tables built here, at
build time, from records in the data file, not Markdown stored in it), and its archive of machines.

``{{ bench_rows("short_rows.rows", "dtype|dtype", "copy_gbps|copy GB/s|.1f", ...) }}``: one row per record
of a section of bench_cpu.json, columns as ``data_table``'s. ``{{ bench_plot("cpu_short_rows", alt, caption,
"short_rows") }}``: the plot, once the file holds that section. A section the committed run predates renders
as one line saying so (the next run of the command fills it in); a file that has it but is malformed fails.
``{{ bench_machines() }}``: every machine in docs/data/bench_cpu_machines/, each file checked against the
benchmark's schema (a corrupt one fails the build with its path).
"""
from __future__ import annotations

from .data import data_macro, data_table_macro, load
from .macros import MacroError, macro
from .plots import plot_macro

FILE = "bench_cpu.json"


def _missing(section: str) -> str | None:
    key = section.split(".")[0]
    if key in load(FILE):
        return None
    return (f"*Not in the committed run: it predates this part of the benchmark (`{key}`); the next run of "
            "`python -m reference_impl.studies.bench` measures it.*")


@macro("bench_rows")
def bench_rows_macro(ctx, section: str, *columns: str) -> str:
    return _missing(section) or data_table_macro(ctx, FILE, section, *columns)


@macro("bench_plot")
def bench_plot_macro(ctx, name: str, alt: str, caption: str, section: str) -> str:
    return _missing(section) or plot_macro(ctx, name, alt, caption)


@macro("bench_machines")
def bench_machines_macro(ctx) -> str:
    from reference_impl.studies.bench import archive

    cols = [("machine", "machine"), ("cores", "cores"), ("AVX512-BF16", "bf16_instructions"),
            ("kernel path", "kernel_path"), ("date", "date"), ("kernels", "source_state"),
            ("forward / copy, float32", "float32_forward_vs_copy"),
            ("forward / copy, bfloat16", "bfloat16_forward_vs_copy"), ("short rows / copy, worst", "short_rows_worst"),
            ("targets met", "targets_met")]
    return archive_table(ctx, archive, cols, "docs/data/bench_cpu_machines/")


def archive_table(ctx, archive, cols, folder: str) -> str:
    """One Markdown row per run of a machine archive (``archive.archived()``, ``archive.machine_row``),
    columns ``(header, row key)``; a corrupt file, or an empty folder, fails the build naming it."""
    from reference_impl.studies.schemas import DataFileError

    try:
        files = archive.archived()
    except DataFileError as exc:
        raise MacroError(f"{ctx.src_path}: {exc}") from exc
    if not files:
        raise MacroError(f"{ctx.src_path}: {folder} holds no machine file")
    lines = ["| " + " | ".join(h for h, _ in cols) + " |", "|" + "---|" * len(cols)]
    for _, data in files:
        row = archive.machine_row(data)
        lines.append("| " + " | ".join(str(row[k]).replace("|", "\\|") for _, k in cols) + " |")
    return "\n".join(lines)


@macro("bench_table")
def bench_table_macro(ctx, rows, *columns) -> str:
    """``table``'s form on bench_cpu.json (row keys, then ``(header, path[, format])`` per column; ``path`` and
    ``format`` are format strings in ``row``, a path starting with ``=`` is text), where a format
    ``signed:<fmt>:<down>:<up>:<same>`` writes a signed figure in words (the ``signed`` macro's)."""
    from .wording import signed_macro

    if not isinstance(rows, (list, tuple)) or not rows or not columns:
        raise MacroError(f"{ctx.src_path}: bench_table needs a non-empty list of row keys and at least one column")
    lines = ["| " + " | ".join(c[0] for c in columns) + " |", "|" + "---|" * len(columns)]
    allocators = load(FILE).get("allocators", {})
    for row in rows:
        key = row[0] if isinstance(row, (list, tuple)) else row
        if isinstance(allocators.get(key), dict) and not allocators[key].get("available", True):
            # an allocator whose package was missing when the benchmark ran: no figure, and the reason
            label = columns[0][1].format(row=row)
            label = label[1:] if label.startswith("=") else key
            lines.append("| " + " | ".join([label] + ["not measured: the package was not installed on this machine"] +
                                           ["-"] * (len(columns) - 2)) + " |")
            continue
        cells = []
        for col in columns:
            if not (isinstance(col, tuple) and len(col) in (2, 3)):
                raise MacroError(f"{ctx.src_path}: a bench_table column is (header, path[, format]), got {col!r}")
            try:
                path, fmt = col[1].format(row=row), (col[2] if len(col) == 3 else "").format(row=row)
            except (IndexError, KeyError, AttributeError) as exc:
                raise MacroError(f"{ctx.src_path}: column {col[0]!r} does not fit row {row!r}: {exc}") from exc
            if path.startswith("="):
                cells.append(path[1:])
            elif fmt.startswith("signed:"):
                parts = fmt.split(":")[1:]
                if len(parts) != 4:
                    raise MacroError(f"{ctx.src_path}: column {col[0]!r}: signed:<fmt>:<down>:<up>:<same>, got {fmt!r}")
                cells.append(signed_macro(ctx, FILE, path, *parts))
            else:
                cells.append(data_macro(ctx, FILE, path, fmt))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
