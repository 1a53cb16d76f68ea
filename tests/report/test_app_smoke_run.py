"""The smoke risk report, run once for this file (module fixture ``smoke_run``): its outputs end to end, and a rerun
that resumes its models, privacy bounds, games, audits and calibration from keyed stores: the same metrics without
computing them again, and a recomputation when a value that determines them changes."""

import contextlib
import dataclasses
import io
import json
import os
import shutil

import pytest

from recon_jax import accounting, shadow
from recon_jax.attacks import audit_one_run, canaries, informed, prior_aware
from recon_jax.io import stable_hash
from recon_jax.report import app
from recon_jax.report.config import get_config

# This process's time, not the result: differs between a run and its rerun.
_VOLATILE = ("runtime_seconds", "timings_seconds", "segments", "total_seconds", "total_segments", "total_complete")


def _count_phases(monkeypatch, calls):
    """Counts the calls of the phases' functions into ``calls`` (name -> count)."""
    for owner, name in ((app, "every_update_released"), (prior_aware, "prior_aware_game"),
                        (canaries, "canary_game"), (audit_one_run, "one_run_audit"),
                        (accounting, "calibrate_sigma_for_rero"), (shadow, "generate_shadow_models"),
                        (informed, "train_model_sets"), (app, "privacy_bounds")):
        real = getattr(owner, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)


def _read(workdir):
    """(metrics.json without this process's times, report.md before its runtime line)."""
    metrics = json.loads((workdir / "metrics.json").read_text())
    report = (workdir / "report.md").read_text().split("\nRuntime: ")[0]
    return {k: v for k, v in metrics.items() if k not in _VOLATILE}, report


def _run(config, workdir, monkeypatch):
    """Runs the report; returns what :func:`_read` reads and the calls of the phases' functions."""
    calls = {}
    _count_phases(monkeypatch, calls)
    app.run(config, str(workdir))
    return (*_read(workdir), calls)


def _stores(workdir, name):
    return sorted(p.name for p in workdir.glob(f"{name}-*"))


@dataclasses.dataclass
class SmokeRun:
    config: object
    workdir: object  # pathlib.Path; read-only for the tests (a rerun works on a copy)
    result: dict
    printed: str  # what the run printed
    calls: dict  # the phases' functions it called


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The smoke variant run once (about a minute on 2 cores), shared by this file's tests."""
    config = get_config("smoke")
    workdir = tmp_path_factory.mktemp("smoke_report")
    calls, printed = {}, io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        _count_phases(mp, calls)
        result = app.run(config, str(workdir))
    return SmokeRun(config, workdir, result, printed.getvalue(), calls)


def test_smoke_report_end_to_end(smoke_run):
    config, tmp_path, result, printed = smoke_run.config, smoke_run.workdir, smoke_run.result, smoke_run.printed
    # The model trained without DP has no epsilon: people read "∞ (no DP)", metrics.json keeps standard JSON.
    assert "| non-private | " in printed and "∞ (no DP)" in printed and "| inf |" not in printed
    for name in ("report.md", "metrics.json", "config.json", "reconstructions.png", "bounds_vs_attack.png"):
        assert os.path.exists(tmp_path / name), name
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    rows = metrics["rows"]
    assert [r["setting"] for r in rows] == ["non-private", "DP sigma=2"]
    dp = rows[1]
    assert dp["eps_rdp"] > 0 and dp["eps_pld"] <= dp["eps_rdp"] * 1.01
    assert 0 <= dp["empirical_eps"] <= dp["audit_rigorous_ceiling"]
    # The audits' metrics (issue 35): Gaussian-DP reading and one-run audit, each a lower bound below the accountant.
    assert 0 <= dp["audit_gdp_mu_lower"] <= dp["audit_gdp_mu_hat"] <= dp["audit_gdp_mu_upper"]
    assert 0 <= dp["audit_gdp_eps"] <= dp["eps_pld"] and dp["audit_runs_per_world"] == 16
    assert 0 <= dp["audit_one_run_eps"] <= dp["audit_one_run_eps_ceiling"]
    assert dp["audit_one_run_canaries"] == config.one_run_canaries
    # Every ReRo bound is a probability at least the prior.
    for r in dp["bounds"]["rero"]:
        for route in ("rero_rdp", "rero_gdp", "rero_zcdp"):
            assert r["kappa"] - 1e-9 <= r[route] <= 1.0
    recs = metrics["prior_aware"]
    assert sorted((r["candidates"], r["prior_size"]) for r in recs) == [
        (kind, k) for kind in ("records", "simplex") for k in (2, 10, 100)]
    for r in recs:
        assert {"setting", "prior_size", "prior_aware_success", "prior_aware_ci", "prior_aware_bound",
                "exact_optimum", "predicted_success", "p_value_above_bound"} <= set(r)
        lo, hi = r["prior_aware_ci"]
        assert lo <= r["prior_aware_success"] <= hi
        assert lo <= r["prior_aware_bound"]  # no measured success above its bound beyond its interval
        assert r["exact_optimum"] <= r["prior_aware_bound"] + 1e-6  # the bound holds for the best prior too
    for r in (r for r in recs if r["candidates"] == "records"):
        # Real records are at most as far apart as orthogonal full-norm gradients (by the triangle inequality a
        # pair can reach 2x the orthogonal distance only when anti-aligned; MNIST gradients are not), and apart.
        assert 0 < r["separation_retained_p10"] <= r["separation_retained_mean"] < 2.0
    for r in (r for r in recs if r["candidates"] == "simplex"):
        # Crafted canaries keep the simplex's separation k / (k - 1) and the per-pair model is exact for them.
        assert r["separation_retained_mean"] == pytest.approx(r["prior_size"] / (r["prior_size"] - 1), rel=1e-5)
        assert r["predicted_success"] == pytest.approx(r["exact_optimum"], abs=1e-6)
        assert r["trials"] == 32
    # Quality on real data: with every update visible the attack identifies the target among 2 candidates far
    # more often than chance, even at smoke size (lower end of the 95% interval above 1/2).
    k2 = next(r for r in recs if r["prior_size"] == 2 and r["candidates"] == "records")
    assert k2["prior_aware_ci"][0] > 0.5, k2
    cal = metrics["calibration"]
    assert cal["noise_multiplier"] > 0 and 0 <= cal["test_accuracy"] <= 1
    names = {c["name"] for c in metrics["claims"]}
    assert any("within its ReRo bound" in n for n in names)
    assert all(c["verdict"] in ("holds", "fails", "undecided") for c in metrics["claims"])
    assert metrics["rows"][0]["eps_rdp"] == metrics["rows"][0]["eps_pld"] == "inf"
    report = (tmp_path / "report.md").read_text()
    assert "| ∞ (no DP) | ∞ (no DP) |" in report and "| inf |" not in report
    for section in ("What the theorems guarantee", "Interpretation", "Audits: empirical epsilon",
                    "Calibration to a risk target", "every update released", "clip-norm units", "per-pair prediction",
                    "simplex optimum / bound", "Gaussian-DP reading", "One-run audit", "## Claims",
                    "Terms. *ReRo bound*", "**In short.** Against the target of any attack"):
        assert section in report, section
    # A smoke run cannot decide its claims, and says so before anything else (issue 35).
    top = report.split("## What was run")[0].splitlines()
    assert top[0].startswith("# Reconstruction-risk report") and top[2].startswith("- Config:")
    assert any(line.startswith("**This run is too small to decide its claims**") for line in top), top
    assert "attained only by" not in report
    assert result["rows"][0]["num_shadow_models"] == config.num_shadow
    # The folder keeps what a rerun needs (each setting's attack results), not the shadow models or the
    # reconstructor checkpoints (two of 112 MB each made a smoke run's folder 230 MB; issue 36).
    size = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert size < 20e6, size
    assert not list(tmp_path.rglob("reconstructor")) and not list(tmp_path.rglob("shadow"))


def test_a_rerun_resumes_the_games_audits_and_calibration(smoke_run, tmp_path, monkeypatch):
    config = get_config("smoke")
    shutil.copytree(smoke_run.workdir, tmp_path, dirs_exist_ok=True)  # the stores are keyed, not tied to a path
    first, first_report = _read(tmp_path)
    calls = smoke_run.calls
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
