"""The pytest plugin of :mod:`reference_impl.check` (entry point ``pytest11``; or ``-p reference_impl_pytest``).

It lives outside the ``reference_impl`` package so that loading it, which pytest does on every run once the
package is installed, imports neither torch nor the package: they are imported when an option or marker
below is used.

- ``pytest --norm-impl pkg.mod:fn --norm-model qwen3`` adds one test per case of the check (named by
  dtype, gain dtype, shape and scale) and one ``diagnosis`` test that names the convention ``fn`` equals;
  ``--norm-convention``, ``--norm-class``, ``--norm-eps``, ``--norm-dtypes``, ``--norm-weight-dtypes``, ``--norm-device``,
  ``--norm-no-grads``, ``--norm-no-bits``, ``--norm-batch-invariant``, ``--norm-residual`` as the command's
  options. A bad option or an unknown model is pytest's usage error (exit 4); a failing case prints its
  table row, and the ``diagnosis`` test names what differs.
- In a test file: ``@pytest.mark.norm_model("qwen3")`` on a test that takes the ``norm_case`` fixture runs
  it once per case; ``check_case(fn, norm_case)`` checks one.
- The ``norm_check`` fixture is :func:`reference_impl.check.check_norm`.

Without these options and markers the plugin does nothing, and it imports torch only when it is used.
"""
from __future__ import annotations

import sys

import pytest


def pytest_addoption(parser):
    g = parser.getgroup("norm-check", "check a norm implementation against a model (reference_impl.check)")
    g.addoption("--norm-impl", action="append", default=[], metavar="MOD:FN",
                help="a norm function or module to check, as module:function (repeatable)")
    g.addoption("--norm-model", default=None, help="the model type or family its convention comes from (qwen3)")
    g.addoption("--norm-convention", default=None, help="a catalog entry or casting order (rms_norm.gemma)")
    g.addoption("--norm-class", default=None,
                help="one norm of the model, by class (Qwen3NextRMSNormGated) or role (q, k, value, latent, "
                     "inner_output, final)")
    g.addoption("--norm-eps", default=None, help="eps instead of the model's (a finite number >= 0)")
    g.addoption("--norm-dtypes", default="bf16,fp16,fp32", help="x dtypes, comma-separated")
    g.addoption("--norm-weight-dtypes", default=None,
                help="gain dtypes, comma-separated, or x (the gain in x's dtype); default: x's half dtype and fp32")
    g.addoption("--norm-device", default="cpu", help="cpu or cuda (cuda:N)")
    g.addoption("--norm-widths", default=None,
                help="row widths of the probes, comma-separated (default: the kit's small and wide probes)")
    g.addoption("--norm-no-grads", action="store_true", default=False, help="skip the gradient checks")
    g.addoption("--norm-no-bits", action="store_true", default=False,
                help="require only the float64 bound, not bit-identity with the model's module")
    g.addoption("--norm-batch-invariant", action="store_true", default=False,
                help="also require the same bits for a row whatever its batch (size, position, padding) and for "
                     "repeated calls")
    g.addoption("--norm-residual", action="store_true", default=False,
                help="the function is a fused add + norm: fn(x, residual, weight, eps) -> (y, new_residual)")


def pytest_configure(config):
    config.addinivalue_line("markers", "norm_model(model=None, **options): run a test taking the norm_case "
                                       "fixture once per case of reference_impl.check's check for that model")


def _options(config) -> dict:
    """The options of norm_cases, checked before any work: a bad value is pytest's usage error (exit 4)."""
    import math

    dtypes = [d.strip() for d in config.getoption("norm_dtypes").split(",") if d.strip()]
    wd = config.getoption("norm_weight_dtypes")
    eps = config.getoption("norm_eps")
    if eps is not None:
        try:
            eps = float(eps)
        except ValueError:
            eps = math.nan
        if not (math.isfinite(eps) and eps >= 0):
            raise pytest.UsageError(f"--norm-eps must be a finite number >= 0, got {config.getoption('norm_eps')!r}")
    opts = {}
    widths = config.getoption("norm_widths")
    if widths is not None:
        try:
            opts["widths"] = tuple(int(w) for w in widths.split(",") if w.strip())
        except ValueError:
            opts["widths"] = ()
        if not opts["widths"] or min(opts["widths"]) < 1:
            raise pytest.UsageError(f"--norm-widths takes positive integers, comma-separated; got {widths!r}")
    return {**opts, "convention": config.getoption("norm_convention"), "eps": eps, "dtypes": dtypes,
            "weight_dtypes": None if wd is None else [w.strip() for w in wd.split(",") if w.strip()],
            "device": config.getoption("norm_device"), "residual": config.getoption("norm_residual"),
            "norm": config.getoption("norm_class")}


def _cases(model, where: str, **opts):
    """norm_cases, with a bad model or option turned into pytest's usage error (exit 4), not an INTERNALERROR."""
    from reference_impl.check import norm_cases

    try:
        return norm_cases(model, **opts)
    except (ValueError, TypeError, ImportError) as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


def pytest_generate_tests(metafunc):
    if "norm_case" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker("norm_model")
    if mark is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} takes norm_case: mark it "
                                f"@pytest.mark.norm_model('<model type>')")
    model = mark.args[0] if mark.args else mark.kwargs.get("model")
    cases = _cases(model, metafunc.definition.nodeid, **{k: v for k, v in mark.kwargs.items() if k != "model"})
    metafunc.parametrize("norm_case", cases, ids=[c.id for c in cases])


@pytest.fixture
def norm_check():
    """:func:`reference_impl.check.check_norm`."""
    from reference_impl.check.kit import check_norm

    return check_norm


class NormCaseItem(pytest.Item):
    """One case of a check as a test: fails with its table row."""

    def __init__(self, *, fn, case, checks, **kw):
        super().__init__(**kw)
        self.fn, self.case, self.checks = fn, case, checks

    def runtest(self):
        from reference_impl.check import check_case
        from reference_impl.check.report import NormCheckFailed

        try:
            res = check_case(self.fn, self.case, **self.checks)
        except NormCheckFailed as exc:
            self.parent.results.append((self.case, exc.report.results[0]))
            raise
        self.parent.results.append((self.case, res))

    def repr_failure(self, excinfo, style=None):
        from reference_impl.check.report import NormCheckFailed

        if isinstance(excinfo.value, NormCheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"norm check {self.name}"


class NormDiagnosisItem(pytest.Item):
    """Passes when every case of the check passed; else names what differs, from the kit's experiments on
    the cases that ran before it (all of them, run here, when none did)."""

    def __init__(self, *, fn, model, options, checks, **kw):
        super().__init__(**kw)
        self.fn, self.model, self.options, self.checks = fn, model, options, checks

    def runtest(self):
        from reference_impl.check.diagnosis import explain
        from reference_impl.check.kit import _fn_name, run_case, truth
        from reference_impl.check.report import Report

        pairs = list(self.parent.results) or [(c, run_case(self.fn, c.target, c, residual=c.residual, **self.checks))
                                               for c in self.parent.cases]
        cases = [c for c, _ in pairs]
        target, residual = cases[0].target, cases[0].residual
        report = Report(_fn_name(self.fn), target, truth(target, cases[0].probe, residual)[2], [r for _, r in pairs])
        if report.ok:
            return
        args = ", ".join(f"{k}={v!r}" for k, v in (("model", self.model), ("norm", self.options["norm"]),
                                                   ("convention", self.options["convention"]),
                                                   ("eps", self.options["eps"])) if v is not None)
        found = explain(self.fn, report, target, cases, residual, fn_name=report.function, args=args)
        text = "; also ".join(f.text() if i == 0 else f.sentence for i, f in enumerate(found))
        raise AssertionError(f"{len(report.failures)} of {len(pairs)} cases fail; diagnosis: "
                             f"{text or 'no single change of the model order explains it'}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, AssertionError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, self.name


class NormCheckCollector(pytest.Collector):
    def __init__(self, *, impl, **kw):
        super().__init__(**kw)
        self.impl = impl
        self.results: list = []  # (case, CaseResult) of the case items that ran, for the diagnosis item
        self.cases: list = []

    def collect(self):
        from reference_impl.check.cli import load_callable

        config = self.config
        model = config.getoption("norm_model")
        opts = _options(config)
        if model is None and opts["convention"] is None and opts["norm"] is None:
            raise pytest.UsageError("--norm-impl needs --norm-model (a transformers model type such as qwen3) "
                                    "or --norm-convention")
        try:
            fn = load_callable(self.impl)
        except ValueError:
            if str(config.rootpath) not in sys.path:  # the project under test, as `python -m` would see it
                sys.path.insert(0, str(config.rootpath))
            try:
                fn = load_callable(self.impl)
            except ValueError as exc:
                raise pytest.UsageError(f"--norm-impl {self.impl}: {exc}") from exc
        self.cases = _cases(model, f"--norm-impl {self.impl}", **opts)
        checks = {"grads": not config.getoption("norm_no_grads"), "bits": not config.getoption("norm_no_bits"),
                  "batch_invariant": config.getoption("norm_batch_invariant")}
        for c in self.cases:
            yield NormCaseItem.from_parent(self, name=c.id, fn=fn, case=c, checks=checks)
        yield NormDiagnosisItem.from_parent(self, name="diagnosis", fn=fn, model=model, options=opts, checks=checks)


def pytest_collection_modifyitems(session, config, items):
    impls = config.getoption("norm_impl", default=[])
    for impl in impls:
        coll = NormCheckCollector.from_parent(session, name=f"norm-check[{impl}]", impl=impl,
                                              path=config.rootpath)
        items.extend(coll.collect())
