"""Data sources (being written)."""
