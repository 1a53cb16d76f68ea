"""Special functions that JAX lacks, written in ``jnp`` (jittable, vmappable, differentiable).

:func:`log_iv` is the logarithm of the modified Bessel function of the first kind, ``log I_nu(x)``, for any
order ``nu >= 0`` and ``x >= 0``. It stays finite and accurate where ``scipy.special.ive`` underflows or
overflows (orders in the thousands to millions at small or moderate ``x``), which the von Mises-Fisher
accounting and Bayes'-capacity bounds of Biswas et al. need (their ``p = 13,700`` gives ``nu ~ 6,850``).

Notation: ``nu`` order, ``x`` argument, ``z = x / nu``, ``p = 1 / sqrt(1 + z^2) = nu / hypot(nu, x)``.
"""

from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero

__all__ = ["log_iv", "gammainc"]

# ---------------------------------------------------------------------------------------------------------
# Debye (uniform large-order) expansion, DLMF 10.41.3:
#   I_nu(nu z) ~ exp(nu eta) / (sqrt(2 pi nu) (1 + z^2)^{1/4}) * sum_k U_k(p) / nu^k,
#   eta = sqrt(1 + z^2) + log(z / (1 + sqrt(1 + z^2))) = sqrt(1 + z^2) - asinh(1 / z).
# The polynomials U_k are generated exactly (rational arithmetic) from DLMF 10.41.9:
#   U_{k+1}(p) = p^2 (1 - p^2) U_k'(p) / 2 + (1/8) int_0^p (1 - 5 t^2) U_k(t) dt.
# With 10 terms and nu >= 50 the first omitted term is below 1.3 / 50^10 ~ 1e-17 (max |U_10| on [0, 1]).
# ---------------------------------------------------------------------------------------------------------

_DEBYE_TERMS = 10
_NU_DEBYE = 50.0  # orders below this are shifted up by _NU_DEBYE and brought back by the ratio recurrence
_SERIES_X_MAX = 20.0  # for nu < _NU_DEBYE and x <= this, the power series is used
_SERIES_TERMS = 48


def _debye_polynomials(num_terms: int) -> list[list[float]]:
    """Coefficients (ascending powers of p) of U_0 .. U_{num_terms - 1}, computed exactly, then as floats."""

    def mul(a, b):
        out = [Fraction(0)] * (len(a) + len(b) - 1)
        for i, ai in enumerate(a):
            for j, bj in enumerate(b):
                out[i + j] += ai * bj
        return out

    def add(a, b):
        n = max(len(a), len(b))
        return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]

    polys = [[Fraction(1)]]
    for _ in range(num_terms - 1):
        u = polys[-1]
        du = [i * u[i] for i in range(1, len(u))] or [Fraction(0)]
        term1 = mul([Fraction(0), Fraction(0), Fraction(1, 2), Fraction(0), Fraction(-1, 2)], du)
        integrand = mul([Fraction(1), Fraction(0), Fraction(-5)], u)
        term2 = [Fraction(0)] + [c / (8 * (i + 1)) for i, c in enumerate(integrand)]
        polys.append(add(term1, term2))
    return [[float(c) for c in u] for u in polys]


_DEBYE_U = _debye_polynomials(_DEBYE_TERMS)


_DEBYE_MATRIX = np.zeros((_DEBYE_TERMS - 1, max(len(u) for u in _DEBYE_U)))
for _k, _u in enumerate(_DEBYE_U[1:]):
    _DEBYE_MATRIX[_k, : len(_u)] = _u  # row k-1: coefficients of U_k in ascending powers of p


def _log_ive_debye(nu: jax.Array, x: jax.Array) -> jax.Array:
    """Debye expansion of log(I_nu(x) e^{-x}); accurate for nu >= 50 and every x >= 0 (x = 0 gives -inf)."""
    r = jnp.hypot(nu, x)  # nu * sqrt(1 + z^2), overflow-safe
    z = x / nu
    tiny = z < 1e-8
    # asinh(1/z) for small z is log(2/z) + z^2/4 + O(z^4); avoids 1/z overflowing.
    z_safe = jnp.where(tiny, 1.0, z)
    asinh_inv = jnp.where(tiny, jnp.log(2.0) - jnp.log(z) + 0.25 * z * z, jnp.arcsinh(1.0 / z_safe))
    nu_eta_minus_x = nu * nu / (r + x) - nu * asinh_inv  # nu * eta - x, with hypot(nu, x) - x done stably
    p = nu / r
    # sum_{k>=1} U_k(p) / nu^k as a bivariate polynomial: [.., K] powers of 1/nu times [K, D] coefficients.
    coeffs = jnp.asarray(_DEBYE_MATRIX, dtype=p.dtype)
    k_pow = jnp.arange(1, _DEBYE_TERMS, dtype=p.dtype)
    d_pow = jnp.arange(coeffs.shape[1], dtype=p.dtype)
    inv_nu_powers = (1.0 / nu)[..., None] ** k_pow
    p_powers = p[..., None] ** d_pow
    corr = jnp.sum((inv_nu_powers @ coeffs) * p_powers, axis=-1)
    return nu_eta_minus_x - 0.5 * jnp.log(2.0 * jnp.pi * r) + jnp.log1p(corr)


def _log_ive_series(nu: jax.Array, x: jax.Array) -> jax.Array:
    """Ascending series, DLMF 10.25.2: (x/2)^nu / Gamma(nu+1) * sum_k (x^2/4)^k / (k! (nu+1)_k), times e^{-x}."""
    q = 0.25 * x * x

    def body(k, carry):
        term, tail = carry
        term = term * q / (k * (nu + k))
        return term, tail + term

    _, tail = lax.fori_loop(1, _SERIES_TERMS + 1, body, (jnp.ones_like(x), jnp.zeros_like(x)))
    return _xlogy(nu, 0.5 * x) - lax.lgamma(nu + 1.0) + jnp.log1p(tail) - x


def _xlogy(a: jax.Array, b: jax.Array) -> jax.Array:
    """a * log(b) with 0 * log(0) = 0."""
    safe_b = jnp.where(a == 0, 1.0, b)
    return jnp.where(a == 0, 0.0, a * jnp.log(safe_b))


def _ratio_recurrence(top: jax.Array, x: jax.Array, log_top: jax.Array, log_top1: jax.Array) -> jax.Array:
    """log I_{top-M}(x) e^{-x} from the Debye values at orders top and top+1, by the backward ratio recurrence.

    With R_v = I_{v+1}(x) / I_v(x), the three-term recurrence (DLMF 10.29.1) gives R_{v-1} = 1 / (2 v / x + R_v),
    which is stable downward (|R| <= 1). Then log I_nu = log I_{nu+M} - sum_{j<M} log R_{nu+j}.
    """
    ratio = jnp.exp(log_top1 - log_top)  # R_{nu+M}

    def body(j, carry):
        r, acc = carry
        v = top - j  # R_{v-1} from R_v
        r_new = 1.0 / (2.0 * v / x + r)
        return r_new, acc + jnp.log(r_new)

    _, log_ratio_sum = lax.fori_loop(0, int(_NU_DEBYE), body, (ratio, jnp.zeros_like(x)))
    return log_top - log_ratio_sum


@jax.jit  # one compiled kernel per shape/dtype, also for eager calls (the expansions are many small ops)
def _log_ive_impl(nu: jax.Array, x: jax.Array) -> jax.Array:
    """log(I_nu(x) e^{-x}) for nu >= 0, 0 < x < inf (the other cases are patched by the caller)."""
    nu, x = jnp.broadcast_arrays(nu, x)
    large = nu >= _NU_DEBYE
    small_x = x <= _SERIES_X_MAX
    # Guard each branch's inputs so that the unused branches never produce NaN (and never poison gradients).
    nu_d = jnp.where(large, nu, _NU_DEBYE)
    nu_s = jnp.where(large, 0.0, nu)
    x_ser = jnp.where(small_x, x, 1.0)
    x_rec = jnp.where(small_x, 1.0, x)
    top = nu_s + _NU_DEBYE
    # One Debye evaluation for the three uses: order nu (large orders), nu + M and nu + M + 1 (recurrence).
    deb = _log_ive_debye(jnp.stack([nu_d, top, top + 1.0]), jnp.stack([x, x_rec, x_rec]))
    shifted = _ratio_recurrence(top, x_rec, deb[1], deb[2])
    series = _log_ive_series(nu_s, x_ser)
    return jnp.where(large, deb[0], jnp.where(small_x, series, shifted))


@jax.custom_jvp
def _log_ive(nu: jax.Array, x: jax.Array) -> jax.Array:
    return _log_ive_impl(nu, x)


def _log_ive_jvp(primals, tangents):
    nu, x = primals
    nu_dot, x_dot = tangents
    out = _log_ive(nu, x)
    tangent_out = jnp.zeros_like(out)
    if not isinstance(x_dot, SymbolicZero):
        # d/dx log(I_nu(x) e^{-x}) = I_{nu+1}(x) / I_nu(x) + nu / x - 1  (DLMF 10.29.2), the ratio from the scaled
        # values (no cancellation at large x); recursive, so higher derivatives work too.
        ratio = jnp.exp(_log_ive(nu + 1.0, x) - out)
        tangent_out = tangent_out + (ratio + nu / x - 1.0) * x_dot
    if not isinstance(nu_dot, SymbolicZero):
        # The derivative in the order is not implemented: NaN, never a silently wrong number.
        tangent_out = tangent_out + jnp.nan * nu_dot
    return out, tangent_out


_log_ive.defjvp(_log_ive_jvp, symbolic_zeros=True)


@jax.jit
def _log_iv_core(nu: jax.Array, x: jax.Array) -> jax.Array:
    nu, x = jnp.broadcast_arrays(nu, x)
    x_pos = jnp.where((x > 0) & (x < jnp.inf), x, 1.0)
    nu_ok = jnp.where((nu >= 0) & (nu < jnp.inf), nu, 0.0)
    out = _log_ive(nu_ok, x_pos) + x_pos
    # x = 0: I_0(0) = 1 and I_nu(0) = 0 for nu > 0; x = inf: I_nu(inf) = inf.
    out = jnp.where(x == 0, jnp.where(nu == 0, 0.0, -jnp.inf), out)
    out = jnp.where(x == jnp.inf, jnp.inf, out)
    invalid = (nu < 0) | (x < 0) | jnp.isnan(nu) | jnp.isnan(x) | (nu == jnp.inf)
    return jnp.where(invalid, jnp.nan, out)


def log_iv(nu: jax.typing.ArrayLike, x: jax.typing.ArrayLike, *, validate: bool = True) -> jax.Array:
    r"""Natural logarithm of the modified Bessel function of the first kind, ``log I_nu(x)``.

    Valid for every order ``nu >= 0`` and argument ``x >= 0`` (``x = 0`` gives ``0`` for ``nu = 0`` and
    ``-inf`` otherwise); broadcasts ``nu`` against ``x``; jittable and vmappable. Methods:

    - ``nu >= 50``: the Debye uniform asymptotic expansion (DLMF 10.41.3) with 10 terms, written in overflow-free
      form (``hypot``, ``asinh``), valid uniformly in ``x`` (first omitted term < 1e-17).
    - ``nu < 50``, ``x <= 20``: the ascending power series (DLMF 10.25.2), 48 terms, summed as ``log1p``.
    - ``nu < 50``, ``x > 20``: Debye at order ``nu + 50`` followed by 50 steps of the stable backward recurrence
      of ``I_{v+1}/I_v`` (DLMF 10.29.1).

    Differentiable in ``x`` through a ``custom_jvp`` using ``d/dx log I_nu = I_{nu+1}/I_nu + nu/x``. The
    derivative in ``nu`` is not implemented and is NaN (never a silently wrong number) when requested; with
    ``nu`` held constant (the usual case) gradients in ``x`` are exact to the accuracy above.

    Accuracy, measured against mpmath (``besseli`` at 40 digits; its Hankel expansion, also at 40 digits, for
    ``x >= 2e4`` and ``x > 1e3 (nu^2 + 1)``; ``scipy.special.ive`` for the remaining ``x >= 2e4``, where mpmath is
    too slow) on a grid of 15 orders ``nu`` in {0, 1e-3, 0.5, 1, 2.5, 10, 30, 49.9, 50, 50.5, 100, 1e3, 6849,
    1e5, 1e6} times 65 arguments ``x`` from 1e-300 to 1e300 (950 points with a finite reference):

    - float64: maximum relative error of ``log I`` is ``1.8e-14`` where ``|log I| >= 1``; where ``|log I| < 1``
      the maximum absolute error of ``log I`` (= relative error of ``I``) is ``5.1e-15``.
    - float32: ``7e-6`` and ``3.4e-6`` respectively.

    ``tests/test_special.py`` re-checks a subset of this grid with these bounds (plus a small margin).
    Near ``I_nu(x) = 1`` the relative error of ``log I`` is unbounded for any method (its condition number is).

    Args:
      nu: order, ``>= 0`` (need not be an integer). Negative, infinite or NaN orders give NaN.
      x: argument, ``>= 0``. Negative or NaN arguments give NaN.
      validate: if True (default) and an argument is concrete (not traced), an invalid value raises
        ``ValueError``; under ``jit``/``vmap`` (or with ``validate=False``) invalid values give NaN.

    Returns:
      ``log I_nu(x)`` with the broadcast shape of ``nu`` and ``x`` and a floating dtype.

    Raises:
      ValueError: ``nu`` is not in ``[0, inf)`` or ``x`` is not ``>= 0`` (concrete inputs, ``validate=True``).

    Example:
      >>> import numpy as np
      >>> from recon_jax.special import log_iv
      >>> bool(np.isclose(float(log_iv(0.0, 1.0)), np.log(1.2660658777520082), rtol=1e-5))
      True
      >>> bool(np.isfinite(float(log_iv(6849.0, 10.0))))  # scipy.special.ive underflows to 0 here
      True
    """
    from recon_jax.bounds import _validate  # local import: recon_jax.bounds imports this module

    _validate.check("nu", nu, lambda v: (v >= 0) & (v < np.inf), "finite and >= 0", validate)
    _validate.check_nonnegative("x", x, validate)
    nu = jnp.asarray(nu)
    x = jnp.asarray(x)
    dtype = jnp.result_type(nu, x, float)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    return _log_iv_core(nu.astype(dtype), x.astype(dtype))


# ---------------------------------------------------------------------------------------------------------
# Regularised lower incomplete gamma P(a, x) accurate for very large a.
# ---------------------------------------------------------------------------------------------------------

_GAMMAINC_A_LARGE = 5000.0
_GL_NODES_256, _GL_WEIGHTS_256 = np.polynomial.legendre.leggauss(256)


def _log1pmx(d: jax.Array) -> jax.Array:
    """log(1 + d) - d, accurate for small |d| (series) and elsewhere (direct)."""
    small = jnp.abs(d) < 0.1
    ds = jnp.where(small, d, 0.0)
    # -d^2/2 + d^3/3 - ... ; 30 terms give < 1e-30 truncation for |d| < 0.1.
    acc = jnp.zeros_like(ds)
    for k in range(31, 1, -1):
        acc = acc * ds + ((-1.0) ** (k + 1)) / k
    series = acc * ds * ds
    d_big = jnp.where(small, 1.0, d)
    return jnp.where(small, series, jnp.log1p(d_big) - d_big)


def _log_gamma_tail_large(a: jax.Array, x: jax.Array, upper: bool) -> jax.Array:
    """log of the lower (upper=False, for x < a-1) or upper (upper=True, x >= a-1) regularised gamma tail.

    Gauss-Legendre quadrature of ``t^{a-1} e^{-t}`` relative to its value at ``x``, on a window that provably
    holds all but ``e^{-50}`` of the (log-concave) integrand, plus the exact Stirling-form prefactor
    ``x^a e^{-x} / Gamma(a) = sqrt(a / 2 pi) exp(a log1pmx(x/a - 1) - stirling(a)) / ...``.
    """
    m = a - 1.0
    if upper:
        slope = 1.0 - m / x  # -(d/dt) log f at x, >= 0
        width = jnp.minimum(50.0 / jnp.maximum(slope, 1e-300), 40.0 * jnp.sqrt(x))
        off_lo = jnp.zeros_like(x)
    else:
        slope = m / x - 1.0
        curv = m / (x * x)
        width = jnp.minimum((-slope + jnp.sqrt(slope * slope + 100.0 * curv)) / curv, x)
        off_lo = -width
    nodes = jnp.asarray(_GL_NODES_256, dtype=x.dtype)
    weights = jnp.asarray(_GL_WEIGHTS_256, dtype=x.dtype)
    half = 0.5 * width
    # Offsets t - x are formed directly (never t itself), so float32 keeps its precision at large x.
    offset = off_lo[..., None] + half[..., None] * (nodes + 1.0)
    d = offset / x[..., None]
    a_minus_x_minus_1 = ((a - x) - 1.0)[..., None]  # (a - 1) - x without rounding a - 1 first (float32)
    g = m[..., None] * _log1pmx(d) + a_minus_x_minus_1 * d  # (a-1) log(t/x) - (t - x)
    log_int = jnp.log(half * jnp.sum(weights * jnp.exp(g), axis=-1))
    lam_m1 = x / a - 1.0
    stirling = 1.0 / (12.0 * a) - 1.0 / (360.0 * a**3)
    # log[x^a e^{-x} / Gamma(a)] - log x = a log1pmx(lambda - 1) + 0.5 log(a / 2 pi) - stirling - log x
    log_pref = a * _log1pmx(lam_m1) + 0.5 * jnp.log(a / (2.0 * jnp.pi)) - stirling - jnp.log(x)
    return log_int + log_pref


def _gammainc_large(a: jax.Array, x: jax.Array, large: jax.Array) -> jax.Array:
    a_l = jnp.where(large, a, _GAMMAINC_A_LARGE)
    x_l = jnp.where(large & (x > 0) & (x < jnp.inf), x, a_l)
    below = x_l < a_l - 1.0
    x_lo = jnp.where(below, x_l, 0.5 * a_l)
    x_hi = jnp.where(below, a_l, x_l)
    p_lower = jnp.exp(_log_gamma_tail_large(a_l, x_lo, upper=False))
    q_upper = jnp.exp(_log_gamma_tail_large(a_l, x_hi, upper=True))
    p_large = jnp.where(below, p_lower, 1.0 - q_upper)
    return jnp.where(x <= 0, 0.0, jnp.where(x == jnp.inf, 1.0, p_large))


@jax.jit
def _gammainc_impl(a: jax.Array, x: jax.Array) -> jax.Array:
    a, x = jnp.broadcast_arrays(a, x)
    large = a >= _GAMMAINC_A_LARGE
    p_small = jax.scipy.special.gammainc(jnp.where(large, 1.0, a), x)
    # The quadrature only runs when some element needs it (under vmap both branches run; results are the same).
    return lax.cond(
        jnp.any(large),
        lambda: jnp.where(large, _gammainc_large(a, x, large), p_small),
        lambda: p_small,
    )


def gammainc(a: jax.typing.ArrayLike, x: jax.typing.ArrayLike) -> jax.Array:
    """Regularised lower incomplete gamma ``P(a, x)``, accurate also for very large ``a`` (up to 1e10).

    For ``a < 5000`` this is ``jax.scipy.special.gammainc``; for larger ``a`` (where JAX's series/continued
    fraction loses accuracy: 2e-6 relative at a = 5e8 near the median and percent-level errors at a = 1e9) the
    smaller tail is integrated by 256-point Gauss-Legendre quadrature of ``t^{a-1} e^{-t}`` relative to its value
    at ``x``, on a window that holds all but ``e^{-50}`` of the log-concave integrand, times the Stirling-form
    prefactor evaluated with ``log1p``-type cancellation-free arithmetic. Measured in float64: against
    ``scipy.special.gammainc`` for ``a`` in [5e3, 5e4] and ``x/a`` in [0.43, 2] (down to P ~ 1e-280), relative error
    <= 2e-11; against mpmath quadrature for ``a`` up to 2e9 within 10 standard deviations of the mean, relative
    error <= 2e-11 (lower tail) and absolute error <= 3e-13 (upper tail). (SciPy itself is wrong there: e.g.
    P(5e8, 5e8 - 10 sqrt(5e8)) = 7.507e-24, SciPy returns 4.48e-24.) float32: absolute error ~1e-6 at a = 2.5e7.
    Differentiable by automatic differentiation (through the quadrature). Invalid inputs give NaN.

    Args:
      a: shape parameter, > 0.
      x: argument, >= 0.

    Returns:
      ``P(a, x)`` in [0, 1].

    Example:
      >>> import scipy.special
      >>> from recon_jax.special import gammainc
      >>> bool(abs(float(gammainc(2.5e7, 2.5e7)) - scipy.special.gammainc(2.5e7, 2.5e7)) < 1e-5)
      True
    """
    a = jnp.asarray(a)
    x = jnp.asarray(x)
    dtype = jnp.result_type(a, x, float)
    a = a.astype(dtype)
    x = x.astype(dtype)
    out = _gammainc_impl(a, x)
    invalid = (a <= 0) | (x < 0) | jnp.isnan(a) | jnp.isnan(x)
    return jnp.where(invalid, jnp.nan, out)
