"""Training-algorithm descriptions: frozen, hashable dataclasses (static arguments of jitted trainers).

:class:`Algorithm` covers every released-model algorithm of the papers:

- full-batch gradient descent with momentum (Balle et al. Table V: lr 0.2, momentum 0.9, 100 epochs),
- minibatch SGD whose shuffling seed is known to the adversary (``shuffle="known"``) or fresh per model
  (``shuffle="fresh"``) (Balle et al. Sec. VI-B d), with shuffled fixed-size batches (``sampling="shuffle"``) or
  Poisson sampling (``sampling="poisson"``: each point joins each step's batch independently with probability
  ``q = batch_size / n``; the sampling DP-SGD accountants assume),
- fixed (adversary-known) or random initialisation (``init="fixed" | "random"``, Sec. VI-B e),
- any optax optimizer (``optimizer=``; give ``optimizer_id`` so stores can hash the configuration),
- DP-GD / DP-SGD: per-example clipping (``clip_norm``, ``clipping="flat" | "per_layer"``) and a noise
  ``mechanism`` (:class:`recon_jax.mechanisms.GaussianMechanism`, the VMF mechanism, or ``NoNoise``).

The factories :func:`full_batch_gd`, :func:`minibatch_sgd`, :func:`dp_gd` and :func:`dp_sgd` build the usual
cases.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import optax

from recon_jax.io import callable_identity
from recon_jax.mechanisms.base import GaussianMechanism, Mechanism, NoNoise
from recon_jax.models.losses import softmax_cross_entropy
#: Per-example clipping: the whole gradient to C (``"flat"``) or each of L layers to C / sqrt(L) (``"per_layer"``).
CLIPPING_MODES = ("flat", "per_layer")
#: How clipped per-example gradients are computed (:func:`recon_jax.training.use_ghost_clipping`).
PER_EXAMPLE_MODES = ("auto", "ghost", "vmap")
SAMPLING_MODES = ("shuffle", "poisson")
POISSON_OVERFLOW = 1e-9  # default max_batch_size: P[Binomial(n, q) > max_batch_size] <= this, per step

__all__ = ["Algorithm", "CLIPPING_MODES", "PER_EXAMPLE_MODES", "SAMPLING_MODES", "full_batch_gd", "minibatch_sgd", "dp_gd", "dp_sgd"]


def _is_count(value) -> bool:
    """A Python int that is not a bool (``True`` is an int, and was taken as 1 epoch or a batch of 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Algorithm:
    """A training algorithm for one model (see the module docstring).

    Attributes:
      epochs: number of passes over the data (>= 1).
      learning_rate: step size of the default optimizer (SGD with momentum).
      momentum: momentum of the default optimizer (0 for plain GD).
      batch_size: minibatch size, or ``None`` for full batch. With ``sampling="shuffle"`` batches are consecutive
        slices of a random permutation of the n + 1 training points (fixed set + target), the remainder dropped;
        with ``sampling="poisson"`` it is the expected batch size B (``q = B / (n + 1)``).
      sampling: ``"shuffle"`` (fixed-size batches from a permutation per epoch: NOT what the Poisson-subsampling
        analyses of :mod:`recon_jax.accounting` assume, so accounting them with ``q = B / n`` is a heuristic) or
        ``"poisson"`` (every step, each point is in the batch independently with probability ``q``; ``(n + 1) // B``
        steps per epoch; the clipped sum, plus the mechanism's noise, is divided by the expected size B, never by
        the realised one, exactly the subsampled mechanism those accountants analyse). Under ``jit`` the batch is
        padded to ``max_batch_size`` rows; padded rows have weight 0 and contribute nothing.
      max_batch_size: Poisson only: the fixed number of rows a step computes. If more points are sampled, a
        uniformly random ``max_batch_size`` of them are kept (the truncated mechanism that dp_accounting's
        ``TruncatedSubsampledGaussianDpEvent`` accounts). Default ``None``: the smallest size with
        ``P[Binomial(n + 1, q) > size] <= 1e-9`` (:meth:`poisson_max_batch`).
      shuffle: ``"known"`` (the permutation / Poisson draws derive from a shared ``shuffle_key``, identical for
        every model) or ``"fresh"`` (derive from the model's own key).
      init: ``"fixed"`` (caller passes ``init_params``; Balle et al.'s default) or ``"random"`` (each model
        draws its own initialisation from its key).
      optimizer: an optax transformation replacing the default SGD(learning_rate, momentum).
      optimizer_id: a stable description of ``optimizer`` (required with ``optimizer`` for store hashing).
      clip_norm: per-example clip norm C for DP-GD / DP-SGD; ``None`` trains without clipping.
      clipping: ``"flat"`` or ``"per_layer"``.
      mechanism: noise mechanism applied to the clipped sum (``None`` with ``clip_norm``: no noise).
      microbatch_size: with clipping, compute per-example gradients this many at a time (bounds memory;
        the ghost path needs no per-example gradients and ignores it).
      per_example: how clipped per-example gradients are computed: ``"auto"`` (ghost clipping,
        :mod:`recon_jax.training.ghost`, when the clipping is flat and every parameter is in a dense layer;
        otherwise ``vmap(grad)``), ``"ghost"`` (required; ``ValueError`` if the model does not allow it) or
        ``"vmap"`` (always materialise per-example gradients). Both give the same result up to rounding.
      loss_fn: per-example loss ``(logits [N, C], labels [N]) -> [N]``.
    """

    epochs: int = 100
    learning_rate: float = 0.2
    momentum: float = 0.9
    batch_size: int | None = None
    sampling: str = "shuffle"
    max_batch_size: int | None = None
    shuffle: str = "known"
    init: str = "fixed"
    optimizer: Any = None
    optimizer_id: str | None = None
    clip_norm: float | None = None
    clipping: str = "flat"
    mechanism: Mechanism | None = None
    microbatch_size: int | None = None
    per_example: str = "auto"
    loss_fn: Callable = softmax_cross_entropy

    def __post_init__(self):
        if not (_is_count(self.epochs) and self.epochs >= 1):
            raise ValueError(f"epochs must be an integer >= 1, got {self.epochs!r}")
        if self.optimizer is None:
            if not 0 < self.learning_rate < math.inf:
                raise ValueError(f"learning_rate must be finite and > 0, got {self.learning_rate}")
            if not 0 <= self.momentum < 1:
                raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.batch_size is not None and not (_is_count(self.batch_size) and self.batch_size >= 1):
            raise ValueError(f"batch_size must be None (full batch) or an integer >= 1, got {self.batch_size!r}")
        if self.sampling not in SAMPLING_MODES:
            raise ValueError(f"sampling must be one of {SAMPLING_MODES}, got {self.sampling!r}")
        if self.sampling == "poisson" and self.batch_size is None:
            raise ValueError("sampling='poisson' needs batch_size (the expected batch size)")
        if self.max_batch_size is not None:
            if self.sampling != "poisson":
                raise ValueError("max_batch_size applies to sampling='poisson' only")
            if not (_is_count(self.max_batch_size) and self.max_batch_size >= 1):
                raise ValueError(f"max_batch_size must be None or an integer >= 1, got {self.max_batch_size!r}")
        if self.shuffle not in ("known", "fresh"):
            raise ValueError(f"shuffle must be 'known' or 'fresh', got {self.shuffle!r}")
        if self.init not in ("fixed", "random"):
            raise ValueError(f"init must be 'fixed' or 'random', got {self.init!r}")
        if self.clip_norm is not None and not 0 < self.clip_norm < math.inf:
            raise ValueError(f"clip_norm must be None or finite and > 0, got {self.clip_norm}")
        if self.clipping not in CLIPPING_MODES:
            raise ValueError(f"clipping must be one of {CLIPPING_MODES}, got {self.clipping!r}")
        if self.mechanism is not None and self.clip_norm is None:
            raise ValueError("mechanism requires clip_norm (DP-GD / DP-SGD clip before adding noise)")
        if self.microbatch_size is not None and not (
                _is_count(self.microbatch_size) and self.microbatch_size >= 1):
            raise ValueError(f"microbatch_size must be None or an integer >= 1, got {self.microbatch_size!r}")
        if self.per_example not in PER_EXAMPLE_MODES:
            raise ValueError(f"per_example must be one of {PER_EXAMPLE_MODES}, got {self.per_example!r}")
        if self.per_example == "ghost" and self.clipping != "flat":
            raise ValueError("per_example='ghost' requires clipping='flat'")

    @property
    def private(self) -> bool:
        """Whether per-example clipping (DP-GD / DP-SGD) is on."""
        return self.clip_norm is not None

    @property
    def poisson(self) -> bool:
        """Whether batches are Poisson-sampled."""
        return self.sampling == "poisson"

    def poisson_max_batch(self, n_total: int) -> int:
        """Rows per Poisson step for ``n_total`` training points: ``max_batch_size``, or the smallest m with
        ``P[Binomial(n_total, B / n_total) > m] <= 1e-9``, at most ``n_total``.

        >>> Algorithm(batch_size=100, sampling="poisson").poisson_max_batch(10_000)
        165
        """
        import scipy.stats

        if not self.poisson:
            raise ValueError("poisson_max_batch applies to sampling='poisson' only")
        if self.max_batch_size is not None:
            return min(self.max_batch_size, n_total)
        q = min(self.batch_size / n_total, 1.0)
        return int(min(n_total, scipy.stats.binom.isf(POISSON_OVERFLOW, n_total, q)))

    def make_optimizer(self) -> optax.GradientTransformation:
        """The optax transformation used for updates."""
        if self.optimizer is not None:
            return self.optimizer
        return optax.sgd(self.learning_rate, momentum=self.momentum if self.momentum > 0 else None)

    def describe(self) -> dict:
        """A JSON-compatible description (the shadow store hashes it).

        Raises:
          ValueError: if a custom ``optimizer`` has no ``optimizer_id``.
        """
        if self.optimizer is not None and self.optimizer_id is None:
            raise ValueError("optimizer_id is required with a custom optimizer (it names the optimizer in hashes)")
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "optimizer":
                continue  # named by optimizer_id
            if f.name == "mechanism" and v is not None:
                v = {"type": type(v).__name__,
                     **(dataclasses.asdict(v) if dataclasses.is_dataclass(v) else {"repr": repr(v)})}
            elif callable(v):  # e.g. loss_fn: its name and a digest of its code and captured values
                v = callable_identity(v)
            out[f.name] = v
        return out


def full_batch_gd(learning_rate: float = 0.2, momentum: float = 0.9, epochs: int = 100,
                  init: str = "fixed", **kwargs) -> Algorithm:
    """Full-batch gradient descent with momentum: Balle et al.'s released-model algorithm (Table V).

    >>> full_batch_gd().batch_size is None
    True
    """
    return Algorithm(learning_rate=learning_rate, momentum=momentum, epochs=epochs, init=init, **kwargs)


def minibatch_sgd(batch_size: int, learning_rate: float = 0.2, momentum: float = 0.9, epochs: int = 100,
                  shuffle: str = "known", init: str = "fixed", **kwargs) -> Algorithm:
    """Minibatch SGD (momentum) with a known (shared) or fresh (per-model) shuffling seed (Balle et al. Fig. 7).

    >>> minibatch_sgd(128, shuffle="fresh").shuffle
    'fresh'
    """
    return Algorithm(batch_size=batch_size, learning_rate=learning_rate, momentum=momentum, epochs=epochs,
                     shuffle=shuffle, init=init, **kwargs)


def dp_gd(clip_norm: float, noise_multiplier: float | None = None, mechanism: Mechanism | None = None,
          learning_rate: float = 0.2, momentum: float = 0.9, epochs: int = 100, **kwargs) -> Algorithm:
    """Full-batch DP gradient descent (Balle et al. Sec. VI-D): clip each per-example gradient, add noise.

    Give either ``noise_multiplier`` (Gaussian mechanism) or a ``mechanism``; neither means clipping only.

    >>> dp_gd(1.0, noise_multiplier=2.0).mechanism
    GaussianMechanism(noise_multiplier=2.0)
    """
    return Algorithm(learning_rate=learning_rate, momentum=momentum, epochs=epochs, clip_norm=clip_norm,
                     mechanism=_mechanism(noise_multiplier, mechanism), **kwargs)


def dp_sgd(batch_size: int, clip_norm: float, noise_multiplier: float | None = None,
           mechanism: Mechanism | None = None, learning_rate: float = 0.2, momentum: float = 0.0,
           epochs: int = 1, shuffle: str = "fresh", **kwargs) -> Algorithm:
    """Minibatch DP-SGD (Abadi et al.; Biswas et al. Alg. 1).

    Default: shuffled fixed-size batches (slices of a random permutation), which the Poisson-subsampling
    accountants do not cover; pass ``sampling="poisson"`` for the sampled mechanism they analyse (``q = B / n``,
    noisy sum divided by the expected batch size B).

    >>> dp_sgd(128, 1.0, noise_multiplier=1.0).batch_size
    128
    >>> dp_sgd(128, 1.0, noise_multiplier=1.0, sampling="poisson").poisson
    True
    """
    return Algorithm(batch_size=batch_size, learning_rate=learning_rate, momentum=momentum, epochs=epochs,
                     shuffle=shuffle, clip_norm=clip_norm, mechanism=_mechanism(noise_multiplier, mechanism),
                     **kwargs)


def _mechanism(noise_multiplier, mechanism):
    if noise_multiplier is not None and mechanism is not None:
        raise ValueError("give noise_multiplier or mechanism, not both")
    if noise_multiplier is not None:
        return GaussianMechanism(noise_multiplier=noise_multiplier)
    return mechanism if mechanism is not None else NoNoise()
