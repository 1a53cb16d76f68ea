"""What the H100 device check found (results/device/h100), kept checkable on a CPU.

Two kinds of its failures can be made on a CPU, and are run here in a fresh pytest process each:

- tests that assumed the suite's two host devices (a GPU machine has one device of its own): the shadow engine's
  support tests and the preflight doctest on ONE host device;
- equivalence tests (two formulations of the same training or features) that compared default-precision products:
  on a GPU those round their operands to TF32, which ``--emulate-matmul-precision=tensorfloat32`` reproduces; the
  tests now compare at full precision.

Each run failed before the fixes of the session that added this file and passes after them.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pytest(args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--tb=short", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_engine_support_on_one_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    done = _pytest(["tests/shadow/test_engine_support.py", "recon_jax/shadow/engine.py"], env)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout.splitlines()[-1] and "skipped" not in done.stdout.splitlines()[-1]


def test_equivalence_tests_under_tf32_products():
    done = _pytest(["--emulate-matmul-precision=tensorfloat32",
                    "tests/training/test_gram.py::test_engine_first_layer_modes",
                    "recon_jax/training/gram.py::recon_jax.training.gram.train_gram",
                    "recon_jax/training/dp.py::recon_jax.training.dp.privatized_loss_and_gradient",
                    "tests/models/test_tygert.py::test_mnist_net_architecture_and_init",
                    "tests/shadow/test_engine.py::test_vmapped_engine_equals_naive_loop",
                    "tests/attacks/test_dimred.py::test_vmapped_shadows_equal_naive_loop"])
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.splitlines()[-1].lstrip("= ").startswith("7 passed"), done.stdout[-500:]


def test_suite_adds_an_xla_flag_only_where_the_installed_xla_has_it():
    """conftest.py adds ``--xla_cpu_use_fusion_emitters=false`` only where jaxlib's XLA knows the flag: XLA aborts
    the process on an unknown one, and an accelerator image's newer jaxlib may have dropped it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("recon_jax_root_conftest", os.path.join(ROOT, "conftest.py"))
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert conftest._xla_knows("xla_cpu_multi_thread_eigen")  # a flag every XLA of the lock's range has
    assert not conftest._xla_knows("xla_cpu_no_such_flag_" + "0123456789")
    flags = os.environ["XLA_FLAGS"].split()
    given = any(f.startswith("--xla_cpu_use_fusion_emitters") for f in flags)  # by conftest, or by the caller
    assert given == conftest._xla_knows("xla_cpu_use_fusion_emitters")
