"""Every Python snippet of README's API tour runs as written and prints its result (issue: a tour for the questions
users bring). The snippets run in a temporary directory (the attack writes its store under ``runs/``)."""

import contextlib
import io
import os
import re

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tour_snippets() -> list[str]:
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    tour = text[text.index("## API tour"):]
    tour = tour[: tour.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", tour, re.S)


SNIPPETS = _tour_snippets()


def test_the_tour_has_the_bound_and_attack_snippets():
    assert len(SNIPPETS) == 2
    assert "calibrate_sigma_for_rero" in SNIPPETS[0] and "rero_dpsgd_tradeoff" in SNIPPETS[0]
    assert "run_informed_pipeline" in SNIPPETS[1]


def _run(code, tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    return out.getvalue()


def test_bound_snippet(tmp_path, monkeypatch):
    out = _run(SNIPPETS[0], tmp_path, monkeypatch)
    first, second = out.strip().splitlines()
    eps, gamma, sigma = _numbers(first)
    assert 0 < eps < 10 and 1e-3 <= gamma < 1
    # The bound falls as sigma grows: sigma = 1 already gives ReRo <= 0.05, so the smallest such sigma is below 1.
    assert gamma <= 0.05 and 0 < sigma < 1.0
    gdp, pld = (float(v) for v in second.split())
    np.testing.assert_allclose(gdp, pld, rtol=1e-4)  # q = 1: the PLD trade-off curve equals the GDP closed form


def _numbers(line):
    eps = float(re.search(r"eps = ([\d.]+)", line).group(1))
    gamma = float(re.search(r"<= ([\d.]+);", line).group(1))
    sigma = float(re.search(r"ReRo 0\.05: ([\d.]+)", line).group(1))
    return eps, gamma, sigma


def test_attack_snippet(tmp_path, monkeypatch):
    out = _run(SNIPPETS[1], tmp_path, monkeypatch)
    m = re.search(r"MSE ([\d.]+) vs nearest-neighbour oracle ([\d.]+); (\d+)% of targets", out)
    assert m, out
    mse, oracle, pct = float(m.group(1)), float(m.group(2)), int(m.group(3))
    assert 0 < mse < oracle  # at this size the attack beats the oracle on average
    assert pct >= 50
