"""Markdown helpers for every run's report.md (the experiments' and the risk report's)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["markdown_table", "format_value"]


def format_value(v: Any, digits: int = 4) -> str:
    """Formats numbers compactly for tables (4 significant digits by default); integers in full; None (no value,
    e.g. a paper that gives a figure only) as an em dash; others with ``str``.

    >>> format_value(0.000123456), format_value(12.0), format_value(10000), format_value("x"), format_value(None)
    ('0.0001235', '12', '10000', 'x', '—')
    """
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int) or (hasattr(v, "dtype") and getattr(v.dtype, "kind", "") in "iu" and getattr(v, "ndim", 1) == 0):
        return str(int(v))
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if f != f:
        return "nan"
    return f"{f:.{digits}g}"


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, digits: int = 4) -> str:
    """Renders a list of dicts as a GitHub-flavoured Markdown table.

    >>> print(markdown_table([{"a": 1, "b": 0.5}]))
    | a | b |
    |---|---|
    | 1 | 0.5 |
    """
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(format_value(row.get(c, ""), digits) for c in columns) + " |")
    return "\n".join(lines)
