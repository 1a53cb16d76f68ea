r"""Exact success of the prior-aware attack's optimal guess for crafted candidate geometries, and a per-pair
model that predicts the success from measured separations (:mod:`recon_jax.attacks.prior_aware`).

Exact optimum of crafted geometries (full batch). When every candidate's clipped gradient has norm C at every
step and the geometry is fixed, the log-likelihoods are a Gaussian vector and the Bayes-optimal success has a
closed form (:func:`crafted_success_probability`), with ``mu = sqrt(T) / sigma``:

- orthogonal: ``P = int phi(x - mu) Phi(x)^(k-1) dx`` (:func:`orthogonal_success_probability`);
- centred regular simplex (pairwise cosine ``-1/(k-1)``): the same with ``mu sqrt(k / (k - 1))``. Proof: the k
  simplex vectors are ``a (e_j - 1/k)`` in k coordinates (``a = C sqrt(k / (k - 1))``); the guess maximises
  ``<y, e_j - 1/k> = y_j - mean(y)``, i.e. ``y_j``, where ``y = a (e_z - 1/k) sqrt(T) / (sigma C) + N(0, I_k)``
  in noise units; dropping the common ``-a/k`` it is the orthogonal game at ``mu sqrt(k / (k - 1))``. At k = 2
  (antipodal) this is ``Phi(mu)``, the GDP ReRo bound ``Phi(Phi^{-1}(1/2) + mu)`` itself: the bound is attained.

The pairwise distances of the simplex are the largest k equal-norm vectors can have, which is why it beats
orthogonal canaries (0.944 vs 0.911 of the bound at k = 10, mu = 2.5). :func:`predicted_success` extends the
formula to measured, unequal separations (a per-pair model of the gap between an attack and its bound).

Notation: ``k`` prior size; ``T`` steps; ``sigma`` noise multiplier; ``mu = sqrt(T) / sigma``; ``phi``, ``Phi``
the standard normal density and CDF. Host-side (SciPy).
"""

from __future__ import annotations

import math

import numpy as np

from recon_jax._validation import check_integer

__all__ = ["orthogonal_success_probability", "crafted_success_probability", "predicted_success"]


def orthogonal_success_probability(k: int, mu: float, sample_rate: float = 1.0) -> float:
    """Success of the optimal guess among k candidates with orthogonal, full-norm gradients (full batch).

    With T steps at noise multiplier sigma the sufficient statistics are ``X_0 ~ N(mu, 1)`` for the target and
    ``X_j ~ N(0, 1)`` for the others (``mu = sqrt(T) / sigma``), so ``P[success] = int phi(x - mu) Phi(x)^(k-1)
    dx`` (numerical quadrature over ``u = x - mu`` in ``[-12, 12]``; host-side). Only ``sample_rate = 1`` has this
    closed form. The probability increases with mu, from ``1 / k`` at ``mu = 0`` to its limit 1 at ``mu = inf``
    (noiseless: the target always wins), which ``mu = inf`` returns.

    Args:
      k: prior size, an integer >= 1.
      mu: ``sqrt(T) / sigma``, in ``[0, inf]``.
      sample_rate: must be 1.

    Returns:
      The success probability (float).

    Raises:
      ValueError: for k < 1, mu < 0 or NaN, or sample_rate != 1.

    >>> round(orthogonal_success_probability(2, 0.0), 6), orthogonal_success_probability(2, float("inf"))
    (0.5, 1.0)
    """
    from scipy import integrate, stats

    check_integer("k", k, 1)
    if not mu >= 0:
        raise ValueError(f"mu must be >= 0, got {mu}")
    if sample_rate != 1.0:
        raise ValueError("orthogonal_success_probability has a closed form only for sample_rate = 1")
    # In u = x - mu the window does not move with mu: mu = inf gives Phi(u + mu) = 1, the limit, not an empty
    # window (inf - 12, inf + 12).
    f = lambda u: stats.norm.pdf(u) * stats.norm.cdf(u + mu) ** (k - 1)  # noqa: E731
    val, _ = integrate.quad(f, -12.0, 12.0, epsabs=1e-12, limit=200)
    return float(min(val, 1.0))


def crafted_success_probability(kind: str, k: int, mu: float) -> float:
    """Exact success of the optimal guess among k gradient canaries of geometry ``kind`` (full batch, host-side).

    ``"orthogonal"``: :func:`orthogonal_success_probability` ``(k, mu)``; ``"simplex"`` (centred regular simplex,
    antipodal at k = 2): the same at ``mu sqrt(k / (k - 1))`` (module docstring). ``mu = sqrt(T) / sigma`` for
    full-norm canaries over T steps at noise multiplier sigma. At k = 2 the simplex gives ``Phi(mu)``, the GDP
    ReRo bound at kappa = 1/2.

    Args:
      kind: ``"orthogonal"`` or ``"simplex"``.
      k: prior size, an integer >= 2 (>= 1 for orthogonal).
      mu: ``sqrt(T) / sigma``, in ``[0, inf]`` (``inf``, no noise, gives 1).

    Returns:
      The success probability (float).

    Raises:
      ValueError: for an unknown kind or out-of-range k or mu.

    >>> from scipy.stats import norm
    >>> round(crafted_success_probability("simplex", 2, 1.5), 9) == round(float(norm.cdf(1.5)), 9)
    True
    """
    if kind == "orthogonal":
        return orthogonal_success_probability(k, mu)
    if kind != "simplex":
        raise ValueError(f"kind must be 'orthogonal' or 'simplex', got {kind!r}")
    check_integer("k", k, 2)  # a simplex has at least two vertices
    if not mu >= 0:
        raise ValueError(f"mu must be >= 0, got {mu}")
    return orthogonal_success_probability(k, float(mu) * math.sqrt(k / (k - 1.0)))


_GRID = np.linspace(-12.0, 12.0, 2401)  # trapezoid nodes of the per-pair model (step 0.01; see its test)


def predicted_success(separation, target_index, prior_size: int | None = None) -> np.ndarray:
    """Success predicted by a per-pair model from each trial's measured separations, averaged over trials, ``[S]``.

    For trial i with target z and separations ``d_j`` (``GameResult.separation``: the squared mu of the test of
    target vs candidate j), the model treats each other candidate as a full-norm orthogonal one at that pair's
    distance, sharing the target's noise: ``P_i = int phi(u) prod_{j != z} Phi(u + sqrt(d_j / 2)) du``. It is exact
    for orthogonal (``d = 2 mu^2``) and simplex (``d = 2 mu^2 k / (k - 1)``) gradient canaries, where it gives
    :func:`crafted_success_probability`; for records, whose gradients shrink and align unevenly, it is a model, and
    comparing it with the measured success tests whether the separations explain the gap to the bound. Full batch
    only (the mixture likelihood of Poisson sampling is not Gaussian). Host-side (SciPy), trapezoid rule on
    ``[-12, 12]`` with step 0.01; identical trials are integrated once.

    Args:
      separation: ``[S, N, k]`` (``GameResult.separation``).
      target_index: ``[N]`` the target of each trial.
      prior_size: use the first ``prior_size`` candidates (default all k); every target must be among them.

    Returns:
      ``[S]`` mean predicted success per noise level.

    Raises:
      ValueError: for inconsistent shapes, a prior size out of range or negative or NaN separations.

    >>> import numpy as np
    >>> d = np.full((1, 1, 10), 2 * 2.5**2); d[0, 0, 0] = 0.0          # orthogonal canaries at mu = 2.5
    >>> round(float(predicted_success(d, [0])[0]), 4), round(orthogonal_success_probability(10, 2.5), 4)
    (0.8092, 0.8092)
    """
    from scipy import special

    sep = np.asarray(separation, np.float64)
    if sep.ndim != 3:
        raise ValueError(f"separation must be [S, N, k], got shape {sep.shape}")
    k = sep.shape[-1] if prior_size is None else int(prior_size)
    if not 2 <= k <= sep.shape[-1]:
        raise ValueError(f"prior_size must be in [2, {sep.shape[-1]}], got {prior_size}")
    t = np.asarray(target_index).reshape(-1)
    if t.shape != (sep.shape[1],) or np.any(t < 0) or np.any(t >= k):
        raise ValueError(f"target_index must be [{sep.shape[1]}] ints in [0, {k})")
    sep = sep[..., :k]
    if np.isnan(sep).any() or np.any(sep < -1e-6 * np.max(np.abs(sep), initial=1.0)):
        raise ValueError("separation must be >= 0 (inf allowed, NaN not)")
    keep = np.ones(sep.shape[1:], bool)
    keep[np.arange(sep.shape[1]), t] = False
    shifts = np.sqrt(np.maximum(sep[:, keep].reshape(sep.shape[0] * sep.shape[1], k - 1), 0.0) / 2.0)
    rows, inverse = np.unique(shifts, axis=0, return_inverse=True)
    weights = np.exp(-0.5 * _GRID**2) / math.sqrt(2.0 * math.pi)
    per_row = np.empty(rows.shape[0])
    for start in range(0, rows.shape[0], 16):
        block = rows[start:start + 16]
        log_prod = np.sum(special.log_ndtr(_GRID[None, None, :] + block[:, :, None]), axis=1)  # [b, grid]
        per_row[start:start + 16] = np.trapezoid(weights * np.exp(log_prod), _GRID, axis=-1)
    return per_row[inverse.reshape(-1)].reshape(sep.shape[0], sep.shape[1]).mean(axis=1)
