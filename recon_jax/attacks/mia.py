"""recon_jax.attacks.mia (filled by its issue)."""

__all__: list[str] = []
