"""Host-side search for the edge of a monotone feasibility region: the calibrations that run an accountant on the
host (PLD epsilon, the trade-off ReRo bound) and so cannot bisect under ``jit``.

Each evaluation of such an accountant costs a second or more, so the search is a safeguarded secant of log(value)
against the log of the parameter (epsilons and ReRo bounds are close to powers of it), not a plain bisection. For
DP-SGD's PLD epsilon at a relative tolerance of 1e-4 it takes at most 7 evaluations per target in
tests/accounting/test_dpsgd.py's case, where log-bisection from the same factor-2 bracket takes 15 (a bracket that
has to grow first costs one evaluation per doubling in either). Bisection takes over wherever interpolation does
not halve the bracket."""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional


class Found(NamedTuple):
    """Outcome of :func:`feasible_edge`.

    ``kind`` is ``"edge"`` (``x`` feasible, and ``x`` moved by a factor ``1 + rtol`` towards the infeasible side is
    not), ``"none"`` (nothing feasible up to the limit on the feasible side; ``x`` is nan), or ``"limit"`` (feasible
    all the way to the limit on the infeasible side; ``x`` is the last feasible point tried).
    """

    kind: str
    x: float


def feasible_edge(value: Callable[[float], Optional[float]], target: float, start: float, *, increasing: bool,
                  limits: tuple[float, float], rtol: float) -> Found:
    """The edge of ``{x > 0 : value(x) <= target}``, found to a relative tolerance ``rtol``.

    ``value`` is monotone in ``x`` (``increasing``: the feasible set is ``(0, edge]``; otherwise ``[edge, inf)``) and
    may return ``None`` where it cannot evaluate, which counts as infeasible (NaN raises ``ValueError``). ``target``
    and the values are positive (epsilons, ReRo bounds: close to powers of x), so the interpolation is of log(value)
    against log(x). The bracket grows from ``start`` by factors of 2 within ``limits`` = (lowest, highest) x to try,
    then shrinks.
    """
    if not rtol > 0:
        raise ValueError(f"rtol must be > 0; got {rtol}")
    if not target > 0:
        raise ValueError(f"target must be > 0; got {target}")
    if not 0 < start < math.inf:
        raise ValueError(f"start must be finite and > 0; got {start}")
    up = -1.0 if increasing else 1.0  # the direction (in log x) in which feasibility is kept
    low, high = math.log(limits[0]), math.log(limits[1])

    def probe(u: float) -> tuple[bool, Optional[float]]:
        """(feasible, log(value / target)), the log clipped to the side feasibility says (rounding)."""
        v = value(math.exp(u))
        if v is None:
            return False, None
        if math.isnan(v):
            raise ValueError(f"the value searched is NaN at {math.exp(u)!r}: no edge to find")
        g = (math.log(v) if v > 0 else -math.inf) - math.log(target)
        return (True, min(g, 0.0)) if v <= target else (False, max(g, 0.0))

    def beyond(u: float, direction: float) -> bool:
        return u > high if direction > 0 else u < low

    u = math.log(start)
    ok, g = probe(u)
    step = math.log(2.0)
    last_out = None  # the latest infeasible point of the walk towards feasibility
    while not ok:  # walk towards feasibility
        last_out = (u, g)
        u += up * step
        if beyond(u, up):
            return Found("none", math.nan)
        ok, g = probe(u)
    a, ga = u, g  # feasible end
    if last_out is not None:
        b, gb = last_out
    else:
        b = a - up * step
        while True:  # walk away from it until infeasible
            if beyond(b, -up):
                return Found("limit", math.exp(a))
            ok, gb = probe(b)
            if not ok:
                break
            a, ga, b = b, gb, b - up * step
    return Found("edge", math.exp(_shrink(probe, (a, ga), (b, gb), math.log1p(rtol))))


def _secant(p0: tuple, p1: tuple) -> Optional[float]:
    """Root of the line through two (u, g) points; None where a g is missing or infinite or the two are equal."""
    (u0, g0), (u1, g1) = p0, p1
    if g0 is None or g1 is None or not (math.isfinite(g0) and math.isfinite(g1)) or g0 == g1:
        return None
    return u1 - g1 * (u1 - u0) / (g1 - g0)


def _shrink(probe, feasible: tuple, infeasible: tuple, tol: float) -> float:
    """Shrink the bracket between a feasible and an infeasible point (u = log x, g = log(value / target), None where
    the value is refused) to width <= tol; its feasible end.

    Each probe is the secant root of the two latest probes (superlinear even when they all land on one side of the
    root), or of the bracket's ends where that falls outside the bracket, or the bracket's middle where neither can
    be formed or three probes have not halved the bracket. It keeps tol/2 from both ends, so once the estimate is
    that close to the root the next probe lands on the root's far side and closes the bracket.
    """
    (a, ga), (b, gb) = feasible, infeasible
    latest = [feasible, infeasible]
    widths = [math.inf] * 3  # bracket widths before each probe
    while abs(b - a) > tol:
        left, right = min(a, b), max(a, b)
        c = None
        if right - left <= 0.5 * widths[-3]:
            for guess in (_secant(*latest[-2:]), _secant((a, ga), (b, gb))):
                if guess is not None and left <= guess <= right:
                    c = min(max(guess, left + 0.5 * tol), right - 0.5 * tol)
                    break
        if c is None:
            c = 0.5 * (left + right)
        widths.append(right - left)
        ok, g = probe(c)
        latest.append((c, g))
        if ok:
            a, ga = c, g
        else:
            b, gb = c, g
    return a
