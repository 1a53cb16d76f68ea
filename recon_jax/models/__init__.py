"""Model zoo (flax.linen) and framework adapters. Filled by the shadow-engine issue."""

from recon_jax.models import dimred, tygert

__all__ = ["dimred", "tygert"]
