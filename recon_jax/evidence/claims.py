"""Claims a run checks, and their verdicts: holds, fails, or undecided when the data cannot decide.

A claim (:func:`claim`) is a finding the run checks, with the numbers behind it. In its structured form it rests on
:func:`comparison` s (a value, its confidence interval, a threshold, a relation and a tolerance fixed before the
run), from which its verdict follows: "fails" if any comparison fails (its whole interval on the wrong side),
"holds" if all hold, "undecided" otherwise (an interval straddles its threshold). A comparison that cannot fail (a
probability against a bound of 1) is vacuous (:func:`is_vacuous`) and refused: such numbers are context. Claims
without a verdict (``claim(name, holds, detail)``) are the form of results made before verdicts existed; a run's
claims carry verdicts all or none (:func:`check_claims`). :func:`recon_jax.evidence.run.finish_run` writes them
into metrics.json and report.md (:func:`claims_markdown`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["VERDICTS", "comparison", "paired_comparison", "student_t_half_width", "is_vacuous", "claim",
           "check_claims", "claims_markdown"]


VERDICTS = ("holds", "fails", "undecided")
"""A claim's verdict: the data decide it either way, or they cannot (an interval straddles the threshold)."""

_RELATIONS = ("<=", ">=")
_VACUITY = 1e-3  # a threshold within 0.1% of the statistic's range from its end cannot be missed (ReRo bound >= 0.999)


def _finite_or_none(name, v):
    if v is None:
        return None
    v = float(v)
    if v != v:
        raise ValueError(f"{name} must not be NaN")
    return v


def comparison(what: str, value, relation: str, threshold, *, interval=None, tolerance: float = 0.0,
               possible=None) -> dict:
    """One comparison behind a claim, ``value <relation> threshold``, with its verdict.

    Verdict, with ``(low, high)`` the confidence interval of the value (the value itself when there is none; an
    unknown end is the end of ``possible``):

    - ``"<="``: fails if ``low > threshold`` (the whole interval lies above it); holds if
      ``high <= threshold + tolerance``; undecided otherwise;
    - ``">="``: fails if ``high < threshold``; holds if ``low >= threshold - tolerance``; undecided otherwise.

    ``tolerance`` >= 0 is the excess (shortfall) the claim accepts as practically equal, fixed before the run (a
    bound that an attack reaches exactly can otherwise never be confirmed). ``possible = (min, max)`` is the range
    the statistic can take (None: unbounded); a run that cannot reach the threshold at all (``max < threshold -
    tolerance`` for ``">="``) is undecided, not failed. A comparison that cannot fail (``"<="`` with the threshold
    at the top of the possible range, e.g. a probability against a ReRo bound of 1) is vacuous
    (:func:`is_vacuous`), and :func:`claim` refuses it: report such numbers as context.

    Args:
      what: what is compared (e.g. ``"DP sigma=4 k=10: success"``).
      value: the estimate.
      relation: ``"<="`` or ``">="``.
      threshold: the threshold.
      interval: ``(low, high)`` confidence interval of the value (either end may be None), or None.
      tolerance: >= 0.
      possible: ``(min, max)`` of the statistic (either may be None), or None.

    Returns:
      A dict ``{what, value, relation, threshold, interval, tolerance, possible, verdict}``.

    Raises:
      ValueError: for an unknown relation, a negative tolerance or NaN numbers.

    >>> comparison("success", 0.73, ">=", 0.75, interval=(0.65, 0.81))["verdict"]
    'undecided'
    >>> comparison("success", 0.02, "<=", 0.2, interval=(0.0, 0.05), possible=(0, 1))["verdict"]
    'holds'
    """
    if relation not in _RELATIONS:
        raise ValueError(f"relation must be one of {_RELATIONS}, got {relation!r}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    value = _finite_or_none("value", value)
    threshold = _finite_or_none("threshold", threshold)
    if value is None or threshold is None:
        raise ValueError("value and threshold are required")
    lo_p, hi_p = (None, None) if possible is None else (_finite_or_none("possible", v) for v in possible)
    low, high = (value, value) if interval is None else (_finite_or_none("interval", v) for v in interval)
    low = (lo_p if lo_p is not None else -float("inf")) if low is None else low
    high = (hi_p if hi_p is not None else float("inf")) if high is None else high
    if relation == "<=":
        unreachable = lo_p is not None and lo_p > threshold + tolerance
        verdict = "fails" if low > threshold else ("holds" if high <= threshold + tolerance else "undecided")
    else:
        unreachable = hi_p is not None and hi_p < threshold - tolerance
        verdict = "fails" if high < threshold else ("holds" if low >= threshold - tolerance else "undecided")
    if unreachable and verdict == "fails":
        verdict = "undecided"
    return {"what": str(what), "value": value, "relation": relation, "threshold": threshold,
            "interval": None if interval is None else [None if v is None else float(v) for v in interval],
            "tolerance": float(tolerance), "possible": None if possible is None else [lo_p, hi_p],
            "verdict": verdict}


def student_t_half_width(std_error: float, n: int, alpha: float) -> float:
    """Half-width of the Student-t interval of a mean from ``n`` values with standard error ``std_error``, each end
    a one-sided bound at level ``alpha`` (so two-sided at ``1 - 2 alpha``): ``t_{1 - alpha, n - 1} * std_error``;
    infinite for fewer than two values (nothing is known about the spread).

    >>> round(student_t_half_width(1.0, 10, 0.025), 4)  # scipy.stats.t.ppf(0.975, 9)
    2.2622
    >>> student_t_half_width(1.0, 1, 0.05)
    inf
    """
    from scipy import stats

    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    if n < 2:
        return float("inf")
    return float(stats.t.ppf(1.0 - alpha, n - 1)) * float(std_error)


def paired_comparison(what: str, a, b, relation: str, *, alpha: float, tolerance: float = 0.0) -> dict:
    """A comparative finding on paired samples (A and B measured on the same targets): the :func:`comparison` of
    ``mean(a - b) <relation> 0`` with the Student-t interval of the mean difference, two-sided at ``1 - 2 alpha``.

    Its verdict is that of a one-sided paired t-test at level ``alpha``: "holds" exactly when the test rejects
    "no difference" in the claimed direction (for ``"<="``: A below B), "fails" when the test in the opposite
    direction rejects, "undecided" otherwise (e.g. when A and B do not differ). Fewer than two pairs decide nothing
    (interval ``(None, None)``), and neither do pairs that all agree exactly (every difference 0: the t statistic
    is 0 / 0 and the test undefined, ``scipy.stats.ttest_rel`` gives p = NaN); differences that are all equal and
    nonzero give an infinite t statistic and a zero-width interval, which the test rejects. A claim resting on
    several such comparisons divides ``alpha`` among them (Bonferroni) if a false "fails" is to stay below
    ``alpha``.

    Args:
      what: what is compared (e.g. ``"PCA - MLP MSE"``).
      a, b: paired 1-D samples of equal length (finite).
      relation: ``"<="`` (A below B) or ``">="`` (A above B).
      alpha: one-sided level in (0, 0.5).
      tolerance: as in :func:`comparison`.

    Raises:
      ValueError: for unequal lengths, non-finite values or alpha outside (0, 0.5).

    >>> paired_comparison("a - b", [1.0, 2.0, 3.0, 4.0], [2.0, 3.1, 3.9, 5.2], "<=", alpha=0.05)["verdict"]
    'holds'
    >>> paired_comparison("a - b", [1.0, 2.0, 3.0, 4.0], [1.1, 1.9, 3.1, 3.9], "<=", alpha=0.05)["verdict"]
    'undecided'
    >>> c = paired_comparison("a - b", [0.1, 0.2, 0.3], [0.1, 0.2, 0.3], ">=", alpha=0.05)  # identical: no test
    >>> c["verdict"], c["interval"]
    ('undecided', [None, None])
    """
    import math

    import numpy as np

    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired samples must have equal lengths, got {a.size} and {b.size}")
    d = a - b
    if not np.all(np.isfinite(d)):
        raise ValueError(f"{what}: paired samples must be finite")
    if d.size == 0:
        raise ValueError(f"{what}: no pairs")
    mean = float(d.mean())
    std = float(d.std(ddof=1)) if d.size >= 2 else 0.0
    if d.size < 2 or (std == 0.0 and mean == 0.0):  # no spread known, or t = 0 / 0: the test decides nothing
        return comparison(what, mean, relation, 0.0, interval=(None, None), tolerance=tolerance)
    half = student_t_half_width(std / math.sqrt(d.size), d.size, alpha)
    return comparison(what, mean, relation, 0.0, interval=(mean - half, mean + half), tolerance=tolerance)


def is_vacuous(comp: dict) -> bool:
    """Whether a :func:`comparison` cannot fail: ``"<="`` with the threshold within 0.1% of the statistic's range
    of its maximum (a success probability against a ReRo bound >= 0.999), or ``">="`` likewise at its minimum.

    >>> is_vacuous(comparison("success", 0.9, "<=", 0.9995, possible=(0, 1)))
    True
    >>> is_vacuous(comparison("success", 0.9, "<=", 0.99, possible=(0, 1)))
    False
    """
    lo_p, hi_p = comp.get("possible") or (None, None)
    width = hi_p - lo_p if lo_p is not None and hi_p is not None else max(1.0, abs(comp["threshold"]))
    if comp["relation"] == "<=":
        return hi_p is not None and comp["threshold"] >= hi_p - _VACUITY * width
    return lo_p is not None and comp["threshold"] <= lo_p + _VACUITY * width


def _aggregate(verdicts) -> str:
    verdicts = list(verdicts)
    if "fails" in verdicts:
        return "fails"
    return "holds" if all(v == "holds" for v in verdicts) else "undecided"


def claim(name: str, holds: Any = None, detail: str = "", *, verdict: str | None = None,
          comparisons: list | None = None) -> dict:
    """A finding the run checks: ``{"name", "holds", "detail"}`` plus, in the structured form, ``"verdict"``
    (holds / fails / undecided) and the ``"comparisons"`` it rests on.

    Three forms:

    - ``claim(name, holds, detail)``: decided on the numbers in ``detail`` (the form of the results committed
      before verdicts existed; no verdict field, and :func:`~recon_jax.evidence.run.finish_run` refuses it);
    - ``claim(name, detail=..., comparisons=[comparison(...), ...])``: the verdict is "fails" if any comparison
      fails, "holds" if all hold, "undecided" otherwise; ``holds = (verdict == "holds")``. A vacuous comparison
      (:func:`is_vacuous`) is refused: a claim must be able to fail;
    - ``claim(name, holds, detail, verdict=...)``: a verdict decided by the caller (``holds`` must agree).

    >>> claim("attack beats oracle", 0.01 < 0.02, "MSE 0.01 vs oracle 0.02")
    {'name': 'attack beats oracle', 'holds': True, 'detail': 'MSE 0.01 vs oracle 0.02'}
    >>> c = claim("success >= 0.75 of the bound", detail="0.73 (0.65-0.81)",
    ...           comparisons=[comparison("ratio", 0.73, ">=", 0.75, interval=(0.65, 0.81))])
    >>> c["verdict"], c["holds"]
    ('undecided', False)
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"claim name must be a non-empty string, got {name!r}")
    if comparisons is not None:
        comparisons = list(comparisons)
        if not comparisons:
            raise ValueError(f"claim {name!r}: comparisons must not be empty (drop a claim with nothing to decide)")
        vacuous = [c["what"] for c in comparisons if is_vacuous(c)]
        if vacuous:
            raise ValueError(f"claim {name!r}: comparisons {vacuous} cannot fail (report them as context)")
        agg = _aggregate(c["verdict"] for c in comparisons)
        if verdict is not None and verdict != agg:
            raise ValueError(f"claim {name!r}: verdict {verdict!r} disagrees with its comparisons ({agg!r})")
        verdict = agg
    if verdict is not None:
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
        if holds is not None and bool(holds) != (verdict == "holds"):
            raise ValueError(f"claim {name!r}: holds={bool(holds)} disagrees with verdict {verdict!r}")
        out = {"name": name, "holds": verdict == "holds", "detail": str(detail), "verdict": verdict}
        if comparisons is not None:
            out["comparisons"] = comparisons
        return out
    if holds is None:
        raise ValueError(f"claim {name!r} needs holds, a verdict or comparisons")
    return {"name": name, "holds": bool(holds), "detail": str(detail)}


_LEGACY_KEYS = {"name", "holds", "detail"}
_STRUCTURED_KEYS = _LEGACY_KEYS | {"verdict", "comparisons"}


def check_claims(claims: list[dict]) -> bool:
    """Validates claims made by :func:`claim`; returns whether they carry verdicts (all or none do)."""
    for c in claims:
        keys = set(c)
        if keys != _LEGACY_KEYS and not (_LEGACY_KEYS | {"verdict"} <= keys <= _STRUCTURED_KEYS):
            raise ValueError(f"a claim must be made with claim(...), got {c!r}")
    structured = {"verdict" in c for c in claims}
    if len(structured) > 1:
        raise ValueError("a run's claims must all carry verdicts or none (mixing claim(name, holds, detail) with "
                         "verdict claims)")
    return structured == {True}


def claims_markdown(claims: list[dict]) -> str:
    """The report's Claims section: how many hold (and, with verdicts, fail or are undecided), then one row per
    claim with its numbers."""
    held = sum(c["holds"] for c in claims)
    head = f"{held} of {len(claims)} paper findings checked by this run hold"
    if claims and all("verdict" in c for c in claims):
        failed = sum(c["verdict"] == "fails" for c in claims)
        undecided = sum(c["verdict"] == "undecided" for c in claims)
        why = ": the data cannot decide them at this run's sample sizes" if undecided else ""
        lines = ["## Claims", "", f"{head} ({failed} fail{'s' if failed == 1 else ''}, {undecided} undecided{why}).",
                 "",
                 "| claim | verdict | numbers |", "|---|---|---|"]
        marks = {"holds": "holds", "fails": "**fails**", "undecided": "*undecided*"}
        lines += [f"| {c['name']} | {marks[c['verdict']]} | {c['detail']} |" for c in claims]
        return "\n".join(lines) + "\n"
    lines = ["## Claims", "", f"{head}.", ""]
    if claims:
        lines += ["| claim | holds | numbers |", "|---|---|---|"]
        for c in claims:
            lines.append(f"| {c['name']} | {'yes' if c['holds'] else '**NO**'} | {c['detail']} |")
    return "\n".join(lines) + "\n"
