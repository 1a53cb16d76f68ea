"""Committed results and the numbers the docs quote from them.

Every directory ``results/<experiment>/<variant>/`` must hold a finished run: report.md with a Claims section,
metrics.json (standard JSON, with ``claims``) and config.json with provenance (commit, date, machine, versions,
wall time). The docs quote run numbers only as links into these files, e.g.
``[0.0234](results/balle_mnist/default/metrics.json#rows.name=default.mean_mse)`` (from experiments/README.md:
``../results/...``); each link must resolve and its text
must equal the value at the printed precision (a trailing ``%`` may stand for a fraction times 100, and a
``/N`` after the key path divides, e.g. ``config.json#wall_time_s/60`` for minutes).
"""

from __future__ import annotations

import json
import math
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results")
DOCS = ("README.md", "experiments/README.md")
_LINK = re.compile(r"\[([^\]]+)\]\(((?:\.\./)*results/[^)#\s]+\.json)#([^)\s]+)\)")


def _result_dirs() -> list[str]:
    if not os.path.isdir(RESULTS):
        return []
    out = []
    for exp in sorted(os.listdir(RESULTS)):
        for variant in sorted(os.listdir(os.path.join(RESULTS, exp))):
            if os.path.isdir(os.path.join(RESULTS, exp, variant)):
                out.append(f"{exp}/{variant}")
    return out


def _strict_load(path: str):
    def refuse(name):
        raise ValueError(f"{path}: non-standard JSON constant {name}")

    with open(path) as f:
        return json.load(f, parse_constant=refuse)


def resolve(obj, path: str):
    """Follows a dotted key path; list items by index or by ``field=value`` (first dict whose field matches)."""
    segs = path.split(".")
    while segs:
        seg = segs.pop(0)
        # a key that itself holds dots ("size_0.005"): the shortest run of segments that names a key
        while isinstance(obj, dict) and seg not in obj and segs:
            seg = f"{seg}.{segs.pop(0)}"
        if isinstance(obj, list):
            if "=" in seg:
                field, want = seg.split("=", 1)
                matches = [d for d in obj if isinstance(d, dict) and str(d.get(field)) == want]
                if not matches:
                    raise KeyError(f"no item with {field}={want}")
                obj = matches[0]
            else:
                obj = obj[int(seg)]
        else:
            obj = obj[seg]
    return obj


def number_matches(text: str, value) -> bool:
    """True if ``text`` (as printed in the docs) is ``value`` at the printed precision."""
    t = text.strip().replace(",", "").replace("\u2212", "-")
    pct = t.endswith("%")
    t = t.rstrip("%").strip()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return t == str(value)
    shown = float(t)
    mant = t.lower().split("e")[0]
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    if "e" in t.lower():
        tol = 0.5 * 10.0 ** (-decimals) * 10.0 ** math.floor(math.log10(abs(shown))) if shown else 0.0
    else:
        tol = 0.5 * 10.0 ** (-decimals)
    tol += 1e-12 * max(1.0, abs(shown))
    candidates = [value, 100.0 * value] if pct else [value]
    return any(abs(float(c) - shown) <= tol for c in candidates)


def doc_links() -> list[tuple[str, str, str, str]]:
    links = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc)) as f:
            text = f.read()
        base = os.path.dirname(doc)  # links are relative to the document, as a reader's viewer resolves them
        links += [(doc, m.group(1), os.path.normpath(os.path.join(base, m.group(2))), m.group(3))
                  for m in _LINK.finditer(text)]
    return links


def test_links_are_found_relative_to_their_document(tmp_path):
    text = "x [1.5](../results/a/b/metrics.json#k.0) y [2](results/c/d/config.json#wall_time_s/60)"
    found = [(m.group(1), m.group(2), m.group(3)) for m in _LINK.finditer(text)]
    assert found == [("1.5", "../results/a/b/metrics.json", "k.0"), ("2", "results/c/d/config.json", "wall_time_s/60")]


def test_number_matching_rules():
    assert number_matches("0.0234", 0.02341)
    assert not number_matches("0.0234", 0.0236)
    assert number_matches("66%", 0.661)
    assert number_matches("98.06%", 98.06)
    assert not number_matches("66%", 0.67)
    assert number_matches("1,000", 1000)
    assert number_matches("1.0e-04", 1.04e-4)
    assert not number_matches("1.0e-04", 1.2e-4)
    assert number_matches("13.5", 13.46)
    assert resolve({"rows": [{"name": "a", "v": 1}, {"name": "b", "v": 2}]}, "rows.name=b.v") == 2
    assert resolve({"x": [5, 6]}, "x.1") == 6
    assert resolve({"hcr": {"size_0.005": {"median": 0.3}}}, "hcr.size_0.005.median") == 0.3  # a key with a dot


@pytest.mark.parametrize("run", _result_dirs())
def test_committed_run_is_complete(run):
    d = os.path.join(RESULTS, run)
    for name in ("report.md", "metrics.json", "config.json"):
        assert os.path.isfile(os.path.join(d, name)), f"results/{run} lacks {name}"
    info = _strict_load(os.path.join(d, "config.json"))
    for field in ("git_commit", "time_utc", "machine", "versions", "wall_time_s", "config"):
        assert info.get(field) is not None, f"results/{run}/config.json lacks {field}"
    assert info["machine"].get("cpu_model") and info["machine"].get("cpu_count")
    assert info["versions"].get("jax")
    metrics = _strict_load(os.path.join(d, "metrics.json"))
    claims = metrics.get("claims")
    assert isinstance(claims, list) and claims, f"results/{run}/metrics.json has no claims"
    for c in claims:
        assert set(c) == {"name", "holds", "detail"} and isinstance(c["holds"], bool), c
    with open(os.path.join(d, "report.md")) as f:
        report = f.read()
    held = sum(c["holds"] for c in claims)
    assert "## Claims" in report
    assert f"{held} of {len(claims)} paper findings" in report, "report.md and metrics.json disagree on the claims"
    for c in claims:
        assert c["name"] in report


def test_docs_quote_only_committed_numbers():
    links = doc_links()
    problems = []
    for doc, text, target, path in links:
        file = os.path.join(ROOT, target)
        key, _, div = path.partition("/")
        if not os.path.isfile(file):
            problems.append(f"{doc}: [{text}] points at missing {target}")
            continue
        try:
            value = resolve(_strict_load(file), key)
        except (KeyError, IndexError, ValueError, TypeError) as err:
            problems.append(f"{doc}: [{text}] -> {target}#{path}: {err!r}")
            continue
        if div:
            value = value / float(div)
        if not number_matches(text, value):
            problems.append(f"{doc}: [{text}] but {target}#{path} is {value!r}")
    assert not problems, "\n".join(problems)
