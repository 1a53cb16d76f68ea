"""Algorithm 1 of Tygert et al.: the search for a perturbation at which the HCR bound is large.

The bound itself (eq. 5 with eq. 12, :func:`~recon_jax.bounds.hcr.hcr_variance_bound`) holds for *any* input
perturbation ``Delta``; its setting, assumptions and notation are in :mod:`recon_jax.bounds.hcr`. Algorithm 1
searches for a good ``Delta``: a perturbation that moves the input far while moving the features little, i.e.
approximately the least singular direction of the Jacobian ``J`` of the feature map. It starts from ``z``
proportional to a noise draw, solves ``min_eps ||J eps - z||`` by LSQR (matrix-free: ``J`` by jvp, ``J^T`` by vjp;
:mod:`recon_jax.bounds.lsqr`), sets ``z <- a(x + eps) - a(x)`` exactly, rescales, repeats, over several random
restarts, and keeps the best bound per coordinate (in the DCT-II basis of :mod:`recon_jax.bounds.dct` by default).

Two implementations share the argument checks and the scoring: :func:`hcr_bounds` (per example, linearised once,
best round kept; :func:`hcr_bounds_batch` vmaps it over examples) and :func:`hcr_bounds_reference` (as the paper's
reference code runs it: one LSQR over a batch, re-linearised rounds, last round scored). Both give rigorous bounds
whatever LSQR achieves, up to floating-point error in the forward pass. :func:`hcr_bounds` reorthogonalizes LSQR's
Golub-Kahan vectors (small per-example systems: float32 solves then follow exact arithmetic, not the rounding);
:func:`hcr_bounds_reference` does not, as SciPy's LSQR in the reference code does not (and its one system spans
the batch, so the stored vectors would be ``iter_lim`` times the batch's size).

Invalid arguments raise ``ValueError`` when they are concrete.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import FINITE_POSITIVE, check, check_integer, invalid, is_concrete
from recon_jax.bounds.dct import default_dct_axes, full_precision, to_coordinates
from recon_jax.bounds.hcr import log_hcr_variance_bound
from recon_jax.bounds.lsqr import lsqr, promote_to_common_dtype

__all__ = ["hcr_bounds", "hcr_bounds_batch", "hcr_bounds_reference", "HCRInfo", "HCRReferenceInfo"]


class HCRInfo(NamedTuple):
    """Diagnostics of :func:`hcr_bounds` (leading axes ``[num_restarts, num_rounds]``).

    Attributes:
      feature_shift_norm: ``||a(x + eps) - a(x)||`` per restart and round.
      input_shift_norm: ``||eps||`` per restart and round.
      lsqr_itn: LSQR iterations per restart and round (both solves with ``refine="inverse"``).
      lsqr_istop: LSQR stopping codes per restart and round.
      best_input_shift: the perturbation (input-shaped, pixel coordinates) of the last round of the
        restart whose bound summed over coordinates is largest.
    """

    feature_shift_norm: jax.Array
    input_shift_norm: jax.Array
    lsqr_itn: jax.Array
    lsqr_istop: jax.Array
    best_input_shift: jax.Array


def _check_scalar(name, value):
    check(name, value, FINITE_POSITIVE)
    if is_concrete(value) and np.size(value) != 1:
        raise ValueError(f"{name} must be a scalar; got shape {np.shape(value)}")


def _check_hcr_search_args(noise_sigma, num_restarts, num_rounds, perturbation_size) -> jax.Array:
    """Raises ``ValueError`` for invalid concrete arguments; returns the scalar mask that is True where a traced
    ``noise_sigma`` or ``perturbation_size`` is not finite and positive (the result is then NaN, not the 0 that the
    scoring gives a round it cannot score)."""
    _check_scalar("noise_sigma", noise_sigma)
    check_integer("num_restarts", num_restarts, 1)
    check_integer("num_rounds", num_rounds, 1)
    _check_scalar("perturbation_size", perturbation_size)
    return jnp.any(invalid(noise_sigma, FINITE_POSITIVE) | invalid(perturbation_size, FINITE_POSITIVE))


def _erased_shift_error(no_bound, a0, perturbation_size, noise_sigma) -> None:
    """Raises ``ValueError`` naming ``perturbation_size`` where a concrete ``no_bound`` is True anywhere: every
    scored perturbation's feature change ``a(x + Delta) - a(x)`` rounded to exactly 0 while ``Delta != 0``.

    In exact arithmetic such a shift would prove that no unbiased estimator exists (bound ``+inf``); in floating
    point it means the shift is below the rounding of ``a(x)`` (``f(v) = v + 1000`` in float32 with ``sigma = 1e-3``,
    ``perturbation_size = 1e-2``: ``||delta|| ~ 1e-5`` against ulp(1000) = 6e-5 gave ``inf`` for every coordinate
    where Cramer-Rao is 1e-3). Such shifts are scored 0 (no bound); if no scored shift is left the result is NaN,
    and this error when it is concrete.
    """
    if is_concrete(no_bound) and bool(np.any(np.asarray(no_bound))):
        scale = float(jnp.max(jnp.abs(a0)))
        raise ValueError(
            f"perturbation_size too small for {jnp.result_type(a0).name}: every feature shift a(x + Delta) - a(x) "
            f"rounded to exactly 0 (perturbation_size * noise_sigma = {float(perturbation_size) * float(noise_sigma):.3g}"
            f", max |a(x)| = {scale:.3g}, eps * max |a(x)| = {scale * float(jnp.finfo(a0.dtype).eps):.3g}); no HCR "
            "bound can be computed from such shifts. Raise perturbation_size (or noise_sigma), or compute in float64 "
            "(jax.config.update('jax_enable_x64', True) and float64 x)")


@full_precision
def hcr_bounds(
    feature_fn: Callable[[jax.Array], jax.Array],
    x: jax.Array,
    noise_sigma: float | jax.Array,
    key: jax.Array,
    num_restarts: int = 25,
    num_rounds: int = 10,
    perturbation_size: float | jax.Array = 1.0 / 200.0,
    *,
    coordinates="dct",
    dct_axes: Sequence[int] | None = None,
    atol: float = 1e-4,
    btol: float = 1e-6,
    conlim: float = 1e8,
    iter_lim: int = 100,
    damp: float = 0.0,
    keep_best_round: bool = True,
    refine: str = "paper",
    return_info: bool = False,
):
    """Per-coordinate lower bounds on the standard deviation of any unbiased estimator of ``x`` (Alg. 1).
    Many parameters because Algorithm 1's own settings (restarts, rounds, perturbation size, coordinates,
    refinement) and LSQR's stopping rule (``atol``, ``btol``, ``conlim``, ``iter_lim``, ``damp``: SciPy's ``lsqr``
    names) are each a field of the experiment's config (experiments/configs/tygert_hcr.py).

    Tygert et al., Algorithm 1 with the bound of eqs. (5) and (12). For each of ``num_restarts``
    independent restarts (run in parallel with ``vmap``): draw ``g ~ N(0, I)`` shaped like the features
    and set ``z = g * perturbation_size * sigma / sqrt(dim a)``, so ``||z|| ~ perturbation_size * sigma``
    and the denominator ``expm1(||delta||^2/sigma^2) ~ perturbation_size^2`` (the paper's "size of the
    perturbation"). Then, ``num_rounds`` times: rescale ``z`` to that norm, solve
    ``min_eps ||J eps - z||`` by matrix-free LSQR (``J`` = Jacobian of ``feature_fn`` at ``x``), compute
    ``delta = a(x + eps) - a(x)`` by an exact forward pass, and evaluate
    ``sqrt(hcr_variance_bound(eps_i, ||delta||^2, sigma))`` in the chosen coordinates; set ``z = delta``.
    The result is the maximum over restarts (and, by default, over rounds: every round is a valid
    bound) per coordinate.

    This is the per-example search (results independent of batching; linearised once at ``x``; best round kept
    by default). :func:`hcr_bounds_reference` runs Algorithm 1 as the paper's reference code does (one LSQR over
    a batch, re-linearised rounds, LSQR to convergence, last round scored); both give rigorous bounds.

    What is bounded: ``std(x_hat_i) >= result_i`` for every unbiased estimator ``x_hat`` of ``x`` from
    ``feature_fn(x) + N(0, sigma^2 I)``, where ``x_hat_i`` is the i-th coordinate of ``x_hat`` in the
    orthonormal DCT-II basis over ``dct_axes`` (default) or in pixels. The bound is rigorous whatever
    LSQR achieves (approximation only makes it looser) up to floating-point error in the forward pass.
    Assumptions: Gaussian isotropic dither with known ``sigma``, unbiased estimation.

    Floating point: ``Delta`` is the shift the forward pass evaluates, ``(x + eps) - x`` (exact), not LSQR's
    ``eps``, which ``x + eps`` rounds. ``delta`` is a difference of two rounded forward passes, so ``||delta||``
    carries an absolute error of about ``u ||a(x)||`` (``u`` the unit roundoff, times the forward pass's own error
    growth): keep ``perturbation_size * sigma`` well above it (float32: ``u = 6e-8``). LSQR reorthogonalizes its
    Golub-Kahan vectors ``v_k`` (:func:`~recon_jax.bounds.lsqr.lsqr`, ``reorthogonalize=True``): without it, float32
    solves lose orthogonality, run past ``n`` iterations and stop where the rounding leads, and eager and jitted
    calls (whose fused products round differently) returned bounds up to 75% apart on a 16-input ReLU net whose
    Jacobian has condition number ~2e3; with it, 7e-5. What remains is the rounding of ``delta`` above, which
    the later rounds of ``refine="paper"`` feed back into LSQR as the next ``z`` (amplified by up to ``cond(J)``):
    on an untrained 784-784-784 ReLU net at ``perturbation_size = 1e-3``, a few DCT modes still moved by up to
    9% between eager and jit after 3 rounds (median 3e-4; after one round 6e-3). Each value is still the bound
    of the perturbation it was computed at; the rounds take different paths.

    Args:
      feature_fn: ``x -> a(x)``, differentiable almost everywhere (ReLU nets are fine), one example.
      x: one input, any shape (e.g. ``[28, 28, 1]``). Computed in the common dtype of ``x`` and ``feature_fn(x)``
        (a float32 ``x`` through a float64 ``feature_fn`` is promoted to float64).
      noise_sigma: dither standard deviation ``sigma > 0`` (scalar).
      key: a typed PRNG key; restart ``r`` uses ``fold_in(key, r)``.
      num_restarts: independent random starts (paper: 25).
      num_rounds: rounds of LSQR + exact forward pass per start (reference code: 10 for MNIST).
      perturbation_size: target ``||delta|| / sigma`` (paper: 1/200 or 1/1000 for MNIST).
      coordinates: ``"dct"``, ``"pixel"``, or an orthogonal matrix (rows = basis vectors); see
        :func:`to_coordinates`.
      dct_axes: axes of the DCT (default :func:`default_dct_axes`).
      atol, btol, conlim, iter_lim, damp: LSQR settings (see :func:`~recon_jax.bounds.lsqr.lsqr`).
      keep_best_round: maximise over rounds as well as restarts (else only the last round counts, as in
        the reference code).
      refine: how the next round's ``z`` is chosen. ``"paper"``: ``z = a(x + eps) - a(x)`` (Alg. 1 as
        published; for a linear ``a`` this is ``J J^+ z``, a fixed point, so the rounds only matter
        through the nonlinearity). ``"inverse"``: ``z = (J^T)^+ eps`` by a second LSQR solve, so
        ``eps_{k+1} = (J^T J)^+ eps_k``: inverse iteration, converging to the least singular
        direction of ``J`` (the direction of the largest Cramer-Rao variance). Either way the bound
        of each round is evaluated with the exact ``delta``, so both are rigorous.
      return_info: also return an :class:`HCRInfo`.

    Rounded-away shifts: a round whose ``delta`` is exactly 0 while ``eps != 0`` (the shift is below the rounding of
    ``a(x)``; for ``f(v) = v + 1000`` in float32 that is ``||delta|| < ~6e-5``) would give ``+inf`` from the closed
    form, an "infinitely confidential" claim the forward pass cannot support: it is scored 0 (no bound) instead.
    If every scored round of every restart is such a shift (or has ``delta = 0``), no bound was obtained: the result
    is NaN everywhere, and a concrete call raises ``ValueError``; raise ``perturbation_size`` or use float64.

    Returns:
      ``std_bound`` shaped like ``x`` (coefficients in the chosen coordinates, in the common dtype; NaN when every
      scored shift was rounded away, see above, and where a traced ``noise_sigma`` or ``perturbation_size`` is not
      finite and positive), and an :class:`HCRInfo` if ``return_info``.

    Raises:
      ValueError: for a non-positive or non-finite ``noise_sigma`` or ``perturbation_size`` (when
        concrete), ``num_restarts < 1`` or ``num_rounds < 1``, features that are not floating, or a ``coordinates``
        matrix that is not orthogonal (:func:`to_coordinates`); ``perturbation_size`` too small for the dtype
        (every scored feature shift rounded to exactly 0; concrete results only).

    >>> import jax
    >>> w = jnp.diag(jnp.array([1.0, 2.0, 4.0]))
    >>> b = hcr_bounds(lambda v: w @ v, jnp.zeros(3), 1.0, jax.random.key(0), num_restarts=2,
    ...                num_rounds=20, perturbation_size=1e-2, coordinates="pixel", refine="inverse",
    ...                keep_best_round=False)
    >>> [round(float(t), 2) for t in b]  # Cramer-Rao sigma / w_00 in the least-informative coordinate
    [1.0, 0.0, 0.0]
    """
    bad_args = _check_hcr_search_args(noise_sigma, num_restarts, num_rounds, perturbation_size)
    if refine not in ("paper", "inverse"):
        raise ValueError(f"refine must be 'paper' or 'inverse'; got {refine!r}")
    if isinstance(coordinates, str) and coordinates not in ("dct", "pixel"):
        raise ValueError(f"coordinates must be 'dct', 'pixel' or an orthogonal matrix; got {coordinates!r}")
    feature_fn, x = promote_to_common_dtype(feature_fn, x, name="feature_fn")
    dtype = x.dtype
    sigma = jnp.asarray(noise_sigma, dtype)
    size = jnp.asarray(perturbation_size, dtype)

    a0, jvp_fn = jax.linearize(feature_fn, x)
    vjp_fn = jax.linear_transpose(jvp_fn, x)

    def rmatvec(u):
        return vjp_fn(u.astype(a0.dtype))[0]

    def matvec(v):
        return jvp_fn(v)

    scale = size * sigma / jnp.sqrt(jnp.asarray(a0.size, dtype))

    def one_restart(r):
        g = jax.random.normal(jax.random.fold_in(key, r), a0.shape, a0.dtype)
        z0 = g * scale.astype(a0.dtype)
        target = jnp.sqrt(jnp.sum(z0 * z0))

        def round_body(carry, _):
            z, best, _ = carry
            zn = jnp.sqrt(jnp.sum(z * z))
            z = z * (target / jnp.where(zn > 0, zn, jnp.ones_like(zn)))
            res = lsqr(matvec, rmatvec, z, atol=atol, btol=btol, conlim=conlim, iter_lim=iter_lim, damp=damp,
                       reorthogonalize=True)
            x_shifted = x + res.x.astype(dtype)
            # The shift the forward pass sees: x + res.x rounds, and (x + res.x) - x is exact (Sterbenz) where it
            # is small against x, so the bound's Delta is the perturbation actually evaluated.
            eps = x_shifted - x
            delta = feature_fn(x_shifted) - a0
            s = jnp.sum(jnp.square(delta.astype(dtype)))
            coords = to_coordinates(eps, coordinates, dct_axes)
            std = jnp.exp(0.5 * log_hcr_variance_bound(coords, s, sigma, validate=False))
            # A zero solution (or NaN from a failed solve) gives no information: bound 0. So does a shift whose
            # feature change rounded to exactly 0 (s = 0 < ||eps||): the closed form would say +inf ("no unbiased
            # estimator"), but the forward pass only failed to resolve it (_erased_shift_error).
            std = jnp.where(jnp.isnan(std) | ~(s > 0), jnp.zeros_like(std), std)
            new_best = jnp.maximum(best, std) if keep_best_round else std
            itn = res.itn
            if refine == "inverse":
                res_t = lsqr(rmatvec, matvec, eps, atol=atol, btol=btol, conlim=conlim, iter_lim=iter_lim,
                             damp=damp, reorthogonalize=True)
                z_next = res_t.x.astype(a0.dtype)
                itn = itn + res_t.itn
            else:
                z_next = delta
            enorm = jnp.sqrt(jnp.sum(eps * eps))
            diag = (jnp.sqrt(s), enorm, itn, res.istop)
            return (z_next, new_best, eps), diag

        init = (z0, jnp.zeros(x.shape, dtype), jnp.zeros(x.shape, dtype))
        (_, best, eps_last), diag = jax.lax.scan(round_body, init, None, length=num_rounds)
        return best, eps_last, diag

    best, eps_last, (fnorm, enorm, itn, istop) = jax.vmap(one_restart)(jnp.arange(num_restarts))
    # [num_restarts, num_rounds]: the rounds scored (all with keep_best_round, else the last) measured no feature
    # change, and some shift was erased by rounding: no bound was obtained, NaN (ValueError when concrete).
    scored = fnorm > 0 if keep_best_round else fnorm[:, -1:] > 0
    no_bound = ~jnp.any(scored) & jnp.any((fnorm == 0) & (enorm > 0))
    _erased_shift_error(no_bound, a0, perturbation_size, noise_sigma)
    std_bound = jnp.where(no_bound | bad_args, jnp.nan, jnp.max(best, axis=0))
    if not return_info:
        return std_bound
    winner = jnp.argmax(jnp.sum(best.reshape(num_restarts, -1), axis=1))
    info = HCRInfo(
        feature_shift_norm=fnorm,
        input_shift_norm=enorm,
        lsqr_itn=itn,
        lsqr_istop=istop,
        best_input_shift=eps_last[winner],
    )
    return std_bound, info


def hcr_bounds_batch(
    feature_fn: Callable[[jax.Array], jax.Array],
    xs: jax.Array,
    noise_sigma: float | jax.Array,
    key: jax.Array,
    example_ids: jax.Array | None = None,
    **kwargs,
):
    """:func:`hcr_bounds` for a batch ``xs[n]``, vmapped over examples (one small operator per example).

    Example ``n`` uses the key ``fold_in(key, example_ids[n])`` (default ids ``0..N-1``), so results do
    not depend on how a data set is chunked if the caller passes global indices.

    Args:
      feature_fn: as in :func:`hcr_bounds` (for one example).
      xs: ``[N, ...]`` inputs.
      noise_sigma: dither standard deviation (scalar, shared).
      key: typed PRNG key.
      example_ids: ``[N]`` integer ids for key derivation.
      **kwargs: forwarded to :func:`hcr_bounds` (``num_restarts``, ``perturbation_size``, ...).

    Returns:
      ``[N, ...]`` standard-deviation bounds (and a batched :class:`HCRInfo` if ``return_info=True``).

    >>> import jax
    >>> xs = jnp.zeros((2, 3))
    >>> out = hcr_bounds_batch(lambda v: 2.0 * v, xs, 1.0, jax.random.key(0), num_restarts=2,
    ...                        num_rounds=2, coordinates="pixel")
    >>> out.shape
    (2, 3)
    """
    xs = jnp.asarray(xs)
    if example_ids is None:
        example_ids = jnp.arange(xs.shape[0])
    _check_hcr_search_args(
        noise_sigma, kwargs.get("num_restarts", 25), kwargs.get("num_rounds", 10), kwargs.get("perturbation_size", 1.0)
    )

    def one(x, i):
        return hcr_bounds(feature_fn, x, noise_sigma, jax.random.fold_in(key, i), **kwargs)

    return jax.vmap(one)(xs, jnp.asarray(example_ids))


class HCRReferenceInfo(NamedTuple):
    """Diagnostics of :func:`hcr_bounds_reference`.

    Attributes:
      feature_shift_norm: ``[num_restarts, B]`` ``||a(x_b + Delta_b) - a(x_b)||`` of the scored (last) round.
      input_shift_norm: ``[num_restarts, B]`` ``||Delta_b||`` of the last round.
      lsqr_itn: ``[num_restarts, num_rounds]`` iterations of the batch LSQR solve of each round.
      lsqr_istop: ``[num_restarts, num_rounds]`` its stopping code (SciPy's meaning; 7 = iteration limit).
      lsqr_rel_residual: ``[num_restarts, num_rounds]`` ``||J Delta - z|| / ||z||`` of each solve.
    """

    feature_shift_norm: jax.Array
    input_shift_norm: jax.Array
    lsqr_itn: jax.Array
    lsqr_istop: jax.Array
    lsqr_rel_residual: jax.Array


@full_precision
def hcr_bounds_reference(
    feature_fn: Callable[[jax.Array], jax.Array],
    xs: jax.Array,
    noise_sigma: float | jax.Array,
    key: jax.Array,
    num_restarts: int = 25,
    num_rounds: int = 10,
    perturbation_size: float | jax.Array = 1.0 / 200.0,
    *,
    example_ids: jax.Array | None = None,
    coordinates="dct",
    dct_axes: Sequence[int] | None = None,
    atol_factor: float = 2e-2,
    btol: float = 1e-8,
    conlim: float = 1e8,
    iter_lim: int | None = None,
    return_info: bool = False,
):
    """Algorithm 1 as the reference implementation runs it (facebookresearch/hcrbounds, ``codes/testers.py``).
    Many parameters because it takes :func:`hcr_bounds`'s, with the reference code's LSQR rule (``atol_factor``,
    ``btol``, ``conlim``, ``iter_lim``) in place of ours: the two are compared setting for setting.

    Differs from :func:`hcr_bounds` in four ways, each as in the reference code:

    1. One LSQR solve per round over the whole batch: the operator is the block-diagonal Jacobian of the
       batched feature map (so the iteration count, and hence each example's result, depends on the batch).
    2. Each round re-linearises at the current perturbed inputs ``x + Delta`` (the first round at ``x``), and
       the solution is taken as the perturbation *from x*: ``Delta <- lsqr(J(x + Delta), z)``.
    3. LSQR runs with ``atol = atol_factor * min_b ||z_b||`` (passed, as in the reference, to LSQR's relative
       ``atol``), ``btol = 1e-8``, ``conlim = 1e8`` and SciPy's default iteration limit ``2 n`` (``n`` = batch
       size times input size: effectively unlimited).
    4. Only the last round is scored (no maximum over rounds); the result is the maximum over restarts.

    Each restart ``r`` draws ``z_b = g_b * perturbation_size * sigma / sqrt(dim a)`` with ``g_b ~ N(0, I)`` (the
    reference: dithered minus clean features, divided by ``sqrt(dim a)`` and by ``diffdiv = 1 /
    perturbation_size``); every round rescales ``z_b`` to that example's starting norm, solves, sets
    ``x_b + Delta_b`` and ``z_b = a(x_b + Delta_b) - a(x_b)`` by exact forward passes. The bound per
    coordinate is ``|Delta_bi| / sqrt(expm1(||z_b||^2 / sigma^2))`` of the last round, rigorous whatever LSQR
    achieved. Restarts run in parallel (``vmap``).

    Args:
      feature_fn: ``x -> a(x)`` for one example.
      xs: ``[B, ...]`` inputs (one batch: one LSQR system).
      noise_sigma: dither standard deviation ``sigma > 0``.
      key: typed PRNG key; example ``b`` of restart ``r`` draws from ``fold_in(fold_in(key, id_b), r)``.
      num_restarts: independent starts (reference: 25).
      num_rounds: rounds per start (reference, MNIST: 10).
      perturbation_size: ``1 / diffdiv`` (reference, MNIST: 1/200; the Cramer-Rao limit run 1/1000).
      example_ids: ``[B]`` integer ids for the noise draws (default ``0..B-1``).
      coordinates: ``"dct"``, ``"pixel"`` or an orthogonal matrix (see :func:`to_coordinates`).
      dct_axes: DCT axes (default :func:`default_dct_axes` of one example).
      atol_factor: LSQR ``atol = atol_factor * min_b ||z_b||``.
      btol, conlim: LSQR settings.
      iter_lim: LSQR iteration limit (default ``2 n``, SciPy's).
      return_info: also return an :class:`HCRReferenceInfo`.

    A last round whose feature change rounded to exactly 0 while its shift did not is scored 0, not ``+inf`` (as in
    :func:`hcr_bounds`); an example whose every restart ends with ``delta = 0`` after some shift was rounded away
    gets NaN (``ValueError`` when concrete: raise ``perturbation_size`` or use float64).

    Returns:
      ``[B, ...]`` standard-deviation bounds in the chosen coordinates (and the info if ``return_info``); NaN
      where a traced ``noise_sigma`` or ``perturbation_size`` is not finite and positive.

    Raises:
      ValueError: as :func:`hcr_bounds`, or if ``xs`` has no batch axis or ``atol_factor`` is negative.

    >>> import jax
    >>> w = jnp.diag(jnp.array([1.0, 2.0, 4.0]))
    >>> b = hcr_bounds_reference(lambda v: w @ v, jnp.zeros((2, 3)), 1.0, jax.random.key(0), num_restarts=3,
    ...                          num_rounds=2, perturbation_size=1e-3, coordinates="pixel")
    >>> bool(jnp.all(b <= jnp.array([1.0, 0.5, 0.25]) + 1e-6))  # never above Cramer-Rao for a linear map
    True
    """
    bad_args = _check_hcr_search_args(noise_sigma, num_restarts, num_rounds, perturbation_size)
    if isinstance(coordinates, str) and coordinates not in ("dct", "pixel"):
        raise ValueError(f"coordinates must be 'dct', 'pixel' or an orthogonal matrix; got {coordinates!r}")
    if not (np.isfinite(atol_factor) and atol_factor >= 0):
        raise ValueError(f"atol_factor must be finite and >= 0; got {atol_factor!r}")
    xs = jnp.asarray(xs)
    if xs.ndim < 2:
        raise ValueError(f"xs must have a batch axis [B, ...]; got shape {xs.shape}")
    batched, xs = promote_to_common_dtype(jax.vmap(feature_fn), xs, name="feature_fn")
    dtype = xs.dtype
    ids = jnp.arange(xs.shape[0]) if example_ids is None else jnp.asarray(example_ids)
    sigma = jnp.asarray(noise_sigma, dtype)
    a0 = batched(xs)
    feat_axes = tuple(range(1, a0.ndim))
    scale = jnp.asarray(perturbation_size, dtype) * sigma / jnp.sqrt(jnp.asarray(a0[0].size, dtype))
    axes = dct_axes if dct_axes is not None else default_dct_axes(xs.shape[1:])

    in_axes = tuple(range(1, xs.ndim))

    def norms(v):
        return jnp.sqrt(jnp.sum(jnp.square(v), axis=feat_axes))

    def bcast(v):
        return v.reshape(v.shape + (1,) * (a0.ndim - 1))

    def one_restart(r):
        g = jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(jax.random.fold_in(key, i), r), a0.shape[1:],
                                                 a0.dtype))(ids)
        z0 = g * scale.astype(a0.dtype)
        target = norms(z0)
        atol = atol_factor * jnp.min(target)

        def round_body(carry, _):
            pert, z = carry
            zn = norms(z)
            z = z * bcast(target / jnp.where(zn > 0, zn, jnp.ones_like(zn)))
            _, jvp_fn = jax.linearize(batched, pert)
            vjp_fn = jax.linear_transpose(jvp_fn, pert)
            res = lsqr(jvp_fn, lambda u: vjp_fn(u.astype(a0.dtype))[0], z, atol=atol, btol=btol, conlim=conlim,
                       iter_lim=iter_lim)
            pert = xs + res.x.astype(dtype)
            z_new = batched(pert) - a0
            rel = res.r1norm / jnp.sqrt(jnp.sum(jnp.square(z)))
            # [B]: this round's shift was nonzero but its feature change rounded to exactly 0
            erased = (norms(z_new) == 0) & (jnp.sqrt(jnp.sum(jnp.square(pert - xs), axis=in_axes)) > 0)
            return (pert, z_new), (res.itn, res.istop, rel, erased)

        (pert, z), (itn, istop, rel, erased) = jax.lax.scan(round_body, (xs, z0), None, length=num_rounds)
        eps = pert - xs
        s = jnp.sum(jnp.square(z.astype(dtype)), axis=feat_axes)
        coords = jax.vmap(lambda e: to_coordinates(e, coordinates, axes))(eps)
        s_b = s.reshape(s.shape + (1,) * (xs.ndim - 1))
        std = jnp.exp(0.5 * log_hcr_variance_bound(coords, s_b, sigma, validate=False))
        # NaN (failed solve), Delta = 0, or a feature change rounded to 0 (s = 0 < ||Delta||: +inf from the closed
        # form, which the forward pass cannot support; see hcr_bounds): no bound, 0.
        std = jnp.where(jnp.isnan(std) | ~(s_b > 0), jnp.zeros_like(std), std)
        enorm = jnp.sqrt(jnp.sum(jnp.square(eps), axis=in_axes))
        return std, (jnp.sqrt(s), enorm, itn, istop, rel, jnp.any(erased, axis=0))

    std, (fnorm, enorm, itn, istop, rel, erased) = jax.vmap(one_restart)(jnp.arange(num_restarts))
    # [B]: no restart's scored (last) round measured a feature change, and some round's shift was rounded away
    no_bound = ~jnp.any(fnorm > 0, axis=0) & jnp.any(erased, axis=0)
    _erased_shift_error(no_bound, a0, perturbation_size, noise_sigma)
    out = jnp.max(std, axis=0)
    out = jnp.where(no_bound.reshape(no_bound.shape + (1,) * (xs.ndim - 1)) | bad_args, jnp.nan, out)
    if not return_info:
        return out
    return out, HCRReferenceInfo(fnorm, enorm, itn, istop, rel)
