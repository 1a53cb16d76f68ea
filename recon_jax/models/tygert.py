"""recon_jax.models.tygert (filled by its issue)."""
