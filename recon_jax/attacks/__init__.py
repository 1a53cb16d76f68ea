"""Reconstruction and membership attacks.

- :mod:`~recon_jax.attacks.glm`: closed-form inversion of GLMs (Balle et al. Thm 1, Thm 8).
- :mod:`~recon_jax.attacks.reconn`: reconstructor networks trained on shadow models (Balle et al.), on the
  features of :mod:`~recon_jax.attacks.features`.
- :mod:`~recon_jax.attacks.informed`: the informed-adversary pipeline (splits -> shadow and released models ->
  reconstructor -> NN oracle -> metrics and success) shared by the experiments and notebooks; how many models it
  trains is a :class:`~recon_jax.attacks.informed.ModelSetSizes`, how it runs them a
  :class:`~recon_jax.attacks.informed.RunOptions` (both also importable from here).
- :mod:`~recon_jax.attacks.oracle`: the nearest-neighbour oracle baseline.
- :mod:`~recon_jax.attacks.mia`: informed membership inference (Balle et al. Alg. 2).
- :mod:`~recon_jax.attacks.gradient`: linear-layer attack (Ziller et al.; home :mod:`~recon_jax.attacks.linear_layer`),
  Inverting Gradients, DLG.
- :mod:`~recon_jax.attacks.dimred`: attacks on dimensionality-reduction embeddings (Lumbut & Ponnoprat), on the
  embedding methods of :mod:`~recon_jax.attacks.dimred_embed`; the embedding mechanism is an
  :class:`~recon_jax.attacks.dimred.EmbeddingSpec`, the network's size and training an
  :class:`~recon_jax.attacks.dimred.AttackTrainingSpec`.
- :mod:`~recon_jax.attacks.audit`: Clopper-Pearson intervals and the empirical epsilon of a canary game, and its
  statistical ceiling; :mod:`~recon_jax.attacks.audit_gdp`: the same multi-run audit read as Gaussian DP (Nasr et
  al. 2023) and the exact GDP (eps, delta) conversion.
- :mod:`~recon_jax.attacks.audit_one_run`: audits in one training run with many canaries (Steinke et al. 2023)
  and their f-DP reading (Mahloujifar et al. 2024).
- :mod:`~recon_jax.attacks.prior_aware`: the prior-aware attack on every released DP-(S)GD update (Hayes et al. 2023),
  with random records or gradient canaries (:mod:`~recon_jax.attacks.canaries`: crafted clipped gradients of a fixed
  geometry, orthogonal or a centred simplex, and the canary game the audits run); the exact success of the optimal
  guess for crafted geometries and a per-pair model of measured separations: :mod:`~recon_jax.attacks.game_optimum`.
"""

from recon_jax.attacks import (audit, audit_gdp, audit_one_run, canaries, dimred, game_optimum, glm, gradient, informed,
                               mia, oracle, prior_aware, reconn)
from recon_jax.attacks.dimred import AttackTrainingSpec, EmbeddingSpec
from recon_jax.attacks.informed import ModelSetSizes, RunOptions

__all__ = ["glm", "reconn", "informed", "oracle", "mia", "gradient", "dimred", "prior_aware", "canaries", "game_optimum",
           "audit", "audit_gdp", "audit_one_run", "EmbeddingSpec", "AttackTrainingSpec", "ModelSetSizes", "RunOptions"]
