"""recon_jax.report (filled by its issue)."""
