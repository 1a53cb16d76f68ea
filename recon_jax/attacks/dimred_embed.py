"""Dimensionality-reduction methods M: R^{n x d} -> R^{n x 2} for the Lumbut & Ponnoprat attack.

PCA and sparse random projection are pure ``jnp`` (jittable, vmappable); MDS (SMACOF), Isomap and t-SNE come
from scikit-learn and UMAP from umap-learn (host-side NumPy; imported lazily). The attack that uses them is
:mod:`recon_jax.attacks.dimred`.

Constants: ``METHODS`` (every method name :func:`embed` takes), ``DETERMINISTIC_METHODS`` (those whose embedding
ignores the key), ``JNP_METHODS`` / ``SKLEARN_METHODS`` (where each runs) and ``SEED_POLICIES`` (how
:func:`run_key` derives a run's key: ``"known"`` shares the victim's key, ``"fresh"`` draws one per run).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import FINITE, check
from recon_jax.bounds.dct import full_precision
from recon_jax.io import seed_from_key

__all__ = [
    "METHODS",
    "DETERMINISTIC_METHODS",
    "JNP_METHODS",
    "SKLEARN_METHODS",
    "SEED_POLICIES",
    "pca_embed",
    "srp_matrix",
    "srp_embed",
    "embed",
    "sklearn_embed",
    "run_key",
    "method_options",
    "check_method_options",
]

METHODS = ("pca", "srp", "mds", "isomap", "tsne", "umap")
DETERMINISTIC_METHODS = ("pca", "isomap")
JNP_METHODS = ("pca", "srp")
SKLEARN_METHODS = ("mds", "isomap", "tsne", "umap")
SEED_POLICIES = ("known", "fresh")


def _check_data(data: Any, name: str = "data") -> None:
    """``data`` is ``[n >= 3, d >= 3]``, and finite when concrete (a NaN or inf gives an all-NaN PCA / SRP embedding;
    traced data, inside the vmapped shadow embeddings, are checked by their caller)."""
    shape = np.shape(data)
    if len(shape) != 2 or shape[0] < 3 or shape[1] < 3:
        raise ValueError(f"{name} must be a [n, d] array with n >= 3 and d >= 3 (paper: d > 2), got {shape}")
    check(name, data, FINITE)


def pca_embed(data: jax.Array, n_components: int = 2, solver: str = "auto") -> jax.Array:
    """Projects centred data on its first principal axes (exact SVD, deterministic signs).

    Both solvers are exact (full, non-randomised decompositions): ``"svd"`` is ``jnp.linalg.svd`` of the
    centred data; ``"gram"`` obtains the same singular vectors from ``eigh`` of the ``n x n`` Gram matrix
    (far cheaper when ``n << d``, e.g. 200 MNIST images); ``"auto"`` picks ``"gram"`` when ``n <= d``. Components
    beyond the rank of the centred data score ~0 with either solver (``"gram"`` sets them to exactly 0).

    Sign convention: each principal axis (a row of ``V^T``) is flipped so that its entry of largest absolute
    value is positive (the convention of scikit-learn >= 1.5, ``svd_flip(u_based_decision=False)``).

    Args:
      data: ``[n, d]`` data matrix.
      n_components: number of principal components (``1 <= n_components <= min(n, d)``).
      solver: ``"auto"``, ``"svd"`` or ``"gram"``.

    Returns:
      ``[n, n_components]`` scores ``(X - mean) V``.

    Raises:
      ValueError: if ``data`` is not 2-D with n, d >= 3, holds a NaN or inf (when concrete) or ``n_components`` is
        out of range.

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.array([[0., 0., 0.], [1., 0., 0.], [2., 0., 0.], [3., 0.1, 0.]])
      >>> pca_embed(x).shape
      (4, 2)
    """
    _check_data(data)
    n, d = np.shape(data)
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) \
            or not 1 <= n_components <= min(n, d):
        raise ValueError(f"n_components must be an integer in [1, {min(n, d)}], got {n_components!r}")
    if solver not in ("auto", "svd", "gram"):
        raise ValueError(f"solver must be 'auto', 'svd' or 'gram', got {solver!r}")
    return _pca_core(jnp.asarray(data), n_components, solver)


# Full-precision products (full_precision): on a GPU (TF32) or TPU (bfloat16) default products move the embeddings
# by 1e-4 to 1e-3 relative, and the embedding is the released mechanism whose exact output the attack inverts.
@full_precision
def _pca_core(data: jax.Array, n_components: int, solver: str = "auto") -> jax.Array:
    xc = data - jnp.mean(data, axis=0, keepdims=True)
    n, d = xc.shape
    if solver == "auto":
        solver = "gram" if n <= d else "svd"
    if solver == "svd":
        _, _, vt = jnp.linalg.svd(xc, full_matrices=False)
        vt = vt[:n_components]  # [k, d] principal axes
    elif solver == "gram":
        # Exact SVD of xc through the eigendecomposition of the n x n Gram matrix xc xc^T = U S^2 U^T
        # (much cheaper than a d-wide SVD when n << d); axes v_k = xc^T u_k / s_k.
        w, u = jnp.linalg.eigh(xc @ xc.T)
        u = u[:, ::-1][:, :n_components]  # [n, k], decreasing eigenvalues
        v = xc.T @ u  # [d, k] = V S
        s = jnp.linalg.norm(v, axis=0, keepdims=True)
        vt = (v / jnp.maximum(s, jnp.finfo(v.dtype).tiny)).T
        # Beyond the rank of xc, v is rounding noise that the division would make a unit axis (scores of the size of
        # the data's spread, where the SVD gives ~0): such axes are dropped, as a rank-revealing SVD would.
        noise = s[0] <= max(n, d) * jnp.finfo(v.dtype).eps * jnp.sqrt(jnp.maximum(w[-1], 0.0))
        vt = jnp.where(noise[:, None], 0.0, vt)
    else:
        raise ValueError(f"solver must be 'auto', 'svd' or 'gram', got {solver!r}")
    idx = jnp.argmax(jnp.abs(vt), axis=1)
    signs = jnp.sign(jnp.take_along_axis(vt, idx[:, None], axis=1))  # [k, 1]
    signs = jnp.where(signs == 0, 1.0, signs)
    return xc @ (vt * signs).T


def _srp_density(density: float | str, d: int) -> float:
    if density == "paper":
        return 1.0 / d
    if density == "auto":
        return 1.0 / math.sqrt(d)
    density = float(density)
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], 'paper' or 'auto', got {density}")
    return density


def srp_matrix(key: jax.Array, dim: int, n_components: int = 2, density: float | str = "paper") -> jax.Array:
    """Draws a sparse random projection matrix R [dim, n_components] (paper eq. 2, Li et al. 2006).

    Entries are ``-v`` and ``+v`` with probability ``density / 2`` each and 0 otherwise, with
    ``v = sqrt(1 / (density * n_components))`` so that ``E ||x R||^2 = ||x||^2``. The paper's eq. 2 uses
    ``density = 1 / d`` (``v = sqrt(d / r)``; its printed first case lost the sign: the values are ``+-v``);
    ``density="auto"`` is ``1 / sqrt(d)`` (scikit-learn's default). scikit-learn stores the transpose
    (``components_`` is ``[r, d]``).

    Args:
      key: typed PRNG key.
      dim: input dimension d (>= 1).
      n_components: output dimension r (>= 1).
      density: ``"paper"`` (1/d), ``"auto"`` (1/sqrt(d)) or a float in (0, 1].

    Returns:
      ``[dim, n_components]`` float32 matrix.

    Raises:
      ValueError: for dim < 1, n_components < 1 or a density outside (0, 1].

    Example:
      >>> import jax
      >>> r = srp_matrix(jax.random.key(0), 784, density=0.5)
      >>> r.shape, float(abs(r).max()) == 1.0
      ((784, 2), True)
    """
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if n_components < 1:
        raise ValueError(f"n_components must be >= 1, got {n_components}")
    s = _srp_density(density, dim)
    v = math.sqrt(1.0 / (s * n_components))
    u = jax.random.uniform(key, (dim, n_components))
    return jnp.where(u < s / 2, -v, jnp.where(u < s, v, 0.0)).astype(jnp.float32)


@full_precision
def srp_embed(data: jax.Array, key: jax.Array, n_components: int = 2, density: float | str = "paper") -> jax.Array:
    """Sparse random projection ``theta = D R`` (paper eq. 1) with ``R = srp_matrix(key, d, ...)``.

    Args:
      data: ``[n, d]`` data.
      key: typed PRNG key for ``R``.
      n_components: output dimension.
      density: see :func:`srp_matrix`.

    Returns:
      ``[n, n_components]`` embedding.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> srp_embed(jnp.ones((5, 10)), jax.random.key(1), density=1.0).shape
      (5, 2)
    """
    _check_data(data)
    if not (isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)):
        raise ValueError(f"key must be a typed jax.random.key, got {type(key).__name__} (embed takes an int seed)")
    r = srp_matrix(key, np.shape(data)[1], n_components, density)
    return jnp.asarray(data) @ r


_KNOWN_STREAM, _FRESH_STREAM = 0, 1  # run_key's two sibling streams of the caller's key


def run_key(key: jax.Array, seed_policy: str, run_index: int | jax.Array) -> jax.Array:
    """The key of one embedding run under a seed policy.

    ``"known"``: every run (victim and all shadows) uses the same key, ``fold_in(key, 0)`` -- the adversary
    knows the victim's randomness. ``"fresh"``: run ``i`` uses ``fold_in(fold_in(key, 1), i)`` -- fresh,
    independent randomness per run, so the adversary's shadows cannot reproduce the victim's random state (the
    paper's setting: scikit-learn estimators created without ``random_state``). The two policies draw from
    sibling streams of ``key``, which is itself never drawn from: the same ``key`` can serve both (the
    experiment compares them) without one policy's draws being another's keys.

    Example:
      >>> import jax
      >>> k = jax.random.key(0)
      >>> a, b = (jax.random.key_data(run_key(k, "known", i)) for i in (0, 7))
      >>> bool((a == b).all()), bool((jax.random.key_data(run_key(k, "fresh", 0)) == a).all())
      (True, False)
    """
    if seed_policy == "known":
        return jax.random.fold_in(key, _KNOWN_STREAM)
    if seed_policy == "fresh":
        return jax.random.fold_in(jax.random.fold_in(key, _FRESH_STREAM), run_index)
    raise ValueError(f"seed_policy must be one of {SEED_POLICIES}, got {seed_policy!r}")


def _int_seed(key_or_seed: Any) -> int:
    if not 0 <= int(key_or_seed) < 2**32:  # the scikit-learn / umap methods take no larger seed
        raise ValueError(f"key_or_seed must be a typed key or an int in [0, 2**32), got {key_or_seed}")
    return int(key_or_seed)


def _as_key(key_or_seed: Any) -> jax.Array:
    if isinstance(key_or_seed, (int, np.integer)):
        return jax.random.key(_int_seed(key_or_seed))
    if isinstance(key_or_seed, jax.Array) and jnp.issubdtype(key_or_seed.dtype, jax.dtypes.prng_key):
        return key_or_seed
    raise ValueError(f"key_or_seed must be a typed jax.random.key or an int >= 0, got {type(key_or_seed)}")


def _as_seed(key_or_seed: Any) -> int:
    if isinstance(key_or_seed, (int, np.integer)):
        return _int_seed(key_or_seed)
    return seed_from_key(_as_key(key_or_seed))


# Keyword arguments the wrappers set themselves (the 2-D output and the run's seed): not options.
_WRAPPER_ARGS = frozenset({"n_components", "random_state"})


@functools.lru_cache(maxsize=None)
def method_options(method: str) -> frozenset[str] | None:
    """The option names a method takes (the ``method_opts`` of :class:`recon_jax.attacks.dimred.EmbeddingSpec`).

    PCA: ``solver`` (:func:`pca_embed`); SRP: ``density`` (:func:`srp_matrix`); the scikit-learn / umap methods:
    their estimator's constructor parameters (``get_params()``, which :func:`sklearn_embed` forwards them to) but
    ``n_components`` and ``random_state``, which :func:`sklearn_embed` sets. ``None`` for UMAP when umap-learn
    (an optional extra) is not installed: its options cannot be listed, and embedding with it fails anyway.

    Raises:
      ValueError: for an unknown method.

    Example:
      >>> sorted(method_options("srp")), "perplexity" in method_options("tsne")
      (['density'], True)
    """
    if method == "pca":
        return frozenset({"solver"})
    if method == "srp":
        return frozenset({"density"})
    if method == "mds":
        from sklearn.manifold import MDS as estimator
    elif method == "isomap":
        from sklearn.manifold import Isomap as estimator
    elif method == "tsne":
        from sklearn.manifold import TSNE as estimator
    elif method == "umap":
        try:
            from umap import UMAP as estimator
        except ImportError:  # optional extra not installed
            return None
    else:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return frozenset(estimator().get_params()) - _WRAPPER_ARGS


def check_method_options(method: str, names, argument: str = "method_opts") -> None:
    """Raises ``ValueError`` naming ``argument``, the unknown option names and the allowed ones when ``names``
    holds an option ``method`` does not take (:func:`method_options`). A misspelt option would otherwise be
    ignored (PCA / SRP run at their defaults) or fail only inside a worker with the estimator's ``TypeError``.

    Example:
      >>> check_method_options("srp", ["densty"])
      Traceback (most recent call last):
      ...
      ValueError: method_opts has unknown option(s) ['densty'] for method 'srp'; allowed: ['density']
    """
    allowed = method_options(method)
    unknown = sorted(set(names) - allowed) if allowed is not None else []
    if unknown:
        raise ValueError(f"{argument} has unknown option(s) {unknown} for method {method!r}; "
                         f"allowed: {sorted(allowed)}")


def _user_count(name: str, value: Any, lower: int, upper: int, n: int) -> int:
    """A user-given neighbour count in ``[lower, upper]`` (``upper`` follows from the ``n`` points), as ``int``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not lower <= value <= upper:
        raise ValueError(f"{name} must be an integer in [{lower}, {upper}] for n = {n} points; got {value!r}")
    return int(value)


def sklearn_embed(method: str, data: np.ndarray, seed: int, **opts: Any) -> np.ndarray:
    """Host-side MDS / Isomap / t-SNE / UMAP embedding of ``data`` [n, d] into 2-D with integer ``seed``.

    Defaults (overridable through ``opts``): MDS -- metric SMACOF, ``init="random"``, ``n_init=4``,
    ``max_iter=300`` (scikit-learn 1.4 defaults, the paper's era); Isomap -- ``n_neighbors=min(5, n-1)``,
    dense eigen-solver (deterministic); t-SNE -- scikit-learn defaults (``init="pca"``, perplexity
    ``min(30, (n-1)/3)`` because it must be below n); UMAP -- ``n_neighbors=min(15, n-1)``. Only these defaults
    are lowered to fit small ``n``; a value given in ``opts`` is used as given.

    Raises:
      ValueError: for an unknown method or option (:func:`method_options`), or a given Isomap ``n_neighbors``
        outside ``[1, n-1]``, UMAP ``n_neighbors`` outside ``[2, n-1]`` or t-SNE ``perplexity`` outside
        ``(0, (n-1)/3]``.
    """
    if method not in SKLEARN_METHODS:
        raise ValueError(f"method must be one of {SKLEARN_METHODS} here, got {method!r}")
    check_method_options(method, opts, "opts")
    data = np.asarray(data, dtype=np.float64)
    n = data.shape[0]
    opts = dict(opts)
    if not 0 <= int(seed) < 2**32:  # numpy's and umap's random_state range
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed}")
    if method == "umap" and n < 4:  # its spectral initialisation needs n > n_components + 1
        raise ValueError(f"UMAP needs n >= 4 points, got data with {n}")
    if method == "tsne" and not np.ptp(data, axis=0).any():  # scikit-learn's t-SNE crashes the process on these
        raise ValueError(f"t-SNE needs at least two distinct points; the {n} rows of data are all the same")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "mds":
            from sklearn.manifold import MDS

            kw = dict(n_init=4, max_iter=300, init="random", metric_mds=True, normalized_stress="auto")
            kw.update(opts)
            return MDS(n_components=2, random_state=seed, **kw).fit_transform(data)
        if method == "isomap":
            from sklearn.manifold import Isomap

            kw = dict(n_neighbors=min(5, n - 1), eigen_solver="dense")
            if "n_neighbors" in opts:
                opts["n_neighbors"] = _user_count("n_neighbors", opts["n_neighbors"], 1, n - 1, n)
            kw.update(opts)
            return Isomap(n_components=2, **kw).fit_transform(data)
        if method == "tsne":
            from sklearn.manifold import TSNE

            kw = dict(perplexity=min(30.0, (n - 1) / 3.0))
            if "perplexity" in opts:
                p = opts["perplexity"]
                if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)) \
                        or not 0 < p <= (n - 1) / 3.0:
                    raise ValueError(f"perplexity must be a number in (0, (n-1)/3] = (0, {(n - 1) / 3.0:g}] for "
                                     f"n = {n} points; got {p!r}")
                opts["perplexity"] = float(p)
            kw.update(opts)
            return TSNE(n_components=2, random_state=seed, **kw).fit_transform(data)
        import umap  # umap-learn (optional extra [dimred])

        kw = dict(n_neighbors=min(15, n - 1))
        if "n_neighbors" in opts:
            opts["n_neighbors"] = _user_count("n_neighbors", opts["n_neighbors"], 2, n - 1, n)
        kw.update(opts)
        return umap.UMAP(n_components=2, random_state=seed, **kw).fit_transform(data)


def embed(method: str, data: Any, key_or_seed: Any, **opts: Any) -> jax.Array:
    """Embeds ``data`` [n, d] into 2-D with one of the paper's six methods (Lumbut & Ponnoprat, Sec. 2.1).

    Args:
      method: ``"pca"``, ``"srp"``, ``"mds"``, ``"isomap"``, ``"tsne"`` or ``"umap"``.
      data: ``[n, d]`` finite array (n >= 3, d >= 3; UMAP n >= 4; t-SNE two distinct rows or more).
      key_or_seed: typed ``jax.random.key`` or an int in ``[0, 2**32)``; the method's randomness (SRP matrix,
        MDS / UMAP initialisation, t-SNE's with ``init="random"``). Ignored by the deterministic PCA and Isomap,
        and by t-SNE at its default ``init="pca"``, which is deterministic too.
      **opts: method options: ``density`` for SRP (see :func:`srp_matrix`); scikit-learn / umap keyword
        arguments for the others.

    Returns:
      ``[n, 2]`` embedding (``jax.Array``).

    Raises:
      ValueError: for an unknown method, an option the method does not take (:func:`method_options`; a misspelt
        name would otherwise surface as a ``TypeError`` or run at the default), a malformed or non-finite
        ``data``, an invalid key/seed, or (the scikit-learn / umap methods) an option value :func:`sklearn_embed`
        refuses.

    Example:
      >>> import numpy as np
      >>> x = np.random.default_rng(0).random((20, 5))
      >>> embed("pca", x, 0).shape, embed("srp", x, 0, density=0.5).shape
      ((20, 2), (20, 2))
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    check_method_options(method, opts, "opts")
    _check_data(data)
    if method == "pca":
        return pca_embed(jnp.asarray(data, dtype=jnp.result_type(float)), **opts)
    if method == "srp":
        return srp_embed(jnp.asarray(data, dtype=jnp.result_type(float)), _as_key(key_or_seed), **opts)
    out = sklearn_embed(method, np.asarray(data), _as_seed(key_or_seed), **opts)
    return jnp.asarray(out, dtype=jnp.result_type(float))  # t-SNE and UMAP return float32: float64 under x64
