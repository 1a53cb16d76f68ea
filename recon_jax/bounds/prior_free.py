"""Filled by the bounds issues."""

__all__: list[str] = []
