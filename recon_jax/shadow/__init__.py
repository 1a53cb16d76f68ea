"""recon_jax.shadow (filled by its issue)."""
