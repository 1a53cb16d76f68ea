"""Every benchmark script runs end to end through ``python -m benchmarks.run NAME`` at a tiny size.

The runner is called as the command line calls it (``sys.argv`` set to ``run.py NAME --no-peak -- ARGS``), so a
script that parsed ``sys.argv`` instead of the arguments it is handed fails here. The numbers at these sizes mean
nothing; the real measurements are run by hand (see ``benchmarks/``).
"""

import math
import re
import sys

import pytest

from benchmarks import run

_BENCH = re.compile(r"^BENCH name=(\S+) ours=(\S+) baseline=(\S+) unit=(\S+) ratio=(\S+)$", re.M)

# Tiny sizes per benchmark, and the BENCH lines each must print. A new script must be added here.
TINY = {
    "accounting": (["--num_sigmas", "3", "--steps", "10", "--repeats", "1", "--vmf_kappas", "100",
                    "--vmf_discretization", "1e-3", "--calibrate_eps", "2", "--calibrate_steps", "10",
                    "--calibrate_grid", "1e-2", "--calibrate_rtol", "1e-2"],
                   {"accounting_vs_dp_accounting", "accounting_vs_dp_accounting_full_grid", "tradeoff_vs_riskcal",
                    "vmf_pld_vs_rdp", "calibrate_pld_vs_bisection"}),
    "bounds": (["--n", "1000"], {"bounds_rero_mse_vs_scipy", "bounds_rdp_curve_vs_numpy"}),
    "conv_shadow": (["--models", "2", "--fixed", "4", "--epochs", "1", "--repeats", "1", "--decoder-examples", "4",
                     "--decoder-features", "8"],
                    {"cnn_shadow_patches_vs_lax", "cnn_single_patches_vs_lax", "decoder_patches_vs_lax"}),
    "dp_shadow": (["--ghost-models", "4", "--vmap-models", "2", "--fixed", "30", "--epochs", "2", "--batch", "8",
                   "--minibatch-models", "2", "--repeats", "1"],
                  {"dpgd_ghost_vs_vmap", "dpgd_ghost_vs_nonprivate", "dpsgd_minibatch_vs_fullbatch_shadow",
                   "dpsgd_minibatch_poisson_vs_fullbatch_shadow"}),
    "hcr": (["--examples", "1", "--restarts", "1", "--rounds", "1", "--train-examples", "64", "--modes", "paper_tol"],
            {"hcr_vs_scipy_lsqr_paper_tol"}),
    "inverting_gradients": (["--restarts", "2", "--steps", "2"], {"ig_restarts_vmap_vs_sequential"}),
    "pld_memory": (["--vmf_cases", "20,3,1:200", "--gaussian_cases", "1,0.01:100"],
                   {"pld_fft_bytes_per_point_vmf", "pld_fft_bytes_per_point_gaussian"}),
    "prior_aware": (["--trials", "2", "--k", "3", "--fixed", "8", "--steps", "2", "--repeats", "1"],
                    {"prior_aware_ghost_vs_per_example"}),
    "reconn": (["--rows", "64", "--features", "32", "--hidden", "16", "--epochs", "1", "--batch", "16"],
               {"reconn_fraction_of_peak", "reconn_streamed_vs_device"}),
    "shadow": (["--targets", "4", "--epochs", "2", "--rounds", "1", "--loop-models", "2", "--notebook-chunk", "2",
                "--fixed", "20", "--configs", "2x1"],
               {"shadow_vs_loop", "shadow_vs_notebook", "shadow_vs_notebook_separate_target", "shadow_fraction_of_peak",
                "shadow_gram_vs_direct", "shadow_direct_vs_loop", "shadow_direct_fraction_of_peak"}),
}


def _parse(text):
    return {m.group(1): tuple(float(m.group(i)) for i in (2, 3, 5)) for m in _BENCH.finditer(text)}


def test_every_benchmark_has_a_tiny_size():
    assert set(TINY) == set(run.available())


@pytest.mark.parametrize("name", sorted(TINY))
def test_benchmark_runs_through_the_runner(name, capsys, monkeypatch):
    args, expected = TINY[name]
    monkeypatch.setattr(sys, "argv", ["benchmarks/run.py", name, "--no-peak", "--", *args])
    assert run.main() == 0
    lines = _parse(capsys.readouterr().out)
    assert set(lines) == expected
    for ours, base, ratio in lines.values():
        assert all(math.isfinite(v) for v in (ours, base, ratio))
        assert ours > 0 and base > 0 and ratio > 0
