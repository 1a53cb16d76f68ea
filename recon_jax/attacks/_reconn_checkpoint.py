"""Per-epoch checkpoints of :func:`recon_jax.attacks.reconn.train_reconstructor`, keyed by a hash of their
configuration, recording the code that saved them."""

from __future__ import annotations

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.io import (array_digest, atomic_save_npz, code_difference, library_code, resume_across_code_allowed,
                          stable_hash)
from recon_jax.models.adapters import ModelFns, model_identity

__all__ = ["CheckpointMismatchError", "EpochCheckpoint", "tree_digest", "module_program"]

_CODE = "__code__"  # member: JSON (uint8) of the code record (recon_jax.io.code_record) that saved the state


class CheckpointMismatchError(ValueError):
    """A reconstructor checkpoint does not fit the call that would resume it: another model's shapes, or saved by
    other code."""


def tree_digest(tree) -> str:
    """A stable digest of the arrays of a pytree (leaf order and contents)."""
    leaves = jax.tree_util.tree_leaves(tree)
    return stable_hash([array_digest(np.atleast_1d(np.asarray(x))) for x in leaves])


def module_program(module, example, **call_kwargs) -> dict | None:
    """What a flax module computes (:func:`recon_jax.models.model_identity` of its ``init`` and ``apply`` on one
    example): a checkpoint key part that, unlike ``repr(module)``, changes with the code of ``__call__``. None for
    no module."""
    if module is None:
        return None
    fns = ModelFns(init=lambda k, x: module.init(k, x, **call_kwargs),
                   apply=lambda p, x: module.apply(p, x, **call_kwargs), name=repr(module))
    return model_identity(fns, example)


class EpochCheckpoint:
    """Per-epoch training state in ``directory/reconstructor-<hash>.npz``, written atomically.

    The file name is a hash of everything that determines the state after epoch ``e`` (model, optimiser
    settings, key, data digests, batch size, the ``min_delta`` that picks the best epoch, ...), not of ``epochs`` or
    ``patience``: a run can be resumed with
    more epochs, and a different configuration never picks up another's state. A state saved past the epoch where
    a later call stops is not used by that call (:func:`recon_jax.attacks.reconn.train_reconstructor` starts over).

    The file also records the code that saved it (``code``: a :func:`recon_jax.io.code_record`, by default
    :func:`recon_jax.io.library_code`: every recon_jax module that can run while a reconstructor trains, with the
    Python and numeric package versions), and :meth:`load` refuses a state saved by other code, or by a recon_jax
    from before this record (:class:`CheckpointMismatchError` saying what differs), unless
    :func:`recon_jax.io.allow_resume_across_code` (then later saves record the earlier codes too).
    """

    def __init__(self, directory: str, key_description: dict, code: dict | None = None):
        digest = stable_hash(key_description)
        self.path = os.path.join(os.fspath(directory), f"reconstructor-{digest[:24]}.npz")
        self.description = key_description
        self.code = library_code() if code is None else code
        self.resumed_from_code: list = []  # the codes of a state resumed across code: save records them

    def load(self, template_state, template_best):
        if not os.path.exists(self.path):
            return None
        with np.load(self.path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        written = json.loads(data[_CODE].tobytes().decode()) if _CODE in data else None
        difference = code_difference(written, self.code)
        if difference is not None:
            if not resume_across_code_allowed():
                raise CheckpointMismatchError(
                    f"reconstructor checkpoint {self.path} was saved by other code than the code running now: "
                    f"{difference}. Resuming it would continue that code's training state under this code; delete "
                    "the file to train from the start, or use another checkpoint_dir (or, knowingly, resume it after "
                    "recon_jax.io.allow_resume_across_code() or with --allow_resume_across_code, which record both "
                    "codes in the checkpoint)")
            self.resumed_from_code = [*(written or {}).get("resumed_from_code", []), written]
        state_leaves, state_def = jax.tree_util.tree_flatten(template_state)
        best_leaves, best_def = jax.tree_util.tree_flatten(template_best)
        got_state = [data[f"state_{i}"] for i in range(len(state_leaves))]
        got_best = [data[f"best_{i}"] for i in range(len(best_leaves))]
        for want, got in zip(state_leaves + best_leaves, got_state + got_best):
            if np.shape(want) != got.shape:
                raise CheckpointMismatchError(f"checkpoint {self.path} does not match the model (shape {got.shape} "
                                              f"!= {np.shape(want)}); delete it to start over")
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
        code = dict(self.code, resumed_from_code=self.resumed_from_code) if self.resumed_from_code else self.code
        arrays[_CODE] = np.frombuffer(json.dumps(code, sort_keys=True).encode(), dtype=np.uint8)
        atomic_save_npz(self.path, losses=np.asarray(losses, np.float64), eval_mse=np.asarray(eval_mse, np.float64),
                        eval_loss=np.asarray(eval_loss, np.float64), best_epoch=np.asarray(best_epoch), **arrays)
