"""Test-suite set-up shared by tests/ and the library doctests.

- Two fake CPU devices (sharding tests), single-threaded XLA per pytest worker (the suite runs with ``-n 2``).
- LLVM backend optimisation off (``--xla_backend_optimization_level=0``): the tests run small programs, so
  compilation dominates the suite's time, and this cuts it by about 30%. XLA's own (semantic) passes still run;
  the benchmarks and experiments use the default level. Set the flag in ``XLA_FLAGS`` to override.
- XLA:CPU's fusion emitters off (``--xla_cpu_use_fusion_emitters=false``, the older loop emitters): about half of
  XLA's compile time at that level (a file of the suite: 36 s to 19 s of compilation). Set it in ``XLA_FLAGS`` to
  test with them.
- ``x64`` fixture: float64 for the duration of one test (``jax.enable_x64``).
- ``key`` fixture: a seeded typed PRNG key.
- ``claim_problems`` fixture: tests/test_results.py's independent re-derivation of claim verdicts (what an
  experiment's smoke run writes must pass the check its committed results will).
- ``--runslow`` runs tests marked ``slow``; ``accelerator`` tests are skipped without a GPU/TPU.
- ``--emulate-matmul-precision=tensorfloat32|bfloat16`` runs everything with float32 products rounded as a GPU or a
  TPU rounds them at default precision (:mod:`recon_jax.testing`): a CPU check of what depends on the precision.
- The most expensive test files are collected first (``make test`` runs xdist with ``--dist loadfile
  --no-loadscope-reorder``), so the run does not end on one long file while the other worker idles.
"""

import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    _flags += " --xla_force_host_platform_device_count=2"
if "xla_cpu_multi_thread_eigen" not in _flags:
    _flags += " --xla_cpu_multi_thread_eigen=false"
if "xla_backend_optimization_level" not in _flags:
    _flags += " --xla_backend_optimization_level=0"


def _xla_knows(flag: str) -> bool:
    """Whether the installed jaxlib's XLA has ``flag`` (its name is in one of jaxlib's shared libraries): XLA aborts
    the process on an unknown flag in ``XLA_FLAGS``, and a later jaxlib (an accelerator image's) may drop one."""
    import importlib.util
    import mmap

    spec = importlib.util.find_spec("jaxlib")
    folder = os.path.dirname(spec.origin) if spec and spec.origin else None
    if folder is None:
        return False
    for name in sorted(os.listdir(folder)):
        if name.endswith(".so") and os.path.getsize(os.path.join(folder, name)) > 0:
            with open(os.path.join(folder, name), "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                if m.find(flag.encode()) >= 0:
                    return True
    return False


if "xla_cpu_use_fusion_emitters" not in _flags and _xla_knows("xla_cpu_use_fusion_emitters"):
    _flags += " --xla_cpu_use_fusion_emitters=false"
os.environ["XLA_FLAGS"] = _flags.strip()
os.environ.setdefault("RECON_JAX_SMOKE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TQDM_DISABLE", "1")

import jax  # noqa: E402
import pytest  # noqa: E402

try:
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("ci", derandomize=True, deadline=None, max_examples=50)
    _hyp_settings.load_profile("ci")
except ImportError:  # pragma: no cover
    pass


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")
    parser.addoption("--emulate-matmul-precision", choices=("tensorfloat32", "bfloat16"), default=None,
                     help="round the operands of float32 products below Precision.HIGHEST like a GPU (TF32) or a "
                          "TPU (bfloat16) at default precision, for the whole run (recon_jax.testing)")
    parser.addoption("--emulate-exact-matrix-vector", action="store_true", default=False,
                     help="with --emulate-matmul-precision: leave matrix-vector products exact, as XLA on a GPU does")
    parser.addoption("--emulated-products-log", default=None, metavar="PATH",
                     help="with --emulate-matmul-precision: write the library call sites of the rounded products")


@pytest.fixture(scope="session", autouse=True)
def _emulated_matmul_precision(request):
    """``--emulate-matmul-precision``: the whole run as on a backend that rounds float32 products (an audit on a
    CPU of what depends on the matmul precision; tests that emulate it themselves skip)."""
    fmt = request.config.getoption("--emulate-matmul-precision")
    if fmt is None:
        yield
        return
    from recon_jax.testing import emulate_matmul_precision

    record = []
    exact_mv = request.config.getoption("--emulate-exact-matrix-vector")
    with emulate_matmul_precision(fmt, exact_matrix_vector=exact_mv, record=record):
        yield
    path = request.config.getoption("--emulated-products-log")
    if path:
        with open(path, "w") as f:
            f.writelines(f"{name} {site}\n" for name, site in sorted({(r[0], r[2]) for r in record}))


@pytest.fixture
def own_precision_emulation():
    """For tests that enter ``recon_jax.testing.emulate_matmul_precision`` themselves: skipped when the whole run
    emulates it already (``--emulate-matmul-precision``; the contexts do not nest)."""
    from recon_jax.testing import active

    if active():
        pytest.skip("the run emulates reduced precision throughout (--emulate-matmul-precision)")


# Test files by cost on a 2-core CI machine, most expensive first (measured for the older files; the files added in
# the evidence work are placed by their cost under load, so the order is approximate).
_EXPENSIVE_FIRST = (
    "tests/test_benchmarks.py",  # every benchmark at a tiny size: several minutes in one file
    "tests/test_notebooks.py",  # ~120 s
    "tests/shadow/test_engine_matrix.py",  # ~90 s of CPU (every model x algorithm x conv_impl, issue 33)
    "tests/report/test_app.py",
    "tests/report/test_app_smoke_run.py",  # one smoke report, its rerun and a changed rerun
    "tests/experiments/test_biswas_gaussian_vs_vmf.py",
    "tests/attacks/test_dimred.py",
    "tests/models/test_conv.py",
    "tests/accounting/test_vmf_pld.py",
    "tests/training/test_ghost.py",
    "tests/training/test_train.py",
    "tests/experiments/test_balle.py",
    "tests/experiments/test_ziller_empirical.py",
    "tests/experiments/test_tygert_hcr.py",
    "tests/training/test_gram.py",
    "tests/attacks/test_gradient.py",
    "tests/attacks/test_prior_aware.py",
    "tests/shadow/test_multiprocess.py",
    "tests/shadow/test_engine.py",
    "tests/mechanisms/test_vmf.py",
    "tests/attacks/test_reconn.py",
    "tests/bounds/test_prior_free.py",
    "tests/attacks/test_mia.py",
    "tests/shadow/test_store_races.py",
    "tests/shadow/test_kill_resume.py",  # ~25 s
)


def _cost_rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return _EXPENSIVE_FIRST.index(path) if path in _EXPENSIVE_FIRST else len(_EXPENSIVE_FIRST)


@pytest.fixture(autouse=True)
def _restore_x64():
    """Keeps one test's global ``jax_enable_x64`` from leaking into the next test of the same worker (a leak makes
    float32 expectations depend on which files a worker happened to run before)."""
    before = jax.config.jax_enable_x64
    yield
    if jax.config.jax_enable_x64 != before:
        jax.config.update("jax_enable_x64", before)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_cost_rank)  # stable: the order within a file and among the other files is kept
    run_slow = config.getoption("--runslow")
    has_accel = any(d.platform in ("gpu", "tpu") for d in jax.devices())
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    skip_accel = pytest.mark.skip(reason="needs a GPU or TPU")
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        if "accelerator" in item.keywords and not has_accel:
            item.add_marker(skip_accel)


@pytest.fixture
def x64():
    """Runs the test with float64 enabled."""
    with jax.enable_x64(True):
        yield


@pytest.fixture
def key():
    """A seeded typed PRNG key."""
    return jax.random.key(0)


@pytest.fixture(scope="session")
def claim_problems():
    """``claim_problems`` of tests/test_results.py (verdicts and vacuity re-derived from each comparison's numbers),
    loaded from its file: the tests directory is not a package."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "test_results.py")
    spec = importlib.util.spec_from_file_location("recon_jax_tests_results", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.claim_problems
