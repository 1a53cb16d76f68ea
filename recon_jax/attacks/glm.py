"""Closed-form reconstruction attacks on generalised linear models (Balle et al. 2022, Sec. III-B, Thm 1, Thm 8).

Setting (informed adversary): the released model ``theta`` is the exact minimiser of the regularised negative
log-likelihood of a canonical-link GLM on ``D = D- u {z}``; the adversary knows ``theta`` and ``D-`` and wants
the unknown target ``z = (x, y)``.

Notation and conventions (this module):

| symbol | meaning |
|---|---|
| ``g^{-1}`` | inverse canonical link (``mean_fn``): identity (linear), sigmoid (logistic), exp (Poisson) |
| ``b`` | log-partition with ``b' = g^{-1}``: ``t^2/2``, ``softplus(t)``, ``exp(t)`` |
| objective | ``sum_i [b(<x_i, theta>) - y_i <x_i, theta>] + l2 * ||theta||^2`` (a *sum* over examples) |
| intercept | the first feature of every example is 1; ``fit_glm`` adds that column itself |

The stationarity condition ``sum_i x_i (g^{-1}(<x_i, theta>) - y_i) + 2 l2 theta = 0`` gives, with
``B = g^{-1}(X- theta) - Y-`` (Theorem 1, with the regulariser's factor 2 written out):

    x = (X-^T B + 2 l2 theta) / (X-_1^T B + 2 l2 theta_1),
    y = g^{-1}(<x, theta>) + X-_1^T B + 2 l2 theta_1.

A model fitted with the mean loss ``(1/n) sum_i ...`` and penalty ``l2 ||theta||^2`` is the sum-loss model with
penalty ``n * l2``; pass ``l2 * n`` in that case. Recovery is exact up to the optimisation tolerance of the
released model; it is independent of generalisation.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from recon_jax._validation import (FINITE, FINITE_NONNEGATIVE, FINITE_POSITIVE, Range, check_integer, guard,
                                   is_concrete, nan_if)
from recon_jax.bounds.dct import full_precision

__all__ = [
    "GLM_FAMILIES",
    "GLMFit",
    "add_intercept",
    "fit_glm",
    "glm_gradient",
    "reconstruct_glm",
    "reconstruct_least_squares_no_intercept",
]

GLM_FAMILIES = ("linear", "logistic", "poisson")

# The labels each family's likelihood is defined for (NaN fails every range).
_LABELS = {"linear": FINITE, "logistic": Range(lambda v: (v == 0) | (v == 1), "in {0, 1} (logistic labels)"),
           "poisson": FINITE_NONNEGATIVE._replace(allowed="finite and >= 0 (Poisson counts)")}


def _family_fns(family: str):
    if family == "linear":
        return (lambda t: 0.5 * t**2), (lambda t: t), (lambda t: jnp.ones_like(t))
    if family == "logistic":
        return jax.nn.softplus, jax.nn.sigmoid, (lambda t: jax.nn.sigmoid(t) * jax.nn.sigmoid(-t))
    if family == "poisson":
        return jnp.exp, jnp.exp, jnp.exp
    raise ValueError(f"family must be one of {GLM_FAMILIES}, got {family!r}")


def add_intercept(x: jax.Array) -> jax.Array:
    """Prepends a column of ones: ``[n, d] -> [n, d + 1]``.

    Args:
      x: features ``[n, d]`` (or any ``[..., d]``, at least 1-D; a single example ``[d]`` gives ``[d + 1]``).

    Returns:
      ``[..., d + 1]``: ``x`` with a leading feature equal to 1 in every example, in the dtype of ``x``.

    >>> import jax.numpy as jnp
    >>> add_intercept(jnp.array([[2., 3.], [4., 5.]]))
    Array([[1., 2., 3.],
           [1., 4., 5.]], dtype=float32)
    """
    x = jnp.asarray(x)
    return jnp.concatenate([jnp.ones((*x.shape[:-1], 1), x.dtype), x], axis=-1)


@full_precision
def glm_gradient(theta: jax.Array, x: jax.Array, y: jax.Array, family: str, l2: float = 0.0) -> jax.Array:
    """Gradient of the summed GLM objective at ``theta`` (features ``x`` already include any intercept column).

    ``sum_i x_i (g^{-1}(<x_i, theta>) - y_i) + 2 l2 theta``, the gradient of
    ``sum_i [b(<x_i, theta>) - y_i <x_i, theta>] + l2 ||theta||^2``; zero (up to ``tol``) at the optimum of
    :func:`fit_glm`. The inputs are not converted or checked (pass arrays, not lists); under ``jit``, ``family``
    must be static.

    Args:
      theta: parameters ``[d]``.
      x: features ``[n, d]``, including the intercept column if ``theta`` has one (:func:`add_intercept`).
      y: labels ``[n]`` (reals for linear, {0, 1} for logistic, counts for Poisson).
      family: ``"linear"``, ``"logistic"`` or ``"poisson"``.
      l2: regularisation strength of the objective's ``l2 ||theta||^2`` term.

    Returns:
      ``[d]``: the gradient at ``theta``.

    Raises:
      ValueError: if ``family`` is not one of :data:`GLM_FAMILIES`.

    At ``theta = 0`` a logistic model predicts 1/2, so the gradient is ``X^T (1/2 - y) = [0, -1/2]`` here; a
    least-squares line through all the points (``y = 1 + 2 t``) has gradient 0, and with ``l2 = 0.5`` at
    ``theta = (1, 1)`` the residuals ``(0, -1, -2)`` give ``X^T r + theta = (-3, -5) + (1, 1)``:

    >>> import jax.numpy as jnp
    >>> glm_gradient(jnp.zeros(2), jnp.array([[1., 0.], [1., 1.]]), jnp.array([0., 1.]), "logistic")
    Array([ 0. , -0.5], dtype=float32)
    >>> x, y = add_intercept(jnp.array([[0.], [1.], [2.]])), jnp.array([1., 3., 5.])
    >>> glm_gradient(jnp.array([1., 2.]), x, y, "linear")
    Array([0., 0.], dtype=float32)
    >>> glm_gradient(jnp.array([1., 1.]), x, y, "linear", l2=0.5)
    Array([-2., -4.], dtype=float32)
    """
    _, mean_fn, _ = _family_fns(family)
    return x.T @ (mean_fn(x @ theta) - y) + 2.0 * l2 * theta


class GLMFit(NamedTuple):
    """Result of :func:`fit_glm`: parameters (intercept first when fitted), iterations, final gradient norm."""

    theta: jax.Array
    num_iters: jax.Array
    grad_norm: jax.Array


# Every product at full precision (full_precision): a GPU's TF32 or a TPU's bfloat16 default products (about 1e-3 and
# 4e-3 relative) stall the float32 Newton fit short of its tolerance and move Theorem 1's recovery by 1e-2 to 1e-1.
@full_precision
@functools.partial(jax.jit, static_argnames=("family", "max_iter"))
def _newton(x, y, l2, tol, family, max_iter):
    b, mean_fn, var_fn = _family_fns(family)
    d = x.shape[1]

    def objective(theta):
        t = x @ theta
        return jnp.sum(b(t) - y * t) + l2 * jnp.sum(theta**2)

    def grad(theta):
        return x.T @ (mean_fn(x @ theta) - y) + 2.0 * l2 * theta

    def cond(state):
        _, it, gnorm = state
        return (it < max_iter) & (gnorm > tol)

    def body(state):
        theta, it, _ = state
        g = grad(theta)
        h = (x * var_fn(x @ theta)[:, None]).T @ x + 2.0 * l2 * jnp.eye(d, dtype=x.dtype)
        step = jnp.linalg.solve(h, g)
        f0 = objective(theta)
        slope = jnp.vdot(g, step)

        # Backtracking (Armijo) line search: halve until sufficient decrease, at most 30 times. Near the optimum the
        # decrease falls below the rounding error of the summed objective; without the slack the search would then
        # reject the full Newton step on rounding noise alone and stall at a gradient of ~1e-8 (seen in float64).
        slack = 64 * jnp.finfo(x.dtype).eps * (jnp.abs(f0) + 1.0)

        def ls_cond(s):
            alpha, k = s
            return (objective(theta - alpha * step) > f0 - 1e-4 * alpha * slope + slack) & (k < 30)

        alpha, _ = jax.lax.while_loop(ls_cond, lambda s: (s[0] * 0.5, s[1] + 1), (jnp.asarray(1.0, x.dtype), 0))
        theta = theta - alpha * step
        return theta, it + 1, jnp.linalg.norm(grad(theta))

    theta0 = jnp.zeros((d,), x.dtype)
    return jax.lax.while_loop(cond, body, (theta0, jnp.asarray(0), jnp.linalg.norm(grad(theta0))))


def fit_glm(
    x: jax.Array,
    y: jax.Array,
    family: str = "logistic",
    l2: float = 0.0,
    fit_intercept: bool = True,
    tol: float = 1e-10,
    max_iter: int = 100,
) -> GLMFit:
    """Fits a canonical-link GLM to optimality by damped Newton's method (the victim's training algorithm).

    Minimises ``sum_i [b(<x_i, theta>) - y_i <x_i, theta>] + l2 ||theta||^2``. The optimum is unique when
    ``l2 > 0`` or the data are in general position (and, for logistic regression, not separable).

    Args:
      x: features ``[n, d]`` (without the intercept column).
      y: labels ``[n]``: finite reals for linear, {0, 1} for logistic, finite counts >= 0 for Poisson.
      family: ``"linear"`` (ridge when ``l2 > 0``), ``"logistic"`` or ``"poisson"``.
      l2: regularisation strength, finite and >= 0.
      fit_intercept: prepend a column of ones (Theorem 1 needs it).
      tol: stop when the gradient norm is below this, finite and > 0 (use float64 for tolerances below ~1e-5).
      max_iter: Newton iterations at most, an integer >= 1 (static).

    Returns:
      ``GLMFit(theta [d (+1)], num_iters, grad_norm)``. Under ``jit`` with traced ``y``, ``l2`` or ``tol`` outside
      their ranges, ``theta`` and ``grad_norm`` are NaN.

    Raises:
      ValueError: for an unknown family, ``max_iter`` not an integer >= 1, shapes other than ``[n, d]`` and
        ``[n]``, or concrete ``y``, ``l2`` or ``tol`` outside the ranges above.

    >>> import jax.numpy as jnp
    >>> fit = fit_glm(jnp.array([[0.], [1.], [2.]]), jnp.array([1., 3., 5.]), "linear", tol=1e-5)
    >>> [round(float(t), 3) for t in fit.theta]
    [1.0, 2.0]
    """
    _family_fns(family)
    max_iter = check_integer("max_iter", max_iter, 1)
    bad = guard(("l2", l2, FINITE_NONNEGATIVE), ("tol", tol, FINITE_POSITIVE)) | guard(("y", y, _LABELS[family])).any()
    x, y = jnp.asarray(x), jnp.asarray(y)
    if x.ndim != 2 or y.shape != x.shape[:1]:
        raise ValueError(f"x must be [n, d] and y [n], got {x.shape} and {y.shape}")
    dtype = jnp.result_type(x, jnp.float32)
    x = x.astype(dtype)
    if fit_intercept:
        x = add_intercept(x)
    theta, iters, gnorm = _newton(x, y.astype(dtype), jnp.asarray(l2, dtype), jnp.asarray(tol, dtype), family, max_iter)
    return GLMFit(nan_if(bad, theta), iters, nan_if(bad, gnorm))


@full_precision
def reconstruct_glm(
    theta: jax.Array, fixed_x: jax.Array, fixed_y: jax.Array, family: str = "logistic", l2: float = 0.0,
    validate: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """Theorem 1 of Balle et al.: recovers the target ``(x, y)`` of a GLM fitted with an intercept.

    Args:
      theta: released parameters ``[d + 1]``, intercept first (as returned by :func:`fit_glm`).
      fixed_x: the fixed set's features ``[n - 1, d]`` (without the intercept column).
      fixed_y: its labels ``[n - 1]``, as :func:`fit_glm` takes them ({0, 1} for logistic, counts for Poisson).
      family: the GLM family the victim used.
      l2: the victim's regularisation strength (objective ``... + l2 ||theta||^2``, summed loss), finite and >= 0.
      validate: raise ``ValueError`` (with concrete inputs) when the system is singular, i.e.
        ``X-_1^T B + 2 l2 theta_1 == 0``; under ``jit`` the result is then inf/NaN.

    Returns:
      ``(x, y)``: the reconstructed features ``[d]`` (without the intercept) and label (scalar); NaN under ``jit``
      when a traced ``l2`` or ``fixed_y`` is outside its range.

    Raises:
      ValueError: for an unknown family, ``theta`` and ``fixed_x`` of mismatched sizes, a concrete ``l2`` or
        ``fixed_y`` outside its range, or (``validate``) a singular system.

    >>> import jax.numpy as jnp
    >>> xs, ys = jnp.array([[0.], [1.], [2.], [3.]]), jnp.array([0., 0., 1., 1.])
    >>> fit = fit_glm(xs, ys, "logistic", l2=0.1, tol=1e-6)
    >>> x_hat, y_hat = reconstruct_glm(fit.theta, xs[:3], ys[:3], "logistic", l2=0.1)
    >>> round(float(x_hat[0]), 2), round(float(y_hat), 2)
    (3.0, 1.0)
    """
    _, mean_fn, _ = _family_fns(family)
    bad = guard(("l2", l2, FINITE_NONNEGATIVE)) | guard(("fixed_y", fixed_y, _LABELS[family])).any()
    theta = jnp.asarray(theta)
    xbar = add_intercept(jnp.asarray(fixed_x, theta.dtype))
    ybar = jnp.asarray(fixed_y, theta.dtype)
    if xbar.shape[1] != theta.shape[0]:
        raise ValueError(f"theta has {theta.shape[0]} entries but fixed_x has {xbar.shape[1] - 1} features (+1 intercept)")
    resid = mean_fn(xbar @ theta) - ybar  # B
    numerator = xbar.T @ resid + 2.0 * l2 * theta
    denominator = numerator[0]
    if validate and is_concrete(denominator) and float(jnp.abs(denominator)) == 0.0:
        raise ValueError(
            "singular system: X-_1^T B + 2*l2*theta_1 == 0 (the fixed set alone already satisfies the optimality "
            "condition in the intercept coordinate), so the target cannot be recovered by Theorem 1"
        )
    x_full = numerator / denominator
    y = mean_fn(x_full @ theta) + denominator
    return nan_if(bad, x_full[1:]), nan_if(bad, y)


@full_precision
def reconstruct_least_squares_no_intercept(
    theta: jax.Array, fixed_x: jax.Array, fixed_y: jax.Array, y: jax.Array, validate: bool = True
) -> jax.Array:
    """Theorem 8 of Balle et al.: least squares (no intercept needed), target label ``y`` known.

    With ``r = X- theta - Y-``, ``v = X-^T r`` and ``a = r^T X- theta``, the target is ``alpha v`` where
    ``a alpha^2 - y alpha + 1 = 0``. Both roots satisfy the optimality condition, so both are returned.

    Args:
      theta: parameters ``[d]`` minimising ``1/2 ||X theta - Y||^2`` over ``D- u {(x, y)}`` (features as fitted,
        including an intercept column if there was one).
      fixed_x: ``[n - 1, d]``; fixed_y: ``[n - 1]``; y: the target's label.
      validate: raise ``ValueError`` (concrete inputs) when ``a == 0`` or there is no real root.

    Returns:
      ``[2, d]``: the two candidates (``+`` root first).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(20, 3)), rng.normal(size=20)
    >>> theta = np.linalg.lstsq(x, y, rcond=None)[0]  # the released model, fitted with the target (last row)
    >>> candidates = reconstruct_least_squares_no_intercept(theta, x[:-1], y[:-1], y[-1])
    >>> bool(np.abs(np.asarray(candidates) - x[-1]).max(axis=1).min() < 1e-3)  # one candidate is the target
    True
    """
    theta = jnp.asarray(theta)
    xbar = jnp.asarray(fixed_x, theta.dtype)
    pred = xbar @ theta
    r = pred - jnp.asarray(fixed_y, theta.dtype)
    v = xbar.T @ r
    a = jnp.vdot(r, pred)
    disc = y**2 - 4.0 * a
    if validate and is_concrete(a) and is_concrete(disc):
        if float(a) == 0.0:
            raise ValueError("singular system: (X- theta - Y-)^T X- theta == 0")
        if float(disc) < 0:
            raise ValueError(f"no real solution: y^2 - 4 a = {float(disc)} < 0 (is theta the exact least-squares fit?)")
    root = jnp.sqrt(disc)
    alphas = jnp.stack([(y + root) / (2.0 * a), (y - root) / (2.0 * a)])
    return alphas[:, None] * v[None, :]
