"""Every theoretical route for one Gaussian DP-SGD configuration, in one call, as a typed result.

:func:`privacy_bounds` collects, for a Gaussian DP-SGD / DP-GD configuration (noise multiplier ``sigma``,
sampling rate ``q``, ``steps``, clip norm ``C``):

- epsilon at ``delta`` from our RDP accountant and from the PLD accountant (``dp_accounting``);
- ReRo upper bounds (probability of a successful reconstruction) for priors ``kappa`` through the RDP curve
  (the optimal RDP-to-trade-off conversion, tighter than Balle et al. Thm 2), zCDP (likewise; full batch only),
  the hypothesis-testing route (Hayes et al. 2023): for full batches the GDP closed form
  ``Phi(Phi^-1(kappa) + mu)`` with ``mu = sqrt(T)/sigma`` (``rero_gdp``), for ``q < 1`` the trade-off curve of the
  subsampled Gaussian's privacy-loss distribution (``rero_pld``, :func:`rero_dpsgd_tradeoff`; the mechanism is not
  GDP then, so the field names the curve that was computed), and Balle et al.'s Thm 2 for approximate DP from the
  RDP accountant's (eps, delta) (``rero_dp``, :func:`~recon_jax.bounds.rero_from_approx_dp`);
- Ziller et al.'s prior-free bounds for an adversary who sees the T noisy gradient releases (expected MSE lower
  bound, PSNR upper bound at data range 1, NCC upper bound, and P[MSE <= eta]), in the units of the clipped record.
  They count the record in every one of the T steps, whatever ``q``: for ``q < 1`` they describe a run that
  samples the record at each step, not the subsampled one (whose fewer releases leak less);
- the log Bayes' capacity of the Gaussian mechanism (Biswas et al. Thm 5).

:func:`tightest_rero` picks the smallest applicable ReRo route (each is a valid upper bound, so the minimum is one
too). Adjacency is add/remove-one with sensitivity C (the usual DP-SGD accounting), which is what the ReRo argument
needs: it compares training on D- u {z} with training on D- alone, where no attack beats the prior. Ziller et al.'s
bounds hold in their threat model (the noisy gradient of a linear layer reveals the clipped record).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

from recon_jax import bounds
from recon_jax.accounting._pld_memory import check_whole_counts
from recon_jax.accounting.dpsgd import dpsgd_epsilon, rero_dpsgd_tradeoff
from recon_jax.accounting.rdp import DEFAULT_ORDERS, rdp_gaussian, rdp_subsampled_gaussian

__all__ = ["ROUTES", "ReroBounds", "PrivacyBounds", "privacy_bounds", "tightest_rero"]

ROUTES = ("rero_gdp", "rero_pld", "rero_rdp", "rero_zcdp")
"""The routes :func:`tightest_rero` chooses among (``rero_dp``, Thm 2 from one (eps, delta) point of the RDP curve,
is never tighter than the curve it comes from)."""


@dataclasses.dataclass(frozen=True)
class ReroBounds:
    """ReRo upper bounds at one prior ``kappa``, one per route (``None`` where a route does not apply).

    The hypothesis-testing route is ``rero_gdp`` (the GDP closed form) for full batches (q = 1) and ``rero_pld``
    (the PLD trade-off curve of the subsampled Gaussian) for q < 1; the other of the two is ``None``.
    """

    kappa: float
    rero_rdp: float
    rero_zcdp: float | None
    rero_gdp: float | None
    rero_dp: float
    rero_pld: float | None = None


@dataclasses.dataclass(frozen=True)
class PrivacyBounds:
    """The result of :func:`privacy_bounds`. :meth:`to_dict` gives the JSON form (the same field names)."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float
    eps_rdp: float
    eps_pld: float
    rero: tuple[ReroBounds, ...]
    ziller_mse_lower_bound: float
    ziller_psnr_upper_bound: float
    ziller_ncc_upper_bound: float
    log_bayes_capacity: float
    kappa_at_eta: float | None = None
    eta_mse: float | None = None
    ziller_p_mse_below_eta: float | None = None

    def at(self, kappa: float) -> ReroBounds:
        """The ReRo row of prior ``kappa`` (one of those computed).

        Raises:
          KeyError: if no row has this ``kappa``.
        """
        for row in self.rero:
            if row.kappa == float(kappa):
                return row
        raise KeyError(f"no ReRo row at kappa={kappa}; computed at {[r.kappa for r in self.rero]}")

    def to_dict(self) -> dict:
        """A JSON-able dict (the optional fields only where set)."""
        out = dataclasses.asdict(self)
        out["rero"] = list(out["rero"])
        for name in ("kappa_at_eta", "eta_mse", "ziller_p_mse_below_eta"):
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> PrivacyBounds:
        """The :class:`PrivacyBounds` whose :meth:`to_dict` is ``d`` (as written, or as JSON gives it back: the
        ``rero`` rows a list of dicts): ``PrivacyBounds.from_dict(b.to_dict()) == b``.

        >>> b = privacy_bounds(4.0, 1.0, 100, 1e-5, 1.0, 784, kappas=[0.1], eta_mse=0.01, kappa_at_eta=0.003)
        >>> PrivacyBounds.from_dict(b.to_dict()) == b
        True
        """
        return cls(**{**d, "rero": tuple(ReroBounds(**r) for r in d["rero"])})


def privacy_bounds(noise_multiplier: float, sample_rate: float, steps: int, delta: float, clip_norm: float,
                   data_dim: int, kappas: Sequence[float], eta_mse: float | None = None,
                   kappa_at_eta: float | None = None, num_params: int | None = None) -> PrivacyBounds:
    """All bounds for one Gaussian DP-SGD configuration (see the module docstring).

    Args:
      noise_multiplier: sigma > 0.
      sample_rate: q in (0, 1] (1 = full-batch DP-GD).
      steps: T >= 1 noisy gradient releases, a whole number.
      delta: target delta in (0, 1).
      clip_norm: C > 0.
      data_dim: dimension N of one training example (for the NCC and P[MSE <= eta] bounds).
      kappas: priors (baseline success probabilities) in (0, 1) for the ReRo table.
      eta_mse: optional MSE success threshold; adds Ziller's ``P[MSE <= eta]`` bound.
      kappa_at_eta: optional baseline success probability of the threshold ``eta_mse``, in (0, 1); adds a ReRo row
        at it (none when ``kappas`` has it already).
      num_params: model size for Bayes' capacity (default ``data_dim``).

    Returns:
      A :class:`PrivacyBounds` (for ``q < 1`` zCDP and GDP are ``None`` and the hypothesis-testing route is
      ``rero_pld``; for ``q = 1`` ``rero_pld`` is ``None``).

    Raises:
      ValueError: naming the argument, when ``noise_multiplier``, ``sample_rate``, ``steps`` (fractional ones
        included) or ``kappa_at_eta`` is out of range.

    >>> b = privacy_bounds(4.0, 1.0, 100, 1e-5, 1.0, 784, kappas=[0.1])
    >>> value, route = tightest_rero(b.at(0.1)); route, round(value, 4)   # Phi(Phi^-1(0.1) + sqrt(100) / 4)
    ('rero_gdp', 0.8885)
    >>> b.eps_pld < b.eps_rdp
    True
    """
    sigma, q = float(noise_multiplier), float(sample_rate)
    if not sigma > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    if not 0 < q <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    # A fractional count was truncated here (7031.25 composed 7031 steps: a bound below the true one).
    check_whole_counts("steps", steps, "privacy_bounds")
    T = int(steps)
    if T < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if kappa_at_eta is not None and not 0 < kappa_at_eta < 1:
        raise ValueError(f"kappa_at_eta must be in the open interval (0, 1) or None, got {kappa_at_eta}")
    eps_rdp = float(dpsgd_epsilon(sigma, q, T, delta, accountant="rdp"))
    eps_pld = float(dpsgd_epsilon(sigma, q, T, delta, accountant="pld"))
    orders = np.asarray(DEFAULT_ORDERS, np.float64)
    if q == 1.0:
        rdp_curve = T * np.asarray(rdp_gaussian(sigma, orders))
    else:
        rdp_curve = T * np.asarray(rdp_subsampled_gaussian(q, sigma, orders))
    all_kappas = [float(k) for k in kappas]
    if kappa_at_eta is not None and float(kappa_at_eta) not in all_kappas:  # one row per prior
        all_kappas.append(float(kappa_at_eta))
    rows = []
    for k in all_kappas:
        full = q == 1.0
        rows.append(ReroBounds(
            kappa=k,
            rero_rdp=float(bounds.rero_from_rdp_curve(k, orders, rdp_curve)),
            rero_zcdp=float(bounds.rero_from_zcdp(k, T / (2 * sigma**2))) if full else None,
            rero_gdp=float(bounds.rero_gdp(k, math.sqrt(T) / sigma)) if full else None,
            # (eps_rdp, delta)-DP, not (eps_rdp, 0): the pure-DP formula dropped delta and fell below the exact
            # Gaussian bound at small kappa (kappa = 1e-8, sigma = 1, T = 1: 1.13e-6 against 1.99e-6).
            rero_dp=float(bounds.rero_from_approx_dp(k, eps_rdp, delta)),
            rero_pld=None if full else float(np.asarray(rero_dpsgd_tradeoff([k], sigma, q, T))[0]),
        ))
    return PrivacyBounds(
        noise_multiplier=sigma, sample_rate=q, steps=T, delta=float(delta), eps_rdp=eps_rdp, eps_pld=eps_pld,
        rero=tuple(rows),
        ziller_mse_lower_bound=float(bounds.mse_lower_bound(sigma, clip_norm, steps=T)),
        ziller_psnr_upper_bound=float(bounds.psnr_upper_bound(sigma, clip_norm, data_range=1.0, steps=T)),
        ziller_ncc_upper_bound=float(bounds.ncc_upper_bound(sigma, data_dim, steps=T)),
        log_bayes_capacity=float(bounds.log_bayes_capacity_gaussian(sigma / math.sqrt(T), num_params or data_dim)),
        kappa_at_eta=None if kappa_at_eta is None else float(kappa_at_eta),
        eta_mse=None if eta_mse is None else float(eta_mse),
        ziller_p_mse_below_eta=(None if eta_mse is None
                                else float(bounds.rero_mse(eta_mse, sigma, clip_norm, data_dim, steps=T))),
    )


def tightest_rero(row: ReroBounds | Mapping) -> tuple[float, str]:
    """The smallest applicable ReRo bound of a row (a :class:`ReroBounds` or its dict form) and its route
    (routes absent from a dict, as in metrics written before ``rero_pld`` existed, do not apply).

    >>> tightest_rero({"kappa": 0.1, "rero_gdp": 0.4, "rero_rdp": 0.5, "rero_zcdp": None})
    (0.4, 'rero_gdp')
    """
    get = row.get if isinstance(row, Mapping) else (lambda name: getattr(row, name, None))
    best = min((get(r), r) for r in ROUTES if get(r) is not None)
    return float(best[0]), best[1]
