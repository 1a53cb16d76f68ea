"""The ``recon-jax-report`` command line (issue 36): variant names, ``--help`` from the config's own field list,
one-line config and data errors with exit status 2 (``--debug``: the traceback), models from files and modules in
the current directory, and sizes that follow the data. Each error case stops before any training."""

import os

import numpy as np
import pytest

from recon_jax.report import app, command_line, setup, sizes
from recon_jax.report.config import DESCRIPTIONS, FIELDS, VARIANTS, get_config
from recon_jax.report.setup import ConfigError


def _console(argv, monkeypatch, run=None):
    """Runs the console script in this process; returns (exit status, stdout, stderr) via capsys by the caller."""
    def no_run(config, workdir):
        raise AssertionError("the report started")

    with pytest.raises(SystemExit) as info:
        command_line.console(run or no_run, app.DEFAULT_CONFIG, ["recon-jax-report", *argv])
    return info.value.code


def test_help_lists_every_field_with_its_default_and_meaning(monkeypatch, capsys):
    assert _console(["--config=smoke", "--help"], monkeypatch) == 0
    out = capsys.readouterr().out
    smoke = get_config("smoke")
    for name, meaning in DESCRIPTIONS.items():
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(f"--config.{name}="))
        assert meaning in line, name
    assert "--config.num_shadow=96 " in out and smoke.num_shadow == 96  # the named variant's defaults
    assert out.startswith("usage: recon-jax-report [--config=smoke|default|paper") and "'smoke' variant" in out
    # the command-line flags beside the fields (the resume switch the README names was in --helpfull only)
    for flag in ("--workdir", "--debug", "--allow_resume_across_code"):
        assert f"\n{flag}" in out, flag


def test_the_fields_are_declared_once():
    """--help's lines, the validation's known fields and every variant's fields are one list."""
    names = [name for name, _, _ in FIELDS]
    assert len(names) == len(set(names)) and setup.KNOWN_KEYS == set(names)
    for variant in VARIANTS:
        assert set(get_config(variant).keys()) == set(names)


@pytest.mark.parametrize("value,variant", [("smoke", "smoke"), (":paper", "paper"), (None, "default")])
def test_variant_names(value, variant):
    argv = ["p", "--config.seed=1"] + ([] if value is None else [f"--config={value}"])
    out, named = command_line.config_argument(argv, "/pkg/config.py:default")
    assert named == variant and out == ["p", f"--config=/pkg/config.py:{variant}", "--config.seed=1"]


def _one_line(err: str, *parts: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("recon-jax-report: ") and "Traceback" not in err
    for part in parts:
        assert part in lines[0], (part, lines[0])


def test_misspelt_field_is_one_line(monkeypatch, capsys):
    assert _console(["--config.noise_multiplier=(1.0,)"], monkeypatch) == 2
    _one_line(capsys.readouterr().err, "'noise_multiplier'", "did you mean 'noise_multipliers'", "--help")


def test_unknown_variant_is_one_line(monkeypatch, capsys):
    assert _console(["--config=smok"], monkeypatch) == 2
    _one_line(capsys.readouterr().err, "'smok'", "smoke, default, paper")


def _images(root, n_train=16, n_test=6, flat=False):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("test", n_test)):
        for i in range(n):
            d = root / split / ("" if flat else f"c{i % 2}")
            d.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 255, (8, 8), np.uint8)).save(d / f"{i}.png")
    return root


_NO_CLASSES = '''
import flax.linen as nn


class OneLogit(nn.Module):
    """No num_classes field: built from its defaults, then checked like an instance (one logit < 2 classes)."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(x.reshape((x.shape[0], -1)))
'''


@pytest.mark.parametrize("case", ["flat folder", "no train/test", "class without num_classes", "missing model file",
                                  "missing module"])
def test_data_and_model_errors_are_one_line(case, tmp_path, monkeypatch, capsys):
    """The issue's bad inputs: each stops with one line naming the field, the value and what is allowed, exit 2."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "no_classes.py").write_text(_NO_CLASSES)
    data, model = "imgs", "no_classes.py:OneLogit"
    if case == "flat folder":  # train/ and test/ hold images but no class sub-directories
        _images(tmp_path / "imgs", flat=True)
        want = ("config.data_path: 'imgs/train' has no class sub-directories", "(16 images lie directly in it)",
                "DIR/train/<class>/")
    elif case == "no train/test":  # images directly in the folder
        _images(tmp_path / "imgs")
        from PIL import Image
        flat = tmp_path / "flat"
        flat.mkdir()
        Image.fromarray(np.zeros((8, 8), np.uint8)).save(flat / "a.png")
        data, want = "flat", ("config.data_path: 'flat' has no train/ and no test/", "1 images lie directly in it",
                              "DIR/train/<class>/")
    else:
        _images(tmp_path / "imgs")
        if case == "class without num_classes":
            want = ("config.model: 'no_classes.py:OneLogit' must map inputs to [batch, >= 2] logits",)
        elif case == "missing model file":
            model, want = "nope.py:Net", ("config.model: 'nope.py:Net': there is no file", str(tmp_path / "nope.py"))
        else:
            model, want = "nope_module:Net", ("config.model: 'nope_module:Net': no module 'nope_module'",)
    argv = ["--config.dataset=folder", f"--config.data_path={data}", f"--config.model={model}",
            "--config.noise_multipliers=(1.0,)", f"--workdir={tmp_path / 'run'}"]
    assert _console(argv, monkeypatch, run=app.run) == 2
    _one_line(capsys.readouterr().err, *want, "--debug")
    assert not (tmp_path / "run").exists()  # nothing written
    with pytest.raises(ConfigError):  # --debug: the exception itself, with its traceback
        command_line.console(app.run, app.DEFAULT_CONFIG, ["recon-jax-report", *argv, "--debug"])


_MODULE = '''
import flax.linen as nn


class Net(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x.reshape((x.shape[0], -1)))


def make(num_classes):
    return Net(num_classes)
'''


@pytest.mark.parametrize("spec", ["cwd_model_issue36:Net", "cwd_model_issue36:make", "sub/cwd_model_file.py:Net"])
def test_models_resolve_from_the_current_directory(spec, tmp_path, monkeypatch):
    """``module:attribute`` and ``file.py:attribute`` are found from the current directory, no PYTHONPATH."""
    import sys

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    (tmp_path / "cwd_model_issue36.py").write_text(_MODULE)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cwd_model_file.py").write_text(_MODULE)
    config = get_config("smoke")
    with config.unlocked():
        config.model = spec
    module = setup.build_model(config, 3)
    assert type(module).__name__ == "Net" and module.num_classes == 3
    sys.modules.pop("cwd_model_issue36", None)


def test_sizes_follow_the_data():
    default = get_config("default")
    # The embedded MNIST (60,000 + 10,000) holds the default sizes: nothing changes.
    same, split = sizes.fit_sizes(default, 60000, 10000)
    assert split.fitted == () and same.to_dict() == default.to_dict()
    # 50 images (40 + 10): 40% fixed set, 10% targets, the rest shadow targets; half the test records for accuracy.
    small, split = sizes.fit_sizes(default, 40, 10)
    assert (small.fixed_size, small.num_shadow, small.num_targets) == (16, 20, 4)
    assert small.eval_size == 5 and tuple(small.prior_sizes) == (2, 4) and small.calibration_models == 4
    setup.validate_config(small, num_train=40, num_test=10)
    assert "fixed set D- 16, shadow targets 20, evaluation targets 4" in split.sentence()
    # A size you set is kept; the others fill the rest.
    with default.unlocked():
        default.num_shadow = 12
    kept, split = sizes.fit_sizes(default, 40, 10)
    assert kept.num_shadow == 12 and kept.fixed_size + kept.num_shadow + kept.num_targets <= 40
    assert "num_shadow" not in split.fitted
    # sizes='fixed': as given, and validation says what does not fit.
    with default.unlocked():
        default.sizes = "fixed"
    fixed, split = sizes.fit_sizes(default, 40, 10)
    assert split.fitted == () and fixed.fixed_size == 1000
    with pytest.raises(ConfigError, match=r"^config\.fixed_size \+ num_shadow \+ num_targets: must be at most the 40 "
                                          r"training records of 'mnist'"):
        setup.validate_config(fixed, num_train=40, num_test=10)


def test_overrides_are_the_fields_that_differ_from_the_variant():
    config = get_config("default")
    assert sizes.overrides(config) == {}
    with config.unlocked():
        config.dataset, config.noise_multipliers = "folder", (1.0,)
    assert sizes.overrides(config) == {"dataset": "folder", "noise_multipliers": (1.0,)}


def test_a_finished_setting_keeps_only_its_results_and_other_configs_stores_go(tmp_path):
    """What a rerun needs stays (attack.npz, key.json, code.json); a setting's shadow and released models and its
    reconstructor checkpoint go once its results are saved; a finished run removes other configs' model folders."""
    store = tmp_path / "models-current"
    for sub in ("shadow", "released", "reconstructor"):
        (store / sub).mkdir(parents=True)
        (store / sub / "x.npy").write_bytes(b"0" * 10)
    (store / "shadow.lock").write_text("")
    for name in ("attack.npz", "key.json", "code.json"):
        (store / name).write_text("{}")
    (tmp_path / "models-old").mkdir()
    (tmp_path / "models-old" / "attack.npz").write_text("")
    (tmp_path / "report.md").write_text("")
    app._drop_intermediates(str(store))
    assert sorted(p.name for p in store.iterdir()) == ["attack.npz", "code.json", "key.json"]
    assert app._prune_other_stores(str(tmp_path), [str(store)]) == ["models-old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models-current", "report.md"]
