"""recon_jax.training (filled by its issue)."""
