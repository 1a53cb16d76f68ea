"""recon_jax.attacks.glm (filled by its issue)."""

__all__: list[str] = []
