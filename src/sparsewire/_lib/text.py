"""Plain-text tables for the command line."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table", "format_bytes"]


def format_bytes(count: int | float) -> str:
    """Not collective. Human-readable byte count with binary-free decimal units (B, kB, MB, GB), as the papers use."""
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1000
    return f"{value:.2f} TB"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Not collective. Columns aligned: text left, numbers right."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(_is_number(row[i]) for row in rows) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric)).rstrip()

    separator = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), separator] + [line(r) for r in cells[1:]])


def _is_number(value: object) -> bool:
    if isinstance(value, (int, float)):
        return True
    text = str(value).split(" ")[0].rstrip("x%")
    try:
        float(text)
        return True
    except ValueError:
        return text in ("", "-")
