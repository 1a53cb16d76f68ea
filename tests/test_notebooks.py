"""Executes every notebook in colab/ in smoke mode (RECON_JAX_SMOKE=1), and checks each .ipynb is in sync
with its jupytext py:percent twin and has its outputs stripped."""

import os
import pathlib

import pytest

COLAB = pathlib.Path(__file__).resolve().parents[1] / "colab"
NOTEBOOK_SOURCES = sorted(COLAB.glob("*.py"))


def _code_cells(nb):
    return [c["source"].strip() for c in nb.cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("source", NOTEBOOK_SOURCES, ids=[p.stem for p in NOTEBOOK_SOURCES])
def test_notebook_paired_and_stripped(source):
    jupytext = pytest.importorskip("jupytext")
    ipynb = source.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: run `jupytext --to ipynb {source}`"
    from_py = jupytext.read(source)
    stored = jupytext.read(ipynb)
    assert _code_cells(from_py) == _code_cells(stored), f"{ipynb.name} out of sync with {source.name}"
    for cell in stored.cells:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{ipynb.name} has stored outputs"


@pytest.mark.parametrize("source", NOTEBOOK_SOURCES, ids=[p.stem for p in NOTEBOOK_SOURCES])
def test_notebook_executes_in_smoke_mode(source, tmp_path, monkeypatch):
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("RECON_JAX_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = jupytext.read(source)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


@pytest.mark.parametrize("source", NOTEBOOK_SOURCES, ids=[p.stem for p in NOTEBOOK_SOURCES])
def test_notebook_starts_with_a_runnable_install_cell(source, monkeypatch):
    """Issue 36: the first code cell installs recon_jax where it is missing (Colab) from the repository URL given as
    a #@param, with a pip requirement that names this package; where recon_jax is importable it does nothing."""
    import importlib.util
    import subprocess
    import sys
    import tomllib

    jupytext = pytest.importorskip("jupytext")
    from packaging.requirements import Requirement

    first = _code_cells(jupytext.read(source))[0]
    assert "# @param" in first and "REPO = " in first
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: calls.append(cmd))
    exec(compile(first, source.name, "exec"), {})  # recon_jax is installed here: nothing to do
    assert calls == []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # as on a fresh Colab runtime
    exec(compile(first, source.name, "exec"), {})
    (cmd,) = calls
    assert cmd[:5] == [sys.executable, "-m", "pip", "install", "--quiet"]
    req = Requirement(cmd[5])
    name = tomllib.loads((COLAB.parent / "pyproject.toml").read_text())["project"]["name"]
    assert req.name == name and req.url.startswith("git+https://github.com/")
