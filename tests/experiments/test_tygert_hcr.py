"""experiments.tygert_hcr: a CI-sized run with quality checks, and keyed caches that never serve another config."""

import json
import os

import numpy as np
import pytest

from experiments import tygert_hcr
from experiments.configs.tygert_hcr import get_config


def _tiny():
    c = get_config("smoke")
    c.num_train, c.num_test, c.num_hcr_examples, c.hcr_chunk = 256, 128, 1, 1
    c.num_restarts, c.num_rounds, c.num_visualise = 1, 2, 1
    c.hcr_modes = ("reference",)
    return c


def test_smoke_run_bounds_and_accuracy_are_sane(tmp_path, claim_problems):
    c = get_config("smoke")
    m = tygert_hcr.run(c, str(tmp_path))
    for name in ("report.md", "metrics.json", "config.json", "rademacher.png",
                 "histograms_reference_size_0.005.png", "histograms_alg1_size_0.005.png"):
        assert os.path.exists(tmp_path / name), name
    stored = json.loads((tmp_path / "metrics.json").read_text())
    assert sorted(stored["figures"]) == sorted(p.name for p in tmp_path.glob("*.png"))  # what publish() copies
    assert stored["accuracy_clean"] == m["accuracy_clean"] and len(stored["claims"]) == 2
    assert not claim_problems(stored["claims"]) and all("verdict" in cl for cl in stored["claims"])
    # The trained net learns (10 classes: chance 0.1; 256 test examples, SE <= 0.03), and dithering does not help.
    assert m["accuracy_clean"] > 0.3
    assert m["accuracy_dithered"] <= m["accuracy_clean"] + 0.05
    # Rank of a 784 -> width -> width ReLU feature map is at most the width; so Cramer-Rao is infinite for most modes.
    assert m["jacobian_rank"]["max"] <= c.width and m["cramer_rao"]["share_modes_finite"] < 1.0
    for mode in c.hcr_modes:
        r = m["hcr"][mode]["size_0.005"]
        assert r["num_examples"] == c.num_hcr_examples
        assert r["min_bound"] > 0 and np.isfinite(r["all_p90"])
        assert sum(r["lsqr_istop_counts"].values()) == r["lsqr_solves"]
    ref = m["hcr"]["reference"]["size_0.005"]
    # The search moves the features by the requested perturbation size (||delta|| / sigma = 1/200) within 25%.
    assert abs(ref["mean_feature_shift_over_sigma"] / 0.005 - 1) < 0.25
    # With SciPy's iteration limit the reference mode's LSQR converges (no istop 7) on this small net.
    assert ref["lsqr_share_iteration_limit"] == 0.0


def test_cache_is_keyed_by_config(tmp_path):
    a = _tiny()
    m_a = tygert_hcr.run(a, str(tmp_path))
    chunk_dir = tmp_path / m_a["hcr"]["reference"]["size_0.005"]["cache_dir"]
    stamps = {f: os.path.getmtime(chunk_dir / f) for f in os.listdir(chunk_dir)}
    # Another config in the same workdir: other training (learning rate) and other search (rounds).
    b = _tiny()
    b.learning_rate, b.num_rounds = 3e-3, 3
    m_b = tygert_hcr.run(b, str(tmp_path))
    assert m_b["params_dir"] != m_a["params_dir"]
    assert m_b["hcr"]["reference"]["size_0.005"]["cache_dir"] != m_a["hcr"]["reference"]["size_0.005"]["cache_dir"]
    assert m_b["hcr"]["reference"]["size_0.005"]["median_all"] != m_a["hcr"]["reference"]["size_0.005"]["median_all"]
    # Only the search changed: the trained parameters are reused, the bounds are not.
    c = _tiny()
    c.num_rounds = 3
    m_c = tygert_hcr.run(c, str(tmp_path))
    assert m_c["params_dir"] == m_a["params_dir"]
    assert m_c["hcr"]["reference"]["size_0.005"]["cache_dir"] not in (
        m_a["hcr"]["reference"]["size_0.005"]["cache_dir"], m_b["hcr"]["reference"]["size_0.005"]["cache_dir"])
    # The first config again: everything comes from its own cache, untouched, with identical numbers.
    m_a2 = tygert_hcr.run(a, str(tmp_path))
    assert {f: os.path.getmtime(chunk_dir / f) for f in os.listdir(chunk_dir)} == stamps
    assert m_a2["hcr"] == m_a["hcr"] and m_a2["accuracy_clean"] == m_a["accuracy_clean"]


@pytest.mark.parametrize("ours,n,verdict", [(0.975, 10000, "holds"), (0.964, 10000, "undecided"),
                                           (0.964, 100, "undecided"), (0.95, 10000, "fails"), (0.979, 2000, "holds")])
def test_accuracy_claims_read_the_clopper_pearson_interval(ours, n, verdict, claim_problems):
    """Within 1.5 points of the paper's 97.9%: holds when the whole interval lies in [96.4%, 99.4%], fails when it
    lies outside, undecided when it straddles an end (at the end itself, or a small test set)."""
    from recon_jax.attacks.audit import clopper_pearson

    c = tygert_hcr._accuracy_claim("x", ours, 0.979, n, get_config("default"), "")
    assert c["verdict"] == verdict and not claim_problems([c])
    low, high = clopper_pearson(round(ours * n), n, 0.9)
    assert c["comparisons"][0]["interval"] == pytest.approx([float(low), float(high)])
