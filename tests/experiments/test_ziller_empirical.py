"""experiments.ziller_empirical: the one-sided test, and a CI-sized run that checks real claims on MNIST."""

import json

import numpy as np
import pytest
import scipy.stats

from experiments import ziller_empirical
from experiments.configs.ziller_empirical import get_config


@pytest.mark.parametrize("side", ["lower", "upper"])
def test_one_sided_test_matches_scipy_ttest(side):
    values = np.random.default_rng(0).normal(1.0, 2.0, size=200)
    bound = 1.3 if side == "lower" else 0.7  # the mean is on the violating side of both bounds
    got = ziller_empirical.one_sided_test(values, bound, side, alpha=0.05, power=0.9)
    ref = scipy.stats.ttest_1samp(values, bound, alternative="less" if side == "lower" else "greater")
    assert got["p"] == pytest.approx(ref.pvalue, rel=1e-10)
    assert got["rejected"] == (ref.pvalue < 0.05)
    # Minimal detectable violation: (t_{1-alpha} + z_power) SE, SE from the sample standard deviation.
    se = values.std(ddof=1) / np.sqrt(values.size)
    assert got["min_detectable"] == pytest.approx((scipy.stats.t.ppf(0.95, 199) + scipy.stats.norm.ppf(0.9)) * se)


def test_one_sided_test_has_the_stated_power():
    # A violation of the minimal detectable size (the formula checked above, with the true SE) is rejected in
    # about `power` of repeated samples (normal data; the exact power is a non-central t probability).
    rng = np.random.default_rng(1)
    n, sd, alpha, power = 100, 1.0, 0.01, 0.9
    mde = (scipy.stats.t.ppf(1 - alpha, n - 1) + scipy.stats.norm.ppf(power)) * sd / np.sqrt(n)
    exact = 1 - scipy.stats.nct.cdf(scipy.stats.t.ppf(1 - alpha, n - 1), n - 1, mde * np.sqrt(n) / sd)
    rejected = [ziller_empirical.one_sided_test(rng.normal(-mde, sd, n), 0.0, "lower", alpha, power)["rejected"]
                for _ in range(2000)]
    # 2000 Bernoulli trials: SE 0.007, tolerance 4 SE; the normal approximation is within 0.02 of the exact power.
    assert abs(np.mean(rejected) - exact) < 0.028
    assert abs(exact - power) < 0.02


def test_smoke_run_checks_bounds_and_beats_mean_image(tmp_path):
    # CI-sized: the smoke grid cut to 4 settings on 6 MNIST images (48 draws each), Fig. 2 at 400 draws.
    c = get_config("smoke")
    c.sigmas, c.clip_norms, c.steps = (1e-3, 0.1), (1.0, 20.0), (1,)
    c.fig3_resolutions, c.fig3_clip_norms, c.fig3_repeats = (16,), (100.0,), 1
    c.fig2.draws, c.fig2.reference_draws = 400, 2000
    res = ziller_empirical.run(c, str(tmp_path))
    for f in ("report.md", "metrics.json", "config.json", "fig1_metrics.png", "fig2_cdfs.png", "fig3_resolutions.png"):
        assert (tmp_path / f).exists(), f
    claims = {cl["name"]: cl for cl in json.loads((tmp_path / "metrics.json").read_text())["claims"]}
    assert len(claims) == 4 and all(cl["holds"] for cl in claims.values()), claims
    # Attack vs the mean-image guess (mean of the whole MNIST test split, computed here from the data).
    from recon_jax.data import load_dataset

    images, _ = load_dataset("mnist", "test")
    images = np.asarray(images, np.float64)
    targets = images[res["image_indices"]]
    baseline = float(np.mean((targets - images.mean(axis=0)) ** 2))
    row = next(r for r in res["grid"] if r["clip_norm"] == 20.0 and r["sigma"] == 1e-3)
    assert row["unclipped"] and row["mse"]["mean"] < 0.1 * baseline, (row["mse"]["mean"], baseline)
