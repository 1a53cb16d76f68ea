"""Shadow embeddings for the DR attack (Lumbut & Ponnoprat, Algorithm 1 lines 4-10), stored resumably.

For each candidate x'_j the dataset D- with x'_j inserted at a fixed row (``target_row``) is embedded, and the
flattened embedding theta_j in R^{2n} is returned. PCA and SRP run as one ``jax.jit(jax.vmap(...))`` per chunk;
MDS / Isomap / t-SNE / UMAP run in joblib worker processes with a progress bar.

Store rules (the same as the shadow engine's): one ``.npz`` chunk per block of runs written atomically with
:func:`recon_jax.io.atomic_save_npz`, a ``manifest.json`` holding a hash of everything that determines the
result, a directory holding a different configuration is refused, and a chunk that fails to load, has the
wrong rows or fails its SHA-256 digest is recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.attacks import _dimred_embed as E
from recon_jax.io import atomic_save_npz, atomic_write_json

__all__ = ["shadow_embeddings", "insert_row"]

_STORE_VERSION = 1


def insert_row(known: jax.Array, x: jax.Array, target_row: int) -> jax.Array:
    """Returns ``known`` [n-1, d] with ``x`` [d] inserted as row ``target_row`` ([n, d])."""
    return jnp.concatenate([known[:target_row], x[None, :], known[target_row:]], axis=0)


def _run_seeds(key: jax.Array, seed_policy: str, indices: np.ndarray) -> np.ndarray:
    keys = jax.vmap(lambda i: E.run_key(key, seed_policy, i))(jnp.asarray(indices, dtype=jnp.uint32))
    return np.asarray(jax.vmap(lambda k: jax.random.randint(k, (), 0, 2**31 - 1))(keys), dtype=np.int64)


def _noise_seeds(noise_key: jax.Array, indices: np.ndarray) -> np.ndarray:
    keys = jax.vmap(lambda i: jax.random.fold_in(noise_key, i))(jnp.asarray(indices, dtype=jnp.uint32))
    return np.asarray(jax.vmap(lambda k: jax.random.randint(k, (), 0, 2**31 - 1))(keys), dtype=np.int64)


def _jnp_chunk_fn(method: str, target_row: int, noisy: bool, density: Any, solver: str = "auto"):
    def one(known, x, key, noise_key, run_index, scale, sigma):
        z = insert_row(known, x, target_row) * scale
        if noisy:
            z = z + sigma * jax.random.normal(jax.random.fold_in(noise_key, run_index), z.shape, z.dtype)
        if method == "pca":
            out = E._pca_core(z, 2, solver)
        else:
            out = z @ E.srp_matrix(key, z.shape[1], 2, density)
        return out.reshape(-1)

    return jax.jit(jax.vmap(one, in_axes=(None, 0, 0, None, 0, None, None)))


def _sklearn_chunk(method, known, xs, seeds, noise_seeds, target_row, scale, sigma, opts):
    """Worker: embeds each candidate of one chunk (host NumPy, runs in a joblib process)."""
    out = []
    for x, seed, nseed in zip(xs, seeds, noise_seeds):
        z = np.concatenate([known[:target_row], x[None], known[target_row:]], axis=0).astype(np.float64) * scale
        if sigma > 0:
            z = z + sigma * np.random.default_rng(int(nseed)).standard_normal(z.shape)
        out.append(np.asarray(E.sklearn_embed(method, z, int(seed), **opts), dtype=np.float32).reshape(-1))
    return np.stack(out)


def _fingerprint(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(a.tobytes() + str(a.shape).encode() + str(a.dtype).encode()).hexdigest()


def _key_fingerprint(key: jax.Array | None) -> str | None:
    return None if key is None else _fingerprint(np.asarray(jax.random.key_data(key)))


def _digest(theta: np.ndarray) -> np.ndarray:
    return np.frombuffer(hashlib.sha256(np.ascontiguousarray(theta).tobytes()).digest(), dtype=np.uint8)


def _load_chunk(path: str, start: int, stop: int, row_dim: int) -> np.ndarray | None:
    try:
        with np.load(path) as f:
            theta = np.array(f["theta"])
            ok = (
                int(f["start"]) == start
                and int(f["stop"]) == stop
                and theta.shape == (stop - start, row_dim)
                and np.array_equal(np.array(f["digest"]), _digest(theta))
            )
    except Exception:  # noqa: BLE001 - any unreadable chunk is recomputed
        return None
    return theta if ok else None


def shadow_embeddings(
    method: str,
    known: Any,
    candidates: Any,
    key: jax.Array,
    *,
    seed_policy: str = "fresh",
    index_offset: int = 0,
    target_row: int = 0,
    data_scale: float = 1.0,
    noise_sigma: float = 0.0,
    noise_key: jax.Array | None = None,
    method_opts: dict | None = None,
    store_dir: str | None = None,
    chunk_size: int = 128,
    n_jobs: int = 1,
    progress: bool = True,
) -> np.ndarray:
    """Embeds ``D- u {x'_j}`` for every candidate (Lumbut & Ponnoprat, Alg. 1), optionally with input noise.

    Run ``j`` (global run index ``index_offset + j``) uses the method key
    ``run_key(key, seed_policy, index_offset + j)`` and, when ``noise_sigma > 0``, input noise
    ``N(0, noise_sigma^2)`` added to every row of the scaled dataset (Sec. 6 defence) drawn from
    ``fold_in(noise_key, index_offset + j)``. Results do not depend on ``chunk_size``, ``n_jobs`` or resume
    point. Give the train / validation / test candidate sets disjoint ``index_offset`` ranges so that under
    the ``"fresh"`` policy every run has its own randomness.

    Args:
        method: one of ``METHODS``.
        known: the known members D- ``[n-1, d]`` (images are flattened).
        candidates: ``[m, d]`` public points x'_j (or the victim's targets).
        key: typed key of the method's randomness (shadows: the adversary's; victim: the curator's).
        seed_policy: ``"known"`` or ``"fresh"`` (see :func:`run_key`).
        index_offset: global index of the first run.
        target_row: row of the candidate in each embedded dataset (0 in the paper's code).
        data_scale: the data are multiplied by this before noise and embedding (255 reproduces the
            reference implementation, which embedded raw 8-bit MNIST pixels).
        noise_sigma: standard deviation of the additive Gaussian input noise, in units of the scaled data.
        noise_key: typed key of the noise (required when ``noise_sigma > 0``).
        method_opts: options passed to the method (see :func:`embed`).
        store_dir: directory for resumable chunk storage (None: in memory only).
        chunk_size: runs per chunk (and per worker task).
        n_jobs: joblib worker processes for the scikit-learn / umap methods.
        progress: show a tqdm progress bar.

    Returns:
        ``[m, 2n]`` float32 array; row ``j`` is the flattened embedding of run ``j`` (row-major, so the
        candidate's two coordinates are entries ``2*target_row`` and ``2*target_row + 1``).

    Raises:
        ValueError: for invalid arguments, or when ``store_dir`` holds a different configuration.

    Example:
        >>> import jax, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> known, cands = rng.random((9, 16)), rng.random((4, 16))
        >>> shadow_embeddings("pca", known, cands, jax.random.key(0), progress=False).shape
        (4, 20)
    """
    if method not in E.METHODS:
        raise ValueError(f"method must be one of {E.METHODS}, got {method!r}")
    if seed_policy not in E.SEED_POLICIES:
        raise ValueError(f"seed_policy must be one of {E.SEED_POLICIES}, got {seed_policy!r}")
    known = np.asarray(known, dtype=np.float32)
    candidates = np.asarray(candidates, dtype=np.float32)
    known = known.reshape(known.shape[0], -1)
    candidates = candidates.reshape(candidates.shape[0], -1)
    if known.shape[0] < 2 or known.shape[1] != candidates.shape[1]:
        raise ValueError(f"known must be [n-1 >= 2, d] matching candidates [m, d]; got {known.shape}, {candidates.shape}")
    n = known.shape[0] + 1
    if not 0 <= target_row < n:
        raise ValueError(f"target_row must be in [0, {n - 1}], got {target_row}")
    if index_offset < 0:
        raise ValueError(f"index_offset must be >= 0, got {index_offset}")
    if chunk_size < 1 or n_jobs < 1:
        raise ValueError(f"chunk_size and n_jobs must be >= 1, got {chunk_size}, {n_jobs}")
    if noise_sigma < 0:
        raise ValueError(f"noise_sigma must be >= 0, got {noise_sigma}")
    if noise_sigma > 0 and noise_key is None:
        raise ValueError("noise_key is required when noise_sigma > 0")
    if data_scale <= 0:
        raise ValueError(f"data_scale must be > 0, got {data_scale}")
    opts = dict(method_opts or {})
    m = candidates.shape[0]
    row_dim = 2 * n
    starts = list(range(0, m, chunk_size))
    bounds = [(s, min(s + chunk_size, m)) for s in starts]

    config = {
        "version": _STORE_VERSION,
        "method": method,
        "opts": opts,
        "seed_policy": seed_policy,
        "index_offset": int(index_offset),
        "target_row": int(target_row),
        "data_scale": float(data_scale),
        "noise_sigma": float(noise_sigma),
        "key": _key_fingerprint(key),
        "noise_key": _key_fingerprint(noise_key) if noise_sigma > 0 else None,
        "known": _fingerprint(known),
        "candidates": _fingerprint(candidates),
        "chunk_size": int(chunk_size),
    }
    config_hash = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()
    results: dict[int, np.ndarray] = {}
    if store_dir is not None:
        os.makedirs(store_dir, exist_ok=True)
        manifest_path = os.path.join(store_dir, "manifest.json")
        if os.path.exists(manifest_path):
            with open(manifest_path) as f:
                manifest = json.load(f)
            if manifest.get("config_hash") != config_hash:
                raise ValueError(
                    f"store_dir {store_dir!r} holds shadow embeddings of a different configuration "
                    f"(hash {manifest.get('config_hash')!r} != {config_hash!r}); use a new directory"
                )
        else:
            atomic_write_json(
                manifest_path,
                {"config_hash": config_hash, "config": config, "m": m, "row_dim": row_dim, "n_chunks": len(bounds)},
            )
        for c, (s, e) in enumerate(bounds):
            theta = _load_chunk(os.path.join(store_dir, f"chunk_{c:05d}.npz"), s, e, row_dim)
            if theta is not None:
                results[c] = theta
    todo = [c for c in range(len(bounds)) if c not in results]

    def _save(c: int, theta: np.ndarray) -> None:
        results[c] = theta
        if store_dir is not None:
            s, e = bounds[c]
            atomic_save_npz(
                os.path.join(store_dir, f"chunk_{c:05d}.npz"), theta=theta, start=s, stop=e, digest=_digest(theta)
            )

    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), desc=f"shadow {method} n={n}", disable=not progress or not todo, leave=False)
    if method in E.JNP_METHODS:
        density = opts.get("density", "paper")
        fn = _jnp_chunk_fn(method, target_row, noise_sigma > 0, density, opts.get("solver", "auto"))
        nkey = noise_key if noise_key is not None else jax.random.key(0)  # unused when noise_sigma == 0
        known_j = jnp.asarray(known)
        for c in todo:
            s, e = bounds[c]
            idx = np.arange(index_offset + s, index_offset + e)
            keys = jax.vmap(lambda i: E.run_key(key, seed_policy, i))(jnp.asarray(idx, dtype=jnp.uint32))
            theta = fn(known_j, jnp.asarray(candidates[s:e]), keys, nkey, jnp.asarray(idx, jnp.uint32),
                       jnp.float32(data_scale), jnp.float32(noise_sigma))
            _save(c, np.asarray(theta, dtype=np.float32))
            bar.update(1)
    else:
        all_idx = np.arange(index_offset, index_offset + m)
        seeds = _run_seeds(key, seed_policy, all_idx)
        nseeds = _noise_seeds(noise_key, all_idx) if noise_sigma > 0 else np.zeros(m, np.int64)

        def task(c):
            s, e = bounds[c]
            return (c, (method, known, candidates[s:e], seeds[s:e], nseeds[s:e], target_row, float(data_scale),
                        float(noise_sigma), opts))

        if n_jobs == 1:
            for c in todo:
                _, args = task(c)
                _save(c, _sklearn_chunk(*args))
                bar.update(1)
        else:
            from joblib import Parallel, delayed

            tasks = [task(c) for c in todo]
            gen = Parallel(n_jobs=n_jobs, return_as="generator")(delayed(_sklearn_chunk)(*a) for _, a in tasks)
            for (c, _), theta in zip(tasks, gen):
                _save(c, theta)
                bar.update(1)
    bar.close()
    return np.concatenate([results[c] for c in range(len(bounds))], axis=0) if bounds else np.zeros((0, row_dim), np.float32)
