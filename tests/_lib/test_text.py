"""sparsewire._lib.text: the byte counts and tables the command line prints."""

from __future__ import annotations

import numpy as np
import pytest

from sparsewire._lib.text import format_bytes, format_table


@pytest.mark.parametrize(
    "count, text",
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.00 kB"),
        (1536, "1.54 kB"),
        (2_500_000, "2.50 MB"),
        (7e9, "7.00 GB"),
        (3.2e12, "3200.00 GB"),
    ],
)
def test_bytes_use_decimal_units_as_the_papers_do(count, text):
    assert format_bytes(count) == text


def test_random_byte_counts_read_back_within_the_printed_precision(rng):
    for count in rng.integers(0, 10**12, 200):
        number, unit = format_bytes(int(count)).split()
        scale = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
        assert abs(float(number) * scale - count) <= 0.005 * scale + 0.5
        assert unit == "B" or float(number) >= 1


def test_tables_align_text_left_and_numbers_right():
    text = format_table(["name", "bytes", "ratio"], [["column", 1234, "0.50x"], ["joint-hier", 5, None]])
    lines = text.splitlines()
    assert lines[0].split() == ["name", "bytes", "ratio"] and set(lines[1]) == {"-", " "}
    assert lines[2].startswith("column ") and lines[3].startswith("joint-hier")
    assert lines[2].index("1234") + 4 == lines[3].index("5") + 1  # numbers end in one column
    widths = [len(cell) for cell in lines[1].split("  ")]
    assert widths == [len("joint-hier"), len("bytes"), len("ratio")]


def test_random_tables_keep_every_cell_and_one_width_per_column(rng):
    rows = [
        [f"m{int(i)}", int(rng.integers(0, 10 ** int(rng.integers(1, 9)))), float(np.round(rng.random(), 3))] for i in range(20)
    ]
    lines = format_table(["matrix", "count", "share"], rows).splitlines()
    assert len(lines) == len(rows) + 2
    for line, row in zip(lines[2:], rows):
        assert line.split() == [str(value) for value in row]
        assert len(line) == len(lines[1])  # right-aligned last column fills the width
