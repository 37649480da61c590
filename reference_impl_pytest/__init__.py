"""The pytest plugin of :mod:`reference_impl.check` (entry point ``pytest11``; or ``-p reference_impl_pytest``).

It lives outside the ``reference_impl`` package so that loading it, which pytest does on every run once the
package is installed, imports neither torch nor the package: they are imported when an option or marker
below is used.

- ``pytest --norm-impl pkg.mod:fn --norm-model qwen3`` adds one test per case of the check (named by
  dtype, gain dtype, shape and scale) and one ``diagnosis`` test that names the convention ``fn`` equals;
  ``--norm-convention``, ``--norm-eps``, ``--norm-dtypes``, ``--norm-no-grads``, ``--norm-residual`` as the
  command's options.
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
    g.addoption("--norm-eps", type=float, default=None, help="eps instead of the model's")
    g.addoption("--norm-dtypes", default="bf16,fp16,fp32", help="x dtypes, comma-separated")
    g.addoption("--norm-no-grads", action="store_true", default=False, help="skip the gradient checks")
    g.addoption("--norm-residual", action="store_true", default=False,
                help="the function is a fused add + norm: fn(x, residual, weight, eps) -> (y, new_residual)")


def pytest_configure(config):
    config.addinivalue_line("markers", "norm_model(model=None, **options): run a test taking the norm_case "
                                       "fixture once per case of reference_impl.check's check for that model")


def _options(config) -> dict:
    dtypes = [d.strip() for d in config.getoption("norm_dtypes").split(",") if d.strip()]
    return {"convention": config.getoption("norm_convention"), "eps": config.getoption("norm_eps"),
            "dtypes": dtypes, "residual": config.getoption("norm_residual")}


def pytest_generate_tests(metafunc):
    if "norm_case" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker("norm_model")
    if mark is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} takes norm_case: mark it "
                                f"@pytest.mark.norm_model('<model type>')")
    from reference_impl.check import norm_cases

    model = mark.args[0] if mark.args else mark.kwargs.pop("model", None)
    cases = norm_cases(model, **{k: v for k, v in mark.kwargs.items() if k != "model"})
    metafunc.parametrize("norm_case", cases, ids=[c.id for c in cases])


@pytest.fixture
def norm_check():
    """:func:`reference_impl.check.check_norm`."""
    from reference_impl.check.kit import check_norm

    return check_norm


class NormCaseItem(pytest.Item):
    """One case of a check as a test: fails with its table row."""

    def __init__(self, *, fn, case, grads, **kw):
        super().__init__(**kw)
        self.fn, self.case, self.grads = fn, case, grads

    def runtest(self):
        from reference_impl.check import check_case

        check_case(self.fn, self.case, grads=self.grads)

    def repr_failure(self, excinfo, style=None):
        from reference_impl.check.report import NormCheckFailed

        if isinstance(excinfo.value, NormCheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"norm check {self.name}"


class NormDiagnosisItem(pytest.Item):
    """Passes when the function equals the model's convention on every input; else names what it equals."""

    def __init__(self, *, fn, model, options, **kw):
        super().__init__(**kw)
        self.fn, self.model, self.options = fn, model, options

    def runtest(self):
        from reference_impl.check.kit import _prefer, diagnose
        from reference_impl.check.models import resolve

        opts = dict(self.options)
        target = resolve(self.model, opts.pop("convention"), opts.pop("eps"))
        m = diagnose(self.fn, self.model, convention=target.entry, eps=target.eps, **opts)
        want = _prefer(target, opts.get("residual", False))[0]
        if want not in m.all_matched:
            raise AssertionError(f"{self.name}: the function {m.description}; {target.name} uses {want}")

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

    def collect(self):
        from reference_impl.check import norm_cases
        from reference_impl.check.cli import load_callable

        config = self.config
        model = config.getoption("norm_model")
        opts = _options(config)
        if model is None and opts["convention"] is None:
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
        cases = norm_cases(model, **opts)
        grads = not config.getoption("norm_no_grads")
        for c in cases:
            yield NormCaseItem.from_parent(self, name=c.id, fn=fn, case=c, grads=grads)
        yield NormDiagnosisItem.from_parent(self, name="diagnosis", fn=fn, model=model, options=opts)


def pytest_collection_modifyitems(session, config, items):
    impls = config.getoption("norm_impl", default=[])
    for impl in impls:
        coll = NormCheckCollector.from_parent(session, name=f"norm-check[{impl}]", impl=impl,
                                              path=config.rootpath)
        items.extend(coll.collect())
