"""balle_mnist and balle_cifar10: smoke configs end to end (one CI-sized quality test on real MNIST)."""

import json
import os
import sys

import jax
import numpy as np
import pytest

from recon_jax import data


def test_balle_mnist_smoke_beats_mean_image_on_held_out_targets(tmp_path, claim_problems):
    from experiments import balle_mnist
    from experiments.configs.balle_mnist import get_config

    config = get_config("smoke")
    metrics = balle_mnist.run(config, str(tmp_path))
    default = metrics["rows"][0]
    assert default["setting"] == "default" and default["num_targets"] == config.num_targets
    # The mean-image guess, computed here from the same split: the reconstructor must do better on targets it
    # never saw (held-out released models), i.e. it reads the target out of the released parameters.
    images, labels = data.load_dataset("mnist", "train+test")
    sp = data.pool_splits(images, labels, fixed_size=config.fixed_size, num_shadow=config.num_shadow,
                          num_targets=config.num_targets, key_or_seed=config.seed)
    mean_guess = float(np.mean((sp.shadow_images.mean(0) - sp.target_images) ** 2))
    assert default["mean_mse"] < 0.85 * mean_guess, (default["mean_mse"], mean_guess)
    # The oracle searches the whole pool: every MNIST record but the targets, recomputed by brute force.
    assert metrics["oracle"]["pool_size"] == 70000 - config.num_targets
    t = sp.target_images[:3].reshape(3, -1)
    p = sp.pool_images.reshape(len(sp.pool_images), -1)
    nn = np.array([np.min(np.mean((p - row) ** 2, axis=1, dtype=np.float64)) for row in t])
    from recon_jax.attacks import informed
    # float32 matmul-form distances vs direct differences: agree to 1e-5 (the MSEs are ~1e-2).
    np.testing.assert_allclose(np.asarray(informed.oracle_for(sp, 3).nn_mse), nn, atol=1e-5)
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["rows"] == metrics["rows"] and any(c["name"].startswith("more shadow") for c in written["claims"])
    assert all("verdict" in c for c in written["claims"]) and not claim_problems(written["claims"])
    report = (tmp_path / "report.md").read_text()
    assert "## Claims" in report and "Every row uses the default shadow set." in report  # default, fewer_shadow


def test_secondary_shadow_sets_are_named_only_when_a_row_uses_one():
    from experiments import balle_mnist_report
    from experiments.configs.balle_mnist import get_config

    c = get_config("table2")
    rows = [{"setting": "default", "shadow_set": "default"}, {"setting": "logits", "shadow_set": "default"}]
    assert balle_mnist_report._secondary_sets_sentence(c, rows) == "Every row uses the default shadow set."
    rows += [{"setting": "width100", "shadow_set": "wide"}, {"setting": "relu", "shadow_set": "relu"}]
    text = balle_mnist_report._secondary_sets_sentence(c, rows)
    assert text.startswith("Rows outside the default shadow set (relu, wide) use 5000 shadow models (wide: 2000) "
                           "and 1000 targets"), text
    assert "minibatch_known" not in text  # its override is named only when a row trains on that set


def _result(mse, oracle=None, num_shadow=100):
    from types import SimpleNamespace

    mse = np.asarray(mse, float)
    oracle = np.full_like(mse, 0.024) if oracle is None else np.asarray(oracle, float)
    return SimpleNamespace(mse=mse, oracle_mse=oracle, mean_mse=float(mse.mean()),
                           mean_oracle_mse=float(oracle.mean()), success=mse < oracle, num_shadow=num_shadow)


def _wiggle(n=40, sd=0.003, seed=0):
    """Noise whose halves cancel exactly: "equal on average" without identical values."""
    half = np.random.default_rng(seed).normal(0.0, sd, n // 2)
    return np.concatenate([half, -half])


@pytest.mark.parametrize("step,verdict", [(0.004, "holds"), (0.0, "undecided"), (-0.004, "fails")])
def test_ordering_claim_is_decided_by_its_paired_tests(step, verdict, claim_problems):
    """default < logits < layer subset on synthetic per-target MSEs: each row clearly above the previous -> holds;
    equal on average -> undecided; reversed -> fails; unequal shadow-model counts -> undecided whatever the MSEs."""
    from experiments import balle_mnist_report

    base = np.random.default_rng(1).uniform(0.01, 0.03, 40)
    res = [_result(base), _result(base + step + _wiggle(seed=2)), _result(base + 2 * step + _wiggle(seed=3))]
    c = balle_mnist_report._ordering_claim(res, 0.05)
    assert c["verdict"] == verdict and not claim_problems([c]), c
    res[2].num_shadow = 50
    assert balle_mnist_report._ordering_claim(res, 0.05)["verdict"] == "undecided"


@pytest.mark.parametrize("gap,verdict", [(-0.01, "holds"), (0.0, "undecided"), (0.01, "fails")])
def test_rows_against_the_oracle_and_the_dp_bounds(gap, verdict, claim_problems):
    """A ✓ row is a paired test of MSE below its targets' oracle MSEs (clearly below holds, equal undecided, clearly
    above fails); a DP row is claimed against its ReRo bound only where the bound is below 0.999 (a bound of 1 is
    context: no success rate can exceed it)."""
    from experiments import balle_mnist_report
    from experiments.configs.balle_mnist import get_config

    config = get_config("smoke")
    oracle = np.random.default_rng(4).uniform(0.015, 0.035, 40)
    results = {"default": _result(oracle + gap + _wiggle(), oracle)}
    dp = []
    # eps = 100: a bound of 0.95 is below 0.999 but at least 0.9278, the lower end of the 90% interval of 40 of 40
    # targets below eta: no run of 40 targets can refute it, so it is context like the bound of 1.
    for eps, bound in ((10.0, 0.6), (100.0, 0.95), (1000.0, 1.0)):
        name = f"dp_eps={eps:g}"
        results[name] = _result(np.full(40, 0.07), oracle)
        dp.append({"setting": name, "num_targets": 40, "eta": 0.024, "success_at_eta": 0.0, "rero_bound_gdp": bound,
                   "rero_bound_rdp": bound})
    summary = {"mean_nn_mse": 0.024, "pool_size": 1000, "num_targets": 40}
    claims = balle_mnist_report.claims(config, results, [], summary, oracle, [], dp)
    assert not claim_problems(claims)
    assert [c["name"].split(":")[0] for c in claims] == ["default attack beats the NN oracle (Table II ✓)",
                                                         "dp_eps=10"]
    assert claims[0]["verdict"] == verdict and claims[1]["verdict"] == "holds"
    assert balle_mnist_report.vacuous_dp_rows(dp, 0.05) == ["dp_eps=100", "dp_eps=1000"]
    assert balle_mnist_report.vacuous_dp_rows([dict(dp[1], num_targets=60)], 0.05) == []  # 60 targets: lower end 0.9513


@pytest.mark.slow  # every Table II row at smoke sizes (~4 min on 2 cores)
def test_balle_mnist_every_row(tmp_path, claim_problems):
    from experiments import balle_mnist
    from experiments.configs.balle_mnist import get_config

    config = get_config("table2")
    smoke = get_config("smoke")
    for k in ("fixed_size", "num_shadow", "num_targets", "eval_size", "probe_size", "chunk_size", "reconstructor",
              "wide_hidden", "long_epochs", "minibatch_size", "fewer_shadow_counts", "secondary_num_shadow",
              "secondary_num_targets", "set_num_shadow", "grid_columns"):
        config[k] = smoke[k]
    config.train.epochs = smoke.train.epochs
    config.dp_eps = (10.0,)
    config.mia_num_models, config.mia_num_candidates, config.mia_fixed_sizes = 8, 1, (50,)
    config.kl_classifier_epochs, config.kl_classifier_size = 1, 500
    metrics = balle_mnist.run(config, str(tmp_path))
    names = [r["setting"] for r in metrics["rows"]]
    assert names == ["default", "logits", "width100", "layer_subset", "fewer_shadow_150", "epochs250", "relu",
                     "random_init", "minibatch_known", "minibatch_unknown", "dp_eps=10"]
    rows = {r["setting"]: r for r in metrics["rows"]}
    assert rows["layer_subset"]["feature_dim"] == 20 * 10 + 10  # second layer of the width-20 smoke model
    assert rows["logits"]["feature_dim"] == config.probe_size * 10
    assert rows["default"]["paper_mse"] is None  # fixed set 50: no paper row of that setting
    assert rows["relu"]["paper_mse"] == 0.0182 and rows["random_init"]["paper_success"] is False
    assert 0 <= rows["dp_eps=10"]["rero_bound_gdp"] <= 1
    assert metrics["claims"] and not claim_problems(metrics["claims"])
    assert metrics["mia"]["n=50/known_init"]["mean_auc"] == 1.0
    for name in ("reconstructions.png", "mse_histogram.png", "dp_curve.png", "mia_losses.png"):
        assert os.path.getsize(tmp_path / name) > 0
    # A rerun in the same workdir reuses the keyed shadow sets and reconstructor checkpoints: same numbers.
    again = balle_mnist.run(config, str(tmp_path))
    assert [r["mean_mse"] for r in again["rows"]] == [r["mean_mse"] for r in metrics["rows"]]


@pytest.mark.slow  # CNN shadow models and the Table VII decoder + PatchGAN: compile-heavy
def test_balle_cifar10_smoke(tmp_path):
    from experiments import balle_cifar10
    from experiments.configs.balle_cifar10 import get_config

    metrics = balle_cifar10.run(get_config("smoke"), str(tmp_path))
    row = metrics["rows"][0]
    assert row["setting"] == "logits" and row["num_shadow_models"] == 40 and row["num_validation_models"] == 8
    assert metrics["oracle"]["pool_size"] == 80 and len(metrics["claims"]) == 1
    (c,) = metrics["claims"]  # decided by the paired test over the targets, like balle_mnist's rows
    assert c["verdict"] in ("holds", "fails", "undecided") and c["comparisons"][0]["what"].startswith("logits: MSE")
    report = (tmp_path / "report.md").read_text()
    assert "](reconstructions.png)" in report and "](mse_histogram.png)" in report and "**Smoke sizes.**" in report


def test_paper_and_table2_variants_reach_the_papers_layout():
    from experiments.configs.balle_mnist import get_config

    images, labels = data.load_dataset("mnist", "train+test")
    # paper: Table V / Fig. 3a, 59K shadow models; table2: its stated reduction to 20K for the default set.
    for variant, num_shadow in (("paper", 59000), ("table2", 20000)):
        c = get_config(variant)
        sp = data.pool_splits(images, labels, fixed_size=c.fixed_size, num_shadow=c.num_shadow,
                              num_targets=c.num_targets, eval_size=c.eval_size, key_or_seed=c.seed)
        # 1K evaluation targets and a 69K pool (Fig. 3a); Table II's 1K fixed set.
        assert (len(sp.fixed_idx), len(sp.shadow_idx), len(sp.target_idx), len(sp.pool_idx)) == (
            1000, num_shadow, 1000, 69000)
        assert c.reconstructor.epochs == 100 and c.reconstructor.hidden == (1000, 1000)
        assert c.reconstructor.patience is not None
    c = get_config("table2")
    # Every secondary set says its size: the per-set overrides name sets that exist and stay below the default's.
    assert set(c.set_num_shadow) <= {"wide", "minibatch_known", "minibatch_unknown", "epochs250", "relu",
                                     "random_init"}
    assert all(0 < v <= c.num_shadow for v in c.set_num_shadow.values())
    with pytest.raises(ValueError, match="variant"):
        get_config("full")


def test_config_sections_are_the_library_structures():
    """``model``, ``train`` and ``reconstructor`` hold exactly the arguments of what they configure (issue 37): every
    variant builds them with ``**``, and ``reconstructor.patience`` takes None and an int in either order."""
    from experiments.configs import balle_cifar10, balle_mnist

    from recon_jax import models, training
    from recon_jax.attacks import informed

    for cfg, variants, model in ((balle_mnist, balle_mnist.VARIANTS, models.balle_mnist_mlp),
                                 (balle_cifar10, ("smoke", "default", "paper"), models.balle_cifar_cnn)):
        for variant in variants:
            c = cfg.get_config(variant)
            assert dict(c.reconstructor) == {k: getattr(informed.ReconstructorSpec(**c.reconstructor), k)
                                             for k in c.reconstructor}
            assert training.full_batch_gd(**c.train).epochs == c.train.epochs
            assert model(**c.model) is not None
    c = balle_mnist.get_config("smoke")
    assert c.reconstructor.patience is None
    c.reconstructor.patience = 10
    c.reconstructor.patience = None


def test_patience_override_takes_none_and_an_int_on_the_command_line(monkeypatch):
    """``--config.reconstructor.patience`` accepts ``None`` and an int on a variant whose default is either (an
    int-typed ml_collections field refuses ``None`` on the command line); a bad value reaches the library's check.
    The command line is parsed in-process, as ``absl.app.run`` parses it (ml_collections reads the overrides from
    ``sys.argv`` when the config file loads), into a fresh set of flags each time."""
    from absl import flags
    from ml_collections import config_flags

    from recon_jax.attacks import informed

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.chdir(root)
    for variant, default in (("smoke", None), ("paper", 10)):
        for given, want in (("None", None), ("7", 7), (None, default)):
            argv = ["balle_mnist", f"--config=experiments/configs/balle_mnist.py:{variant}"]
            argv += [] if given is None else [f"--config.reconstructor.patience={given}"]
            monkeypatch.setattr(sys, "argv", argv)
            fv = flags.FlagValues()
            cfg = config_flags.DEFINE_config_file("config", flag_values=fv)
            fv(argv)
            assert repr(cfg.value.reconstructor.patience) == repr(want), (variant, given)
    with pytest.raises(ValueError, match="patience"):  # refused when the spec is built, before any model trains
        informed.ReconstructorSpec(hidden=(4,), epochs=1, patience="ten")


class _Stop(Exception):
    """Raised in place of keyed_dir: the test needs the store's key, not the models."""


def _capture_store_keys(monkeypatch, module) -> list:
    keys = []

    def capture(workdir, name, key):
        keys.append(key)
        raise _Stop

    monkeypatch.setattr(module, "keyed_dir", capture)
    return keys


def test_balle_mnist_store_key_names_every_model_field(tmp_path, monkeypatch):
    """The model sets' key holds the whole model section: a model argument the section did not have before
    (num_classes) changes the key instead of reaching the store under the old one; the shipped sections keep the
    key they had (hidden and activation at its top level), so existing stores keep their names."""
    from experiments import balle_mnist
    from experiments.configs.balle_mnist import get_config

    images, labels = data.load_dataset("synthetic", "train", num_examples=40, shape=(28, 28, 1), seed=0)
    sp = data.pool_splits(images, labels, fixed_size=8, num_shadow=24, num_targets=4)
    keys = _capture_store_keys(monkeypatch, balle_mnist)
    for extra in ({}, {"num_classes": 12}):
        config = get_config("smoke")
        config.model.update(extra)
        with pytest.raises(_Stop):
            balle_mnist._Sets(config, sp, jax.random.key(0), str(tmp_path)).get("default")
    shipped, changed = keys
    assert set(shipped) == {"set", "seed", "dataset", "fixed_size", "pool_num_shadow", "pool_num_targets",
                            "eval_size", "num_shadow", "num_targets", "probe_size", "hidden", "activation",
                            "algorithm"}
    assert changed == {**shipped, "num_classes": 12}


@pytest.mark.parametrize("extra", [{"dense_width": 16}, {"num_classes": 12}])
def test_balle_cifar10_store_key_names_every_model_field(tmp_path, monkeypatch, extra):
    """As for MNIST: a model argument beyond the shipped activation (the paper's wider dense layer) changes the
    shadow store's key."""
    from experiments import balle_cifar10
    from experiments.configs.balle_cifar10 import get_config

    keys = _capture_store_keys(monkeypatch, balle_cifar10)
    for more in ({}, extra):
        config = get_config("smoke")
        config.model.update(more)
        with pytest.raises(_Stop):
            balle_cifar10.run(config, str(tmp_path / "w"))
    shipped, changed = keys
    assert shipped["activation"] == "elu" and changed == {**shipped, **extra}


def test_balle_cifar10_store_key_names_the_data(tmp_path, monkeypatch):
    """The shadow store's key holds the data's digest: the same config over other images (another data_dir) keys
    another store, where before it reached the first one's store and was refused there."""
    from experiments import balle_cifar10
    from experiments.configs.balle_cifar10 import get_config

    keys = _capture_store_keys(monkeypatch, balle_cifar10)
    config = get_config("smoke")
    n = config.fixed_size + config.num_shadow + config.num_targets + config.eval_size
    for seed in (0, 1):  # two image sets of the same shape and size
        monkeypatch.setattr(balle_cifar10, "_load", lambda c, s=seed: data.load_dataset(
            "synthetic", "train", num_examples=n, shape=(32, 32, 3), seed=s))
        with pytest.raises(_Stop):
            balle_cifar10.run(config, str(tmp_path / "w"))
    first, second = keys
    assert first["data"] != second["data"]
    assert {k: v for k, v in first.items() if k != "data"} == {k: v for k, v in second.items() if k != "data"}
