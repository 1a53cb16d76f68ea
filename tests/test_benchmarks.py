"""Smoke runs of benchmark scripts at tiny sizes: they run end to end and print well-formed BENCH lines.

(The numbers at these sizes mean nothing; the real measurements are run by hand, see benchmarks/.)
"""

import math
import re

import pytest

_BENCH = re.compile(r"^BENCH name=(\S+) ours=(\S+) baseline=(\S+) unit=(\S+) ratio=(\S+)$", re.M)


def _parse(text):
    return {m.group(1): tuple(float(m.group(i)) for i in (2, 3, 5)) for m in _BENCH.finditer(text)}


def test_dp_shadow_benchmark_smoke(capsys):
    from benchmarks import dp_shadow

    rates = dp_shadow.main(["--ghost-models", "4", "--vmap-models", "2", "--fixed", "30", "--epochs", "2"])
    lines = _parse(capsys.readouterr().out)
    assert set(lines) == {"dpgd_ghost_vs_vmap", "dpgd_ghost_vs_nonprivate"}
    ours, base, ratio = lines["dpgd_ghost_vs_vmap"]
    assert ours > 0 and base > 0 and math.isclose(ratio, ours / base, rel_tol=1e-4)
    assert set(rates) == {"ghost", "vmap", "nonprivate"}


@pytest.mark.slow
def test_shadow_benchmark_smoke(capsys):
    from benchmarks import shadow

    shadow.main(["--targets", "4", "--epochs", "2", "--rounds", "1", "--loop-models", "2", "--notebook-chunk", "2",
                 "--fixed", "20"])
    lines = _parse(capsys.readouterr().out)
    assert {"shadow_vs_loop", "shadow_vs_notebook", "shadow_vs_notebook_separate_target",
            "shadow_fraction_of_peak", "shadow_cpu_devices", "shadow_gram_vs_direct", "shadow_direct_vs_loop",
            "shadow_direct_fraction_of_peak"} <= set(lines)
    assert all(v[0] > 0 and v[1] > 0 for v in lines.values())


@pytest.mark.slow  # compile-bound (~40 s on 2 cores)
def test_conv_shadow_benchmark_smoke(capsys):
    from benchmarks import conv_shadow

    rates = conv_shadow.main(["--models", "2", "--fixed", "4", "--epochs", "1", "--repeats", "1",
                              "--decoder-examples", "4", "--decoder-features", "8"])
    lines = _parse(capsys.readouterr().out)
    assert set(lines) == {"cnn_shadow_patches_vs_lax", "cnn_single_patches_vs_lax", "decoder_patches_vs_lax"}
    ours, base, ratio = lines["cnn_shadow_patches_vs_lax"]
    assert ours == pytest.approx(rates["engine_patches"], rel=1e-4) and base > 0
    assert math.isclose(ratio, ours / base, rel_tol=1e-4)


def test_vmf_pld_benchmark_smoke(capsys):
    from benchmarks import accounting

    res = accounting.main(["--skip_dpsgd", "--vmf_kappas", "100", "--vmf_discretization", "1e-3", "--repeats", "1"])
    lines = _parse(capsys.readouterr().out)
    assert set(lines) == {"vmf_pld_vs_rdp"}
    ours, base, ratio = lines["vmf_pld_vs_rdp"]
    assert ours > 0 and base > 0 and math.isclose(ratio, base / ours, rel_tol=1e-4)
    assert res["vmf"]["eps_pld"][0] < res["vmf"]["eps_rdp"][0]  # the PLD bound is the tighter one


def test_reconn_benchmark_smoke(capsys):
    from benchmarks import reconn

    rates = reconn.main(["--rows", "64", "--features", "32", "--hidden", "16", "--epochs", "1", "--batch", "16"])
    lines = _parse(capsys.readouterr().out)
    assert set(lines) == {"reconn_fraction_of_peak", "reconn_streamed_vs_device"}
    ours, base, ratio = lines["reconn_fraction_of_peak"]
    assert ours == pytest.approx(rates["streamed"], rel=1e-4) and base == pytest.approx(rates["peak"], rel=1e-4)
    assert math.isclose(ratio, ours / base, rel_tol=1e-4)
