"""recon_jax.models (filled by its issue)."""
