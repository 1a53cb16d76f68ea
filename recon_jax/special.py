"""Special functions that JAX lacks, written in ``jnp`` (jittable, vmappable, differentiable).

:func:`log_iv` is the logarithm of the modified Bessel function of the first kind, ``log I_nu(x)``, for any
order ``nu >= 0`` and ``x >= 0``. It stays finite and accurate where ``scipy.special.ive`` underflows or
overflows (orders in the thousands to millions at small or moderate ``x``), which the von Mises-Fisher
accounting and Bayes'-capacity bounds of Biswas et al. need (their ``p = 13,700`` gives ``nu ~ 6,850``).

:func:`log_expm1` is ``log(exp(t) - 1)`` without overflow or cancellation, also from ``log t`` when ``t`` itself
is below the floating-point range (the HCR bound's denominator, the subsampled-Gaussian RDP series).

:func:`gammainc` / :func:`gammaincc` are the regularised incomplete gamma functions ``P(a, x)`` and ``Q(a, x)``
with a fixed number of elementwise operations per value (Temme's uniform expansion, the series, a continued
fraction), accurate for shapes up to 2e9 (chi-square CDFs at dimension d = 2a in the ReRo bounds).

Notation: ``nu`` order, ``x`` argument, ``z = x / nu``, ``p = 1 / sqrt(1 + z^2) = nu / hypot(nu, x)``.

The module is one concern despite its length (~640 lines): scalar special functions with one contract (elementwise
``jnp``, jit / vmap / grad, checked against mpmath and SciPy), most of it expansion coefficients and their series.
"""

from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero

from recon_jax import _validation as v

__all__ = ["log_iv", "log_expm1", "gammainc", "gammaincc"]

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
    v.check("nu", nu, v.FINITE_NONNEGATIVE, validate=validate)
    v.check_nonnegative("x", x, validate)
    nu, x = v.as_float(nu, x, broadcast=False)
    return _log_iv_core(nu, x)


# ---------------------------------------------------------------------------------------------------------
# log(exp(t) - 1).
# ---------------------------------------------------------------------------------------------------------

_LOG_EXPM1_SMALL = -40.0 * np.log(2.0)  # log t below this (t <= 2^-40): log t + t/2
_LOG_EXPM1_LARGE = 30.0  # t above this: t + log1p(-exp(-t))


def log_expm1(x: jax.typing.ArrayLike, *, log_input: bool = False, validate: bool = True) -> jax.Array:
    """``log(exp(t) - 1)`` for ``t >= 0``, without overflow or cancellation (``-inf`` at ``t = 0``).

    Three branches, each exact to rounding where it is used: ``t <= 2^-40``: ``log t + t / 2`` (the next term,
    ``t^2 / 24``, is below float64 resolution); ``t > 30``: ``t + log1p(-exp(-t))`` (``exp(t)`` would overflow
    for ``t > 709`` in float64, ``88`` in float32); otherwise ``log(expm1(t))``. Jittable, vmappable, and
    differentiable for ``t > 0`` (the derivative is ``exp(t) / expm1(t)``); at ``t = 0`` the value is ``-inf`` and
    the gradient is finite (the unused branches are evaluated at safe points).

    With ``log_input=True`` the argument is ``log t`` (any real, ``-inf`` for ``t = 0``, ``+inf`` for ``t = inf``),
    so ``t`` may lie below the floating-point range: the HCR bound (:mod:`recon_jax.bounds.hcr`) passes
    ``log ||delta||^2 - 2 log sigma`` and never forms the ratio.

    Args:
      x: ``t >= 0``; with ``log_input``, ``log t``.
      log_input: ``x`` is ``log t`` (keyword only).
      validate: if True (default) and ``x`` is concrete, an invalid value (``t < 0`` or NaN; NaN with
        ``log_input``) raises ``ValueError``; under ``jit``/``vmap`` (or with ``validate=False``) it gives NaN.

    Returns:
      ``log(exp(t) - 1)``, shaped like ``x``, in its floating dtype.

    Raises:
      ValueError: for an invalid concrete ``x`` (``validate=True``).

    Example:
      >>> import numpy as np
      >>> from recon_jax.special import log_expm1
      >>> bool(np.isclose(float(log_expm1(1.0)), np.log(np.e - 1.0), rtol=1e-6))
      True
      >>> float(log_expm1(1000.0))  # exp(1000) overflows; log(exp(1000) - 1) = 1000 to float precision
      1000.0
      >>> round(float(log_expm1(-1000.0, log_input=True)), 2)  # t = exp(-1000) underflows; log t + t/2 does not
      -1000.0
    """
    v.check("x", x, (lambda a: a <= np.inf) if log_input else v.NONNEGATIVE,
            "a number (not NaN)" if log_input else None, validate=validate)
    x = v.as_float(x)
    if log_input:
        log_t = x
        t = jnp.exp(log_t)
        off = jnp.zeros(t.shape, bool)  # t = 0 (log t = -inf) takes the small branch
    else:
        t = x
        off = ~(t > 0)  # t <= 0 or NaN: answered below; every branch is evaluated at a safe point
        log_t = jnp.log(jnp.where(off, jnp.ones_like(t), t))
    small = log_t < _LOG_EXPM1_SMALL
    large = t > _LOG_EXPM1_LARGE
    t_mid = jnp.where(small | large | off, jnp.ones_like(t), t)
    t_large = jnp.where(large, t, jnp.full_like(t, _LOG_EXPM1_LARGE))
    mid = jnp.log(jnp.expm1(t_mid))
    big = t_large + jnp.log1p(-jnp.exp(-t_large))
    out = jnp.where(small, log_t + 0.5 * t, jnp.where(large, big, mid))
    if log_input:
        return out
    return jnp.where(t > 0, out, jnp.where(t == 0, -jnp.inf, jnp.nan))


# ---------------------------------------------------------------------------------------------------------
# Regularised incomplete gamma P(a, x) and Q(a, x) = 1 - P(a, x): a fixed number of elementwise operations per
# value (no data-dependent loops), so XLA fuses the whole evaluation into one loop over the array.
#
# Three methods, each used where it converges to full precision within its fixed number of terms:
# - Temme's uniform asymptotic expansion (DLMF 8.12.3-8.12.10) for a >= _A_TEMME and |eta| <= _ETA_TEMME:
#     Q(a, x) = erfc(eta sqrt(a/2)) / 2 + exp(-a eta^2/2) / sqrt(2 pi a) * sum_k c_k(eta) a^{-k},
#     eta = sign(lambda - 1) sqrt(2 (lambda - 1 - log lambda)), lambda = x / a,
#     c_0 = 1/(lambda - 1) - 1/eta,  c_k = (1/eta) c_{k-1}'(eta) + (-1)^k gamma_k / (lambda - 1),
#   with gamma_k the coefficients of Gamma*(a) = Gamma(a) / (sqrt(2 pi / a) (a/e)^a) ~ sum_k gamma_k a^{-k}.
#   The c_k are used as Taylor polynomials in eta, generated exactly (rational arithmetic) from that recursion.
# - The ascending series P = x^a e^{-x} / Gamma(a + 1) * sum_k x^k / ((a+1)...(a+k)) (DLMF 8.7.1) below.
# - Legendre's continued fraction for Q (DLMF 8.9.2) above, evaluated bottom-up at a fixed depth.
# The prefactor x^a e^{-x} / Gamma(a+1) is formed as exp(-a eta^2/2) / (sqrt(2 pi a) Gamma*(a)) for a >= _A_TEMME
# (no cancellation between a log x and x at large a).
# ---------------------------------------------------------------------------------------------------------

_A_TEMME = 20.0
_ETA_TEMME = 1.0
_TEMME_K = 13  # powers of 1/a: the first omitted term is below 0.01 / 20^13 ~ 1e-19
_TEMME_N = 30  # powers of eta: the Taylor series converge for |eta| < 2 sqrt(pi); 3.54^-30 ~ 3e-17 at |eta| = 1
_GAMMA_SERIES_TERMS = 48  # x < a + 1 with a < 20: the terms fall below 1e-17 by k ~ 45; eta < -1: ratio < 0.3
_CF_DEPTH = 32
_BIG_SERIES_TERMS = 32  # a >= 20 and eta < -1: ratio x / (a + k) < 0.3, 0.3^32 < 2e-17
_BIG_CF_DEPTH = 10  # eta > 1: x > 2.3 a >= 46; depth 8 already matches SciPy to 1e-12 (a in [20, 5000])
_CF_X_MIN = 2.0  # below, the series (x^48 / 48! < 1e-47); the fraction converges slowly near x = 1 for small a
_RENORMALISE = 4  # the division-free recurrences are renormalised every this many steps (float32-safe range)
_STIRLING_SHIFT = 9  # log Gamma(a + 1) for a < _A_TEMME from Stirling's series at a + 9 (>= 9)


def _gamma_star_coefficients(num: int) -> list[Fraction]:
    """gamma_0 .. gamma_{num-1} of Gamma*(a) ~ sum_k gamma_k a^{-k}, from exp of Stirling's series (exact)."""
    from math import comb

    n = 2 * num + 2
    bern = [Fraction(1)] + [Fraction(0)] * n
    for m in range(1, n + 1):
        bern[m] = -sum(comb(m + 1, k) * bern[k] for k in range(m)) / (m + 1)
    log_series = [Fraction(0)] * num  # log Gamma*(a) = sum_m B_2m / (2m (2m-1) a^{2m-1})
    for m in range(1, num):
        if 2 * m - 1 < num:
            log_series[2 * m - 1] = bern[2 * m] / (2 * m * (2 * m - 1))
    out = [Fraction(1)] + [Fraction(0)] * (num - 1)  # exp of a power series: e' = s' e
    for m in range(1, num):
        out[m] = sum(k * log_series[k] * out[m - k] for k in range(1, m + 1)) / m
    return out


def _temme_coefficients(num_k: int, num_n: int) -> np.ndarray:
    """[num_k, num_n] Taylor coefficients (ascending powers of eta) of Temme's c_0 .. c_{num_k - 1}, exactly."""
    m = num_n + 2 * num_k + 1
    # lambda - 1 = sum_j b_j eta^j from mu mu' = eta (1 + mu) (differentiate eta^2/2 = mu - log(1 + mu)).
    b = [Fraction(0), Fraction(1)] + [Fraction(0)] * (m - 1)
    for n in range(2, m + 1):
        b[n] = (b[n - 1] - sum(b[i] * (n - i + 1) * b[n - i + 1] for i in range(2, n))) / (n + 1)
    h = [Fraction(1)] + [Fraction(0)] * (m - 1)  # eta / (lambda - 1)
    for j in range(1, m):
        h[j] = -sum(b[i + 1] * h[j - i] for i in range(1, j + 1))
    gam = _gamma_star_coefficients(num_k + 1)
    c = h[1:]  # c_0 = (h - 1) / eta
    rows = [c[:num_n]]
    for k in range(1, num_k):
        assert c[1] + (-1) ** k * gam[k] == 0  # the 1/eta poles of the two terms cancel
        c = [(n + 2) * c[n + 2] + (-1) ** k * gam[k] * h[n + 1] for n in range(len(c) - 2)]
        rows.append(c[:num_n])
    return np.array([[float(v) for v in row] for row in rows])


_TEMME_C = _temme_coefficients(_TEMME_K, _TEMME_N)
# Row k cut after the last coefficient with |c_kn| / 20^k > 1e-18 (30 terms for k = 0 down to 2 for k = 12).
_TEMME_ROWS = [
    [float(c) for c in row[: 1 + max(n for n in range(_TEMME_N) if abs(row[n]) / _A_TEMME**k > 1e-18)]]
    for k, row in enumerate(_TEMME_C)
]
# log Gamma*(z) = sum_m B_2m / (2m (2m-1) z^{2m-1}); 8 terms: the first omitted one is < 2e-16 for z >= 9.
_STIRLING = [1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156, -3617 / 122400]


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


def _log_gamma_star(z: jax.Array) -> jax.Array:
    """log Gamma*(z) = log Gamma(z) - (z - 1/2) log z + z - log(2 pi) / 2 by Stirling's series (z >= 9)."""
    inv_z = 1.0 / z
    out = jnp.zeros_like(z)
    for coef in reversed(_STIRLING):
        out = out * inv_z * inv_z + coef
    return out * inv_z


def _eta_and_prefactor(a: jax.Array, x: jax.Array, all_big: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(eta, a eta^2 / 2, log[x^a e^{-x} / Gamma(a + 1)]) for 0 < a, x < inf, without cancellation at large a.

    ``all_big``: every ``a >= _A_TEMME`` (the small-``a`` form is then left out).
    """
    big = a >= _A_TEMME
    log_a, log_x = jnp.log(a), jnp.log(x)
    mu = (x - a) / a  # lambda - 1
    # r = (mu - log(1 + mu)) / mu^2 = eta^2 / (2 mu^2): a series for small |mu|, log x - log a (not log1p(mu),
    # which loses x / a when it is below the rounding of 1) elsewhere.
    near = jnp.abs(mu) < 0.1
    mu_n = jnp.where(near, mu, 0.0)
    r_series = jnp.zeros_like(mu)
    for j in range(19, 1, -1):  # sum_{j>=2} (-1)^j mu^{j-2} / j; |mu| < 0.1: 17 terms leave < 1e-18
        r_series = r_series * mu_n + (-1.0) ** j / j
    mu_f = jnp.where(near, 1.0, mu)
    r = jnp.where(near, r_series, (mu_f - (log_x - log_a)) / (mu_f * mu_f))
    a_half_eta2 = a * jnp.maximum(mu * mu * r, 0.0)
    eta = mu * jnp.sqrt(2.0 * r)  # sign(mu) sqrt(2 (mu - log(1 + mu))), smooth through mu = 0
    # Large a: x^a e^{-x} / Gamma(a+1) = exp(-a eta^2/2) / (sqrt(2 pi a) Gamma*(a)).
    if all_big:
        return eta, a_half_eta2, -a_half_eta2 - 0.5 * jnp.log(2.0 * jnp.pi * a) - _log_gamma_star(a)
    # Small a: a log x - x - log Gamma(a+1), with log Gamma(a+1) = log Gamma(a+9) - log((a+1)...(a+8)) and
    # Stirling's series at a + 9.
    z = jnp.where(big, a, a + _STIRLING_SHIFT)
    log_gamma_star = _log_gamma_star(z)
    prod = jnp.ones_like(a)
    for j in range(1, _STIRLING_SHIFT):
        prod = prod * (a + j)
    log_gamma_a1 = (z - 0.5) * jnp.log(z) - z + 0.5 * np.log(2.0 * np.pi) + log_gamma_star - jnp.log(prod)
    log_pref = jnp.where(
        big, -a_half_eta2 - 0.5 * jnp.log(2.0 * jnp.pi * a) - log_gamma_star, a * log_x - x - log_gamma_a1
    )
    return eta, a_half_eta2, log_pref


def _gammainc_pq(a: jax.Array, x: jax.Array, all_big: bool) -> tuple[jax.Array, jax.Array]:
    """(P, Q) for 0 < a, x < inf (the caller guards the inputs); every branch is NaN-free for such inputs.

    ``all_big``: every ``a >= _A_TEMME``; the series and fraction then need fewer terms (``eta < -1`` means
    ``x < 0.3 a``; ``eta > 1`` means ``x > 2.3 a >= 46``) and the small-``a`` prefactor is left out.
    """
    big = a >= _A_TEMME
    eta, a_half_eta2, log_pref = _eta_and_prefactor(a, x, all_big)
    series_terms, cf_depth = (_BIG_SERIES_TERMS, _BIG_CF_DEPTH) if all_big else (_GAMMA_SERIES_TERMS, _CF_DEPTH)

    # Temme's expansion (computed everywhere, used where big & |eta| <= _ETA_TEMME): sum_k c_k(eta) a^{-k}, with
    # the Taylor polynomial of c_k cut where its terms stay below 1e-18 at a = 20, |eta| = 1.
    # Written as sum_n eta^n w_n(a), w_n(a) = sum_k c_kn a^{-k}, so that a shape parameter shared by many x (a
    # scalar or a broadcast axis) costs one Horner step per power of eta per value.
    eta_t = jnp.clip(eta, -_ETA_TEMME, _ETA_TEMME)
    a_t = jnp.where(big, a, _A_TEMME)
    inv_a = 1.0 / a_t
    total = jnp.zeros((), a.dtype)
    for n in range(len(_TEMME_ROWS[0]) - 1, -1, -1):
        w_n = jnp.zeros_like(a)
        for row in reversed(_TEMME_ROWS):
            w_n = w_n * inv_a + (row[n] if n < len(row) else 0.0)
        total = total * eta_t + w_n
    half_erfc = 0.5 * lax.erfc(jnp.abs(eta_t) * jnp.sqrt(0.5 * a_t))
    rem = jnp.exp(-jnp.where(big, a_half_eta2, 0.0)) / jnp.sqrt(2.0 * jnp.pi * a_t) * total
    p_temme = jnp.where(eta_t < 0, half_erfc - rem, 1.0 - (half_erfc + rem))
    q_temme = jnp.where(eta_t < 0, 1.0 - (half_erfc - rem), half_erfc + rem)

    lower = jnp.where(big, eta < 0, x < jnp.maximum(a + 1.0, _CF_X_MIN))
    # Series, Horner form 1 + x/(a+1) (1 + x/(a+2) (1 + ...)) as a running fraction num / den (scaled by
    # 1 / (a + N) so it stays in range) and one division every _RENORMALISE steps.
    x_s = jnp.where(lower, x, jnp.minimum(x, a))  # keeps the unused branch bounded
    scale = 1.0 / (a + series_terms)
    ratio = x_s * scale
    num, den = jnp.ones_like(a), jnp.ones_like(a)
    for k in range(series_terms, 0, -1):
        step = (a + k) * scale
        num, den = den * step + ratio * num, den * step
        if k % _RENORMALISE == 1:
            num, den = num / den, jnp.ones_like(a)
    p_series = jnp.exp(log_pref) * num
    # Continued fraction D_n = c_n - p_n / D_{n+1}, c_n = x + 2n + 1 - a, p_n = (n + 1)(n + 1 - a), all over s
    # (D / s = u / v, u <- c u - p v, v <- u), with a division every _RENORMALISE steps. Q = x^a e^{-x}/Gamma(a)/D_0.
    x_c = jnp.where(lower, a + 1.0, x)
    inv_s = 1.0 / (x_c + (2 * cf_depth + 1))
    xa = (x_c - a) * inv_s
    a_s2 = a * inv_s * inv_s
    inv_s2 = inv_s * inv_s
    u, v = xa + (2 * cf_depth + 1) * inv_s, jnp.ones_like(a)
    for n in range(cf_depth - 1, -1, -1):
        c = xa + (2 * n + 1) * inv_s
        pn = (n + 1) ** 2 * inv_s2 - (n + 1) * a_s2
        u, v = c * u - pn * v, u
        if n % _RENORMALISE == 0:
            u, v = u / v, jnp.ones_like(a)
    q_cf = jnp.exp(log_pref + jnp.log(a)) * inv_s / u
    q_cf = jnp.where(lower, 0.0, q_cf)

    temme = big & (jnp.abs(eta) <= _ETA_TEMME)
    p = jnp.where(temme, p_temme, jnp.where(lower, p_series, 1.0 - q_cf))
    q = jnp.where(temme, q_temme, jnp.where(lower, 1.0 - p_series, q_cf))
    return p, q


def _gammainc_both(a: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(P, Q) for every a > 0, x >= 0 including x = 0 and x = inf (other inputs: the caller makes them NaN)."""
    # a and x are guarded separately (not broadcast): work that depends on a alone is done once per a.
    a_s = jnp.where((a > 0) & (a < jnp.inf), a, _A_TEMME)
    x_s = jnp.where((x > 0) & (x < jnp.inf), x, 1.0)
    # When every shape is large (the usual case: a = d / 2 with d >= 40) the cheaper large-a program runs; under
    # vmap both run and the selected results are the same.
    p, q = lax.cond(
        jnp.all(a_s >= _A_TEMME),
        lambda: _gammainc_pq(a_s, x_s, all_big=True),
        lambda: _gammainc_pq(a_s, x_s, all_big=False),
    )
    p = jnp.where(x <= 0, 0.0, jnp.where(x == jnp.inf, 1.0, p))
    q = jnp.where(x <= 0, 1.0, jnp.where(x == jnp.inf, 0.0, q))
    return p, q


def _log_gamma_density(a: jax.Array, x: jax.Array) -> jax.Array:
    """log[x^{a-1} e^{-x} / Gamma(a)] = log dP/dx (-inf at x = 0 and x = inf)."""
    interior = (a > 0) & (a < jnp.inf) & (x > 0) & (x < jnp.inf)
    a_s = jnp.where((a > 0) & (a < jnp.inf), a, 1.0)
    x_s = jnp.where((x > 0) & (x < jnp.inf), x, 1.0)
    log_pref = _eta_and_prefactor(a_s, x_s, all_big=False)[2]
    return jnp.where(interior, log_pref + jnp.log(a_s) - jnp.log(x_s), -jnp.inf)


def _gammainc_jvp(index: int, primals, tangents):
    a, x = primals
    a_dot, x_dot = tangents
    both = _gammainc_both(a, x)
    out = both[index]
    sign = 1.0 if index == 0 else -1.0
    tangent = jnp.zeros_like(out)
    if not isinstance(x_dot, SymbolicZero):
        tangent = tangent + sign * jnp.exp(_log_gamma_density(a, x)) * x_dot  # d/dx P = x^{a-1} e^{-x} / Gamma(a)
    if not isinstance(a_dot, SymbolicZero):
        # The order derivative differentiates the fixed-term approximation itself (all branches are smooth).
        tangent = tangent + jax.jvp(lambda a_: _gammainc_both(a_, x)[index], (a,), (a_dot,))[1]
    return out, tangent


@jax.custom_jvp
def _gammainc_p(a: jax.Array, x: jax.Array) -> jax.Array:
    return _gammainc_both(a, x)[0]


@jax.custom_jvp
def _gammainc_q(a: jax.Array, x: jax.Array) -> jax.Array:
    return _gammainc_both(a, x)[1]


_gammainc_p.defjvp(lambda primals, tangents: _gammainc_jvp(0, primals, tangents), symbolic_zeros=True)
_gammainc_q.defjvp(lambda primals, tangents: _gammainc_jvp(1, primals, tangents), symbolic_zeros=True)


def _as_float_pair(a: jax.typing.ArrayLike, x: jax.typing.ArrayLike) -> tuple[jax.Array, jax.Array]:
    return v.as_float(a, x, broadcast=False)


@jax.jit
def _gammainc_p_checked(a: jax.Array, x: jax.Array) -> jax.Array:
    invalid = (a <= 0) | (x < 0) | jnp.isnan(a) | jnp.isnan(x) | (a == jnp.inf)
    return jnp.where(invalid, jnp.nan, _gammainc_p(a, x))


@jax.jit
def _gammainc_q_checked(a: jax.Array, x: jax.Array) -> jax.Array:
    invalid = (a <= 0) | (x < 0) | jnp.isnan(a) | jnp.isnan(x) | (a == jnp.inf)
    return jnp.where(invalid, jnp.nan, _gammainc_q(a, x))


def gammainc(a: jax.typing.ArrayLike, x: jax.typing.ArrayLike) -> jax.Array:
    """Regularised lower incomplete gamma ``P(a, x)``, accurate for every shape ``a`` (tested up to 2e9).

    A fixed number of elementwise operations per value (XLA fuses them into one loop; no data-dependent
    iteration), so it vectorises and runs unchanged on accelerators:

    - ``a >= 20`` and ``|eta| <= 1`` (``eta^2 / 2 = x/a - 1 - log(x/a)``, i.e. ``0.30 a <~ x <~ 2.35 a``): Temme's
      uniform asymptotic expansion (DLMF 8.12), 13 powers of ``1/a`` times 30-term Taylor polynomials in ``eta``
      whose coefficients are generated exactly from the DLMF 8.12.10 recursion;
    - below that (and ``x < a + 1`` for ``a < 20``): the ascending series (DLMF 8.7.1), 48 terms;
    - above: Legendre's continued fraction (DLMF 8.9.2) at depth 40, evaluated bottom-up.

    The factor ``x^a e^{-x} / Gamma(a + 1)`` is formed as ``exp(-a eta^2 / 2) / (sqrt(2 pi a) Gamma*(a))`` for
    ``a >= 20``, so nothing cancels at huge ``a`` (SciPy and ``jax.scipy`` lose accuracy there: e.g.
    ``P(5e8, 5e8 - 10 sqrt(5e8)) = 7.507e-24``, SciPy returns ``4.48e-24``). Far tails underflow to exactly 0
    (e.g. ``a >= 5000`` with tiny ``x``), never NaN. ``tests/test_special.py`` checks it against SciPy for
    ``a < 5e4`` (down to ``P ~ 1e-280``) and against mpmath for ``a`` up to 2e9.

    Differentiable: ``d/dx P = x^{a-1} e^{-x} / Gamma(a)`` exactly (``custom_jvp``), ``d/da`` by differentiating
    the expansion above. Invalid inputs (``a <= 0``, ``a = inf``, ``x < 0``, NaN) give NaN.

    Args:
      a: shape parameter, > 0.
      x: argument, >= 0 (``x = inf`` gives 1).

    Returns:
      ``P(a, x)`` in [0, 1], with the broadcast shape of ``a`` and ``x``.

    Example:
      >>> import scipy.special
      >>> from recon_jax.special import gammainc
      >>> bool(abs(float(gammainc(2.5e7, 2.5e7)) - scipy.special.gammainc(2.5e7, 2.5e7)) < 1e-5)
      True
      >>> float(gammainc(5000.0, 1e-20))  # far lower tail: exactly 0, not NaN
      0.0
    """
    return _gammainc_p_checked(*_as_float_pair(a, x))


def gammaincc(a: jax.typing.ArrayLike, x: jax.typing.ArrayLike) -> jax.Array:
    """Regularised upper incomplete gamma ``Q(a, x) = 1 - P(a, x)``, computed directly (no ``1 - P`` in the tail).

    Same methods, range and gradients as :func:`gammainc`; the upper tail (``x`` above ``a``) keeps full relative
    accuracy down to underflow. Where the series is used (``x < a + 1`` for ``a < 20``, ``x <~ 0.3 a`` above),
    ``Q = 1 - P``: its relative accuracy is that of ``P`` times ``P / Q`` (only small when ``a << 1``).

    Args:
      a: shape parameter, > 0.
      x: argument, >= 0.

    Returns:
      ``Q(a, x)`` in [0, 1].

    Example:
      >>> import scipy.special
      >>> from recon_jax.special import gammaincc
      >>> bool(abs(float(gammaincc(30.0, 90.0)) / scipy.special.gammaincc(30.0, 90.0) - 1) < 1e-5)
      True
    """
    return _gammainc_q_checked(*_as_float_pair(a, x))
