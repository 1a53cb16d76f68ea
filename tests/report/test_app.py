import os
import time

import numpy as np
import pytest

from recon_jax.attacks import informed
from recon_jax.report import app, reading, text
from recon_jax.report.config import get_config
from recon_jax.shadow import ShadowSet


def _smoke():
    config = get_config("smoke")
    return config


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("noise_multipliers", (0.0,), "config.noise_multipliers"),
        ("noise_multipliers", (-1.0, 2.0), "config.noise_multipliers"),
        # sizes exceed the 60,000 MNIST training images
        ("num_shadow", 70000, r"^config\.fixed_size \+ num_shadow \+ num_targets: must be at most the 60000 training"),
        ("eval_size", 20000, r"^config\.eval_size: must be at most the 10000 test records"),
        ("delta", 1.5, "config.delta"),
        ("kappas", (0.0,), "config.kappas"),
        ("learning_rate", 0.0, "config.learning_rate"),
        ("batch_size", 10_000, "config.batch_size"),
        ("dataset", "imagenet", "config.dataset"),
        ("seed", -1, "config.seed"),
        ("noise_multipliers", (True,), "config.noise_multipliers"),
        ("noise_multipliers", (2.0, 2.0), "config.noise_multipliers"),
        ("prior_sizes", (1, 10), "config.prior_sizes"),
        # more candidates than test records
        ("prior_sizes", (20000,), r"^config\.eval_size \+ the largest of prior_sizes \+ one canary: must be at most"),
        ("confidence", 1.0, "config.confidence"),
        ("calibration_rero", 0.001, "config.calibration_rero"),  # below the prior: unreachable
        ("audit_runs", 2, "config.audit_runs"),
        ("calibration_models", 9, "config.calibration_models"),  # more than num_targets
        ("crafted_candidates", "cube", "config.crafted_candidates"),
        ("crafted_trials", 20, "config.crafted_trials"),  # fewer than prior_aware_trials
        ("bound_tolerance", 1.5, "config.bound_tolerance"),
        ("crafted_reach", 0.0, "config.crafted_reach"),
        ("one_run_canaries", 2, "config.one_run_canaries"),
        ("channels", 3, r"^config\.channels: must be 1 .* when dataset is 'mnist'"),  # only 'folder' reads it
    ],
)
def test_malformed_configs_fail_before_training(tmp_path, monkeypatch, field, value, match):
    def no_training(*args, **kwargs):
        raise AssertionError("training started before validation")

    monkeypatch.setattr(informed, "generate_shadow_models", no_training)
    monkeypatch.setattr(app.shadow, "generate_shadow_models", no_training)
    config = _smoke()
    with config.unlocked():
        config[field] = value
    workdir = tmp_path / "run"
    with pytest.raises(ValueError, match=match):
        app.run(config, str(workdir))
    assert not workdir.exists()  # nothing is written before the config is valid


def test_nan_stops_the_run(tmp_path, monkeypatch):
    from recon_jax.evidence.run import NonFiniteResult

    def nan_models(*args, outputs=("params",), **kwargs):
        n = len(args[3][0])
        return ShadowSet({k: np.full((n, 7960), np.nan, np.float32) for k in outputs}, None, n)

    monkeypatch.setattr(informed, "generate_shadow_models", nan_models)
    with pytest.raises(NonFiniteResult, match="shadow model parameters"):
        app.run(_smoke(), str(tmp_path))
    assert not (tmp_path / "metrics.json").exists()


def test_unknown_config_key_is_named(tmp_path):
    config = _smoke()
    with config.unlocked():
        config.noise_multiplier = 1.0  # typo of noise_multipliers
    with pytest.raises(ValueError, match="noise_multiplier"):
        app.run(config, str(tmp_path))
    locked = _smoke()
    with pytest.raises(AttributeError):  # command-line overrides of unknown keys are refused by the locked config
        locked.sigma = 1.0


def _dp_accounting_eps(sigma, q, steps, delta):
    """Independent reference: Google's dp_accounting RDP accountant."""
    import dp_accounting
    from dp_accounting import rdp

    from recon_jax import accounting

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    acc = rdp.RdpAccountant(orders=[float(a) for a in accounting.DEFAULT_ORDERS if a == int(a)])
    return acc.compose(event).get_epsilon(delta)


def test_shuffle_field_is_validated(tmp_path):
    config = _smoke()
    with config.unlocked():
        config.batch_size = 10
        config.shuffle = "sometimes"
    with pytest.raises(ValueError, match="config.shuffle"):
        app.run(config, str(tmp_path))


@pytest.mark.parametrize("shuffle,q,steps", [("fresh", 17 / 51, 5 * 3), ("known", 1.0, 5)])
def test_sampling_rate_and_steps(shuffle, q, steps):
    config = _smoke()  # fixed_size 50 -> 51 records per model, 5 epochs
    with config.unlocked():
        config.batch_size = 17
        config.shuffle = shuffle
    got_q, got_steps = app.sampling(config)
    assert got_q == pytest.approx(q) and got_steps == steps
    with config.unlocked():
        config.batch_size = None
    assert app.sampling(config) == (1.0, 5)


@pytest.mark.slow  # ~25 s; sampling() and the DP-SGD accounting have fast tests above
def test_minibatch_dp_sgd_report(tmp_path):
    """DP-SGD with secret minibatch order (q < 1): trained, attacked and accounted with subsampling."""
    config = _smoke()
    with config.unlocked():
        config.batch_size = 17
        config.include_non_private = False
        config.num_targets = 4
    result = app.run(config, str(tmp_path))
    (row,) = result["rows"]
    assert result["sample_rate"] == pytest.approx(17 / 51) and result["steps"] == 15
    ref = _dp_accounting_eps(2.0, 17 / 51, 15, config.delta)
    assert row["eps_rdp"] <= ref * (1 + 1e-6)  # our order grid includes dp_accounting's integer orders
    assert row["eps_rdp"] >= 0.9 * ref
    assert 0.0 <= row["test_accuracy"] <= 1.0 and row["num_targets"] == 4
    report = (tmp_path / "report.md").read_text()
    assert "Poisson" in report and "minibatch SGD (batch 17)" in report
    # The batch-order item stays in the "What was run" list, right after its last item, before the glossary.
    rates = report.index("- Rates carry")
    assert rates < report.index("- Batch order: secret") < report.index("Terms. *ReRo bound*")
    assert "\n\n" not in report[rates:report.index("- Batch order")]


def test_models_no_better_than_chance_are_named():
    """The report warns where the released models reach at most the majority-class rate of the test images (a
    two-class run whose model never learned once reported 30% accuracy without a word), with the training advice
    only where a setting without noise failed."""
    assert reading.chance_accuracy([2, 0, 2, 1, 2]) == pytest.approx(0.6)
    assert reading.chance_accuracy(np.eye(3)[[0, 1, 1, 1]]) == pytest.approx(0.75)  # one-hot rows
    with pytest.raises(ValueError, match="labels"):
        reading.chance_accuracy([])
    np_row = {"setting": "non-private", "noise_multiplier": 0.0, "test_accuracy": 0.3}
    dp_row = {"setting": "DP sigma=16", "noise_multiplier": 16.0, "test_accuracy": 0.5}
    good = {"setting": "DP sigma=1", "noise_multiplier": 1.0, "test_accuracy": 0.9}
    both = reading.not_learned_note([np_row, dp_row, good], 0.5, 5)
    assert "non-private (30.0%), DP sigma=16 (50.0%)" in both and "DP sigma=1 " not in both
    assert "--config.learning_rate" in both and "5 test images" in both
    dp_only = reading.not_learned_note([dp_row, good], 0.5, 400)
    assert "DP sigma=16" in dp_only and "--config.learning_rate" not in dp_only and "eval_size" not in dp_only
    assert reading.not_learned_note([good], 0.5, 400) == ""
    assert reading.not_learned_note([np_row], None, None) == ""  # a run that did not measure it (older metrics)


def test_interpretation_points_at_secret_batch_order():
    config = _smoke()
    with config.unlocked():
        config.batch_size = 17
    row = {"noise_multiplier": 0, "success_rate": 0.0, "mean_mse": 0.09, "mean_oracle_mse": 0.04}
    assert "--config.shuffle=known" in reading.interpretation([row], 0.1, config)
    with config.unlocked():
        config.shuffle = "known"
    assert "--config.shuffle=known" not in reading.interpretation([row], 0.1, config)


def _image_folder(root, n_train=70, n_test=30, size=16):
    """Two classes of 16x16 grayscale PNGs (bright left vs bright right half, plus noise) in train/ and test/."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("test", n_test)):
        for i in range(n):
            c = i % 2
            img = rng.uniform(0, 0.3, (size, size))
            img[:, : size // 2] += 0.6 * (c == 0)
            img[:, size // 2:] += 0.6 * (c == 1)
            d = root / split / f"class{c}"
            d.mkdir(parents=True, exist_ok=True)
            Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8)).save(d / f"{i:03d}.png")
    return str(root)


def _folder_config(path):
    config = _smoke()
    with config.unlocked():
        config.dataset = "folder"
        config.data_path = path
        config.image_size = 16
        config.channels = 1
        config.model = "balle_cifar_cnn"
        config.fixed_size, config.num_shadow, config.num_targets, config.eval_size = 20, 40, 4, 10
        config.epochs = 3
        config.prior_sizes = (2, 10)
        config.prior_aware_trials, config.audit_runs, config.chunk_size = 16, 8, 16
        config.crafted_trials, config.one_run_canaries = 16, 50
        config.calibration_models = 2
    return config


@pytest.mark.slow  # ~70 s; the whole report on an image folder with a conv model runs in the README's own-model test
def test_cnn_on_image_folder_smoke(tmp_path):
    """A CNN released model (balle_cifar_cnn) on an image folder: the whole report at smoke size."""
    config = _folder_config(_image_folder(tmp_path / "images"))
    metrics = app.run(config, str(tmp_path / "run"))
    assert [r["setting"] for r in metrics["rows"]] == ["non-private", "DP sigma=2"]
    assert sorted(r["prior_size"] for r in metrics["prior_aware"]) == [2, 2, 10, 10]  # records and crafted
    report = (tmp_path / "run" / "report.md").read_text()
    assert "`balle_cifar_cnn`" in report and "MLP 2x1000" in report
    # Two clearly separable classes: the non-private CNN learns them.
    assert metrics["rows"][0]["test_accuracy"] > 0.9


def _config_that_must_not_train(monkeypatch, tmp_path):
    """A folder config whose run fails the test if any shadow or released model starts training."""

    def no_training(*args, **kwargs):
        raise AssertionError("training started before validation")

    monkeypatch.setattr(informed, "generate_shadow_models", no_training)
    monkeypatch.setattr(app.shadow, "generate_shadow_models", no_training)
    return _folder_config(_image_folder(tmp_path / "images", n_train=70, n_test=30))


@pytest.mark.parametrize("overrides,match", [
    (dict(model="no_such_module:model"), "config.model"),
    (dict(model="numpy:zeros"), "config.model"),  # not a flax module
    (dict(image_size=4), "config.model"),  # the CNN's VALID convolutions do not fit 4x4 inputs
    (dict(reconstructor="conv", image_size=18), "config.reconstructor"),  # side not divisible by 4
    (dict(data_path="/nonexistent"), "config.data_path"),
])
@pytest.mark.parametrize("conv_impl", ["default", "lax"])
def test_unsupported_model_and_data_fail_before_training(tmp_path, monkeypatch, overrides, match, conv_impl):
    """Bad models and data stop before any training. ``conv_impl="lax"`` runs the CNN with XLA's convolution, as on a
    GPU: there a kernel larger than a 4x4 input gives an empty output (no error from the convolution itself), and
    the next layer's initialisation divides by zero (on an H200 a bare ZeroDivisionError escaped the check)."""
    if conv_impl == "lax":
        from recon_jax.models import conv

        monkeypatch.setattr(conv, "resolve_conv_impl", lambda impl: "lax")

    config = _config_that_must_not_train(monkeypatch, tmp_path)
    with config.unlocked():
        for k, v in overrides.items():
            config[k] = v
    with pytest.raises(ValueError, match=match):
        app.run(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_model_with_dropout_stops_before_training_and_says_how_to_switch_it_off(tmp_path, monkeypatch):
    """An ordinary user model with dropout: the report trains deterministic models, so it names the fix."""
    (tmp_path / "drop.py").write_text(
        "import flax.linen as nn\n\n\n"
        "class DropNet(nn.Module):\n"
        "    num_classes: int\n\n"
        "    @nn.compact\n"
        "    def __call__(self, x, train: bool = True):\n"
        "        h = nn.Dropout(0.5, deterministic=not train)(nn.relu(nn.Dense(8)(x.reshape((x.shape[0], -1)))))\n"
        "        return nn.Dense(self.num_classes)(h)\n")

    config = _config_that_must_not_train(monkeypatch, tmp_path)
    with config.unlocked():
        config.model = f"{tmp_path}/drop.py:DropNet"
    with pytest.raises(ValueError, match=r"config\.model.*random stream.*dropout.*deterministic=True"):
        app.run(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_folder_fields_refused_for_builtin_datasets(tmp_path):
    config = _smoke()
    with config.unlocked():
        config.image_size = 32
    with pytest.raises(ValueError, match="config.image_size"):
        app.run(config, str(tmp_path))


_HOST_MODEL = '''
import flax.linen as nn
import jax
import numpy as np


class HostPreprocessed(nn.Module):
    """Runs and passes the shape check, but calls the host (pure_callback, no vmap_method): not vmappable."""

    num_classes: int

    @nn.compact
    def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        x = jax.pure_callback(lambda a: np.asarray(a), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return nn.Dense(self.num_classes)(x)


def model(num_classes):
    return HostPreprocessed(num_classes)
'''


def test_model_the_engine_cannot_train_fails_in_seconds(tmp_path, monkeypatch):
    """check_model runs one tiny engine job per training algorithm before anything is written: a model the shape
    check passes but the engine cannot train (not vmappable) stops with a ValueError naming the model, the
    algorithm and what to change, chained to the original error (issue 33, item 2)."""
    def no_training(*args, **kwargs):
        raise AssertionError("training started before the model was checked")

    monkeypatch.setattr(informed, "generate_shadow_models", no_training)
    monkeypatch.setattr(app.shadow, "generate_shadow_models", no_training)
    (tmp_path / "host_model_issue33.py").write_text(_HOST_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = _folder_config(_image_folder(tmp_path / "images"))
    with config.unlocked():
        config.model = "host_model_issue33:model"
        config.include_non_private = False  # the DP setting is the first (and only) algorithm checked
        config.epochs = 10**6  # what would run for hours if training started
    start = time.perf_counter()
    with pytest.raises(ValueError) as info:
        app.run(config, str(tmp_path / "run"))
    assert time.perf_counter() - start < 60
    msg = str(info.value)
    assert msg.startswith("config.model: 'host_model_issue33:model': model 'HostPreprocessed(")
    assert "cannot be trained with DP-GD (clip_norm=1.0" in msg and "What to change:" in msg
    assert isinstance(info.value.__cause__, ValueError)  # the engine's UnsupportedConfiguration ...
    assert isinstance(info.value.__cause__.__cause__, NotImplementedError)  # ... chained to JAX's error
    assert not (tmp_path / "run").exists()


def test_empty_intermediate_is_found_where_a_model_runs_on_nothing():
    """A convolution whose kernel is larger than its input (XLA's form: an empty output, no error) followed by a
    layer without fan-in (a global mean) would train on nothing; check_model's tracer finds the empty output."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from recon_jax import models
    from recon_jax.report.setup import _empty_intermediate

    class Pooled(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(3, (5, 5), padding="VALID")(x)
            return jnp.mean(x, axis=(1, 2)) + self.param("b", nn.initializers.zeros, (3,))

    fns = models.from_flax(Pooled())
    small, large = np.zeros((2, 4, 4, 1), np.float32), np.zeros((2, 8, 8, 1), np.float32)
    params = jax.eval_shape(fns.init, jax.random.key(0), large[:1])
    found = _empty_intermediate(fns.apply, params, small)
    assert found is not None and found.startswith("conv_general_dilated") and "(2, 0, 0, 3)" in found
    assert _empty_intermediate(fns.apply, params, large) is None


@pytest.mark.parametrize("outputs,noted", [(10, True), (2, False)])
def test_more_logits_than_classes_are_noted(capsys, outputs, noted):
    """A model made for 10 classes on 2-class data trains (the extra logits never carry a label) but was accepted
    without a word."""
    import flax.linen as nn

    from recon_jax import models
    from recon_jax.report.setup import check_model

    class Flat(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(outputs)(x.reshape((x.shape[0], -1)))

    fns = models.from_flax(Flat())
    config = _smoke()
    with config.unlocked():
        config.model = "my_model.py:Flat"
    check_model(config, fns, np.zeros((2, 4, 4, 1), np.float32), num_classes=2)
    out = capsys.readouterr().out
    assert ("emits 10 logits and the data have 2 classes: the last 8 never carry a label" in out) == noted


def _update_row(setting, sigma, k, kind, wins, trials, bound):
    from recon_jax.attacks.audit import clopper_pearson

    lo, hi = (float(v) for v in clopper_pearson(wins, trials, 0.95))
    return {"setting": setting, "noise_multiplier": sigma, "prior_size": k, "candidates": kind, "trials": trials,
            "prior_aware_success": wins / trials, "prior_aware_ci": [lo, hi], "prior_aware_bound": bound,
            "success_over_bound": wins / trials / bound, "success_over_bound_ci": [lo / bound, hi / bound],
            "p_value_above_bound": 0.5, "exact_optimum_over_bound": 0.94}


def test_claims_drop_vacuous_cells_and_decide_from_intervals(claim_problems):
    """Issue 38 item 3 and issue 35 item 3 on synthetic numbers: cells whose bound is ~1 are context, not claims;
    an interval straddling a threshold is undecided; the report's audit claims read their own fields."""
    config = _smoke()
    upd = [_update_row("DP sigma=1", 1.0, 10, "simplex", 100, 100, 1.0),  # bound 1: cannot fail
           _update_row("DP sigma=16", 16.0, 10, "simplex", 1440, 6000, 0.2557),  # 0.24: decided both ways
           _update_row("DP sigma=16", 16.0, 2, "simplex", 4400, 6000, 0.734),
           _update_row("DP sigma=16", 16.0, 10, "records", 45, 200, 0.2557),
           # results/risk_report/default's sigma = 4, k = 2 cell: 512 games cannot fail a bound of 0.9938 (their
           # interval's lower end is at most 0.9928, with all 512 won), so it is context; it still counts for "reach".
           _update_row("DP sigma=4", 4.0, 2, "simplex", 510, 512, 0.9938)]
    dp = {"noise_multiplier": 16.0, "setting": "DP sigma=16", "num_targets": 200, "eps_rdp": 2.78, "eps_pld": 2.56,
          "success_at_eta": 0.005, "success_at_eta_ci": [0.0, 0.028], "bound_at_eta": 0.227,
          "empirical_eps": 1.1, "audit_rigorous_ceiling": 5.7, "audit_gdp_eps": 2.2, "audit_gdp_eps_hat": 2.5,
          "audit_gdp_eps_upper": 2.8, "audit_gdp_mu_lower": 0.55, "audit_runs_per_world": 3000,
          "audit_one_run_eps": 0.95, "audit_one_run_eps_ceiling": 5.4, "audit_one_run_canaries": 6000,
          # the claim "no audit certifies more" reads the family-wise bounds (Bonferroni over 6 audits)
          "audit_familywise_confidence": 1 - 0.05 / 6, "audit_family_size": 6, "empirical_eps_familywise": 0.9,
          "audit_rigorous_ceiling_familywise": 5.2, "audit_one_run_eps_familywise": 0.8,
          "audit_one_run_eps_ceiling_familywise": 5.0, "audit_gdp_eps_familywise": 2.1}
    sigma1 = dict(dp, noise_multiplier=1.0, setting="DP sigma=1", eps_rdp=96.0, eps_pld=91.8, bound_at_eta=1.0,
                  empirical_eps=3.3, audit_rigorous_ceiling=3.4, audit_one_run_eps_ceiling=5.4,
                  empirical_eps_familywise=3.0, audit_rigorous_ceiling_familywise=3.1)
    out = {c["name"]: c for c in text.claims(config, {"rows": [sigma1, dp], "prior_aware": upd,
                                                            "sample_rate": 1.0})}
    within = next(c for n, c in out.items() if n.startswith("every crafted-canary"))
    assert [k["what"] for k in within["comparisons"]] == ["DP sigma=16 k=10: success", "DP sigma=16 k=2: success"]
    assert within["verdict"] == "holds"
    assert "Context, not claimed" in within["detail"] and "DP sigma=1 k=10" in within["detail"]  # shown, not claimed
    assert "too few games" in within["detail"] and "DP sigma=4 k=2 (512 games" in within["detail"]
    # With every game won it could fail: 600 games leave a lower end of 0.99387 > 0.9938, and 600 of 600 fails.
    lost = [_update_row("DP sigma=4", 4.0, 2, "simplex", 600, 600, 0.9938)]
    (c,) = [c for c in text.claims(config, {"rows": [], "prior_aware": lost, "sample_rate": 1.0})
            if c["name"].startswith("every crafted-canary")]
    assert c["verdict"] == "fails" and not claim_problems([c])
    reach = next(c for n, c in out.items() if n.startswith("crafted canaries reach"))
    assert reach["verdict"] == "holds" and len(reach["comparisons"]) == 3
    final = next(c for n, c in out.items() if n.startswith("every final-model"))
    assert [k["what"] for k in final["comparisons"]] == ["DP sigma=16: P[MSE <= eta]"]  # sigma 1: bound 1.0
    assert final["detail"].endswith("Context, not claimed (ReRo bound >= 0.999, which no success can exceed): DP sigma=1")
    audits = next(c for n, c in out.items() if n.startswith("no audit certifies"))
    whats = [k["what"] for k in audits["comparisons"]]
    assert "DP sigma=1: rigorous (eps, delta) bound" not in whats  # ceiling 3.4 < 91.8: cannot fail, context
    assert "DP sigma=16: rigorous (eps, delta) bound" in whats and audits["verdict"] == "holds"
    assert [k["value"] for k in audits["comparisons"] if k["what"] == "DP sigma=16: Gaussian-DP reading"] == [2.1]
    # A 95% Gaussian-DP bound above the accountant's eps (5% of sound runs give one) fails the claim only when the
    # family-wise bound is above it too.
    chance = dict(dp, audit_gdp_eps=2.6, audit_gdp_eps_familywise=2.5)
    res = text.claims(config, {"rows": [chance], "prior_aware": [], "sample_rate": 1.0})
    assert next(c for c in res if c["name"].startswith("no audit certifies"))["verdict"] == "holds"
    # The audit table names such a bound under it, with its family-wise value, and names nothing when none is above.
    (note,) = [line for line in reading.above_accountant_note([chance, dp], 0.95) if line]
    assert note.startswith("Above the accountant's epsilon: DP sigma=16, GDP eps >= 2.6 vs eps_pld 2.56; "
                           "family-wise 2.5. Each number in the table is a 95% lower bound on its own")
    assert "with 8 such numbers" in note and "Bonferroni over the run's 6 audits" in note
    assert reading.above_accountant_note([dp, sigma1], 0.95) == []
    # Full batch: the note gives the canary's true mu, sqrt(T) / sigma = 10 / 16, beside the bound above it.
    (note,) = [line for line in reading.above_accountant_note([chance], 0.95, full_batch_steps=100) if line]
    assert "true mu is sqrt(T) / sigma = 0.625 against mu >= 0.55" in note
    leaky = dict(dp, audit_gdp_eps=2.9, audit_gdp_eps_familywise=2.7)
    res = text.claims(config, {"rows": [leaky], "prior_aware": [], "sample_rate": 1.0})
    assert next(c for c in res if c["name"].startswith("no audit certifies"))["verdict"] == "fails"
    gdp = next(c for n, c in out.items() if n.startswith("the Gaussian-DP audit"))
    assert gdp["verdict"] == "holds"  # 2.2 / 2.56 = 0.86 >= 0.8
    one = next(c for n, c in out.items() if n.startswith("the one-run audit"))
    assert one["verdict"] == "holds"  # 0.95 / 2.56 = 0.37 >= 0.35
    # The same crafted cell at 200 games straddles 0.85 of the bound: undecided, and the banner says so.
    small = [_update_row("DP sigma=16", 16.0, 10, "simplex", 48, 200, 0.2557)]
    c = text.claims(config, {"rows": [], "prior_aware": small, "sample_rate": 1.0})
    assert [x["verdict"] for x in c] == ["undecided", "undecided"]
    assert text.decidability_banner(c).startswith("**This run is too small to decide its claims**")
    # The claims name the level their intervals were computed at, config.confidence, not a fixed 95%; the
    # Gaussian-DP claim's interval runs between two one-sided bounds at that level (two-sided 2 conf - 1).
    for conf, one_sided, two_sided in ((0.95, "95%", "90%"), (0.8, "80%", "60%")):
        config.confidence = conf
        names = [c["name"] for c in text.claims(config, {"rows": [sigma1, dp], "prior_aware": upd,
                                                         "sample_rate": 1.0})]
        interval_claims = [n for n in names if "interval" in n]
        assert len(interval_claims) == 4 and all(one_sided in n for n in interval_claims), names
        (gdp_name,) = [n for n in names if n.startswith("the Gaussian-DP audit")]
        assert f"one-sided {one_sided} lower and upper bounds, a {two_sided} interval" in gdp_name
        if conf != 0.95:
            assert not any("95%" in n for n in names), names
    config.confidence = 0.95
    # The interpretation quotes the accountant's epsilon the claims compare with (PLD 2.56 here), not the looser
    # RDP conversion (2.78).
    words = reading.interpretation([dict(dp, success_rate=0.3, test_accuracy=0.9)], 0.05, config)
    assert "eps=2.56" in words and "2.78" not in words


def test_bottom_line_reads_the_tightest_bound_at_the_calibration_target():
    """Each DP setting against the target (5% at a 1% prior): the smallest route's bound at kappa = 0.01, met or not;
    the non-private row and a row without that prior say nothing."""
    cal = {"rero": 0.05, "kappa": 0.01}
    rows = [{"setting": "non-private", "noise_multiplier": 0, "eps_pld": "inf"},
            {"setting": "DP sigma=4", "noise_multiplier": 4.0, "eps_pld": 13.21,
             "bounds": {"rero": [{"kappa": 0.01, "rero_gdp": 0.5689, "rero_rdp": 0.7902, "rero_zcdp": 0.7898}]}},
            {"setting": "DP sigma=16", "noise_multiplier": 16.0, "eps_pld": 2.56,
             "bounds": {"rero": [{"kappa": 0.1, "rero_gdp": 0.2557}, {"kappa": 0.01, "rero_gdp": 0.04444,
                                                                     "rero_rdp": 0.05456, "rero_zcdp": 0.05456}]}}]
    line = reading.bottom_line(rows, cal)
    assert ("DP sigma=4 (eps_pld 13.2): bound 56.9%, **not met**; DP sigma=16 (eps_pld 2.56): bound 4.44%, **met**"
            in line)
    assert "non-private" not in line and "they hold for any attack" in line and "0% means that attack failed" in line
    assert reading.bottom_line(rows, dict(cal, kappa=0.5)) == "" and reading.bottom_line(rows, None) == ""


def test_crafted_trials_reach_the_precision_asked():
    """The crafted runs are sized before the run so that the 95% interval of success / bound is at most
    crafted_precision wide on each side at k <= 10 (exact optimum from SciPy quadrature here)."""
    from scipy import integrate, stats

    from recon_jax.accounting import privacy_bounds
    from recon_jax.report import updates

    config = get_config("default")
    for sigma, want in ((16.0, 6016), (4.0, 512), (1.0, 512)):
        b = privacy_bounds(sigma, 1.0, 100, config.delta, config.clip_norm, 784, [0.5, 0.1, 0.01], num_params=7960)
        row = {"noise_multiplier": sigma, "bounds": b.to_dict()}
        n = updates.crafted_trials(config, row, 1.0, 100)
        assert n == want and n % config.chunk_size == 0
        if sigma == 4.0:  # the rule's own need (325 games) is below the floor of 2 x audit_runs
            mu = 10.0 / sigma * np.sqrt(10 / 9)
            p = integrate.quad(lambda x: stats.norm.pdf(x - mu) * stats.norm.cdf(x) ** 9, -12, 12 + mu)[0]
            bound = stats.norm.cdf(stats.norm.ppf(0.1) + 10.0 / sigma)
            assert 1.96 * np.sqrt(p * (1 - p) / n) / bound < config.crafted_precision


def test_familywise_audit_bounds_are_bonferroni_bounds():
    """The claim 'no audit certifies more than the accountant's epsilon' reads bounds at 1 - 0.05 / family: on a
    sound Gaussian mechanism (mu = 0.625, sigma 16 over 100 steps) they sit below the 95% ones, and the Gaussian-DP
    one is the noncentral-t bound at that confidence (audit_gdp, computed here directly)."""
    from recon_jax.attacks import audit_gdp
    from recon_jax.report import updates

    config = _smoke()
    rng = np.random.default_rng(0)
    mu = 0.625
    s_with, s_without = rng.normal(mu * mu / 2, mu, 1500), rng.normal(-mu * mu / 2, mu, 1500)
    included = rng.random(400) < 0.5
    one_run = np.where(included, rng.normal(mu, 1.0, 400), rng.normal(0.0, 1.0, 400))
    out = updates._audits(config, s_with, s_without, one_run, included, 6)
    fw = 1 - (1 - config.confidence) / 6
    assert out["audit_familywise_confidence"] == pytest.approx(fw) and out["audit_family_size"] == 6
    mu_fw = audit_gdp.gdp_mu_lower_bound(s_with, s_without, confidence=fw)[0]
    assert out["audit_gdp_mu_lower_familywise"] == pytest.approx(float(mu_fw))
    assert out["audit_gdp_eps_familywise"] == pytest.approx(float(audit_gdp.gdp_epsilon(mu_fw, config.delta)))
    assert out["audit_gdp_mu_lower_familywise"] < out["audit_gdp_mu_lower"] < mu + 0.1
    # The rigorous and one-run bounds at that confidence, recomputed directly (the rigorous audit picks its
    # threshold at its own confidence, so its family-wise bound need not sit below its 95% one).
    from recon_jax.attacks import audit, audit_one_run

    assert out["empirical_eps_familywise"] == audit.empirical_epsilon(s_with, s_without, config.delta,
                                                                      confidence=fw).eps_lower
    assert out["audit_one_run_eps_familywise"] == audit_one_run.one_run_audit(one_run, included, config.delta,
                                                                              confidence=fw).eps_lower
    assert out["audit_rigorous_ceiling_familywise"] < out["audit_rigorous_ceiling"]


def test_stores_are_keyed_by_the_model_and_the_data_not_their_paths(tmp_path):
    """A model file or image folder is named in the config by its path only: the stores' keys carry the model's
    identity and the data's digests, so editing the file or the images between two runs recomputes instead of
    returning the earlier run's attack results (an outside audit saw a width-16 model's results reported for
    width 64)."""
    from recon_jax import models
    from recon_jax.report import app
    from recon_jax.report.config import get_config

    config = get_config("smoke")
    x = np.random.default_rng(0).uniform(size=(6, 4, 4, 1)).astype(np.float32)
    y = np.arange(6, dtype=np.int32) % 2
    narrow, wide = (models.from_flax(models.MLP(features=(w, 2))) for w in (16, 64))
    base = app._inputs_identity(narrow, (x, y), (x[:2], y[:2]))
    assert base == app._inputs_identity(narrow, (x, y), (x[:2], y[:2]))
    others = [app._inputs_identity(wide, (x, y), (x[:2], y[:2])),
              app._inputs_identity(narrow, (x + 0.5, y), (x[:2], y[:2])),
              app._inputs_identity(narrow, (x, y), (x[2:4], y[2:4]))]
    setting = (1, "DP sigma=1", 1.0)
    dirs = {app._model_store(str(tmp_path), config, setting, ins) for ins in [base, *others]}
    assert len(dirs) == 4
    assert app._model_store(str(tmp_path), config, setting, base) in dirs


# The fields a setting's models and attack results do not depend on (app._NOT_IN_MODELS), written out here so that
# moving a field out of the key is a decision a test sees.
_OUT_OF_MODEL_KEY = {"keep_intermediates", "noise_multipliers", "include_non_private", "delta", "kappas", "prior_sizes",
                     "prior_aware_trials", "crafted_candidates", "crafted_precision", "crafted_trials", "audit_runs",
                     "one_run_canaries", "confidence", "bound_tolerance", "crafted_reach", "audit_gdp_reach",
                     "audit_one_run_reach", "calibration_rero", "calibration_kappa", "calibration_models"}


def test_model_store_is_keyed_by_what_the_models_depend_on(tmp_path):
    """A games-, audits-, calibration-, bounds- or claims-only field, or another noise multiplier appended to the
    sweep, keeps every setting's models folder (no retraining); a field the training, the data split or the
    reconstructor reads, the setting's index (its noise draws) or its noise multiplier gives another folder."""
    from recon_jax.report.config import DESCRIPTIONS

    assert set(app._NOT_IN_MODELS) == _OUT_OF_MODEL_KEY and _OUT_OF_MODEL_KEY < set(DESCRIPTIONS)
    setting = (1, "DP sigma=2", 2.0)

    def store(setting=setting, **change):
        config = _smoke()
        with config.unlocked():
            config.update(change)
        return app._model_store(str(tmp_path), config, setting, {"model": "m", "data": ["d"]})

    base = store()
    for field, value in [("kappas", (0.5,)), ("prior_sizes", (2, 4)), ("crafted_candidates", "orthogonal"),
                         ("crafted_precision", 0.1), ("crafted_trials", 64), ("audit_runs", 20),
                         ("audit_gdp_reach", 0.5), ("audit_one_run_reach", 0.2), ("calibration_rero", 0.1),
                         ("calibration_kappa", 0.02), ("calibration_models", 1), ("confidence", 0.9),
                         ("bound_tolerance", 0.3), ("one_run_canaries", 100), ("delta", 1e-6),
                         ("crafted_reach", 0.5), ("prior_aware_trials", 64), ("keep_intermediates", True),
                         ("noise_multipliers", (2.0, 4.0)), ("include_non_private", False)]:
        assert store(**{field: value}) == base, field
    read = [("epochs", 6), ("learning_rate", 0.1), ("momentum", 0.5), ("seed", 1), ("clip_norm", 2.0),
            ("fixed_size", 40), ("num_shadow", 64), ("num_targets", 4), ("eval_size", 100), ("batch_size", 10),
            ("hidden", 12), ("activation", "relu"), ("model", "lenet"), ("reconstructor", "mlp"),
            ("reconstructor_epochs", 3), ("reconstructor_batch_size", 16), ("reconstructor_learning_rate", 1e-2),
            ("chunk_size", 16), ("dataset", "tfds:mnist")]
    for field, value in read:
        assert store(**{field: value}) != base, field
    # The fields that enter through the training algorithm's description are each shown to matter (shuffle below).
    assert set(app._ALGORITHM_FIELDS) <= {field for field, _ in read} | {"shuffle"}
    for other in [(2, "DP sigma=2", 2.0), (1, "DP sigma=3", 3.0)]:
        assert store(other) != base, other
    # What the setting's training algorithm does not read: the clip norm without DP, the order of full batches.
    non_private = (0, "non-private", None)
    assert store(non_private, clip_norm=2.0) == store(non_private) != base
    assert store(shuffle="known") == base and store(batch_size=10, shuffle="known") != store(batch_size=10)


def test_privacy_bounds_are_stored_and_read_back(tmp_path, monkeypatch):
    """A DP setting's privacy bounds are computed once per set of arguments (and code) and read back by a rerun,
    equal to what privacy_bounds returns; another argument computes them again."""
    from recon_jax.accounting import privacy_bounds

    args = dict(noise_multiplier=2.0, sample_rate=1.0, steps=5, delta=1e-5, clip_norm=1.0, data_dim=784,
                kappas=[0.01, 0.5], eta_mse=0.05, kappa_at_eta=0.003, num_params=7960)
    first, folder = app._stored_bounds(str(tmp_path), args)
    assert first == privacy_bounds(**args) and os.path.exists(os.path.join(folder, "result.json"))

    def refuse(*a, **kw):
        raise AssertionError("privacy_bounds computed again")

    monkeypatch.setattr(app, "privacy_bounds", refuse)
    again, again_folder = app._stored_bounds(str(tmp_path), args)
    assert again == first and again.to_dict() == first.to_dict() and again_folder == folder
    with pytest.raises(AssertionError, match="computed again"):
        app._stored_bounds(str(tmp_path), dict(args, kappas=[0.01]))
