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

One module per family: :mod:`~recon_jax.special.bessel`, :mod:`~recon_jax.special.elementary`,
:mod:`~recon_jax.special.gamma`.
"""

from recon_jax.special.bessel import log_iv
from recon_jax.special.elementary import log_expm1
from recon_jax.special.gamma import gammainc, gammaincc

__all__ = ["log_iv", "log_expm1", "gammainc", "gammaincc"]
