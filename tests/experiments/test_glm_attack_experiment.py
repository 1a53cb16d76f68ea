import json
import os

from experiments import glm_attack
from experiments.configs import glm_attack as glm_config


def test_smoke_config_runs_and_recovers_exactly(tmp_path):
    config = glm_config.get_config("smoke")
    with config.unlocked():
        config.num_targets = 2
        config.fixed_size = 60
    result = glm_attack.run(config, str(tmp_path))
    for name in ("report.md", "metrics.json", "config.json", "reconstructions.png"):
        assert os.path.exists(tmp_path / name), name
    rows = json.loads((tmp_path / "metrics.json").read_text())["rows"]
    assert rows == result["rows"]
    optimal = rows[0]
    # At optimality recovery is exact (to the solver tolerance): far below the NN oracle.
    assert optimal["mean_mse"] < 1e-6 < optimal["mean_oracle_mse"]
    assert optimal["success_rate"] == 1.0 and optimal["label_accuracy"] == 1.0
