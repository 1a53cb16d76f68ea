"""The nearest-neighbour oracle baseline and per-target reconstruction metrics (Balle et al. 2022, Sec. V-B).

The NN oracle knows every point available to the adversary (the fixed set D- and the shadow pool) and guesses
the one closest in MSE to the target. Its MSE is a conservative success threshold: a reconstruction with a
smaller MSE is closer to the target than anything the adversary had, so it must have extracted information
about the target from the released model. Fig. 3 also shows order statistics of each target's MSE to the pool
(1st, 10th and 50th percentile); :func:`nn_oracle` returns them per target.

Also here: per-target success (``reconstruction MSE < oracle MSE``), the classifier-KL metric (KL divergence
between a separately trained classifier's predictions on target and reconstruction, Sec. V-B c), a small
trainer for that classifier, :func:`empirical_kappa`, the baseline error ``kappa(eta)`` of Sec. VII for the
empirical prior over a pool at given guesses, and :func:`estimate_kappa`, the one estimator every experiment uses
to place ReRo bounds next to attack results.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax import metrics as _metrics
from recon_jax._validation import FINITE, Range, check

__all__ = [
    "OracleResult",
    "pairwise_mse",
    "nn_oracle",
    "success",
    "reconstruction_metrics",
    "empirical_kappa",
    "estimate_kappa",
]

_PERCENT = Range(lambda v: (v >= 0) & (v <= 100), "in [0, 100]")  # NaN fails it


class OracleResult(NamedTuple):
    """Output of :func:`nn_oracle` (``T`` targets, ``M`` pool points, ``Q`` percentiles).

    Attributes:
      nn_mse: ``[T]`` MSE of each target to its nearest pool point (the oracle's MSE).
      nn_index: ``[T]`` index of that pool point.
      percentile_mse: ``[T, Q]`` the requested percentiles of each target's MSEs to the pool.
      percentiles: ``[Q]`` the percentiles (in [0, 100]).
      histogram: ``[bins]`` histogram of the MSEs to the pool averaged over targets (Fig. 3), or empty.
      bin_edges: ``[bins + 1]`` its edges, or empty.
    """

    nn_mse: jax.Array
    nn_index: jax.Array
    percentile_mse: jax.Array
    percentiles: jax.Array
    histogram: jax.Array
    bin_edges: jax.Array


def _flat(x, name):
    x = jnp.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"{name} must have a leading batch axis and >= 1 more axis, got shape {x.shape}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one point, got shape {x.shape}")
    return x.reshape(x.shape[0], -1)


def _check_chunk(chunk_size):
    if not (isinstance(chunk_size, int) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")


@jax.jit
def _pairwise_block(t, pool, pool_sq):
    # ||t - p||^2 = ||t||^2 + ||p||^2 - 2 <t, p>, at full matmul precision; clamp rounding below zero.
    dots = jnp.matmul(t, pool.T, precision=jax.lax.Precision.HIGHEST)
    sq = jnp.sum(t * t, axis=1, keepdims=True) + pool_sq[None, :] - 2.0 * dots
    return jnp.maximum(sq, 0.0) / t.shape[1]


def _chunked_targets(targets, chunk_size):
    n = targets.shape[0]
    pad = (-n) % chunk_size
    padded = jnp.concatenate([targets, jnp.zeros((pad, targets.shape[1]), targets.dtype)]) if pad else targets
    return padded.reshape(-1, chunk_size, targets.shape[1]), n


def pairwise_mse(targets: jax.Array, pool: jax.Array, chunk_size: int = 256) -> jax.Array:
    """MSE between every target and every pool point, ``[T, M]`` (computed in target chunks with ``lax.map``).

    Args:
      targets: ``[T, ...]``.
      pool: ``[M, ...]`` with the same example shape.
      chunk_size: targets per block (bounds memory at ``chunk_size x M``).

    >>> import jax.numpy as jnp
    >>> pairwise_mse(jnp.zeros((1, 2)), jnp.array([[0., 0.], [1., 1.], [2., 0.]])).tolist()
    [[0.0, 1.0, 2.0]]
    """
    _check_chunk(chunk_size)
    t, p = _flat(targets, "targets"), _flat(pool, "pool")
    if t.shape[1] != p.shape[1]:
        raise ValueError(f"targets and pool must have the same example size, got {t.shape[1]} and {p.shape[1]}")
    dtype = jnp.result_type(t, p, jnp.float32)
    t, p = t.astype(dtype), p.astype(dtype)
    pool_sq = jnp.sum(p * p, axis=1)
    blocks, n = _chunked_targets(t, min(chunk_size, t.shape[0]))
    out = jax.lax.map(lambda b: _pairwise_block(b, p, pool_sq), blocks)
    return out.reshape(-1, p.shape[0])[:n]


@functools.partial(jax.jit, static_argnames=("bins",))
def _oracle_block(t, pool, pool_sq, q, edges, bins):
    d = _pairwise_block(t, pool, pool_sq)
    idx = jnp.argmin(d, axis=1)
    nn = jnp.take_along_axis(d, idx[:, None], axis=1)[:, 0]
    pct = jnp.percentile(d, q, axis=1).T  # [chunk, Q]
    if bins:
        hist = jax.vmap(lambda row: jnp.histogram(row, bins=edges)[0])(d).astype(d.dtype)
    else:
        hist = jnp.zeros((d.shape[0], 0), d.dtype)
    return nn, idx, pct, hist


def nn_oracle(targets: jax.Array, pool: jax.Array, percentiles: Sequence[float] = (1.0, 10.0, 50.0), *,
              bins: int = 0, max_mse: float | None = None, chunk_size: int = 256) -> OracleResult:
    """Nearest-neighbour oracle of Balle et al. (Sec. V-B d) and the order statistics of Fig. 3.

    For each target, the pool point with the smallest MSE (the oracle's guess), that MSE, and percentiles of
    the target's MSEs to all pool points. The pool is everything the adversary knows (D- and the shadow
    targets); it must not contain the evaluation targets themselves.

    Args:
      targets: ``[T, ...]`` evaluation targets.
      pool: ``[M, ...]`` points available to the adversary.
      percentiles: percentiles in [0, 100] of each target's MSE distribution (linear interpolation, as
        ``np.percentile``).
      bins: if > 0, also an averaged histogram of the MSEs over ``bins`` equal bins on ``[0, max_mse]``.
      max_mse: upper edge of the histogram, finite and > 0 (default: the largest possible MSE for data in
        [0, 1], i.e. 1).
      chunk_size: targets per block.

    Returns:
      An :class:`OracleResult`.

    Raises:
      ValueError: on mismatched shapes, NaN or inf in ``targets`` or ``pool`` (concrete), percentiles outside
        [0, 100] (or NaN), or negative ``bins``.

    >>> import jax.numpy as jnp
    >>> r = nn_oracle(jnp.array([[0.0, 0.0]]), jnp.array([[0.0, 1.0], [1.0, 1.0], [0.5, 0.5]]), (50.0,))
    >>> float(r.nn_mse[0]), int(r.nn_index[0]), float(r.percentile_mse[0, 0])
    (0.25, 2, 0.5)
    """
    _check_chunk(chunk_size)
    q = np.asarray(check("percentiles", percentiles, _PERCENT), np.float64).reshape(-1)
    if q.size == 0:
        raise ValueError(f"percentiles must be a non-empty sequence in [0, 100], got {percentiles}")
    q = jnp.asarray(q, jnp.float32)
    if not (isinstance(bins, int) and bins >= 0):
        raise ValueError(f"bins must be an integer >= 0, got {bins!r}")
    t, p = _flat(targets, "targets"), _flat(pool, "pool")
    if t.shape[1] != p.shape[1]:
        raise ValueError(f"targets and pool must have the same example size, got {t.shape[1]} and {p.shape[1]}")
    check("targets", t, FINITE)  # one NaN pixel in the pool made every target's oracle MSE NaN
    check("pool", p, FINITE)
    if max_mse is not None and not 0 < max_mse < np.inf:  # inf made every bin edge inf or NaN
        raise ValueError(f"max_mse must be finite and > 0, got {max_mse}")
    dtype = jnp.result_type(t, p, jnp.float32)
    t, p = t.astype(dtype), p.astype(dtype)
    pool_sq = jnp.sum(p * p, axis=1)
    edges = jnp.linspace(0.0, 1.0 if max_mse is None else float(max_mse), bins + 1, dtype=dtype)
    blocks, n = _chunked_targets(t, min(chunk_size, t.shape[0]))
    nn, idx, pct, hist = jax.lax.map(lambda b: _oracle_block(b, p, pool_sq, q.astype(dtype), edges, bins), blocks)
    nn, idx = nn.reshape(-1)[:n], idx.reshape(-1)[:n]
    pct = pct.reshape(-1, q.size)[:n]
    hist = hist.reshape(-1, bins)[:n].mean(axis=0) if bins else jnp.zeros((0,), dtype)
    return OracleResult(nn, idx, pct, q, hist, edges if bins else jnp.zeros((0,), dtype))


def success(reconstruction_mse: jax.Array, oracle_mse: jax.Array) -> jax.Array:
    """Per-target success of Balle et al.: the reconstruction MSE is strictly below the target's NN-oracle MSE.

    >>> import jax.numpy as jnp
    >>> success(jnp.array([0.01, 0.05]), jnp.array([0.02, 0.02])).tolist()
    [True, False]
    """
    a, b = jnp.asarray(reconstruction_mse), jnp.asarray(oracle_mse)
    if a.shape != b.shape:
        raise ValueError(f"reconstruction_mse and oracle_mse must have the same shape, got {a.shape}, {b.shape}")
    return a < b


def reconstruction_metrics(targets: jax.Array, reconstructions: jax.Array, oracle_mse: jax.Array | None = None,
                           classifier_apply: Callable[[jax.Array], jax.Array] | None = None,
                           data_range: float = 1.0) -> dict[str, jax.Array]:
    """Per-target MSE, PSNR, SSIM (images only), NCC, and optionally success and classifier KL.

    Args:
      targets: ``[T, ...]`` in ``[0, data_range]``.
      reconstructions: same shape.
      oracle_mse: ``[T]`` NN-oracle MSEs; adds ``"success"`` and ``"oracle_mse"``.
      classifier_apply: images -> logits; adds ``"kl"``.
      data_range: dynamic range of the data.

    Returns:
      A dict of ``[T]`` arrays.

    >>> import jax.numpy as jnp
    >>> m = reconstruction_metrics(jnp.zeros((2, 8, 8, 1)), jnp.full((2, 8, 8, 1), 0.1), jnp.array([0.02, 0.001]))
    >>> [round(float(v), 4) for v in m["mse"]], m["success"].tolist()
    ([0.01, 0.01], [True, False])
    """
    targets, reconstructions = jnp.asarray(targets), jnp.asarray(reconstructions)
    out = {
        "mse": _metrics.mse(targets, reconstructions),
        "psnr": _metrics.psnr(targets, reconstructions, data_range),
        "ncc": _metrics.ncc(targets, reconstructions),
    }
    if targets.ndim in (3, 4) and min(targets.shape[1:3]) >= 11:
        out["ssim"] = _metrics.ssim(targets, reconstructions, data_range)
    if oracle_mse is not None:
        out["oracle_mse"] = jnp.asarray(oracle_mse)
        out["success"] = success(out["mse"], out["oracle_mse"])
    if classifier_apply is not None:
        out["kl"] = _metrics.classifier_kl(classifier_apply, targets, reconstructions)
    return out


def empirical_kappa(pool: jax.Array, eta: float | jax.Array, candidates: jax.Array | None = None,
                    chunk_size: int = 256) -> jax.Array:
    """Baseline error ``kappa(eta) = sup_z0 P_{Z ~ pi}[MSE(Z, z0) <= eta]`` for the empirical prior ``pi`` on ``pool``.

    Balle et al. Sec. VII-B: the success probability of the best oblivious reconstruction, used in the ReRo
    bounds. The supremum is taken over ``candidates`` (default: the pool itself), a lower estimate of the true
    supremum over all of the data space.

    Args:
      pool: ``[M, ...]`` points of the (uniform) empirical prior.
      eta: MSE threshold(s) (scalar or ``[E]``), >= 0.
      candidates: ``[C, ...]`` guesses ``z0`` (default ``pool``).

    Returns:
      ``kappa`` with the shape of ``eta``.

    Raises:
      ValueError: ``eta`` negative or NaN, an empty ``pool`` or ``candidates``, or their example sizes differ.

    >>> import jax.numpy as jnp
    >>> round(float(empirical_kappa(jnp.array([[0.0], [0.1], [1.0]]), 0.02)), 4)   # 2 of 3 within 0.02 of 0.0
    0.6667
    """
    eta = jnp.asarray(eta)
    if not jnp.issubdtype(eta.dtype, jnp.floating):
        eta = eta.astype(jnp.float32)  # a float eta keeps its value (float64 with x64 on), an int becomes a float
    if not bool(jnp.all(eta >= 0)):  # NaN fails too
        raise ValueError(f"eta must be >= 0 (not NaN), got {eta}")
    _check_chunk(chunk_size)
    p = _flat(pool, "pool")
    c = p if candidates is None else _flat(candidates, "candidates")
    if c.shape[1] != p.shape[1]:
        raise ValueError(f"candidates and pool must have the same example size, got {c.shape[1]} and {p.shape[1]}")
    dtype = jnp.result_type(c, p, eta)
    c, p = c.astype(dtype), p.astype(dtype)
    pool_sq = jnp.sum(p * p, axis=1)
    e = eta.reshape(-1).astype(dtype)
    blocks, n = _chunked_targets(c, min(chunk_size, c.shape[0]))

    def block_counts(b):
        d = _pairwise_block(b, p, pool_sq)  # [chunk, M]
        return jnp.sum(d[:, :, None] <= e[None, None, :], axis=1)  # [chunk, E]

    counts = jax.lax.map(block_counts, blocks).reshape(-1, e.size)[:n]
    return (jnp.max(counts, axis=0) / p.shape[0]).reshape(eta.shape)


def estimate_kappa(pool: jax.Array, eta: float | jax.Array, labels: jax.Array | None = None, *,
                   max_pool: int | None = 4000, chunk_size: int = 256) -> jax.Array:
    """The shared estimator of the ReRo baseline ``kappa(eta)`` for the uniform prior on a pool of records.

    ``kappa(eta) = sup_z0 P_{Z ~ pi}[MSE(Z, z0) <= eta]`` (Balle et al. Sec. VII-B) with ``pi`` uniform on the
    first ``max_pool`` records of ``pool`` (the adversary's records, in the order given; pass them shuffled). The
    supremum runs over these guesses ``z0``: every record of that prior, the prior's mean and, when ``labels``
    are given, each class mean (blurry averages are often the best oblivious guesses under MSE). Since the true
    supremum is over the whole data space, the estimate is a lower estimate of kappa, and a ReRo bound computed
    at it is approximate (slightly too small) rather than guaranteed. Every experiment that places ReRo bounds
    beside MSE-thresholded attack success (risk_report, balle_mnist) calls this function, so their kappas agree.

    Args:
      pool: ``[M, ...]`` records of the prior.
      eta: MSE threshold(s) >= 0 (scalar or ``[E]``).
      labels: optional ``[M]`` integer class labels (adds the class means as guesses).
      max_pool: use only the first ``max_pool`` records (bounds the ``O(M^2)`` cost); ``None`` uses all.
      chunk_size: guesses per block.

    Returns:
      ``kappa`` with the shape of ``eta``.

    Raises:
      ValueError: for mismatched labels, a negative eta, or ``max_pool < 1``.

    >>> import jax.numpy as jnp
    >>> pool = jnp.array([[0.0], [0.2], [1.0], [1.2]])
    >>> float(estimate_kappa(pool, 0.011))              # each record covers only itself
    0.25
    >>> float(estimate_kappa(pool, 0.011, jnp.array([0, 0, 1, 1])))   # class mean 0.1 covers 0.0 and 0.2
    0.5
    >>> float(estimate_kappa(pool, 0.37)), float(empirical_kappa(pool, 0.37))  # the pool mean 0.6 covers all
    (1.0, 0.5)
    """
    if max_pool is not None and not (isinstance(max_pool, int) and max_pool >= 1):
        raise ValueError(f"max_pool must be None or an integer >= 1, got {max_pool!r}")
    pool = _flat(pool, "pool")
    m = pool.shape[0] if max_pool is None else min(pool.shape[0], max_pool)
    prior = pool[:m]
    guesses = [prior, prior.mean(axis=0, keepdims=True)]
    if labels is not None:
        lab = np.asarray(labels)
        if lab.shape != (pool.shape[0],):
            raise ValueError(f"labels must have shape [{pool.shape[0]}], got {lab.shape}")
        lab = lab[:m]
        guesses += [prior[lab == c].mean(axis=0, keepdims=True) for c in np.unique(lab)]
    return empirical_kappa(prior, eta, candidates=jnp.concatenate(guesses), chunk_size=chunk_size)
