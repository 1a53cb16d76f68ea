"""Per-epoch checkpoints of :func:`recon_jax.attacks.reconn.train_reconstructor`, keyed by a hash of their configuration."""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.io import array_digest, atomic_save_npz, stable_hash

__all__ = ["EpochCheckpoint", "tree_digest"]


def tree_digest(tree) -> str:
    """A stable digest of the arrays of a pytree (leaf order and contents)."""
    leaves = jax.tree_util.tree_leaves(tree)
    return stable_hash([array_digest(np.atleast_1d(np.asarray(x))) for x in leaves])


class EpochCheckpoint:
    """Per-epoch training state in ``directory/reconstructor-<hash>.npz``, written atomically.

    The file name is a hash of everything that determines the state after epoch ``e`` (model, optimiser
    settings, key, data digests, batch size, the ``min_delta`` that picks the best epoch, ...), not of ``epochs`` or
    ``patience``: a run can be resumed with
    more epochs, and a different configuration never picks up another's state. A state saved past the epoch where
    a later call stops is not used by that call (:func:`recon_jax.attacks.reconn.train_reconstructor` starts over).
    """

    def __init__(self, directory: str, key_description: dict):
        digest = stable_hash(key_description)
        self.path = os.path.join(os.fspath(directory), f"reconstructor-{digest[:24]}.npz")
        self.description = key_description

    def load(self, template_state, template_best):
        if not os.path.exists(self.path):
            return None
        with np.load(self.path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        state_leaves, state_def = jax.tree_util.tree_flatten(template_state)
        best_leaves, best_def = jax.tree_util.tree_flatten(template_best)
        got_state = [data[f"state_{i}"] for i in range(len(state_leaves))]
        got_best = [data[f"best_{i}"] for i in range(len(best_leaves))]
        for want, got in zip(state_leaves + best_leaves, got_state + got_best):
            if np.shape(want) != got.shape:
                raise ValueError(f"checkpoint {self.path} does not match the model (shape {got.shape} != "
                                 f"{np.shape(want)}); delete it to start over")
        eval_mse = list(data["eval_mse"])
        # Checkpoints written before the objective was recorded: NaN for those epochs (never "best" under
        # monitor="loss", which is part of the checkpoint name, so such a run never resumes from them).
        eval_loss = list(data["eval_loss"]) if "eval_loss" in data else [math.nan] * len(eval_mse)
        return {"state": jax.tree_util.tree_unflatten(state_def, [jnp.asarray(x) for x in got_state]),
                "best": jax.tree_util.tree_unflatten(best_def, [jnp.asarray(x) for x in got_best]),
                "losses": list(data["losses"]), "eval_mse": eval_mse, "eval_loss": eval_loss,
                "best_epoch": int(data["best_epoch"])}

    def save(self, state, best, losses, eval_mse, eval_loss, best_epoch):
        arrays = {f"state_{i}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(state))}
        arrays.update({f"best_{i}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(best))})
        atomic_save_npz(self.path, losses=np.asarray(losses, np.float64), eval_mse=np.asarray(eval_mse, np.float64),
                        eval_loss=np.asarray(eval_loss, np.float64), best_epoch=np.asarray(best_epoch), **arrays)
