"""The data of one training step, as one pytree: :class:`Batch`.

The training step (:func:`recon_jax.training.make_train_step`) and the DP gradient
(:func:`recon_jax.training.privatized_loss_and_gradient`) take it; :func:`recon_jax.training.train` builds one per
step (full batch, shuffled minibatch or Poisson slots). The optional target term is one example kept apart from
the batch (its own loss and clipped-gradient term, never concatenated into ``x``), so that ``vmap`` over targets
keeps the batch's products unbatched.
"""

from __future__ import annotations

import flax.struct
import jax

__all__ = ["Batch"]


class Batch(flax.struct.PyTreeNode):
    """The data of one step.

    Attributes:
      x: inputs ``[B, ...]``.
      y: labels ``[B]``.
      weights: ``[B]`` example weights (0 drops a padded or unsampled row); ``None``: all 1.
      target_x: optional separate target term, one example ``[...]`` (its own loss term; ``None``: none).
      target_y: its label ``[]``.
      target_weight: its weight ``[]`` (``None``: 1; 0 keeps the slot but ignores it, the MIA "out" model). It
        weights the target's loss and gradient terms. The normaliser differs by training kind: *private* training
        (:func:`~recon_jax.training.privatized_loss_and_gradient`) counts the target slot 1 whatever its weight
        (a public ``n + 1``, so the "in" and "out" releases differ by the target's clipped gradient alone, the
        add/remove sensitivity C that the accountants assume); *non-private* training divides by the realised
        count ``sum_i w_i + target_weight`` (the "out" model is trained on D- alone with its own mean, as in
        Balle et al.'s non-private MIA, Fig. 11).
      x_sq_norms: optional ``[B]`` squared l2 norms of the flattened rows of ``x``; ghost clipping reuses them
        for the layer that reads ``x`` (:func:`~recon_jax.training.train` gathers them from norms of the fixed
        set computed once). ``None``: computed from ``x`` when needed.
      target_rows: optional ``[B]`` bool, the rows of ``x`` that hold the target slot (minibatch training gathers
        a drawn target into the batch, at weight ``target_weight``). Private training counts each such row 1 in
        its normaliser whatever its weight, as it counts the separate target term; non-private training ignores
        this (realised count). ``None``: no row is the target slot.
    """

    x: jax.Array
    y: jax.Array
    weights: jax.Array | None = None
    target_x: jax.Array | None = None
    target_y: jax.Array | None = None
    target_weight: jax.Array | None = None
    x_sq_norms: jax.Array | None = None
    target_rows: jax.Array | None = None

