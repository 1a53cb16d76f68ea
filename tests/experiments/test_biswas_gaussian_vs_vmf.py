"""experiments.biswas_gaussian_vs_vmf at a tiny size: outputs, claims, tight accounting, cache keyed by config."""

import json
import math
import os

import numpy as np
import pytest

from experiments import biswas_gaussian_vs_vmf, biswas_gaussian_vs_vmf_report
from experiments.configs.biswas_gaussian_vs_vmf import get_config


def _tiny(accountings):
    c = get_config("smoke")
    c.num_train, c.num_test, c.kappas, c.eps_targets, c.accountings = 64, 32, (75,), (2.0,), accountings
    c.batch_sizes, c.attack_batch_sizes, c.include_dlg, c.epochs = (2,), (2,), False, 1
    c.ig_steps, c.ig_restarts = 30, 1  # the smoke run's 30 IG steps already give ~1/15 of the mean image's MSE
    return c


def _check_outputs(tmp_path, res):
    for f in ("report.md", "metrics.json", "config.json", "fig_mnist.png"):
        assert (tmp_path / f).exists(), f
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["claims"] == res["claims"]
    assert sorted(metrics["figures"]) == sorted(p.name for p in tmp_path.glob("*.png"))  # what publish() copies
    # The cache lives in a directory named by the config's hash: a changed config gets a fresh one.
    caches = [d for d in os.listdir(tmp_path) if d.startswith("cache-")]
    assert len(caches) == 1 and os.path.exists(tmp_path / caches[0] / "cache.json")


def test_smoke_quality_and_tight_accounting(tmp_path):
    c = _tiny(("tight",))
    res = biswas_gaussian_vs_vmf.run(c, str(tmp_path))
    _check_outputs(tmp_path, res)
    claims = {cl["name"]: cl for cl in res["claims"]}
    # Real quality claim on real data: IG on the non-private gradient of two MNIST digits beats the mean image.
    quality = claims["mnist: Inverting Gradients on the non-private gradient beats the mean-image guess"]
    assert quality["holds"], quality["detail"]
    # Tight pairs: both mechanisms accounted per step on the run made (q = B / n, epochs * (n // B) steps).
    (r,) = res["pairs"]
    assert r["accounting"] == "tight" and r["q"] == 2 / 64 and r["steps"] == 32
    assert r["kappa"] > 0 and r["sigma"] > 0


@pytest.mark.slow  # both accountings: adds the paper's RDP routes and the tight re-accounting of its pairs
def test_smoke_both_accountings(tmp_path):
    res = biswas_gaussian_vs_vmf.run(_tiny(("tight", "paper")), str(tmp_path))
    _check_outputs(tmp_path, res)
    paper = [r for r in res["pairs"] if r["accounting"] == "paper"]
    assert paper and all(np.isfinite(r["eps_vmf_tight"]) and np.isfinite(r["eps_gauss_tight"]) for r in paper)
    names = [cl["name"] for cl in res["claims"]]
    assert any("paper's matched" in n for n in names) and any("tight per-step" in n for n in names)


def _naive_sign_p(wins, total):
    return sum(math.comb(total, j) for j in range(wins, total + 1)) / 2**total


@pytest.mark.parametrize("wins,total,verdict", [(8, 8, "holds"), (6, 6, "holds"), (5, 6, "undecided"),
                                                (7, 8, "holds"), (4, 8, "undecided"), (0, 8, "fails")])
def test_comparisons_across_settings_are_sign_tests(wins, total, verdict):
    """VMF-vs-Gaussian claims: a one-sided sign test over the (eps, B) settings at the config's level decides
    them; 5 of 6 is not enough (p = 7/64), 7 of 8 is (p = 9/256)."""
    c = biswas_gaussian_vs_vmf_report._sign_claim("x", wins, total, 0.05, "wins")
    assert c["verdict"] == verdict and c["holds"] == (verdict == "holds")
    assert f"p = {_naive_sign_p(wins, total):.3g}" in c["detail"]
    why = "the attack fails in every DP setting"
    failed_attack = biswas_gaussian_vs_vmf_report._sign_claim("x", wins, total, 0.05, "wins", why)
    assert failed_attack["verdict"] == "undecided" and why in failed_attack["detail"]


def test_signal_per_step_and_the_papers_cells():
    """The VMF's mean cosine is the Bessel ratio A_p(kappa), checked against mpmath; the report's paper column reads
    Tables V and VI at the pair's kappa (values typed from the paper), a Gaussian cell naming the paper's sigma."""
    import mpmath

    from experiments.configs.biswas_gaussian_vs_vmf import PAPER_TABLE_V, PAPER_TABLE_VI_MNIST_MSE

    p = 13_700
    rows = [{"kappa": 75.0, "sigma": 1.232, "batch_size": 16}, {"kappa": 500.0, "sigma": 0.1745, "batch_size": 64}]
    biswas_gaussian_vs_vmf._capacities(rows, p)
    for r in rows:
        ratio = mpmath.besseli(p / 2, r["kappa"]) / mpmath.besseli(p / 2 - 1, r["kappa"])
        assert r["cos_vmf"] == pytest.approx(float(ratio), rel=1e-9)
        assert r["cos_gauss"] == pytest.approx(r["batch_size"] / math.sqrt(r["batch_size"] ** 2 + p * r["sigma"] ** 2))
    cell = biswas_gaussian_vs_vmf_report._paper_cell
    acc = PAPER_TABLE_V["mnist"]
    assert cell(acc, {"accounting": "paper", "kappa": 75.0, "sigma": 1.232}, "vmf", 16) == "0.1815"
    assert cell(acc, {"accounting": "paper", "kappa": 75.0, "sigma": 1.232}, "gauss", 64) == "0.8458"
    assert cell(acc, {"accounting": "paper", "kappa": 150.0, "sigma": 0.4578}, "gauss", 64) == "0.8866 (sigma 0.461)"
    assert cell(PAPER_TABLE_VI_MNIST_MSE, {"accounting": "paper", "kappa": 300.0, "sigma": 0.264}, "vmf", 64) == "4.363"
    for row, b in (({"accounting": "paper", "kappa": 500.0, "sigma": 0.1745}, 16),  # not in Tables V / VI
                   ({"accounting": "tight", "kappa": 75.0, "sigma": 1.232}, 16), ({"kappa": 75.0}, 16),
                   ({"accounting": "paper", "kappa": 75.0, "sigma": 1.232}, 8)):
        assert cell(acc, row, "vmf", b) == "—"
