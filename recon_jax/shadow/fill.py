"""Computing a shadow set chunk by chunk into a resumable store: :func:`fill_store`.

The protocol over a :class:`~recon_jax.shadow.store.ShadowStore` (whose on-disk format, lock, checksums and
consolidation :mod:`recon_jax.shadow.store` describes): take the writer lock, open or create the manifest of the
configuration, compute only the row ranges no valid chunk covers, write each chunk atomically, consolidate, and
load the finished store. The shadow-model engine and the dimensionality-reduction attack's shadow embeddings both
run it; any generator of fixed-shape rows can.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable

import numpy as np
from tqdm.auto import tqdm

from recon_jax.models.flatten import Layout
from recon_jax.shadow.store import ShadowSet, ShadowStore

__all__ = ["fill_store"]


def fill_store(directory: str | os.PathLike | None, config: dict, count: int,
               output_specs: dict[str, tuple[tuple, str]],
               compute: Callable[[list[tuple[int, int]]], Iterable[dict[str, np.ndarray]]], *, chunk_size: int,
               layout: Layout | None = None, mmap: bool = True, progress: bool = False,
               desc: str = "rows", code: dict | None = None) -> ShadowSet:
    """Computes ``count`` rows chunk by chunk and returns them; with ``directory``, resumably through a store.

    ``compute(pieces)`` gets the row ranges ``[(start, stop), ...]`` still to do, in order, and yields one dict
    ``{output: [stop - start, *shape]}`` per range in the same order (a generator, so each chunk is written as
    soon as it is done). Rows must not depend on how they are chunked.

    With ``directory`` (see :mod:`recon_jax.shadow.store`): takes the writer lock, opens or creates the manifest of
    ``config`` (:class:`~recon_jax.shadow.store.ShadowStoreMismatchError` if the directory holds another configuration,
    the same one with another ``count``, ``output_specs`` or ``layout``, or rows made by other code than ``code``),
    computes only
    the ranges no valid chunk covers (chunks of at most ``chunk_size`` rows), writes each chunk atomically,
    consolidates and returns the loaded store (memory-mapped if ``mmap``). A complete store is loaded (and its
    checksums verified) without computing anything. Without ``directory`` everything stays in memory.

    Args:
      directory: the store directory, or None.
      config: JSON-compatible description of everything that determines the rows (:func:`~recon_jax.shadow.store.config_hash`).
      count: number of rows (>= 1).
      output_specs: output name -> (per-row shape, dtype string).
      compute: see above.
      chunk_size: rows per chunk (>= 1).
      layout: parameter layout recorded with model rows (None otherwise).
      mmap: memory-map the loaded store's arrays.
      progress: show a tqdm bar over rows.
      desc: the bar's label.
      code: the :func:`~recon_jax.io.code_record` of the code that computes the rows, recorded in the store and
        compared on resume (default: :func:`~recon_jax.io.library_code`, all of recon_jax but the layers above
        the stores).

    Returns:
      A :class:`ShadowSet` with one ``[count, *shape]`` array per output.

    Raises:
      ValueError: for a bad ``count`` or ``chunk_size``, or a chunk of the wrong shape or dtype;
      ShadowStoreMismatchError, ShadowStoreCorruptError: see :class:`~recon_jax.shadow.store.ShadowStore`.

    >>> import numpy as np, tempfile
    >>> rows = lambda pieces: ({"x": np.arange(s, e, dtype=np.float32)[:, None]} for s, e in pieces)
    >>> d = tempfile.mkdtemp() + "/store"
    >>> fill_store(d, {"what": "arange"}, 5, {"x": ((1,), "float32")}, rows, chunk_size=2)["x"].ravel().tolist()
    [0.0, 1.0, 2.0, 3.0, 4.0]
    """
    if not (isinstance(count, (int, np.integer)) and count >= 1):
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    if not (isinstance(chunk_size, (int, np.integer)) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    specs = {k: (tuple(int(d) for d in s), np.dtype(t).str) for k, (s, t) in output_specs.items()}

    def checked(start, stop, arrays):
        for name, (shape, dtype) in specs.items():
            a = arrays.get(name)
            if a is None or tuple(a.shape) != (stop - start, *shape) or np.dtype(a.dtype).str != dtype:
                got = None if a is None else (tuple(a.shape), np.dtype(a.dtype).str)
                raise ValueError(f"compute gave output {name!r} as {got} for rows [{start}, {stop}), "
                                 f"expected ({(stop - start, *shape)}, {dtype!r})")
        return {k: np.asarray(arrays[k]) for k in specs}

    def run(ranges, write):
        pieces = [(s, min(s + chunk_size, e)) for a, e in ranges for s in range(a, e, chunk_size)]
        bar = tqdm(total=count, initial=count - sum(e - s for s, e in pieces), desc=desc, unit="row",
                   disable=not progress or not pieces, leave=False)
        done = 0
        for (start, stop), arrays in zip(pieces, compute(pieces)):
            write(start, stop, checked(start, stop, arrays))
            bar.update(stop - start)
            done += 1
        bar.close()
        if done != len(pieces):
            raise ValueError(f"compute yielded {done} chunks for {len(pieces)} row ranges")

    if directory is None:
        arrays = {k: np.empty((count, *s), d) for k, (s, d) in specs.items()}

        def keep(start, stop, chunk):
            for k, v in chunk.items():
                arrays[k][start:stop] = v

        run([(0, count)], keep)
        return ShadowSet(arrays=arrays, layout=layout, count=int(count), config=config)
    store = ShadowStore(directory)
    store.acquire()  # one writer at a time: waits while another process writes this store
    try:
        manifest = store.open(config, count, layout, {k: (s, d) for k, (s, d) in specs.items()}, code=code)
        store.clean_leftovers(manifest)
        if not manifest.get("complete"):
            run(store.missing_ranges(manifest), store.write_chunk)
            store.consolidate(manifest)
    finally:
        store.release()
    return store.load(mmap=mmap)
