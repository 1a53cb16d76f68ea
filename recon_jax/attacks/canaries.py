r"""Gradient canaries: crafted candidates whose clipped gradients have a chosen geometry at every step.

Threat model. A *gradient canary* is a record whose clipped gradient the adversary (or auditor) chooses outright:
it contributes the same vector ``c`` of norm at most C to every step's clipped sum, whatever the parameters
(Nasr et al. 2021 and 2023 insert such gradients to audit DP-SGD white-box; Hayes, Mahloujifar & Balle 2023 use
them to show that their reconstruction bound is tight). DP-SGD's accounting covers any contribution of norm at
most C, so every bound of the accountant (and the ReRo bound derived from it) applies to gradient canaries; they
are the adversary the bound speaks about, not a plausible data record. Random records are the realistic row
(:func:`recon_jax.attacks.prior_aware.prior_aware_game` with records).

Geometry. :func:`crafted_canaries` builds a prior of k canaries on k chosen parameter coordinates:

- ``"orthogonal"``: ``c_j = C e_{p_j}`` (Dirac canaries): pairwise orthogonal, full norm;
- ``"simplex"``: ``c_j = C sqrt(k / (k - 1)) (e_{p_j} - (1/k) sum_i e_{p_i})``: a centred regular simplex, full
  norm, pairwise cosine ``-1 / (k - 1)``, summing to zero (``c_2 = -c_1``: antipodal at k = 2). At equal norm
  these are the k vectors farthest apart, so the Bayes-optimal guess succeeds most often
  (:func:`recon_jax.attacks.prior_aware.crafted_success_probability`).

Being fixed vectors, their clipped gradients stay at full norm and keep their geometry along the whole training
run. :func:`canary_coordinates` places them, for the model and D- at hand, first on parameters that D-'s gradients
never touch (first-layer weights of input features that are zero in every D- record, where the kernel gradient
``a^T delta`` vanishes at any parameters): there the canaries do not change what D- does to the model.

The game. :func:`canary_game` trains on D- plus the included canaries (each canary's inclusion per run given, and
under Poisson sampling each included canary joins each step with probability q), releases every noisy clipped sum
and scores every canary by its log-likelihood ratio ``sum_t log((1 - q) + q exp(a_{t,j}))`` with
``a_{t,j} = (<r_t, c_j> - ||c_j||^2 / 2) / (sigma C)^2`` and ``r_t`` the released sum minus D-'s clipped sum (which
the adversary recomputes at the released parameters), exactly the scoring of the prior-aware attack. Canaries on
disjoint coordinates do not see each other: ``<r_t, c_j>`` is the projection of the residual on ``c_j``'s
coordinates, where the other canaries add nothing, and the Gaussian noise on disjoint coordinates is independent.
So one run can carry several independent games (one per block of coordinates), the canary of a with/without audit
beside them, or the m canaries of a one-run audit (:mod:`recon_jax.attacks.audit_one_run`).

Notation:

==============  ==================================================================
``C``           clip norm
``sigma``       noise multiplier (noise std / C)
``T``           number of noisy steps
``q``           Poisson rate per step (1 = full batch)
``M``           number of canaries; ``r`` coordinates per canary
==============  ==================================================================
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from recon_jax._validation import check_integer
from recon_jax.models.adapters import ModelFns
from recon_jax.models.losses import softmax_cross_entropy
from recon_jax.mechanisms.base import GaussianMechanism
from recon_jax.training.dp import clipped_gradient_sum, per_example_gradients
from recon_jax.training.ghost import ghost_supported
from recon_jax.training.step import apply_gradient

__all__ = ["GradientCanaries", "CRAFTED_KINDS", "crafted_canaries", "concat_canaries", "canary_coordinates",
           "dense_canaries", "GameTraining", "CanaryGameResult", "canary_game", "check_game_mechanism", "released_sum"]

CRAFTED_KINDS = ("orthogonal", "simplex")


class GradientCanaries(NamedTuple):
    """M gradient canaries, each a sparse flat gradient: ``c_j = sum_l values[j, l] e_{indices[j, l]}``.

    Attributes:
      indices: ``[M, r]`` int32 flat parameter coordinates (distinct within a row; padding entries carry value 0).
      values: ``[M, r]`` float32 values (each row's l2 norm is the canary's norm, at most C once clipped).
    """

    indices: np.ndarray
    values: np.ndarray


def crafted_canaries(kind: str, k: int, coordinates, clip_norm: float) -> GradientCanaries:
    """A prior of k gradient canaries of geometry ``kind`` on ``coordinates`` (see the module docstring).

    Args:
      kind: ``"orthogonal"`` (Dirac canaries ``C e_{p_j}``) or ``"simplex"`` (centred regular simplex, antipodal at
        k = 2).
      k: number of canaries, >= 1 (>= 2 for ``"simplex"``).
      coordinates: k distinct flat parameter indices ``p_1, ..., p_k``.
      clip_norm: C > 0, the norm of every canary.

    Returns:
      :class:`GradientCanaries` (``r = 1`` for orthogonal, ``r = k`` for simplex).

    Raises:
      ValueError: for an unknown kind, k out of range, or coordinates that are not k distinct integers >= 0.

    >>> c = crafted_canaries("simplex", 2, [5, 7], 1.0)
    >>> dense_canaries(c, 8)[:, 5:].round(4).tolist()          # antipodal: c_2 = -c_1, both of norm 1
    [[0.7071, 0.0, -0.7071], [-0.7071, 0.0, 0.7071]]
    """
    if kind not in CRAFTED_KINDS:
        raise ValueError(f"kind must be one of {CRAFTED_KINDS}, got {kind!r}")
    check_integer("k", k, 2 if kind == "simplex" else 1)
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
    p = np.asarray(coordinates)
    if p.shape != (k,) or not np.issubdtype(p.dtype, np.integer) or np.any(p < 0) or len(set(p.tolist())) != k:
        raise ValueError(f"coordinates must be {k} distinct integers >= 0, got {coordinates!r}")
    if kind == "orthogonal":
        return GradientCanaries(p[:, None].astype(np.int32), np.full((k, 1), clip_norm, np.float32))
    geometry = np.sqrt(k / (k - 1.0)) * (np.eye(k) - 1.0 / k)  # rows: unit vectors, pairwise cosine -1/(k-1)
    return GradientCanaries(np.broadcast_to(p, (k, k)).astype(np.int32), (clip_norm * geometry).astype(np.float32))


def concat_canaries(*sets: GradientCanaries) -> GradientCanaries:
    """Stacks canary sets (rows padded to the widest with index 0 and value 0, which add nothing).

    >>> a = crafted_canaries("orthogonal", 2, [0, 1], 1.0)
    >>> concat_canaries(a, crafted_canaries("simplex", 2, [2, 3], 1.0)).indices.tolist()
    [[0, 0], [1, 0], [2, 3], [2, 3]]
    """
    if not sets:
        raise ValueError("concat_canaries needs at least one set")
    width = max(s.indices.shape[1] for s in sets)
    idx = [np.pad(np.asarray(s.indices), ((0, 0), (0, width - s.indices.shape[1]))) for s in sets]
    val = [np.pad(np.asarray(s.values), ((0, 0), (0, width - s.values.shape[1]))) for s in sets]
    return GradientCanaries(np.concatenate(idx).astype(np.int32), np.concatenate(val).astype(np.float32))


def dense_canaries(canaries: GradientCanaries, num_params: int) -> np.ndarray:
    """The canaries as dense flat gradients ``[M, P]`` (host-side, float64; for checks and small models)."""
    out = np.zeros((canaries.indices.shape[0], num_params))
    rows = np.arange(canaries.indices.shape[0])[:, None]
    np.add.at(out, (np.broadcast_to(rows, canaries.indices.shape), canaries.indices), canaries.values)
    return out


def _leaf_offsets(params):
    leaves = jax.tree_util.tree_leaves(params)
    offsets = np.cumsum([0] + [int(np.size(leaf)) for leaf in leaves])
    return leaves, offsets


def canary_coordinates(model_fns: ModelFns, params, fixed_x, count: int, *, loss_fn: Callable = softmax_cross_entropy
                       ) -> tuple[np.ndarray, int]:
    """``count`` distinct flat parameter coordinates for gradient canaries, those D- never touches first.

    Free coordinates: the rows of a first-layer kernel ``[d, h]`` (``d`` the number of input features) that belong
    to input features equal to 0 in every D- record. The kernel gradient of a dense layer reading the inputs is
    ``a^T delta``, so D-'s gradients there vanish at any parameters; this is checked (every D- record's gradient is
    exactly 0 there at ``params`` and at a random perturbation of them), and a kernel that fails the check (a layer
    that does not read the raw inputs) gives no free coordinates. The remaining coordinates follow in flat
    (``ravel_pytree``) order; any coordinate serves the white-box game, where the adversary subtracts D-'s sum.

    Args:
      model_fns: the model.
      params: its parameters (the adversary-known initialisation).
      fixed_x: D-'s inputs ``[n, ...]``.
      count: how many coordinates, 1 <= count <= number of parameters.
      loss_fn: per-example loss (for the check).

    Returns:
      ``(coordinates [count] int32, number of them that are free)``.

    Raises:
      ValueError: if count is out of range.
    """
    flat, _ = ravel_pytree(params)
    num_params = int(flat.shape[0])
    if not (isinstance(count, (int, np.integer)) and 1 <= count <= num_params):
        raise ValueError(f"count must be an integer in [1, {num_params}] (the number of parameters), got {count!r}")
    x = np.asarray(fixed_x)
    d = int(np.prod(x.shape[1:]))
    zero_features = np.flatnonzero(np.all(x.reshape(x.shape[0], d) == 0, axis=0))
    leaves, offsets = _leaf_offsets(params)
    free = np.zeros((0,), np.int64)
    for i, leaf in enumerate(leaves):
        if np.ndim(leaf) == 2 and np.shape(leaf)[0] == d and zero_features.size:
            h = np.shape(leaf)[1]
            cand = (offsets[i] + zero_features[:, None] * h + np.arange(h)[None, :]).reshape(-1)
            if _untouched(model_fns, params, x, cand, loss_fn):
                free = cand
                break
    rest = np.setdiff1d(np.arange(num_params), free, assume_unique=True)
    coords = np.concatenate([free, rest])[:count].astype(np.int32)
    return coords, int(min(free.size, count))


def _untouched(model_fns, params, x, coords, loss_fn) -> bool:
    """Every D- record's gradient is exactly 0 on ``coords`` at ``params`` and at a perturbation of them."""
    flat, unravel = ravel_pytree(params)
    shifted = unravel(flat + 0.1 * jax.random.normal(jax.random.key(0), flat.shape, flat.dtype))
    cj = jnp.asarray(coords)

    @jax.jit
    def largest(p, xb):  # the labels do not matter: a^T delta vanishes for any delta
        g = per_example_gradients(model_fns, p, xb, jnp.zeros((xb.shape[0],), jnp.int32), loss_fn)
        return jnp.max(jnp.abs(g[:, cj]))

    for p in (params, shifted):
        for start in range(0, x.shape[0], 256):
            if float(largest(p, jnp.asarray(x[start:start + 256]))) != 0.0:
                return False
    return True


@dataclasses.dataclass(frozen=True, kw_only=True)
class GameTraining:
    """The released training run of a game (:func:`canary_game`,
    :func:`~recon_jax.attacks.prior_aware.prior_aware_game`): DP-GD, or DP-SGD with Poisson sampling, from the
    adversary-known initial parameters, one run per noise multiplier.

    Attributes:
      noise_multipliers: ``[S]`` noise multipliers sigma > 0 (the noise of a step is ``N(0, (sigma C)^2 I)``).
      clip_norm: the per-example clipping norm C > 0.
      steps: the number of noisy steps T >= 1.
      optimizer: the update rule applied to the noisy normalised sum (e.g. ``optax.sgd(0.2, momentum=0.9)``).
      sample_rate: Poisson rate q in (0, 1]; 1 means full-batch DP-GD.
      loss_fn: per-example loss ``(logits, labels) -> [B]``.
    """

    noise_multipliers: Any
    clip_norm: float
    steps: int
    optimizer: optax.GradientTransformation
    sample_rate: float = 1.0
    loss_fn: Callable = softmax_cross_entropy


class CanaryGameResult(NamedTuple):
    """Output of :func:`canary_game` (``S`` noise levels, ``N`` runs, ``M`` canaries).

    Attributes:
      log_likelihood: ``[S, N, M]`` each canary's log-likelihood ratio, "this canary alone was trained on" vs
        "none was", summed over the released steps (the prior-aware attack's score; the audit's statistic).
    """

    log_likelihood: jax.Array


def released_sum(key: jax.Array, clipped_sum: jax.Array, noise_multiplier, clip_norm: float) -> jax.Array:
    """The second stage of a game's DP step: the Gaussian mechanism's noisy sum, before the public normaliser.

    ``GaussianMechanism(noise_multiplier).privatize`` with batch size 1 (the games keep the unnormalised sum: the
    adversary subtracts D-'s sum from it; the update divides by the normaliser). ``noise_multiplier`` may be
    traced (one game runs every noise level under ``vmap``).
    """
    return GaussianMechanism(noise_multiplier=noise_multiplier).privatize(key, clipped_sum, clip_norm, 1)


def _make_run(model_fns, optimizer, clip_norm, steps, use_ghost, loss_fn, poisson):
    def run(params0, fx, fy, idx, vals, included, sigma, sample_rate, key):
        flat0 = ravel_pytree(params0)[0]
        dtype = flat0.dtype
        n = fx.shape[0]
        q = jnp.asarray(sample_rate, dtype)
        vals = vals.astype(dtype)
        norms = jnp.sqrt(jnp.sum(vals * vals, axis=1))
        vals = vals * jnp.minimum(1.0, clip_norm / jnp.maximum(norms, jnp.finfo(dtype).tiny))[:, None]  # clipped
        sq = jnp.sum(vals * vals, axis=1)
        included = jnp.asarray(included, dtype)
        denom = jnp.where(poisson, q * (n + 1), n + 1).astype(dtype)  # public normaliser, as for D- + one target
        sigma = jnp.asarray(sigma, dtype)
        noise_std = sigma * jnp.asarray(clip_norm, dtype)
        per_example = "ghost" if use_ghost else "vmap"

        def step(carry, t):
            params, opt_state, ll = carry
            k_noise, k_fixed, k_canary = jax.random.split(jax.random.fold_in(key, t), 3)
            if poisson:
                w_fixed = jax.random.bernoulli(k_fixed, q, (n,)).astype(dtype)
                b = jax.random.bernoulli(k_canary, q, included.shape).astype(dtype)
            else:
                w_fixed, b = None, jnp.ones_like(included)
            # The DP step (the released run's): clip (D-'s sum plus the included canaries' clipped vectors), add
            # noise, apply the optimizer; the adversary scores the released sum in between. It recomputes D-'s sum
            # at the released parameters (the same first stage), so `base` serves both sides.
            base = clipped_gradient_sum(model_fns, params, fx, fy, clip_norm=clip_norm, weights=w_fixed,
                                        per_example=per_example, loss_fn=loss_fn)[1]
            canary_sum = jnp.zeros_like(base).at[idx].add(vals * (included * b)[:, None])
            observed = released_sum(k_noise, base + canary_sum, sigma, clip_norm)
            residual = observed - base  # the adversary subtracts the D- sum it recomputes at the released params
            a = (jnp.sum(residual[idx] * vals, axis=1) - 0.5 * sq) / jnp.square(noise_std)
            ll = ll + jnp.logaddexp(jnp.log1p(-q), jnp.log(q) + a)
            params, opt_state = apply_gradient(optimizer, params, opt_state, observed / denom)
            return (params, opt_state, ll), None

        zeros = jnp.zeros(included.shape, dtype)
        (_, _, ll), _ = jax.lax.scan(step, (params0, optimizer.init(params0), zeros), jnp.arange(steps))
        return ll

    return run


@functools.lru_cache(maxsize=16)
def _compiled(model_fns, optimizer, clip_norm, steps, use_ghost, loss_fn, poisson):
    run = _make_run(model_fns, optimizer, clip_norm, steps, use_ghost, loss_fn, poisson)
    over_runs = jax.vmap(run, in_axes=(None, None, None, None, None, 0, None, None, 0))
    return jax.jit(jax.vmap(over_runs, in_axes=(None, None, None, None, None, None, 0, None, 0)))


def check_game_mechanism(noise_multipliers, clip_norm, steps, sample_rate, chunk_size) -> jax.Array:
    """Checks the accounted mechanism of a game (:func:`canary_game`, ``prior_aware_game``) and returns the noise
    multipliers as a 1-D array.

    Raises:
      ValueError: naming the argument: noise multipliers not a 1-D sequence of values > 0, ``clip_norm <= 0``,
        ``steps`` or ``chunk_size`` not an integer >= 1, ``sample_rate`` outside (0, 1].

    >>> check_game_mechanism([4.0, 16.0], 1.0, 100, 1.0, 64).tolist()
    [4.0, 16.0]
    >>> check_game_mechanism([4.0], 1.0, 100, 1.5, 64)
    Traceback (most recent call last):
    ...
    ValueError: sample_rate must be in (0, 1], got 1.5
    """
    sigmas = jnp.atleast_1d(jnp.asarray(noise_multipliers, jnp.result_type(float)))
    if sigmas.ndim != 1 or not bool(jnp.all(sigmas > 0)):
        raise ValueError(f"noise_multipliers must be a 1-D sequence of values > 0, got {noise_multipliers}")
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
    check_integer("steps", steps, 1)
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    check_integer("chunk_size", chunk_size, 1)
    return sigmas


def canary_game(model_fns: ModelFns, init_params, fixed_set, canaries: GradientCanaries, included,
                training: GameTraining, key: jax.Array, *, chunk_size: int = 64) -> CanaryGameResult:
    """Trains on D- plus the included gradient canaries with DP-GD / Poisson DP-SGD and scores every canary.

    For each noise multiplier ``s`` and run ``i`` (``training``: noise multipliers, C, T, q, optimiser and loss):
    from ``init_params``, ``steps`` steps of: D-'s per-example
    clipped gradients (Poisson-weighted when ``sample_rate < 1``) plus every canary j with ``included[i, j] = 1``
    (its fixed gradient, clipped to C; under Poisson sampling present at each step with probability q), plus
    Gaussian noise ``N(0, (s C)^2 I)``, divided by the public normaliser ``n + 1`` (``q (n + 1)`` under Poisson
    sampling) and applied by ``optimizer``. Every canary is scored at every released step (module docstring).
    Noise key of level s, run i, step t: ``fold_in(fold_in(fold_in(key, s), i), t)``, split three ways (noise, D-'s
    and the canaries' Poisson draws), the scheme of :func:`recon_jax.attacks.prior_aware.prior_aware_game`.

    Args:
      model_fns: the released model.
      init_params: the adversary-known initial parameters.
      fixed_set: ``(x [n, ...], y [n])``, D-.
      canaries: :class:`GradientCanaries` (M canaries, coordinates within the model's P parameters).
      included: ``[N, M]`` 0/1, which canaries each run trains on.
      training: the released training run (:class:`GameTraining`).
      key: a typed key.
      chunk_size: runs per compiled call (the last chunk is padded by repeating its last run, which is dropped).

    Returns:
      A :class:`CanaryGameResult`.

    Raises:
      ValueError: on mismatched shapes or out-of-range parameters.

    >>> import jax, jax.numpy as jnp, optax
    >>> from recon_jax.models import ModelFns
    >>> fns = ModelFns(init=lambda k, x: {"w": jnp.zeros((3,))}, apply=lambda p, x: x @ p["w"][:, None])
    >>> loss = lambda logits, y: logits[:, 0]
    >>> c = crafted_canaries("orthogonal", 3, [0, 1, 2], 1.0)
    >>> run = GameTraining(noise_multipliers=[0.05], clip_norm=1.0, steps=4, optimizer=optax.sgd(0.1), loss_fn=loss)
    >>> r = canary_game(fns, {"w": jnp.zeros((3,))}, (jnp.zeros((2, 3)), jnp.zeros(2, jnp.int32)), c,
    ...                 [[0, 1, 0]], run, jax.random.key(0))
    >>> int(jnp.argmax(r.log_likelihood[0, 0]))
    1
    """
    if not isinstance(training, GameTraining):
        raise TypeError(f"training must be a GameTraining, got {type(training).__name__}")
    noise_multipliers, clip_norm, steps = training.noise_multipliers, training.clip_norm, training.steps
    optimizer, sample_rate, loss_fn = training.optimizer, training.sample_rate, training.loss_fn
    fx, fy = (jnp.asarray(a) for a in fixed_set)
    idx = jnp.asarray(canaries.indices, jnp.int32)
    vals = jnp.asarray(canaries.values, jnp.float32)
    inc = np.asarray(included, np.float32)
    sigmas = check_game_mechanism(noise_multipliers, clip_norm, steps, sample_rate, chunk_size)
    num_params = int(ravel_pytree(init_params)[0].shape[0])
    if fx.shape[0] < 1 or fx.shape[0] != fy.shape[0]:
        raise ValueError(f"fixed_set must be (x [n, ...], y [n]) with n >= 1, got shapes {fx.shape}, {fy.shape}")
    if idx.ndim != 2 or idx.shape != vals.shape or idx.shape[0] < 1:
        raise ValueError(f"canaries must have indices and values of one shape [M, r], M >= 1, got {idx.shape}, "
                         f"{vals.shape}")
    if bool(jnp.any((idx < 0) | (idx >= num_params))):
        raise ValueError(f"canary coordinates must lie in [0, {num_params}) (the model's parameters)")
    if inc.ndim != 2 or inc.shape[1] != idx.shape[0] or inc.shape[0] < 1 or not np.all((inc == 0) | (inc == 1)):
        raise ValueError(f"included must be [N, M = {idx.shape[0]}] zeros and ones with N >= 1, got shape {inc.shape}")
    use_ghost = ghost_supported(model_fns.tap, init_params, fx)
    game = _compiled(model_fns, optimizer, float(clip_norm), int(steps), use_ghost, loss_fn, bool(sample_rate < 1))
    level_keys = jnp.stack([jax.random.fold_in(key, s) for s in range(sigmas.shape[0])])
    n_runs = inc.shape[0]
    chunk_size = min(chunk_size, n_runs)
    out = []
    for start in range(0, n_runs, chunk_size):
        real = np.arange(start, min(start + chunk_size, n_runs))
        sel = np.concatenate([real, np.full(chunk_size - real.size, real[-1])])
        keys = jax.vmap(lambda lk: jax.vmap(lambda i: jax.random.fold_in(lk, i))(jnp.asarray(sel)))(level_keys)
        ll = game(init_params, fx, fy, idx, vals, jnp.asarray(inc[sel]), sigmas,
                  jnp.asarray(sample_rate, sigmas.dtype), keys)
        out.append(ll[:, : real.size])
    return CanaryGameResult(jnp.concatenate(out, axis=1))
