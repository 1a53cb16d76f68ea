"""recon_jax.attacks.oracle (filled by its issue)."""

__all__: list[str] = []
