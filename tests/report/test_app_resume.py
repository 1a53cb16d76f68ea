"""A rerun of the risk report resumes its models, privacy bounds, games, audits and calibration from keyed stores:
the same metrics without computing them again, and a recomputation when a value that determines them changes."""

import json

from recon_jax import accounting, shadow
from recon_jax.attacks import audit_one_run, canaries, informed, prior_aware
from recon_jax.io import stable_hash
from recon_jax.report import app
from recon_jax.report.config import get_config

# This process's time, not the result: differs between a run and its rerun.
_VOLATILE = ("runtime_seconds", "timings_seconds", "segments", "total_seconds", "total_segments", "total_complete")


def _counted(monkeypatch, calls, owner, name):
    real = getattr(owner, name)

    def counting(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)


def _run(config, workdir, monkeypatch):
    """Runs the report; returns (metrics.json without this process's times, report.md before its runtime line,
    the calls of the phases' functions)."""
    calls = {}
    for owner, name in ((app, "every_update_released"), (prior_aware, "prior_aware_game"),
                        (canaries, "canary_game"), (audit_one_run, "one_run_audit"),
                        (accounting, "calibrate_sigma_for_rero"), (shadow, "generate_shadow_models"),
                        (informed, "train_model_sets"), (app, "privacy_bounds")):
        _counted(monkeypatch, calls, owner, name)
    app.run(config, str(workdir))
    metrics = json.loads((workdir / "metrics.json").read_text())
    report = (workdir / "report.md").read_text().split("\nRuntime: ")[0]
    return {k: v for k, v in metrics.items() if k not in _VOLATILE}, report, calls


def _stores(workdir, name):
    return sorted(p.name for p in workdir.glob(f"{name}-*"))


def test_a_rerun_resumes_the_games_audits_and_calibration(tmp_path, monkeypatch):
    config = get_config("smoke")
    first, first_report, calls = _run(config, tmp_path, monkeypatch)
    assert calls["every_update_released"] == 1 and calls["calibrate_sigma_for_rero"] == 1
    assert calls["generate_shadow_models"] == 1  # the calibration models (the settings' go through informed)
    assert calls["train_model_sets"] == 2 and calls["privacy_bounds"] == 1  # non-private and one DP setting
    models = _stores(tmp_path, "models")
    assert len(models) == 2 and len(_stores(tmp_path, "bounds")) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("privacy_bounds computed again")

    monkeypatch.setattr(app, "privacy_bounds", refuse)  # the rerun reads the stored bounds
    again, again_report, calls = _run(config, tmp_path, monkeypatch)
    assert calls == {}  # nothing of the models, bounds, games, audits or calibration computed again
    runtime = (tmp_path / "report.md").read_text().split("\nRuntime: ")[1]
    assert " in 2 segments (see Segments), this process " in runtime.splitlines()[0]  # the total of both runs
    assert again == first and again_report == first_report
    assert len(list(tmp_path.glob("updates-*"))) == len(list(tmp_path.glob("calibration-*"))) == 1

    with config.unlocked():
        config.one_run_canaries = 100  # determines the one-run audit, not the calibration
    changed, _, calls = _run(config, tmp_path, monkeypatch)
    assert calls["every_update_released"] == 1 and calls["one_run_audit"] >= 1
    assert "calibrate_sigma_for_rero" not in calls and "generate_shadow_models" not in calls
    # A games-only field: every setting's models (and its bounds) are the earlier run's, not trained again.
    assert "train_model_sets" not in calls and "privacy_bounds" not in calls
    assert _stores(tmp_path, "models") == models and changed["rows"][0] == first["rows"][0]
    assert [r["bounds"] for r in changed["rows"][1:]] == [r["bounds"] for r in first["rows"][1:]]
    assert changed["rows"][1]["audit_one_run_canaries"] == 100 != first["rows"][1]["audit_one_run_canaries"]
    assert changed["calibration"] == first["calibration"]
    assert len(list(tmp_path.glob("updates-*"))) == 1  # the other config's games are pruned, as its models are


def test_the_phase_keys_follow_what_determines_each_phase():
    config = get_config("smoke")

    def keys(**change):
        c = get_config("smoke")
        with c.unlocked():
            c.update(change)
        return tuple(stable_hash(app._phase_key(c, exclude, {}, {}))
                     for exclude in (app._NOT_IN_UPDATES, app._NOT_IN_CALIBRATION))

    base = keys()
    assert base == keys() and config.seed == 0
    for field, value, games, calibration in [
            ("seed", 1, True, True), ("epochs", 6, True, True), ("learning_rate", 0.1, True, True),
            ("chunk_size", 16, True, True), ("prior_aware_trials", 64, True, False), ("audit_runs", 20, True, False),
            ("confidence", 0.9, True, False), ("delta", 1e-6, True, False),
            ("calibration_rero", 0.06, False, True), ("calibration_models", 4, False, True),
            ("reconstructor_epochs", 3, False, False), ("bound_tolerance", 0.2, False, False)]:
        other = keys(**{field: value})
        assert (other[0] != base[0], other[1] != base[1]) == (games, calibration), field
