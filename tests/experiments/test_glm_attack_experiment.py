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


def test_label_sentence_sets_early_stopped_label_accuracy_beside_a_coin():
    import math

    from experiments.glm_attack import _label_sentence

    def two_sided(k, n):  # naive: twice the smaller tail of Binomial(n, 1/2), capped at 1
        tail = sum(math.comb(n, i) for i in range(0, min(k, n - k) + 1)) / 2**n
        return min(1.0, 2 * tail)

    rows = [{"setting": "released model grad-norm tol 1e-10", "label_accuracy": 1.0, "num_targets": 16},
            {"setting": "released model grad-norm tol 0.1", "label_accuracy": 5 / 16, "num_targets": 16},
            {"setting": "released model grad-norm tol 1", "label_accuracy": 1 / 40, "num_targets": 40}]
    text = _label_sentence(rows)
    assert "1e-10" not in text  # every label recovered: nothing to say
    assert f"5/16 at tol 0.1 (two-sided binomial p = {two_sided(5, 16):.2g}" in text
    assert "not told apart from guessing at 16 targets" in text
    assert f"1/40 at tol 1 (two-sided binomial p = {two_sided(1, 40):.2g}" in text and "worse than guessing" in text
    assert _label_sentence(rows[:1]) == ""
