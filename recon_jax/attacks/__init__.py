"""recon_jax.attacks (filled by its issue)."""
