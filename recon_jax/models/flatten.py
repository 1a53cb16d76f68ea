"""Flattening parameter pytrees with a recorded layout (path, shape, offset), and layer-subset selection.

Flat vectors follow ``jax.flatten_util.ravel_pytree`` order (the pytree's leaf order). The :class:`Layout`
records, for every leaf, its ``/``-joined path (``"Dense_0/kernel"`` for flax, ``"mlp/~/linear_0/w"`` for
Haiku), shape and offset, so flat vectors stored on disk stay interpretable, can be unflattened without the
original pytree, and can be restricted to a subset of layers (Balle et al. Appendix F: the attack that only
sees the released model's second layer).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

__all__ = ["LayoutEntry", "Layout", "layout_of", "ravel", "unravel", "select_indices", "select"]


@dataclasses.dataclass(frozen=True)
class LayoutEntry:
    """One leaf of a flattened pytree: ``flat[offset : offset + size].reshape(shape)``.

    ``path`` is the ``/``-joined pytree path, the leaf's name for matching (:func:`select_indices`) and display;
    ``keys`` is the path itself, one string per level, which :func:`unravel` rebuilds the tree from. The two agree
    as ``path == "/".join(keys)``; ``keys`` defaults to ``path.split("/")``, which is exact unless a key contains
    ``/`` (Haiku's module names, ``"mlp/~/linear_0"``). Two leaves can share a ``path`` (``{"a/b": x, "a": {"b":
    y}}``) but not ``keys``.

    Raises:
      ValueError: if ``keys`` is not a tuple of strings that ``/``-joins to ``path``.
    """

    path: str
    shape: tuple[int, ...]
    offset: int
    size: int
    dtype: str
    keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)

    def __post_init__(self):
        keys = tuple(self.keys) if self.keys else tuple(self.path.split("/"))
        if not all(isinstance(k, str) for k in keys) or "/".join(keys) != self.path:
            raise ValueError(f"keys must be strings that '/'-join to the path {self.path!r}, got {self.keys!r}")
        object.__setattr__(self, "keys", keys)


@dataclasses.dataclass(frozen=True)
class Layout:
    """The layout of a flattened parameter pytree (hashable, JSON-serialisable).

    Attributes:
      entries: one :class:`LayoutEntry` per leaf, in flat order.
    """

    entries: tuple[LayoutEntry, ...]

    @property
    def size(self) -> int:
        """Total number of scalars."""
        return sum(e.size for e in self.entries)

    @property
    def paths(self) -> tuple[str, ...]:
        """Leaf paths in flat order."""
        return tuple(e.path for e in self.entries)

    def to_json(self) -> list[dict[str, Any]]:
        """A JSON-compatible description (used in the shadow store's manifest).

        An entry's ``keys`` are written only where splitting its path at ``/`` would not give them back (a key
        contains ``/``, as Haiku's module names do), so the description of a layout without such keys (any flax
        model's) is the same as before ``keys`` existed.
        """
        out = []
        for e in self.entries:
            d = {"path": e.path, "shape": list(e.shape), "offset": e.offset, "size": e.size, "dtype": e.dtype}
            if e.keys != tuple(e.path.split("/")):
                d["keys"] = list(e.keys)
            out.append(d)
        return out

    @classmethod
    def from_json(cls, obj: Sequence[dict[str, Any]]) -> "Layout":
        """Inverse of :meth:`to_json` (an entry without ``keys`` gets its path split at ``/``)."""
        return cls(tuple(LayoutEntry(path=d["path"], shape=tuple(d["shape"]), offset=int(d["offset"]),
                                     size=int(d["size"]), dtype=str(d["dtype"]), keys=tuple(d.get("keys", ())))
                         for d in obj))


def _key_str(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def layout_of(params) -> Layout:
    """The :class:`Layout` of a parameter pytree (no data is copied).

    >>> layout_of({"b": jnp.zeros(2), "a": {"w": jnp.zeros((3, 2))}}).entries[0]
    LayoutEntry(path='a/w', shape=(3, 2), offset=0, size=6, dtype='float32')
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(params)
    entries, offset = [], 0
    for path, leaf in leaves:
        shape = tuple(int(d) for d in np.shape(leaf))
        size = int(np.prod(shape, dtype=np.int64))
        keys = tuple(_key_str(k) for k in path)
        entries.append(LayoutEntry("/".join(keys), shape, offset, size, str(jnp.result_type(leaf)), keys=keys))
        offset += size
    return Layout(tuple(entries))


def ravel(params) -> tuple[jax.Array, Layout]:
    """Flattens a parameter pytree to one vector and returns it with its :class:`Layout`.

    Args:
      params: a pytree of arrays (all of one dtype).

    Returns:
      ``(flat, layout)`` with ``flat`` equal to ``jax.flatten_util.ravel_pytree(params)[0]``.

    >>> flat, layout = ravel({"w": jnp.ones((2, 2)), "b": jnp.zeros(2)})
    >>> flat.tolist(), [(e.path, e.offset) for e in layout.entries]
    ([0.0, 0.0, 1.0, 1.0, 1.0, 1.0], [('b', 0), ('w', 2)])
    """
    flat, _ = ravel_pytree(params)
    return flat, layout_of(params)


def unravel(flat: jax.Array, layout: Layout):
    """Rebuilds the nested-dict parameter pytree of a flat vector (last axis) from its :class:`Layout`.

    Leading axes of ``flat`` are kept (``[K, P]`` gives leaves of shape ``[K, *shape]``). Works for the
    dict-of-dicts parameters of flax and Haiku: the tree is rebuilt from each entry's ``keys``, so Haiku's
    ``"mlp/~/linear_0"`` stays one key.

    Raises:
      ValueError: if the last axis of ``flat`` is not ``layout.size``, or two entries' keys collide (one leaf's
        keys equal or extend another's, which no pytree's layout has).

    >>> flat, layout = ravel({"a": {"w": jnp.arange(4.0).reshape(2, 2)}, "b": jnp.zeros(1)})
    >>> unravel(flat, layout)["a"]["w"].tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    """
    if flat.shape[-1] != layout.size:
        raise ValueError(f"flat must have last dimension {layout.size} (the layout size), got {flat.shape}")
    lead = flat.shape[:-1]
    out: dict = {}
    for e in layout.entries:
        node = out
        for k in e.keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ValueError(f"layout entries collide: {e.keys!r} passes through a leaf")
        if e.keys[-1] in node:
            raise ValueError(f"layout entries collide: {e.keys!r} is already a leaf or a subtree")
        node[e.keys[-1]] = flat[..., e.offset:e.offset + e.size].reshape(lead + e.shape)
    return out


def select_indices(layout: Layout, include: str | Iterable[str]) -> np.ndarray:
    """Flat indices of the leaves whose path matches any of ``include`` (prefixes or glob patterns).

    A pattern matches a leaf if it equals the path, is a ``/``-prefix of it (``"Dense_1"`` selects
    ``Dense_1/bias`` and ``Dense_1/kernel``; Haiku's ``"mlp/~/linear_0"`` selects ``mlp/~/linear_0/b`` and
    ``mlp/~/linear_0/w``) or matches it as an ``fnmatch`` glob. Matching is on the joined path string, so a
    pattern matches every leaf of that path (both of ``{"a/b": x, "a": {"b": y}}`` for ``"a/b"``).

    Raises:
      ValueError: if a pattern matches no leaf.

    >>> from recon_jax.models.zoo import balle_mnist_mlp
    >>> params = balle_mnist_mlp().init(jax.random.key(0), jnp.zeros((1, 784)))["params"]
    >>> select_indices(layout_of(params), "Dense_1").shape   # Balle et al. App. F: second layer only
    (110,)
    """
    patterns = [include] if isinstance(include, str) else list(include)
    if not patterns:
        raise ValueError("include must name at least one layer path or pattern")
    chosen = []
    for pat in patterns:
        hits = [e for e in layout.entries
                if e.path == pat or e.path.startswith(pat.rstrip("/") + "/") or fnmatch.fnmatchcase(e.path, pat)]
        if not hits:
            raise ValueError(f"include pattern {pat!r} matches no parameter; paths are {list(layout.paths)}")
        chosen.extend(hits)
    seen, idx = set(), []
    for e in sorted(chosen, key=lambda e: e.offset):
        if e.keys not in seen:  # a leaf matched by several patterns is taken once (its keys, unlike paths and the
            seen.add(e.keys)    # offsets of zero-size leaves, are unique)
            idx.append(np.arange(e.offset, e.offset + e.size))
    return np.concatenate(idx)


def select(flat, layout: Layout, include: str | Iterable[str]):
    """The columns (last axis) of ``flat`` belonging to the layers matched by ``include``.

    Works on NumPy arrays (including memory-mapped shadow sets) and on jax arrays.

    >>> flat, layout = ravel({"l1": {"w": jnp.ones(3)}, "l2": {"w": jnp.zeros(2)}})
    >>> select(flat, layout, "l2").tolist()
    [0.0, 0.0]
    """
    idx = select_indices(layout, include)
    return flat[..., idx]
