"""Matrix-free LSQR (Paige and Saunders, 1982) in JAX: jittable, vmappable, differentiable-free.

LSQR solves ``min_x ||A x - b||^2 + damp^2 ||x||^2`` using only the products ``A v`` (``matvec``) and
``A^T u`` (``rmatvec``), by Golub-Kahan bidiagonalisation and plane rotations. This module follows the
algorithm of

    C. C. Paige and M. A. Saunders, "LSQR: An algorithm for sparse linear equations and sparse least
    squares", ACM Trans. Math. Softw. 8(1), 43-71 (1982),

including the damping rotation, the running estimates of ``||A||``, ``cond(A)``, ``||x||``, ``||r||`` and
``||A^T r||``, and the standard stopping rules (the same ``istop`` codes as ``scipy.sparse.linalg.lsqr``):

====== ===================================================================================
istop  meaning
====== ===================================================================================
0      ``b = 0`` or ``A^T b = 0``: ``x = 0`` is the exact solution
1      ``A x - b`` is small enough (compatible system), test ``||r|| <= btol ||b|| + atol ||A|| ||x||``
2      least-squares solution to within ``atol``: ``||A^T r|| <= atol ||A|| ||r||``
3      the estimate of ``cond(A)`` exceeds ``conlim``
4-6    as 1-3 with ``atol = btol = machine precision`` (``1 + test <= 1``)
7      the iteration limit was reached
====== ===================================================================================

The iteration is one ``lax.while_loop``, so :func:`lsqr` is jittable and, under ``jax.vmap``, every lane
stops at its own iteration (JAX freezes the state of lanes whose predicate is false). Operators may act
on arrays of any shape; ``x`` has the shape of ``rmatvec(b)``.

``reorthogonalize=True`` keeps each Golub-Kahan vector ``v_k`` (the side ``x`` is built from) orthogonal to all
earlier ones by classical Gram-Schmidt applied twice: one-sided, which Simon and Zha (2000) and Fong and Saunders
(LSMR, 2011) found sufficient; SciPy's ``lsqr`` does not reorthogonalize. In finite precision the short recurrences
lose orthogonality as soon as a singular value has been resolved (Paige's analysis of the Lanczos process): LSQR
then takes many more iterations than in exact arithmetic, and where it stops, and with what ``x``, follows the
rounding. In float32 that is visible: on the 64 x 16 Jacobian of a ReLU net with condition number ~2e3 (atol 1e-4,
btol 1e-6), LSQR took 23-43 iterations, and an eager and a jitted solve of the same system (whose products round
differently) stopped up to 3 iterations apart with solutions 1e-3 apart; with reorthogonalization it took 12-15
(<= n, as in exact arithmetic), the same in both, with solutions 3e-6 apart. The cost: ``(iter_lim + 1) n``
stored entries and ``4 (iter_lim + 1) n`` multiply-adds per iteration, worth it where ``iter_lim`` is small
against the cost of a product (a network's Jacobian-vector product, say).

Notation: ``A`` is m x n (as a linear map), ``b`` in R^m, ``x`` in R^n; ``damp >= 0``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import FINITE_NONNEGATIVE, FINITE_POSITIVE, check, check_integer

__all__ = ["LSQRResult", "lsqr", "jacobian_lsqr"]


class LSQRResult(NamedTuple):
    """Output of :func:`lsqr` (names and meaning as in ``scipy.sparse.linalg.lsqr``).

    Attributes:
      x: the solution estimate, shape of ``rmatvec(b)``.
      istop: the stopping reason (see the module docstring), int32.
      itn: the number of iterations performed, int32.
      r1norm: ``||A x - b||``.
      r2norm: ``sqrt(||A x - b||^2 + damp^2 ||x||^2)``.
      anorm: the estimate of the Frobenius norm of ``[A; damp I]``.
      acond: the estimate of ``cond([A; damp I])``.
      arnorm: ``||A^T (b - A x) - damp^2 x||``.
      xnorm: ``||x||``.
    """

    x: jax.Array
    istop: jax.Array
    itn: jax.Array
    r1norm: jax.Array
    r2norm: jax.Array
    anorm: jax.Array
    acond: jax.Array
    arnorm: jax.Array
    xnorm: jax.Array


def _norm(v: jax.Array) -> jax.Array:
    return jnp.sqrt(jnp.sum(v * v))


def _safe_div(a, b):
    """a / b, with b == 0 replaced by 1 (callers guard the result)."""
    return a / jnp.where(b == 0, jnp.ones_like(b), b)


def _orthogonalize(w: jax.Array, basis: jax.Array) -> jax.Array:
    """``w`` minus its projection on the rows of ``basis`` (orthonormal rows, or zero rows: not yet filled), by
    classical Gram-Schmidt twice ("twice is enough": Giraud, Langou, Rozloznik 2005); full-precision products."""
    flat = basis.reshape(basis.shape[0], -1)
    hi = jax.lax.Precision.HIGHEST
    for _ in range(2):
        coef = jnp.matmul(flat, w.reshape(-1), precision=hi)
        w = w - jnp.matmul(coef, flat, precision=hi).reshape(w.shape)
    return w


def _sym_ortho(a, b):
    """Stable Givens rotation (c, s, r) with [c s; -s c] [a; b] = [r; 0] (Choi, Paige, Saunders)."""
    abs_a, abs_b = jnp.abs(a), jnp.abs(b)
    # Branch |b| > |a| (b != 0).
    tau1 = _safe_div(a, b)
    s1 = jnp.sign(b) / jnp.sqrt(1.0 + tau1 * tau1)
    c1 = s1 * tau1
    r1 = _safe_div(b, s1)
    # Branch |a| >= |b| (a != 0).
    tau2 = _safe_div(b, a)
    c2 = jnp.sign(a) / jnp.sqrt(1.0 + tau2 * tau2)
    s2 = c2 * tau2
    r2 = _safe_div(a, c2)
    zero, one = jnp.zeros_like(a), jnp.ones_like(a)
    c = jnp.where(b == 0, jnp.where(a == 0, one, jnp.sign(a)), jnp.where(a == 0, zero, jnp.where(abs_b > abs_a, c1, c2)))
    s = jnp.where(b == 0, zero, jnp.where(a == 0, jnp.sign(b), jnp.where(abs_b > abs_a, s1, s2)))
    r = jnp.where(b == 0, abs_a, jnp.where(a == 0, abs_b, jnp.where(abs_b > abs_a, r1, r2)))
    return c, s, r


def lsqr(
    matvec: Callable[[jax.Array], jax.Array],
    rmatvec: Callable[[jax.Array], jax.Array],
    b: jax.Array,
    *,
    damp: float | jax.Array = 0.0,
    atol: float | jax.Array = 1e-6,
    btol: float | jax.Array = 1e-6,
    conlim: float | jax.Array = 1e8,
    iter_lim: int | None = None,
    reorthogonalize: bool = False,
) -> LSQRResult:
    """Solves ``min ||A x - b||^2 + damp^2 ||x||^2`` by LSQR, matrix-free, starting from ``x = 0``.

    Paige & Saunders (1982), Algorithm LSQR with the damping rotation and the stopping rules of their
    Section 6 (as in ``scipy.sparse.linalg.lsqr``). Assumes ``matvec`` and ``rmatvec`` are a linear map
    and its exact transpose. Runs in a ``lax.while_loop``: jittable; vmap it (with the operator built
    inside the vmapped function) to solve one small problem per example, each stopping on its own.

    Args:
      matvec: ``v -> A v`` (x-shaped array to b-shaped array).
      rmatvec: ``u -> A^T u`` (b-shaped to x-shaped).
      b: right-hand side, any shape.
      damp: damping ``>= 0`` (Tikhonov regularisation ``damp^2 ||x||^2``).
      atol: relative tolerance on ``||A^T r|| / (||A|| ||r||)`` (and on ``||A|| ||x||`` in the residual
        test), ``>= 0``.
      btol: relative tolerance on ``||r|| / ||b||``, ``>= 0``.
      conlim: stop when the estimate of ``cond(A)`` exceeds it; ``> 0``.
      iter_lim: the maximum number of iterations; default ``2 * n`` with ``n = size of x`` (SciPy's
        default). Must be a Python int (static) when given.
      reorthogonalize: keep every new ``v_k`` orthogonal to the earlier ones (see the module docstring):
        iterates as in exact arithmetic up to rounding times ``cond(A)``, at ``(iter_lim + 1) n`` stored entries.
        A Python bool (static).

    Returns:
      An :class:`LSQRResult`.

    Raises:
      ValueError: if ``damp``, ``atol``, ``btol`` are negative, ``conlim <= 0`` or ``iter_lim < 0``
        (checked when the values are concrete; traced values are used as given).

    >>> import jax.numpy as jnp
    >>> a = jnp.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    >>> res = lsqr(lambda v: a @ v, lambda u: a.T @ u, jnp.array([1.0, 2.0, 2.0]), atol=1e-7, btol=1e-7)
    >>> [round(float(t), 4) for t in res.x], int(res.istop)
    ([1.0, 1.0], 1)
    >>> res = lsqr(lambda v: a @ v, lambda u: a.T @ u, jnp.array([1.0, 2.0, 2.0]), atol=1e-7, btol=1e-7,
    ...            reorthogonalize=True)
    >>> [round(float(t), 4) for t in res.x], int(res.itn)  # at most n = 2 iterations, as in exact arithmetic
    ([1.0, 1.0], 2)
    """
    for name, value in (("damp", damp), ("atol", atol), ("btol", btol)):
        check(name, value, FINITE_NONNEGATIVE)
    check("conlim", conlim, FINITE_POSITIVE)
    if iter_lim is not None:
        check_integer("iter_lim", iter_lim, 0)

    b = jnp.asarray(b)
    if not jnp.issubdtype(b.dtype, jnp.floating):
        b = b.astype(jnp.result_type(float))
    dtype = b.dtype
    eps = jnp.asarray(np.finfo(np.dtype(dtype)).eps, dtype)
    damp = jnp.asarray(damp, dtype)
    atol = jnp.asarray(atol, dtype)
    btol = jnp.asarray(btol, dtype)
    conlim = jnp.asarray(conlim, dtype)
    dampsq = damp * damp
    ctol = 1.0 / conlim

    bnorm = _norm(b)
    u = b * _safe_div(jnp.ones_like(bnorm), bnorm)
    v = rmatvec(u).astype(dtype)
    v = jnp.where(bnorm > 0, v, jnp.zeros_like(v))
    if iter_lim is None:
        iter_lim = 2 * int(np.prod(v.shape))
    alpha = _norm(v)
    v = v * _safe_div(jnp.ones_like(alpha), alpha)
    zero = jnp.zeros((), dtype)
    trivial = alpha * bnorm == 0

    init = dict(
        itn=jnp.zeros((), jnp.int32),
        istop=jnp.zeros((), jnp.int32),
        x=jnp.zeros_like(v),
        u=u,
        v=v,
        w=v,
        alpha=alpha,
        rhobar=alpha,
        phibar=bnorm,
        anorm=zero,
        acond=zero,
        ddnorm=zero,
        res2=zero,
        xnorm=zero,
        xxnorm=zero,
        z=zero,
        cs2=-jnp.ones((), dtype),
        sn2=zero,
        rnorm=bnorm,
        r1norm=bnorm,
        arnorm=alpha * bnorm,
    )
    if reorthogonalize:  # row k holds v_{k+1}; rows not yet reached are zero (they project to nothing)
        init["v_basis"] = jnp.zeros((iter_lim + 1,) + v.shape, dtype).at[0].set(v)

    def cond(s):
        return (s["istop"] == 0) & (s["itn"] < iter_lim) & ~trivial

    def body(s):
        itn = s["itn"] + 1
        alpha = s["alpha"]
        # Bidiagonalisation: beta u = A v - alpha u; alpha v = A^T u - beta v.
        u = matvec(s["v"]).astype(dtype) - alpha * s["u"]
        beta = _norm(u)
        pos_beta = beta > 0
        u = jnp.where(pos_beta, u * _safe_div(jnp.ones_like(beta), beta), u)
        anorm = jnp.where(pos_beta, jnp.sqrt(s["anorm"] ** 2 + alpha**2 + beta**2 + dampsq), s["anorm"])
        v_new = rmatvec(u).astype(dtype) - beta * s["v"]
        if reorthogonalize:
            v_new = _orthogonalize(v_new, s["v_basis"])
        alpha_new = _norm(v_new)
        v_new = jnp.where(alpha_new > 0, v_new * _safe_div(jnp.ones_like(alpha_new), alpha_new), v_new)
        v = jnp.where(pos_beta, v_new, s["v"])
        alpha = jnp.where(pos_beta, alpha_new, alpha)

        # Plane rotation eliminating the damping parameter.
        rhobar, phibar = s["rhobar"], s["phibar"]
        rhobar1 = jnp.sqrt(rhobar**2 + dampsq)
        cs1 = _safe_div(rhobar, rhobar1)
        sn1 = _safe_div(damp, rhobar1)
        has_damp = damp > 0
        psi = jnp.where(has_damp, sn1 * phibar, zero)
        phibar = jnp.where(has_damp, cs1 * phibar, phibar)
        rhobar1 = jnp.where(has_damp, rhobar1, rhobar)

        # Plane rotation eliminating the subdiagonal element beta.
        cs, sn, rho = _sym_ortho(rhobar1, beta)
        theta = sn * alpha
        rhobar = -cs * alpha
        phi = cs * phibar
        phibar = sn * phibar
        tau = sn * phi

        # Update x and w.
        t1 = _safe_div(phi, rho)
        t2 = -_safe_div(theta, rho)
        w = s["w"]
        dknorm_sq = jnp.sum(w * w) * _safe_div(jnp.ones_like(rho), rho) ** 2
        x = s["x"] + t1 * w
        w = v + t2 * w
        ddnorm = s["ddnorm"] + dknorm_sq

        # Estimate of ||x|| by the second rotation (Paige & Saunders Sec. 5.3).
        delta = s["sn2"] * rho
        gambar = -s["cs2"] * rho
        rhs = phi - delta * s["z"]
        zbar = _safe_div(rhs, gambar)
        xnorm = jnp.sqrt(s["xxnorm"] + zbar**2)
        gamma = jnp.sqrt(gambar**2 + theta**2)
        cs2 = _safe_div(gambar, gamma)
        sn2 = _safe_div(theta, gamma)
        z = _safe_div(rhs, gamma)
        xxnorm = s["xxnorm"] + z**2

        # Norm estimates and stopping tests.
        acond = anorm * jnp.sqrt(ddnorm)
        res1 = phibar**2
        res2 = s["res2"] + psi**2
        rnorm = jnp.sqrt(res1 + res2)
        arnorm = alpha * jnp.abs(tau)
        r1sq = rnorm**2 - dampsq * xxnorm
        r1norm = jnp.sign(r1sq) * jnp.sqrt(jnp.abs(r1sq))

        test1 = rnorm / bnorm
        test2 = arnorm / (anorm * rnorm + eps)
        test3 = 1.0 / (acond + eps)
        t1n = test1 / (1.0 + anorm * xnorm / bnorm)
        rtol = btol + atol * anorm * xnorm / bnorm

        # Same precedence as Paige & Saunders / SciPy: later tests override earlier ones.
        istop = jnp.where(itn >= iter_lim, 7, 0)
        istop = jnp.where(1.0 + test3 <= 1.0, 6, istop)
        istop = jnp.where(1.0 + test2 <= 1.0, 5, istop)
        istop = jnp.where(1.0 + t1n <= 1.0, 4, istop)
        istop = jnp.where(test3 <= ctol, 3, istop)
        istop = jnp.where(test2 <= atol, 2, istop)
        istop = jnp.where(test1 <= rtol, 1, istop)

        out = dict(
            itn=itn,
            istop=istop.astype(jnp.int32),
            x=x,
            u=u,
            v=v,
            w=w,
            alpha=alpha,
            rhobar=rhobar,
            phibar=phibar,
            anorm=anorm,
            acond=acond,
            ddnorm=ddnorm,
            res2=res2,
            xnorm=xnorm,
            xxnorm=xxnorm,
            z=z,
            cs2=cs2,
            sn2=sn2,
            rnorm=rnorm,
            r1norm=r1norm,
            arnorm=arnorm,
        )
        if reorthogonalize:
            out["v_basis"] = s["v_basis"].at[itn].set(jnp.where(pos_beta, v, jnp.zeros_like(v)))  # v_{itn + 1}
        return out

    s = jax.lax.while_loop(cond, body, init)
    return LSQRResult(
        x=s["x"],
        istop=s["istop"],
        itn=s["itn"],
        r1norm=s["r1norm"],
        r2norm=s["rnorm"],
        anorm=s["anorm"],
        acond=s["acond"],
        arnorm=s["arnorm"],
        xnorm=s["xnorm"],
    )


def promote_to_common_dtype(fn, x, *others, name: str = "fn"):
    """``x`` as a floating array in the common dtype of ``x``, ``fn(x)`` and ``others`` (dtypes: a right-hand
    side's, say), and ``fn`` with its output cast to that dtype. ``x`` may be a batch for a vmapped ``fn`` (pass
    ``jax.vmap(fn)``); ``name`` names ``fn`` in the error.

    A linearised ``fn``'s tangents (``x``-shaped) and cotangents (output-shaped) then share one dtype: a float32
    ``x`` through a float64 ``fn`` (with x64 on) would otherwise give float64 right-hand sides whose products
    ``J^T u`` are float64 but must enter the jvp linearised at the float32 ``x`` as float32 tangents. Promoting
    ``x`` does not change the map: its float32 values are float64 values, and the float64 ``fn`` promotes them
    anyway. Returns ``fn`` itself where no cast is needed.

    Raises:
      ValueError: if the common dtype is not a real floating one (``fn`` returns complex values, say).
    """
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    out = jax.eval_shape(fn, x)
    dtype = jnp.result_type(x.dtype, out.dtype, *others)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"{name} must return floating features; got dtype {out.dtype}")
    if dtype == x.dtype and out.dtype == dtype:
        return fn, x
    return (lambda v: fn(v).astype(dtype)), x.astype(dtype)


def jacobian_lsqr(
    fn: Callable[[jax.Array], jax.Array],
    primal: jax.Array,
    b: jax.Array,
    **lsqr_kwargs,
) -> LSQRResult:
    """LSQR for ``min_e ||J e - b||`` with ``J`` the Jacobian of ``fn`` at ``primal``, never formed.

    ``J e`` is a Jacobian-vector product (``jax.linearize``, so the forward pass is evaluated once) and
    ``J^T u`` its transpose (``jax.linear_transpose``, a vector-Jacobian product).

    Args:
      fn: a differentiable function of one array.
      primal: the point where ``fn`` is linearised.
      b: right-hand side, shaped like ``fn(primal)``.
      **lsqr_kwargs: ``damp``, ``atol``, ``btol``, ``conlim``, ``iter_lim`` (see :func:`lsqr`).

    Returns:
      An :class:`LSQRResult`; ``x`` has the shape of ``primal``. The solve runs in the common dtype of ``primal``,
      ``fn(primal)`` and ``b`` (:func:`promote_to_common_dtype`): a float32 ``primal`` through a float64 ``fn``
      gives a float64 solve, as a float64 ``primal`` would.

    Raises:
      ValueError: as :func:`lsqr`, or as :func:`promote_to_common_dtype`.

    >>> import jax.numpy as jnp
    >>> res = jacobian_lsqr(lambda x: 3.0 * x, jnp.ones(2), jnp.array([3.0, 6.0]))
    >>> [round(float(t), 4) for t in res.x]
    [1.0, 2.0]
    """
    b = jnp.asarray(b)
    if not jnp.issubdtype(b.dtype, jnp.floating):
        b = b.astype(jnp.result_type(float))
    fn, primal = promote_to_common_dtype(fn, primal, b.dtype)
    b = b.astype(primal.dtype)
    _, jvp_fn = jax.linearize(fn, primal)
    vjp_fn = jax.linear_transpose(jvp_fn, primal)
    return lsqr(jvp_fn, lambda u: vjp_fn(u)[0], b, **lsqr_kwargs)
