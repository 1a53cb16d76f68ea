"""experiments.tygert_hcr: a CI-sized run with quality checks, and keyed caches that never serve another config."""

import json
import os

import numpy as np

from experiments import tygert_hcr
from experiments.configs.tygert_hcr import get_config


def _tiny():
    c = get_config("smoke")
    c.num_train, c.num_test, c.num_hcr_examples, c.hcr_chunk = 256, 128, 1, 1
    c.num_restarts, c.num_rounds, c.num_visualise = 1, 2, 1
    c.hcr_modes = ("reference",)
    return c


def test_smoke_run_bounds_and_accuracy_are_sane(tmp_path):
    c = get_config("smoke")
    m = tygert_hcr.run(c, str(tmp_path))
    for name in ("report.md", "metrics.json", "config.json", "rademacher.png",
                 "histograms_reference_size_0.005.png", "histograms_alg1_size_0.005.png"):
        assert os.path.exists(tmp_path / name), name
    stored = json.loads((tmp_path / "metrics.json").read_text())
    assert stored["accuracy_clean"] == m["accuracy_clean"] and len(stored["claims"]) == 2
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
