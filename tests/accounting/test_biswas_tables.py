"""Runs experiments.biswas_tables in-process with the smoke config and checks the reproduced cells."""

import json
import os

import numpy as np
import pytest

from experiments import biswas_tables
from experiments.configs import biswas_tables as cfg


def test_smoke_run_reproduces_tables(tmp_path):
    config = cfg.get_config("smoke")
    out = biswas_tables.run(config, str(tmp_path))
    for name in ("report.md", "metrics.json", "config.json", "eps_vs_kappa.png"):
        assert os.path.exists(tmp_path / name), name
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert sorted(metrics["figures"]) == sorted(p.name for p in tmp_path.glob("*.png"))  # what publish() copies
    assert metrics["table_i_approach2_max_abs_diff_pct"] <= 2.0  # Table I, kappa in {100, 125, 200}
    assert all(-3.5 <= d <= 0.0 for d in metrics["table_i_approach1_diff_pct"])  # exact optimiser: up to ~3% below
    assert metrics["gaussian_max_abs_diff_pct"] <= 2.0  # Table IV sigma -> eps row
    rows = {r["kappa"]: r for r in out["table_iv"]}
    # Every Table IV kappa cell except 150 and 300 is within 2% with the sound bound; those two match the paper
    # only with its interpolation of tau itself (see experiments/biswas_tables.md).
    for k, r in rows.items():
        if k in (150, 300):
            assert abs(r["paper interp."] / r["paper eps"] - 1) < 0.005 and r["diff %"] > 2.0
        else:
            assert abs(r["diff %"]) <= 2.0, (k, r)
    assert np.isfinite(metrics["runtime_seconds"])
    claims = {c["name"]: c["holds"] for c in metrics["claims"]}
    assert claims["Table I, approach 2 at kappa 100, 125, 200 reproduced within 2%"]
    assert claims["Table IV, Gaussian sigma -> eps row reproduced within 2% (composed over steps)"]
    assert not claims["Table IV, every VMF kappa -> eps cell reproduced within 2% by a sound bound"]  # 150, 300


@pytest.mark.slow  # the step-composed RDP routes and two PLD evaluations over 1,407 steps
def test_pld_columns(tmp_path):
    config = cfg.get_config("smoke")
    config.step_composition, config.pld, config.pld_discretization = True, True, 1e-3
    config.table_iv_eps, config.table_iv_kappa, config.table_iv_sigma = (2.48, 41.02), (100, 300), (0.660, 0.282)
    out = biswas_tables.run(config, str(tmp_path))
    for r in out["table_iv"]:
        # The tight bound over the same steps is far below the paper's two approaches over steps.
        assert r["VMF eps over steps (PLD)"] < r["VMF eps over steps"] and r["approaches 1/2 / PLD"] > 1.0
        assert np.isfinite(r["Gauss eps(sigma) (PLD)"])
    names = [c["name"] for c in out["claims"]]
    assert any("valid DP-SGD guarantee" in n for n in names)
