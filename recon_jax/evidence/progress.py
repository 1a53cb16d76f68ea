"""Progress display for a report's steps that have nothing to count (one compiled call, a root search, an
accountant): a tqdm line with the step's label and the time it has taken so far, refreshed every second, so that
no step over a few seconds runs silently. Steps that train or iterate show their own bars (the shadow engine's
models, the reconstructor's epochs).
"""

from __future__ import annotations

import contextlib
import threading

from tqdm.auto import tqdm

__all__ = ["step"]


@contextlib.contextmanager
def step(desc: str, *, enabled: bool = True, interval: float = 1.0):
    """Shows ``desc`` and the elapsed time while the ``with`` block runs (tqdm; ``TQDM_DISABLE=1`` hides it).

    Args:
      desc: what the step trains or computes, e.g. ``"prior-aware game (200 trials x 2 noise levels)"``.
      enabled: False shows nothing.
      interval: seconds between refreshes.

    >>> with step("adding", enabled=False):
    ...     total = 1 + 1
    >>> total
    2
    """
    off = {} if enabled else {"disable": True}  # left unset when enabled, so that TQDM_DISABLE=1 applies
    bar = tqdm(total=None, desc=desc, bar_format="{desc}: {elapsed}", **off)
    stop = threading.Event()

    def tick():
        while not stop.wait(interval):
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    if not bar.disable:
        ticker.start()
    try:
        yield bar
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        bar.close()
