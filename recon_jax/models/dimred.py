"""recon_jax.models.dimred (filled by its issue)."""
