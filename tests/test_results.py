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


# Committed runs whose claims predate verdicts (name / holds / detail only) and that this machine cannot rerun in
# a session: their code now writes verdicts (experiments/balle_mnist_report.py), and each leaves this list when rerun.
LEGACY_CLAIMS = {
    "balle_mnist/gpu": "made on an H200; needs an accelerator",
    "device/h200": "the device check of an H200 session; needs an accelerator",
}


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
    problems = claim_problems(claims)
    assert not problems, f"results/{run}: " + "; ".join(problems)
    if run in LEGACY_CLAIMS:  # made before verdicts existed, not rerun yet: the list only shrinks
        assert not any("verdict" in c for c in claims), f"results/{run} carries verdicts: drop it from LEGACY_CLAIMS"
    else:
        assert all("verdict" in c for c in claims), (
            f"results/{run}: every claim needs a verdict (holds / fails / undecided); rerun it at the current code")
    with open(os.path.join(d, "report.md")) as f:
        report = f.read()
    held = sum(c["holds"] for c in claims)
    assert "## Claims" in report
    assert f"{held} of {len(claims)} paper findings" in report, "report.md and metrics.json disagree on the claims"
    # the machine line once promised that a rerun elsewhere "agrees within the stated uncertainty"; the tygert
    # rerun on another CPU did not (disjoint intervals): each report carries the sentence the harness writes now
    assert "agrees within the stated uncertainty" not in report, f"results/{run}: the old machine sentence"
    for c in claims:
        assert c["name"] in report
        if "verdict" in c:  # the report shows each verdict beside its claim
            assert re.search(re.escape(c["name"]) + r" \| \**\*?" + c["verdict"], report), c["name"]


# Structured claims (recon_jax.evidence.claims.claim with a verdict): verdicts and vacuity are re-derived here from
# the numbers each comparison carries, independently of the code that wrote them.
_VERDICTS = ("holds", "fails", "undecided")
_LEGACY = {"name", "holds", "detail"}


def _verdict(comp) -> str:
    """The verdict of one comparison from its numbers (rules of evidence.comparison, restated)."""
    thr, tol = comp["threshold"], comp["tolerance"]
    lo_p, hi_p = comp["possible"] or (None, None)
    low, high = comp["interval"] or (comp["value"], comp["value"])
    low = (-math.inf if lo_p is None else lo_p) if low is None else low
    high = (math.inf if hi_p is None else hi_p) if high is None else high
    if comp["relation"] == "<=":
        if low > thr:
            return "undecided" if lo_p is not None and lo_p > thr + tol else "fails"
        return "holds" if high <= thr + tol else "undecided"
    if high < thr:
        return "undecided" if hi_p is not None and hi_p < thr - tol else "fails"
    return "holds" if low >= thr - tol else "undecided"


def vacuous(comp) -> bool:
    """A comparison the data cannot fail: ``<=`` against (nearly) the largest value the statistic can take, e.g. a
    success probability against a ReRo bound >= 0.999; or ``>=`` against (nearly) its smallest."""
    lo_p, hi_p = comp["possible"] or (None, None)
    width = (hi_p - lo_p) if lo_p is not None and hi_p is not None else max(1.0, abs(comp["threshold"]))
    if comp["relation"] == "<=":
        return hi_p is not None and comp["threshold"] >= hi_p - 1e-3 * width
    return lo_p is not None and comp["threshold"] <= lo_p + 1e-3 * width


def claim_problems(claims) -> list[str]:
    """What is wrong with a run's claims: legacy claims (name/holds/detail, from results that predate verdicts) are
    accepted as they are; once one claim carries a verdict every claim must, with ``holds == (verdict == "holds")``,
    each comparison's verdict following from its numbers, the claim's verdict from its comparisons, and no
    comparison vacuous."""
    out = []
    structured = ["verdict" in c for c in claims]
    if any(structured) and not all(structured):
        out.append("some claims carry a verdict and some do not")
    for c in claims:
        if not isinstance(c.get("holds"), bool) or not _LEGACY <= set(c):
            out.append(f"malformed claim {c!r}")
            continue
        if "verdict" not in c:
            if set(c) != _LEGACY:
                out.append(f"{c['name']}: extra fields without a verdict")
            continue
        if set(c) - _LEGACY - {"verdict", "comparisons"}:
            out.append(f"{c['name']}: unknown fields {sorted(set(c) - _LEGACY)}")
        if c["verdict"] not in _VERDICTS or c["holds"] != (c["verdict"] == "holds"):
            out.append(f"{c['name']}: verdict {c['verdict']!r} with holds {c['holds']}")
        comps = c.get("comparisons")
        if comps is None:
            continue
        if not comps:
            out.append(f"{c['name']}: empty comparisons")
            continue
        verdicts = [_verdict(k) for k in comps]
        for k, v in zip(comps, verdicts):
            if k["verdict"] != v:
                out.append(f"{c['name']}: {k['what']} says {k['verdict']!r}, its numbers {v!r}")
            if vacuous(k):
                out.append(f"{c['name']}: {k['what']} cannot fail ({k['value']} {k['relation']} {k['threshold']} "
                           f"with possible range {k['possible']})")
        agg = "fails" if "fails" in verdicts else ("holds" if all(v == "holds" for v in verdicts) else "undecided")
        if c["verdict"] != agg:
            out.append(f"{c['name']}: verdict {c['verdict']!r}, comparisons give {agg!r}")
    return out


def _comp(value, relation, threshold, interval=None, tolerance=0.0, possible=(0, 1), verdict=None):
    comp = {"what": "x", "value": value, "relation": relation, "threshold": threshold, "interval": interval,
            "tolerance": tolerance, "possible": list(possible) if possible is not None else None}
    comp["verdict"] = verdict or _verdict(comp)
    return comp


# Committed runs made before runs listed their figures in metrics.json (2e4e988) that this machine cannot rerun as
# they were made: their PNGs are the run's own, but nothing in the run says so. Each leaves this list when rerun.
LEGACY_FIGURES = {
    "tygert_hcr/rerun_other_cpu": "the rerun on an AVX2-only EPYC, kept to show a CPU change moving the numbers",
}


@pytest.mark.parametrize("run", _result_dirs())
def test_committed_figures_are_the_ones_the_run_lists(run):
    """What ``publish`` copies now: the figures a run's metrics list under ``figures``, no PNG more or less. A
    result directory holding PNGs its metrics do not name was published by an older harness, which copied every
    PNG of the workdir, an earlier run's included."""
    d = os.path.join(RESULTS, run)
    figures = _strict_load(os.path.join(d, "metrics.json")).get("figures") or []
    listed = set(figures.values() if isinstance(figures, dict) else figures)
    present = {n for n in os.listdir(d) if n.endswith(".png")}
    assert listed <= present, f"results/{run} lists figures it lacks: {sorted(listed - present)}"
    if run in LEGACY_FIGURES:  # the list only shrinks
        assert present and not listed, f"results/{run} lists its figures now: drop it from LEGACY_FIGURES"
    else:
        assert present == listed, (f"results/{run} holds PNGs its metrics.json does not list under 'figures': "
                                   f"{sorted(present - listed)}; rerun it at the current code")


def test_legacy_lists_name_committed_runs():
    assert set(LEGACY_CLAIMS) <= set(_result_dirs()), "LEGACY_CLAIMS names a run that is not committed"
    assert set(LEGACY_FIGURES) <= set(_result_dirs()), "LEGACY_FIGURES names a run that is not committed"


def test_claim_checks_accept_legacy_and_flag_bad_structured_claims():
    legacy = {"name": "a", "holds": True, "detail": "1 < 2"}
    assert claim_problems([legacy]) == []
    ok = {"name": "b", "holds": True, "detail": "", "verdict": "holds",
          "comparisons": [_comp(0.02, "<=", 0.2, interval=[0.0, 0.05])]}
    assert claim_problems([ok]) == []
    assert claim_problems([legacy, ok]) == ["some claims carry a verdict and some do not"]
    # The ReRo-bound >= 0.999 pattern: a success rate "within" a bound of 1 cannot fail.
    vac = dict(ok, comparisons=[_comp(0.9, "<=", 0.9995, interval=[0.8, 0.95])])
    assert any("cannot fail" in p for p in claim_problems([vac]))
    # An interval that straddles the threshold is undecided, not held or failed.
    straddle = {"name": "c", "holds": False, "detail": "", "verdict": "fails",
                "comparisons": [_comp(0.73, ">=", 0.75, interval=[0.65, 0.81], possible=(0, None), verdict="fails")]}
    problems = claim_problems([straddle])
    assert any("its numbers 'undecided'" in p for p in problems) and any("comparisons give" in p for p in problems)
    wrong_holds = dict(ok, holds=False)
    assert any("with holds False" in p for p in claim_problems([wrong_holds]))


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
