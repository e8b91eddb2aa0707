"""Vectorised checks of the data lines of a text matrix file (Matrix Market), fast enough for
multi-million-line files: every line holds the expected number of fields, and every field is a
plain decimal number (SciPy's fast parser would read ``1,5`` as 1 and ``0x10`` as 0)."""

from __future__ import annotations

import functools

import numpy as np

from sparsewire._lib.distinct import distinct
from sparsewire.errors import InputError

__all__ = ["check_field_counts", "check_number_syntax"]

_LETTER_BYTES = np.zeros(256, bool)
_LETTER_BYTES[list(b"infatyINFATY")] = True  # the letters of inf, infinity and nan
_WORDS = {b"inf", b"infinity", b"nan"}
#: Bodies from this size on are first checked in one compiled pass over the bytes instead of a dozen array passes;
#: smaller ones skip it, as importing Numba would cost more than it saves.
COMPILED_FROM_BYTES = 1 << 20


def check_number_syntax(path: str, body: bytes, first_line: int) -> None:
    """Not collective. Refuse data tokens that are not plain decimal numbers, which the fast parser
    would read up to the first character it does not expect (``1,5`` as 1, ``0x10`` as 0,
    ``1.5abc`` as 1.5): only digits, at most one ``.`` and one exponent, signs at the start or after
    the exponent, or the words inf, infinity and nan. A body of ``COMPILED_FROM_BYTES`` or more is read once by a
    compiled pass; where it finds a fault, and for smaller bodies, :func:`array_passes` finds the first and names it."""
    buffer = np.frombuffer(body, dtype=np.uint8)
    if not buffer.size:
        return
    if buffer.size >= COMPILED_FROM_BYTES and _compiled_check()(buffer):
        return  # every token plain; otherwise the array passes below find the first fault and name it
    array_passes(path, body, first_line, buffer)


def array_passes(path: str, body: bytes, first_line: int, buffer: np.ndarray) -> None:
    """Not collective. :func:`check_number_syntax`'s rules as comparisons over all the bytes at once, each fault
    class in turn; refuses the first fault of the first class found."""

    def refuse(position: int, why: str) -> None:
        line = first_line + body.count(b"\n", 0, position)
        start, stop = body.rfind(b"\n", 0, position) + 1, body.find(b"\n", position)
        text = body[start : len(body) if stop < 0 else stop].decode("ascii", "replace").strip()
        raise InputError(f"{path}: line {line}: {why} in {text[:80]!r}; write plain decimal numbers such as 1.5 or -2e-3")

    space = buffer <= 32
    control = np.flatnonzero(space & (buffer != 32) & (buffer != 10) & (buffer != 9) & (buffer != 13))
    if control.size:
        refuse(int(control[0]), f"control character {int(buffer[control[0]])} is not part of a number")
    dot = buffer == ord(".")
    exponent = (buffer == ord("e")) | (buffer == ord("E"))
    sign = (buffer == ord("+")) | (buffer == ord("-"))
    other = ~((buffer - np.uint8(48)) < 10)  # not a digit (uint8 arithmetic wraps below '0')
    other &= ~space & ~dot & ~exponent & ~sign
    others = np.flatnonzero(other)  # letters of NaN and Inf (rare), or bytes that are no part of a number
    del other
    odd = others[~_LETTER_BYTES[buffer[others]]]
    if odd.size:
        refuse(int(odd[0]), f"character {chr(buffer[odd[0]])!r} is not part of a number")
    previous_space = np.concatenate(([True], space[:-1]))
    starts = np.flatnonzero(~space & previous_space)  # first byte of every token
    del previous_space
    sign[starts] = False  # a sign may lead a token
    sign[1:] &= ~exponent[:-1]  # or follow its exponent
    if sign.any():
        refuse(int(np.flatnonzero(sign)[0]), "a sign inside a number")
    for mask, what in ((dot, "two decimal points"), (exponent, "two exponents")):
        per_token = np.add.reduceat(mask.view(np.uint8), starts, dtype=np.int32)  # (on uint8: 9x faster than int32)
        if (per_token > 1).any():
            refuse(int(starts[np.flatnonzero(per_token > 1)[0]]), what)
    if others.size:  # the words, checked one by one
        ends = np.append(np.flatnonzero(~space[:-1] & space[1:]) + 1, len(buffer) if not space[-1] else [])
        for index in distinct(np.searchsorted(starts, others, side="right") - 1).tolist():
            word = body[starts[index] : int(ends[np.searchsorted(ends, starts[index], side="right")])]
            if word.lower().lstrip(b"+-") not in _WORDS:
                refuse(int(starts[index]), f"{word.decode('ascii', 'replace')!r} is not a number")


@functools.cache
def _compiled_check():
    from sparsewire._lib.jit import njit

    return njit(nogil=True, cache=True)(_all_plain)


def _all_plain(buffer) -> bool:
    """True when every token of ``buffer`` obeys :func:`check_number_syntax`'s rules, in one pass: no control
    byte, only digits, ``.``, ``e``/``E``, signs and the letters of inf, infinity and nan; a sign only first or
    after an exponent; at most one ``.`` and one exponent per token; a token with letters one of the words."""
    dots = exponents = letters = 0
    start = -1  # the first byte of the current token, -1 between tokens
    for i in range(buffer.shape[0] + 1):
        byte = buffer[i] if i < buffer.shape[0] else 32
        if byte <= 32:
            if byte != 32 and byte != 10 and byte != 9 and byte != 13:
                return False
            if start >= 0 and letters:
                first = start
                while buffer[first] == 43 or buffer[first] == 45:
                    first += 1
                word = np.zeros(8, np.uint8)  # the token without its signs, in lower case (| 32)
                if i - first not in (3, 8):
                    return False
                for j in range(i - first):
                    word[j] = buffer[first + j] | 32
                inf = word[0] == 105 and word[1] == 110 and word[2] == 102  # "inf"
                nan = word[0] == 110 and word[1] == 97 and word[2] == 110  # "nan"
                # "infinity": "inf" then "inity"
                tail = word[3] == 105 and word[4] == 110 and word[5] == 105 and word[6] == 116 and word[7] == 121
                if not ((i - first == 3 and (inf or nan)) or (i - first == 8 and inf and tail)):
                    return False
            start = -1
            continue
        if start < 0:
            start, dots, exponents, letters = i, 0, 0, 0
        if 48 <= byte <= 57:
            continue
        if byte == 46:
            dots += 1
            if dots > 1:
                return False
        elif byte == 101 or byte == 69:
            exponents += 1
            if exponents > 1:
                return False
        elif byte == 43 or byte == 45:
            if i != start and buffer[i - 1] != 101 and buffer[i - 1] != 69:
                return False
        else:
            lower = byte | 32  # the letters of inf, infinity and nan in either case, and nothing else
            if not (lower == 105 or lower == 110 or lower == 102 or lower == 97 or lower == 116 or lower == 121):
                return False
            letters += 1
    return True


def check_field_counts(path: str, body: bytes, first_line: int, fields: int, n_entries: int, field: str) -> None:
    """Not collective. Check that every non-blank data line has exactly ``fields`` tokens and that there are
    ``n_entries`` of them; vectorised so that multi-million-line files are checked in well under a second."""
    buffer = np.frombuffer(body, dtype=np.uint8)
    is_space = (buffer == 32) | (buffer == 9) | (buffer == 13) | (buffer == 10)
    token_starts = np.flatnonzero(~is_space & np.concatenate(([True], is_space[:-1])))
    del is_space
    line_ends = np.flatnonzero(buffer == 10)
    if len(buffer) and buffer[-1] != 10:
        line_ends = np.append(line_ends, len(buffer))
    tokens_per_line = np.diff(np.searchsorted(token_starts, line_ends), prepend=0)
    bad = np.flatnonzero((tokens_per_line != 0) & (tokens_per_line != fields))
    expected = "ROW COLUMN" if fields == 2 else "ROW COLUMN VALUE"
    if bad.size:
        line = int(bad[0])
        raise InputError(
            f"{path}: line {first_line + line}: {int(tokens_per_line[line])} fields, expected {fields} ({expected}) "
            f"for a '{field}' file; fix the line or the header's field"
        )
    n_found = int(np.count_nonzero(tokens_per_line))
    if n_found < n_entries:
        raise InputError(
            f"{path}: the size line promises {n_entries} entries but the file has {n_found}; "
            "the file may be truncated (download it again) or the size line is wrong"
        )
    if n_found > n_entries:
        raise InputError(f"{path}: the size line promises {n_entries} entries but the file has {n_found}; fix the size line")
