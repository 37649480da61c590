"""The kit's results: one :class:`CaseResult` per input, the :class:`Report` of a check with its table and
diagnosis, and :class:`NormCheckFailed`, the AssertionError a failing check raises."""
from __future__ import annotations

from dataclasses import dataclass, field

COLUMNS = ("dtype", "w dtype", "shape", "scale", "bits", "differ", "max ulp", "err ulp (bound)", "grad err/bound",
           "")


@dataclass
class CaseResult:
    """One input through the function. ``identical``: bit-equal to the truth (None: not compared);
    ``fraction_different``/``max_ulp``: against the truth, in the function's output dtype; ``err_ulp``: the
    largest |y - y64| in ulps of the output dtype at y64 (the float64 oracle); ``worst_err_ulp``
    and ``bound_ulp``: the error and the derived bound, in those ulps, at the element whose error uses the
    largest share of its bound; ``within_bound``: every element within its bound; ``grad_ratio``: the
    largest gradient error divided by its bound (None: not checked); ``problem``: what went wrong, in words."""

    case: str
    dtype: str
    weight_dtype: str
    shape: tuple
    scale: float
    layout: str = "contiguous"
    identical: bool | None = None
    fraction_different: float | None = None
    max_ulp: int | None = None
    err_ulp: float | None = None
    worst_err_ulp: float | None = None
    bound_ulp: float | None = None
    within_bound: bool | None = None
    grad_ratio: float | None = None
    grad_note: str | None = None
    problem: str | None = None
    bits_required: bool = True
    notes: list = field(default_factory=list)
    not_applicable: str | None = None  # the truth itself cannot take this input: not run, not a pass

    @property
    def ok(self) -> bool:
        if self.problem is not None or self.within_bound is False:
            return False
        if self.bits_required and self.identical is False:
            return False
        return self.grad_ratio is None or self.grad_ratio <= 1.0

    def cells(self) -> list[str]:
        shape = "(" + ", ".join(map(str, self.shape)) + ")" + ({"strided": " s", "3-d": ""}.get(self.layout, ""))
        bits = "-" if self.identical is None else ("same" if self.identical else "DIFFER")
        differ = "-" if self.fraction_different is None else f"{100 * self.fraction_different:.1f}%"
        mu = "-" if self.max_ulp is None else (">1e9" if self.max_ulp > 10**9 else str(self.max_ulp))
        err = "-" if self.worst_err_ulp is None else f"{_num(self.worst_err_ulp)} ({_num(self.bound_ulp)})"
        if self.within_bound is False:
            err += " OUT"
        grad = "-" if self.grad_ratio is None else f"{self.grad_ratio:.2f}"
        status = "n/a" if self.not_applicable else ("ok" if self.ok else "FAIL")
        if self.problem or self.not_applicable:
            status += ": " + (self.problem or self.not_applicable)
        scale = "per row" if self.layout == "wide" else f"{self.scale:g}"
        return [self.dtype, self.weight_dtype, shape, scale, bits, differ, mu, err, grad, status]


def _num(v) -> str:
    if v is None:
        return "-"
    if v != v:
        return "nan"
    if v >= 1e5:
        return f"{v:.1e}"
    return f"{v:.2f}" if v < 10 else f"{v:.0f}"


def table(results, columns=COLUMNS) -> str:
    """A plain-text table, one line per case (as pytest prints failure messages)."""
    rows = [list(columns)] + [r.cells() for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns) - 1)]
    lines = []
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    lines.insert(1, "-" * min(120, len(lines[0]) + 10))
    return "\n".join(lines)


@dataclass
class Report:
    """What :func:`reference_impl.check.check_norm` found.

    ``target``: the model's norm (:class:`~reference_impl.check.models.Target`); ``truth``: what the bits
    were compared with; ``results``: one :class:`CaseResult` per input; ``match``: the
    :class:`~reference_impl.check.matching.Match` of the function over the contiguous inputs (None if the
    function failed before); ``diagnosis``: a sentence saying what the function computes against what the
    model does."""

    function: str
    target: object
    truth: str
    results: list
    match: object = None
    diagnosis: str = ""
    notes: list = field(default_factory=list)
    findings: list = field(default_factory=list)  # diagnosis.Finding s of a failing check, the first the main one

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def failures(self) -> list:
        return [r for r in self.results if not r.ok]

    def summary(self) -> str:
        n, bad = len(self.results), len(self.failures)
        na = sum(1 for r in self.results if r.not_applicable)
        t = self.target
        head = (f"{self.function} against {t.name} ({t.entry}, eps {t.eps:g}, gain {t.gain}; from {t.source}); "
                f"bits compared with {self.truth}")
        verdict = f"all {n - na} cases pass" if not bad else f"{bad} of {n - na} cases FAIL"
        if na:
            verdict += f"; {na} cases not run (the model's norm rejects their inputs)"
        return f"{head}\n{verdict}"

    def text(self, only_failures: bool = False) -> str:
        rows = self.failures if only_failures and self.failures else self.results
        out = [self.summary(), "", table(rows)]
        if only_failures and len(rows) < len(self.results):
            out.append(f"({len(self.results) - len(rows)} passing cases not shown)")
        if self.diagnosis:
            out += ["", "diagnosis: " + self.diagnosis]
        for note in self.notes:
            out.append("note: " + note)
        return "\n".join(out)

    def __str__(self) -> str:
        return self.text()

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {"function": self.function, "target": dict(self.target.__dict__), "truth": self.truth, "ok": self.ok,
                "diagnosis": self.diagnosis, "notes": list(self.notes),
                "matched": None if self.match is None else self.match.matched,
                "closest": None if self.match is None else self.match.closest,
                "findings": [f.key for f in self.findings],
                "results": [{**asdict(r), "shape": list(r.shape), "ok": r.ok} for r in self.results]}


class NormCheckFailed(AssertionError):
    """A check found cases that fail; ``report`` holds every case and the diagnosis."""

    def __init__(self, report: Report):
        self.report = report
        super().__init__(report.text(only_failures=True))
