"""The shadow-model engine (jit + vmap + lax.scan, sharded over devices) and its resumable store.

- :func:`generate_shadow_models`: one model per target on ``fixed_set + {target}``; outputs flat parameters,
  probe logits, eval accuracy, target loss; optional resumable store directory; full-batch training trains the
  first dense layer through the shared fixed set's Gram matrix where that saves work (``first_layer``). It
  compiles its program before training any model: an unsupported combination of model, algorithm and devices
  stops there with :class:`UnsupportedConfiguration` (a ``ValueError`` saying what to change).
- :func:`preflight`: one tiny engine job of a configuration, to check it before long work (the risk report).
- :func:`load_shadow_models`, :class:`ShadowSet`, :class:`ShadowStore`, :class:`ShadowStoreMismatchError`,
  :class:`ShadowStoreLostError`, :class:`ShadowStoreCorruptError`.
- :func:`fill_store` (:mod:`recon_jax.shadow.fill`): the store's resume / write / consolidate protocol for any
  generator of fixed-shape rows (the DR attack's shadow embeddings); :func:`config_hash`, :func:`key_fingerprint`
  (:mod:`recon_jax.shadow.store`) and :func:`~recon_jax.io.array_digest` (:mod:`recon_jax.io`): how a store
  configuration is described and hashed.
- :func:`default_mesh`, :func:`cpu_xla_flags`: device set-up (see :mod:`recon_jax.shadow.devices`).
"""

from recon_jax.io import array_digest
from recon_jax.shadow.arguments import OUTPUTS
from recon_jax.shadow.devices import MODEL_AXIS, cpu_xla_flags, default_mesh
from recon_jax.shadow.engine import SharedInputs, generate_shadow_models, preflight, shadow_model_fn
from recon_jax.shadow.fill import fill_store
from recon_jax.shadow.store import (
    ShadowSet,
    ShadowStore,
    ShadowStoreCorruptError,
    ShadowStoreLostError,
    ShadowStoreMismatchError,
    config_hash,
    key_fingerprint,
    load_shadow_models,
)
from recon_jax.shadow.support import UnsupportedConfiguration
from recon_jax.training.gram import FIRST_LAYER_MODES

__all__ = [
    "FIRST_LAYER_MODES",
    "MODEL_AXIS",
    "OUTPUTS",
    "cpu_xla_flags",
    "default_mesh",
    "generate_shadow_models",
    "preflight",
    "shadow_model_fn",
    "SharedInputs",
    "ShadowSet",
    "ShadowStore",
    "ShadowStoreCorruptError",
    "ShadowStoreLostError",
    "ShadowStoreMismatchError",
    "UnsupportedConfiguration",
    "array_digest",
    "config_hash",
    "fill_store",
    "key_fingerprint",
    "load_shadow_models",
]
