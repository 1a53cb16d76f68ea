"""recon_jax.attacks.reconn (filled by its issue)."""

__all__: list[str] = []
