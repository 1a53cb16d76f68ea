r"""The prior-aware reconstruction attack on DP-(S)GD of Hayes, Mahloujifar & Balle (NeurIPS 2023).

Threat model ("every update released"): the adversary knows the fixed set D-, the initialisation, the
training algorithm and every noisy (privatised) gradient sum of the run; the target was drawn uniformly from a
prior of ``k`` candidate records, which the adversary also knows. It scores each candidate by the likelihood of
the observed updates under the hypothesis that this candidate was the target and guesses the best one. For a
uniform prior this is the Bayes-optimal (maximum a posteriori) guess, so its success probability is the exact
reconstruction risk of the mechanism for that prior; the ReRo bound at ``kappa = 1/k``
(:func:`recon_jax.bounds.rero_gdp`, :func:`recon_jax.accounting.rero_dpsgd_tradeoff`) caps it.

Likelihood. At step t the released clipped sum is ``o_t = s_t + b_t c_{t,z} + N(0, sigma^2 C^2 I)`` with
``s_t`` the sum of D-'s clipped gradients (known to the adversary, who recomputes it at the released parameters),
``c_{t,z}`` the target's clipped gradient and ``b_t`` its inclusion (always 1 for full-batch DP-GD, Bernoulli(q)
under Poisson sampling). With the residual ``r_t = o_t - s_t`` and
``a_{t,j} = (<r_t, c_{t,j}> - ||c_{t,j}||^2 / 2) / (sigma C)^2``, the log-likelihood of candidate j relative to
"no target" is

- full batch: ``sum_t a_{t,j}`` (the Gaussian log-density ``-||r_t - c_{t,j}||^2 / (2 sigma^2 C^2)`` up to a
  term common to all candidates);
- Poisson sampling at rate q (mixture likelihood): ``sum_t log((1 - q) + q exp(a_{t,j}))``.

Notation:

==============  ==================================================================
``sigma``       noise multiplier (noise std / clip norm)
``C``           clip norm
``q``           Poisson sampling rate of each record per step (1 = full batch)
``T``           number of noisy steps (``steps``)
``k``           prior size (number of candidates); ``kappa = 1 / k``
==============  ==================================================================

:func:`log_likelihood_scores` is the scoring rule on given residuals and candidate gradients;
:func:`prior_aware_game` simulates the whole game for a model (trains the released trajectory with noise drawn
per noise level and trial, recomputes every candidate's clipped gradient along it and accumulates the scores),
vectorised with ``vmap`` over noise levels, trials and candidates. Candidates are records (random data: the
realistic prior) or gradient canaries (:mod:`recon_jax.attacks.canaries`: crafted clipped gradients of a fixed
geometry, the priors that come closest to the ReRo bound).

The exact success of the optimal guess for crafted geometries (orthogonal, simplex) and the per-pair model of
measured separations live in :mod:`recon_jax.attacks.game_optimum` (re-exported here).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.typing import ArrayLike

from recon_jax.attacks.canaries import GameTraining, canary_game, check_game_mechanism, dense_canaries, released_sum
from recon_jax.attacks.game_optimum import (crafted_success_probability, orthogonal_success_probability,
                                           predicted_success)
from recon_jax.models.adapters import ModelFns
from recon_jax.training.dp import clip_gradients, clipped_gradient_sum, per_example_gradients
from recon_jax.training.ghost import dense_call_gradients, ghost_squared_norms, ghost_supported
from recon_jax.training.step import apply_gradient

__all__ = [
    "step_log_likelihoods",
    "log_likelihood_scores",
    "GameResult",
    "prior_aware_game",
    "guess_breaking_ties",
    "orthogonal_success_probability",
    "crafted_success_probability",
    "predicted_success",
    "separation_retained",
]


def step_log_likelihoods(residual: jax.Array, candidate_grads: jax.Array, noise_std, sample_rate=1.0) -> jax.Array:
    """Per-candidate log-likelihood (relative to "no target") of one released step, ``[P], [k, P] -> [k]``.

    ``a_j = (<r, c_j> - ||c_j||^2 / 2) / noise_std^2``; returns ``log((1 - q) + q exp(a_j))``, which is ``a_j``
    at ``q = 1`` (computed as ``logaddexp(log(1 - q), log(q) + a_j)``; exact at q = 1 since ``log 0 = -inf``).

    Args:
      residual: observed clipped noisy sum minus the known D- clipped sum, ``[P]``.
      candidate_grads: clipped gradients of the k candidates at the released parameters, ``[k, P]``.
      noise_std: standard deviation of the Gaussian noise on the sum (``sigma * C``), > 0.
      sample_rate: Poisson inclusion probability q in (0, 1].

    Returns:
      ``[k]`` log-likelihoods.

    >>> import jax.numpy as jnp
    >>> step_log_likelihoods(jnp.array([1.0, 0.0]), jnp.eye(2), 1.0).tolist()
    [0.5, -0.5]
    """
    r = jnp.asarray(residual)
    c = jnp.asarray(candidate_grads)
    a = (jnp.einsum("p,kp->k", r, c, precision=jax.lax.Precision.HIGHEST) - 0.5 * jnp.sum(c * c, axis=-1))
    a = a / jnp.square(noise_std)
    q = jnp.asarray(sample_rate, a.dtype)
    return jnp.logaddexp(jnp.log1p(-q), jnp.log(q) + a)


def log_likelihood_scores(residuals: jax.Array, candidate_grads: jax.Array, noise_std, sample_rate=1.0,
                          ) -> jax.Array:
    """Log-likelihood of each candidate given T released steps, ``[T, P], [T, k, P] -> [k]`` (sum over steps).

    The prior-aware guess is the highest-scoring candidate (:func:`guess_breaking_ties`). Vmappable over leading axes of all arguments.

    Args:
      residuals: ``[T, P]`` observed clipped noisy sums minus the known D- clipped sums.
      candidate_grads: ``[T, k, P]`` clipped candidate gradients at each step's released parameters.
      noise_std: noise standard deviation on the sum (``sigma * C``), > 0.
      sample_rate: Poisson rate q in (0, 1] (1: full batch).

    Returns:
      ``[k]`` scores.

    >>> import jax.numpy as jnp
    >>> c = jnp.broadcast_to(jnp.eye(3), (4, 3, 3))      # 4 steps, 3 orthogonal unit candidate gradients
    >>> r = c[:, 1] + 0.1                                 # candidate 1 was the target (small offset as noise)
    >>> int(jnp.argmax(log_likelihood_scores(r, c, 1.0)))
    1
    """
    return jnp.sum(jax.vmap(step_log_likelihoods, in_axes=(0, 0, None, None))(
        residuals, candidate_grads, noise_std, sample_rate), axis=0)


class GameResult(NamedTuple):
    """Output of :func:`prior_aware_game` (``S`` noise levels, ``N`` trials, ``k`` candidates).

    Attributes:
      scores: ``[S, N, k]`` log-likelihood of each candidate (relative to "no target").
      guess: ``[S, N]`` the highest-scoring candidate (ties broken at random: :func:`guess_breaking_ties`).
      success: ``[S, N]`` whether the guess is the target.
      separation: ``[S, N, k]`` how far apart the run's evidence puts the target and candidate j:
        ``sum_t ||c_{t,z} - c_{t,j}||^2 / (sigma C)^2`` along the released trajectory (0 at the target itself).
        In full-batch DP-GD the log-likelihood ratio of target vs candidate j is ``N(d/2, d)`` with d this value,
        so it is the squared mu of that pair's test; candidates with orthogonal full-norm clipped gradients give
        ``2 T / sigma^2`` for every pair (a centred simplex ``2 T k / ((k - 1) sigma^2)``);
        :func:`separation_retained` divides by the orthogonal value.
    """

    scores: jax.Array
    guess: jax.Array
    success: jax.Array
    separation: jax.Array


def _flat_clipped_grads(model_fns, params, x, y, clip_norm, loss_fn):
    return clip_gradients(per_example_gradients(model_fns, params, x, y, loss_fn), clip_norm)


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def _ghost_candidate_terms(tap, params, x, y, trees, clip_norm, loss_fn):
    """``([<t, clip(g_j)> for t in trees], ||clip(g_j)||^2)`` for every candidate j without materialising ``[k, P]``
    gradients (one forward/backward pass over the candidates serves every tree).

    For a dense layer the gradient of example j is ``a_j^T delta_j`` (kernel) and ``delta_j`` (bias), so
    ``<R, a_j^T delta_j> = a_j R delta_j^T``; its squared norm is the ghost norm
    (:func:`recon_jax.training.ghost.ghost_squared_norms`; inputs with extra axes ``[k, T, d]`` are summed over T).
    """
    _, calls, inputs, deltas = dense_call_gradients(tap, params, x, y, loss_fn)
    dtype = jax.tree_util.tree_leaves(trees[0])[0].dtype
    sq = ghost_squared_norms(calls, inputs, deltas, dtype)
    dots = [jnp.zeros((x.shape[0],), dtype) for _ in trees]
    hi = jax.lax.Precision.HIGHEST
    for (kernel_path, bias_path, *_), a, d in zip(calls, inputs, deltas):
        a3 = a.reshape((a.shape[0], -1, a.shape[-1])).astype(dtype)
        d3 = d.reshape((d.shape[0], -1, d.shape[-1])).astype(dtype)
        for i, tree in enumerate(trees):
            ar = jnp.einsum("bti,io->bto", a3, _get(tree, kernel_path).astype(dtype), precision=hi)
            dots[i] = dots[i] + jnp.einsum("bto,bto->b", ar, d3, precision=hi)
            if bias_path is not None:
                dots[i] = dots[i] + jnp.matmul(jnp.sum(d3, axis=1), _get(tree, bias_path).astype(dtype), precision=hi)
    factor = jnp.minimum(1.0, clip_norm / jnp.maximum(jnp.sqrt(sq), jnp.finfo(dtype).tiny))
    return [factor * dt for dt in dots], factor * factor * sq


def _make_trial(model_fns: ModelFns, optimizer, clip_norm: float, steps: int, use_ghost: bool, loss_fn,
                poisson: bool):
    def trial(params0, fixed_x, fixed_y, cand_x, cand_y, target_index, include, sigma, sample_rate, key):
        flat0, unravel = ravel_pytree(params0)
        dtype = flat0.dtype  # everything in the parameters' dtype (also when float64 is enabled globally)
        n = fixed_x.shape[0]
        sample_rate = jnp.asarray(sample_rate, dtype)
        include = jnp.asarray(include, dtype)
        denom = jnp.where(poisson, sample_rate * (n + 1), n + 1).astype(dtype)  # public normaliser
        sigma = jnp.asarray(sigma, dtype)
        noise_std = sigma * jnp.asarray(clip_norm, dtype)
        q = sample_rate
        per_example = "ghost" if use_ghost else "vmap"

        def step(carry, t):
            params, opt_state, scores, sep = carry
            k_noise, k_fixed, k_target = jax.random.split(jax.random.fold_in(key, t), 3)
            if poisson:
                w_fixed = jax.random.bernoulli(k_fixed, sample_rate, (n,)).astype(flat0.dtype)
                b_target = jax.random.bernoulli(k_target, sample_rate).astype(flat0.dtype)
            else:
                w_fixed, b_target = None, jnp.ones((), flat0.dtype)
            # The DP step (the released run's): clip (D-'s sum plus the target's term), add noise, apply the
            # optimizer; the adversary scores the released sum in between. It recomputes D-'s sum at the released
            # parameters (the same first stage), so `base` serves both sides.
            base = clipped_gradient_sum(model_fns, params, fixed_x, fixed_y, clip_norm=clip_norm, weights=w_fixed,
                                        per_example=per_example, loss_fn=loss_fn)[1]
            if use_ghost:
                tx, ty = cand_x[target_index][None], cand_y[target_index][None]
                target_grad = _flat_clipped_grads(model_fns, params, tx, ty, clip_norm, loss_fn)[0]
            else:  # every candidate's clipped gradient (the target is one of them)
                cand = _flat_clipped_grads(model_fns, params, cand_x, cand_y, clip_norm, loss_fn)  # [k, P]
                target_grad = cand[target_index]
            observed = released_sum(k_noise, base + (include * b_target) * target_grad, sigma, clip_norm)
            residual = observed - base  # the adversary subtracts the D- sum it recomputes at the released params
            if use_ghost:
                (dots, cross), sqs = _ghost_candidate_terms(model_fns.tap, params, cand_x, cand_y,
                                                            [unravel(residual), unravel(target_grad)], clip_norm,
                                                            loss_fn)
                a = (dots - 0.5 * sqs) / jnp.square(noise_std)
                scores = scores + jnp.logaddexp(jnp.log1p(-q), jnp.log(q) + a)
            else:
                scores = scores + step_log_likelihoods(residual, cand, noise_std, sample_rate)
                cross = jnp.einsum("kp,p->k", cand, target_grad, precision=jax.lax.Precision.HIGHEST)
                sqs = jnp.sum(cand * cand, axis=-1)
            # ||c_z - c_j||^2 in noise units (the target's own entry is 0 up to rounding; clamped at 0).
            dist = jnp.maximum(jnp.sum(target_grad * target_grad) + sqs - 2.0 * cross, 0.0)
            sep = sep + dist / jnp.square(noise_std)
            params, opt_state = apply_gradient(optimizer, params, opt_state, observed / denom)
            return (params, opt_state, scores, sep), None

        zeros = jnp.zeros((cand_x.shape[0],), flat0.dtype)
        (_, _, scores, sep), _ = jax.lax.scan(step, (params0, optimizer.init(params0), zeros, zeros),
                                              jnp.arange(steps))
        return scores, sep

    return trial


_TIE_STREAM = 0x7FFFFFFF  # fold_in(key, _TIE_STREAM): the tie-break draws, apart from every noise level's stream


def guess_breaking_ties(scores: ArrayLike, uniforms: ArrayLike) -> jax.Array:
    """The index of the highest score on the last axis, ties broken uniformly at random by ``uniforms``.

    The adversary's Bayes-optimal guess picks any of the most likely candidates; among equal scores (duplicate
    records, candidates whose clipped gradients coincide) each is equally right. ``argmax`` alone takes the lowest
    index, which counts every tie as a win for a target placed first (the records game puts it at 0).

    Args:
      scores: ``[..., k]`` scores (higher = more likely the target).
      uniforms: i.i.d. U(0, 1) draws of the same shape (a prefix ``[..., :k']`` of them serves the prefix game).

    Returns:
      ``[...]`` int indices; -1 where a row has a NaN score (a guess that is never the target).

    >>> import numpy as np
    >>> int(guess_breaking_ties(np.array([1.0, 3.0, 2.0]), np.array([0.9, 0.1, 0.5])))
    1
    >>> int(guess_breaking_ties(np.array([3.0, 3.0, 2.0]), np.array([0.2, 0.7, 0.9])))  # a tie: the larger draw
    1
    """
    scores, uniforms = jnp.asarray(scores), jnp.asarray(uniforms)
    if scores.shape != uniforms.shape or scores.ndim < 1:
        raise ValueError(f"scores and uniforms must have the same shape [..., k], got {scores.shape} and "
                         f"{uniforms.shape}")
    top = scores == jnp.max(scores, axis=-1, keepdims=True)
    guess = jnp.argmax(jnp.where(top, uniforms, -1.0), axis=-1)
    return jnp.where(jnp.any(jnp.isnan(scores), axis=-1), -1, guess)


@functools.lru_cache(maxsize=16)
def _compiled_game(model_fns, optimizer, clip_norm, steps, use_ghost, loss_fn, poisson):
    trial = _make_trial(model_fns, optimizer, clip_norm, steps, use_ghost, loss_fn, poisson)
    # trials: vmap over (candidates, target index, inclusion, key); noise levels: vmap over (sigma, key).
    over_trials = jax.vmap(trial, in_axes=(None, None, None, 0, 0, 0, 0, None, None, 0))
    over_sigmas = jax.vmap(over_trials, in_axes=(None, None, None, None, None, None, None, 0, None, 0))
    return jax.jit(over_sigmas)


def prior_aware_game(model_fns: ModelFns, init_params, fixed_set, candidates, target_index, training: GameTraining,
                     key: jax.Array, *, include_target=None, chunk_size: int = 64) -> GameResult:
    """Simulates the prior-aware reconstruction game on DP-GD / Poisson DP-SGD and scores every candidate.

    For each noise multiplier ``s`` and trial ``i`` (``training``, a :class:`~recon_jax.attacks.canaries.GameTraining`:
    noise multipliers, C, T, q, optimiser and loss): trains from ``init_params`` on D- plus the target
    ``candidates[i, target_index[i]]`` for ``steps`` steps (per-example clipping to ``clip_norm``, Gaussian noise
    ``N(0, (s C)^2 I)`` on the clipped sum, the noisy sum divided by the public normaliser ``n + 1`` (full batch)
    or ``q (n + 1)`` (Poisson), ``optimizer`` applied to it), and the adversary accumulates
    :func:`step_log_likelihoods` of every candidate at every released step. Noise key of noise level ``s``,
    trial ``i``, step ``t``: ``fold_in(fold_in(fold_in(key, s), i), t)`` (split three ways for the noise and the
    Poisson draws), so every noise level and trial draws independent noise.

    Under Poisson sampling (``sample_rate < 1``) each D- record and the target join each step's batch
    independently with probability q; the adversary knows which D- records were drawn (the worst case of the
    add/remove analysis) but not whether the target was, and uses the mixture likelihood.

    Priors: if the candidate rows are i.i.d. draws from a data set, fixing the target at position 0 and scoring
    the first k columns is the game with a uniform prior of size k (the attack is invariant to the order of the
    candidates: ties are broken at random, :func:`guess_breaking_ties`), so nested priors k = 2, 10, 100 can share
    trials.

    Args:
      model_fns: the released model.
      init_params: the (adversary-known) initial parameters.
      fixed_set: ``(x [n, ...], y [n])``, D-.
      candidates: ``(x [N, k, ...], y [N, k])``, the prior of each trial (records); or
        :class:`~recon_jax.attacks.canaries.GradientCanaries` with k canaries, one prior shared by every trial
        (gradient canaries: each candidate's clipped gradient is its fixed vector at every step; the game is then
        :func:`~recon_jax.attacks.canaries.canary_game` with the target alone included, and ``separation`` is
        ``T ||c_z - c_j||^2 / (sigma C)^2``).
      target_index: ``[N]`` ints, which candidate is the target in each trial.
      training: the released training run (:class:`~recon_jax.attacks.canaries.GameTraining`).
      key: a typed key.
      include_target: optional ``[N]`` 0/1, whether the target is trained on (default all 1); with 0 the run is
        on D- alone (the "without canary" world of :func:`recon_jax.attacks.audit.empirical_epsilon`).
      chunk_size: trials per compiled call (bounds memory at ``S x chunk_size`` trajectories); calls with the
        same shapes, ``min(chunk_size, N)``, ``optimizer`` and ``loss_fn`` objects reuse one compilation.

    Returns:
      A :class:`GameResult`.

    Raises:
      ValueError: on mismatched shapes or out-of-range parameters.

    >>> import jax, jax.numpy as jnp, optax
    >>> from recon_jax.models import ModelFns
    >>> fns = ModelFns(init=lambda k, x: {"w": jnp.zeros((2,))}, apply=lambda p, x: x @ p["w"][:, None])
    >>> loss = lambda logits, y: logits[:, 0]          # gradient of each record = the record itself
    >>> cands = (jnp.broadcast_to(jnp.eye(2), (4, 2, 2)), jnp.zeros((4, 2), jnp.int32))
    >>> run = GameTraining(noise_multipliers=[0.01], clip_norm=1.0, steps=2, optimizer=optax.sgd(0.1), loss_fn=loss)
    >>> r = prior_aware_game(fns, {"w": jnp.zeros((2,))}, (jnp.zeros((3, 2)), jnp.zeros(3, jnp.int32)), cands,
    ...                      jnp.zeros(4, jnp.int32), run, jax.random.key(0))
    >>> r.success.tolist()
    [[True, True, True, True]]
    """
    if hasattr(candidates, "indices") and hasattr(candidates, "values"):  # GradientCanaries (duck-typed: a module
        # re-imported by a doctest runner has a second class of that name)
        return _gradient_canary_game(model_fns, init_params, fixed_set, candidates, target_index, include_target,
                                     training, key, chunk_size)
    if not isinstance(training, GameTraining):
        raise TypeError(f"training must be a GameTraining, got {type(training).__name__}")
    noise_multipliers, clip_norm, steps = training.noise_multipliers, training.clip_norm, training.steps
    optimizer, sample_rate, loss_fn = training.optimizer, training.sample_rate, training.loss_fn
    fx, fy = (jnp.asarray(a) for a in fixed_set)
    cx, cy = (jnp.asarray(a) for a in candidates)
    target_index = jnp.asarray(target_index, jnp.int32)
    sigmas = check_game_mechanism(noise_multipliers, clip_norm, steps, sample_rate, chunk_size)
    if fx.shape[0] < 1 or fx.shape[0] != fy.shape[0]:
        raise ValueError(f"fixed_set must be (x [n, ...], y [n]) with n >= 1, got shapes {fx.shape}, {fy.shape}")
    if cx.ndim < 3 or cx.shape[:2] != cy.shape or cx.shape[2:] != fx.shape[1:]:
        raise ValueError(f"candidates must be (x [N, k, ...], y [N, k]) with D-'s example shape {fx.shape[1:]}, "
                         f"got shapes {cx.shape}, {cy.shape}")
    n_trials, k = cy.shape
    if target_index.shape != (n_trials,) or bool(jnp.any((target_index < 0) | (target_index >= k))):
        raise ValueError(f"target_index must be [N] = [{n_trials}] ints in [0, {k}), got shape {target_index.shape}")
    if include_target is None:
        include = jnp.ones((n_trials,), jnp.float32)
    else:
        include = jnp.asarray(include_target, jnp.float32)
        if include.shape != (n_trials,):
            raise ValueError(f"include_target must have shape [{n_trials}], got {include.shape}")
    use_ghost = ghost_supported(model_fns.tap, init_params, fx)
    game = _compiled_game(model_fns, optimizer, float(clip_norm), int(steps), use_ghost, loss_fn,
                          bool(sample_rate < 1))
    level_keys = jnp.stack([jax.random.fold_in(key, s) for s in range(sigmas.shape[0])])
    out = []
    chunk_size = min(chunk_size, n_trials)
    for start in range(0, n_trials, chunk_size):
        real = np.arange(start, min(start + chunk_size, n_trials))
        # Every call has chunk_size trials (the last chunk padded by repeating its last trial, dropped below), so
        # one compilation serves every chunk and every call with the same shapes.
        idx = np.concatenate([real, np.full(chunk_size - real.size, real[-1])])
        keys = jax.vmap(lambda lk: jax.vmap(lambda i: jax.random.fold_in(lk, i))(jnp.asarray(idx)))(level_keys)
        sc, sep = game(init_params, fx, fy, cx[idx], cy[idx], target_index[idx], include[idx], sigmas,
                       jnp.asarray(sample_rate, sigmas.dtype), keys)
        out.append((sc[:, : real.size], sep[:, : real.size]))
    scores = jnp.concatenate([o[0] for o in out], axis=1)
    separation = jnp.concatenate([o[1] for o in out], axis=1)
    guess = guess_breaking_ties(scores, jax.random.uniform(jax.random.fold_in(key, _TIE_STREAM), scores.shape))
    return GameResult(scores, guess, guess == target_index[None, :], separation)


def _gradient_canary_game(model_fns, init_params, fixed_set, canaries, target_index, include_target, training, key,
                          chunk_size):
    """prior_aware_game for a prior of gradient canaries: canary_game with the target alone included."""
    k = int(np.asarray(canaries.indices).shape[0])
    target = np.asarray(target_index)
    if target.ndim != 1 or target.size < 1 or not np.issubdtype(target.dtype, np.integer) or np.any(
            (target < 0) | (target >= k)):
        raise ValueError(f"target_index must be [N] ints in [0, {k}) with N >= 1, got {target_index!r}")
    include = np.ones(target.shape, np.float32) if include_target is None else np.asarray(include_target, np.float32)
    if include.shape != target.shape:
        raise ValueError(f"include_target must have shape [{target.size}], got {include.shape}")
    included = np.eye(k, dtype=np.float32)[target] * include[:, None]
    res = canary_game(model_fns, init_params, fixed_set, canaries, included, training, key, chunk_size=chunk_size)
    noise_multipliers, clip_norm, steps = training.noise_multipliers, training.clip_norm, training.steps
    scores = res.log_likelihood
    # Clipped canary vectors (as the game clips them) and the constant separations T ||c_z - c_j||^2 / (sigma C)^2.
    g = dense_canaries(canaries, int(ravel_pytree(init_params)[0].shape[0]))
    g = g * np.minimum(1.0, clip_norm / np.maximum(np.linalg.norm(g, axis=1), 1e-300))[:, None]
    sq = np.sum(g * g, axis=1)
    dist = np.maximum(sq[:, None] + sq[None, :] - 2.0 * g @ g.T, 0.0)  # [k, k]
    sigmas = np.atleast_1d(np.asarray(noise_multipliers, np.float64))
    sep = steps * dist[target][None] / (sigmas * clip_norm)[:, None, None] ** 2
    guess = guess_breaking_ties(scores, jax.random.uniform(jax.random.fold_in(key, _TIE_STREAM), scores.shape))
    return GameResult(scores, guess, guess == jnp.asarray(target)[None, :], jnp.asarray(sep, scores.dtype))


def separation_retained(result: GameResult, noise_multipliers, steps: int, target_index,
                        prior_size: int | None = None) -> np.ndarray:
    """The fraction of orthogonal full-norm gradients' separation the candidates keep, ``[S, N, k - 1]`` (host-side).

    ``result.separation`` of every non-target candidate among the first ``prior_size`` (default all k), divided
    by ``2 T / sigma^2``, its value for orthogonal full-norm clipped gradients (a simplex of gradient canaries
    gives ``k / (k - 1)``, antipodal canaries 2). 1 means that pair is as distinguishable as orthogonal
    full-norm gradients; gradients below the clip norm or aligned with the target's give less. Meaningful for
    runs with the target included (full batch).

    >>> import jax, jax.numpy as jnp
    >>> sep = jnp.array([[[0.0, 8.0, 4.0]]])                        # 1 level, 1 trial, k = 3; T = 4, sigma = 1
    >>> r = GameResult(sep, jnp.zeros((1, 1), int), jnp.ones((1, 1), bool), sep)
    >>> separation_retained(r, [1.0], 4, [0]).tolist()
    [[[1.0, 0.5]]]
    """
    sep = np.asarray(result.separation, np.float64)
    k = sep.shape[-1] if prior_size is None else int(prior_size)
    if not 2 <= k <= sep.shape[-1]:
        raise ValueError(f"prior_size must be in [2, {sep.shape[-1]}], got {prior_size}")
    sigmas = np.atleast_1d(np.asarray(noise_multipliers, np.float64))
    if sigmas.shape != (sep.shape[0],):
        raise ValueError(f"noise_multipliers must have {sep.shape[0]} entries, got {sigmas.shape}")
    t = np.asarray(target_index).reshape(-1)
    if t.shape != (sep.shape[1],) or np.any(t >= k) or np.any(t < 0):
        raise ValueError(f"target_index must be [{sep.shape[1]}] ints in [0, {k})")
    sep = sep[..., :k] / (2.0 * steps / sigmas**2)[:, None, None]
    keep = np.ones(sep.shape[1:], bool)
    keep[np.arange(sep.shape[1]), t] = False
    return sep[:, keep].reshape(sep.shape[0], sep.shape[1], k - 1)
