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
