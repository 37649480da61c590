"""Signed figures in words: "7% less time" or "4% more time", never "-4% less time" or "-0%"."""
from __future__ import annotations

import html

from .data import lookup
from .macros import MacroError, macro


def signed_words(value: float, fmt: str, down: str, up: str, same: str) -> str:
    """``value`` > 0 is read with ``down`` ("less time"), < 0 with ``up`` ("more time"); a value that rounds to
    zero in ``fmt`` is ``same`` ("about the same time"), so no page prints a minus zero."""
    shown = format(abs(value), fmt)
    if format(0.0, fmt) == shown:
        return same
    return f"{shown} {down if value > 0 else up}"


@macro("signed")
def signed_macro(ctx, name: str, dotted: str, fmt: str, down: str, up: str, same: str = "about the same") -> str:
    """``{{ signed("bench_cpu.json", "a.b", ".0%", "less time", "more time") }}``: the size of a signed figure
    with the word for its direction."""
    value = lookup(name, dotted)
    if value is None:
        return "n/a"
    if not isinstance(value, (int, float)):
        raise MacroError(f"{ctx.src_path}: docs/data/{name} {dotted!r} = {value!r} is not a number")
    return signed_words(float(value), fmt, down, up, same)


def plural(n: int | float, word: str, many: str | None = None) -> str:
    """``plural(1, "thread")`` -> "1 thread", ``plural(3, "round")`` -> "3 rounds": every count a page prints
    goes through here, so no page says "1 threads"."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        raise MacroError(f"plural: {n!r} is not a count (for {word!r})")
    return f"{n:g} {word if n == 1 else (many or word + 's')}"


@macro("count")
def count_macro(ctx, name: str, dotted: str, word: str, many: str | None = None) -> str:
    """``{{ count("training.json", "provenance.machine.torch_threads", "thread") }}`` -> "2 threads"."""
    value = lookup(name, dotted)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise MacroError(f"{ctx.src_path}: docs/data/{name} {dotted!r} = {value!r} is not a count")
    return plural(value, word, many)


def run_facts(prov: dict) -> list[str]:
    """The facts of one measuring run, read from a data file's ``provenance``: machine, threads, load,
    duration, date. Each fact is there only when the file records it."""
    m = prov.get("machine") or {}
    facts = []
    if m.get("cpu"):
        facts.append(str(m["cpu"]) + (f" ({plural(m['cores'], 'core')})" if isinstance(m.get("cores"), int) else ""))
    if isinstance(m.get("torch_threads"), int):
        facts.append(plural(m["torch_threads"], "PyTorch thread"))
    start, end = prov.get("load_avg") or [None], prov.get("load_avg_end") or [None]
    if isinstance(start[0], (int, float)):
        facts.append(f"load {start[0]:.2f}" + (f" to {end[0]:.2f}" if isinstance(end[0], (int, float)) else ""))
    if isinstance(prov.get("duration_s"), (int, float)):
        minutes = prov["duration_s"] / 60
        facts.append(f"{minutes:.1f} min" if minutes >= 1 else plural(round(prov["duration_s"]), "second"))
    if prov.get("date"):
        facts.append(str(prov["date"])[:10])
    return facts


@macro("run_record")
def run_record(ctx, name: str) -> str:
    """``{{ run_record("bench_cpu.json") }}``: a one-line badge with the run that wrote the file, from its
    provenance. A smoke run (``quick``) is shown as such, so a page never states in prose what kind of run
    its numbers come from."""
    from .data import load

    d = load(name)
    prov = d.get("provenance") if isinstance(d, dict) else None
    if not isinstance(prov, dict):
        raise MacroError(f"{ctx.src_path}: docs/data/{name} has no provenance to show")
    quick = bool(prov.get("quick") or d.get("quick"))
    state = ('<span class="run-state run-quick" title="a smoke run (--quick): the figures show that the '
             'pipeline works, not what it measures">smoke run</span>' if quick else
             '<span class="run-state run-full">measured</span>')
    cmd = prov.get("command", "")
    facts = " · ".join(html.escape(f) for f in run_facts(prov))
    return f'<p class="run-record">{state} <code>{html.escape(cmd)}</code> · {facts}</p>'


@macro("data_state")
def data_state(ctx, name: str, needs: str, command: str) -> str:
    """``{{ data_state("rsqrt_gpu.json", "a GPU", "python -m ... --gpu") }}``: the run record of a data file
    when it is committed, else a badge saying what writing it needs and the command that writes it. The
    page's words stay true either way: the state is read from ``docs/data``, never typed."""
    from .data import DATA

    if (DATA / name).is_file():
        return run_record(ctx, name)
    return (f'<p class="run-record"><span class="run-state run-missing" title="docs/data/{html.escape(name)} '
            f'is not committed">needs {html.escape(needs)}</span> <code>{html.escape(command)}</code> writes '
            f'<code>docs/data/{html.escape(name)}</code></p>')
