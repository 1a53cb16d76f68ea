"""recon_jax.attacks.dimred (filled by its issue)."""

__all__: list[str] = []
