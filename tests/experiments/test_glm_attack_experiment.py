import json
import os

import numpy as np
import pytest

from experiments import glm_attack
from experiments.configs import glm_attack as glm_config


def test_smoke_config_runs_and_recovers_exactly(tmp_path, claim_problems):
    config = glm_config.get_config("smoke")
    with config.unlocked():
        config.num_targets = 2
        config.fixed_size = 60
    result = glm_attack.run(config, str(tmp_path))
    for name in ("report.md", "metrics.json", "config.json", "reconstructions.png"):
        assert os.path.exists(tmp_path / name), name
    assert sorted(result["figures"]) == sorted(p.name for p in tmp_path.glob("*.png"))  # what publish() copies
    rows = json.loads((tmp_path / "metrics.json").read_text())["rows"]
    assert rows == result["rows"]
    optimal = rows[0]
    # At optimality recovery is exact (to the solver tolerance): far below the NN oracle.
    assert optimal["mean_mse"] < 1e-6 < optimal["mean_oracle_mse"]
    assert optimal["success_rate"] == 1.0 and optimal["label_accuracy"] == 1.0
    claims = json.loads((tmp_path / "metrics.json").read_text())["claims"]
    assert len(claims) == 3 and all("verdict" in c for c in claims) and not claim_problems(claims), claims
    assert [c["verdict"] for c in claims[:2]] == ["holds", "holds"]


def _rows(per_target):
    return [{"mean_mse": float(np.mean(m)), "median_mse": float(np.median(m)), "max_mse": float(np.max(m)),
             "min_abs_target_residual": 0.1, "mean_oracle_mse": 0.05, "success_rate": 1.0, "label_accuracy": 1.0,
             "mse_per_target": list(map(float, m))} for m in per_target]


@pytest.mark.parametrize("shift,verdict", [(0.02, "holds"), (0.0, "undecided"), (-0.02, "fails")])
def test_degradation_claim_is_a_paired_test(shift, verdict, claim_problems):
    """Synthetic per-target MSEs: clearly larger at the looser tolerance -> holds; equal on average (differences
    that cancel exactly, not identical values) -> undecided; clearly smaller -> fails."""
    config = glm_config.get_config("smoke")
    rng = np.random.default_rng(0)
    tight = rng.uniform(0.04, 0.06, 40)
    noise = rng.normal(0.0, 0.01, 20)
    loose = tight + shift + np.concatenate([noise, -noise])
    claims = glm_attack._claims(config, _rows([tight, loose]))
    assert not claim_problems(claims)
    assert claims[2]["verdict"] == verdict, claims[2]
    # Exactness: a mean MSE above the threshold fails Thm 1's claim.
    assert claims[0]["verdict"] == "fails"
