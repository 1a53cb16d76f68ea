"""recon_jax.attacks.gradient (filled by its issue)."""

__all__: list[str] = []
