"""Special functions JAX lacks. Filled by the bounds issue."""

__all__: list[str] = []
