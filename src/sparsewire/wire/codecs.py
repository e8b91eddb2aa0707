"""Payload codecs of the wire path: a message's rows sent in fewer bytes, each entry within a
stated error bound, decoded into the receive buffer before anything reads it.

* ``bf16`` (bfloat16: float32's 8-bit exponent, 8 significant bits): each finite entry rounded to the
  nearest bf16 value, ties to even, directly from the data's own precision (float64 data is not rounded
  to float32 first, which would round twice). Per entry ``|decoded - x| <= max(2^-8 |x|, 2^-134)``: half
  a unit in the last place of 8 significant bits where ``|x| >= 2^-126`` (bf16's smallest normal), half
  the subnormal spacing 2^-133 below it. NaN stays NaN and +-Inf stays +-Inf; a row holding a finite
  entry that would round past bf16's largest value (float64 data beyond about 3.39e38) goes whole.
* ``fp16`` with a power-of-two scale per row: the row is multiplied by ``2^-s`` (exact) so that its
  largest magnitude lies in ``[2^14, 2^15)``, then rounded to float16 (nearest, ties to even); per entry
  ``|decoded - x| <= 2^-11 |x| + 2^(s-25)`` (the second term where the scaled entry falls below float16's
  normal range, at most ``2^-39`` of the row's largest magnitude). Rows with NaN or Inf go whole.
* ``int8`` with an affine map per row and stochastic rounding (AdaQP's): ``q = floor((x - lo) / step + u)``
  with ``lo`` the row's minimum, ``step = (max - min) / 255`` (rounded up to the data's dtype, in which
  both travel) and ``u`` uniform in [0, 1), so the decoded ``lo + q step`` is unbiased (E = x) and
  ``|decoded - x| <= step`` (plus, for float32 data, the step's rounding up and the decoded value's rounding
  to float32: ``2^-22 (|x| + step)``). Rows with NaN or Inf, or whose range overflows, go whole.

``none`` sends the rows as they are (bitwise). A message on the wire, in bytes: ``rows`` and ``k`` (two
int32, the sender's: the receiver counts the payload from them, not from its own plan), one flag byte per
row (1: sent whole, in the data's dtype), the per-row metadata (fp16: an int32 exponent; int8: ``lo`` and
``step`` in the data's dtype), the coded entries (2, 2 or 1 byte each), then the whole rows in order; each
part padded to 8 bytes. So a message of float64 rows takes about a quarter (bf16, fp16) or an eighth plus
16 bytes a row (int8; float32: a quarter plus 8) of its payload, and at most :func:`max_message_bytes`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from sparsewire.errors import InputError
from sparsewire.wire.codec_kernels import compiled

__all__ = [
    "CODECS",
    "parse_compress",
    "coded_message_bytes",
    "max_message_bytes",
    "encode",
    "decode",
    "error_bound",
    "product_error_bound",
    "operator_change",
    "describe",
]

#: The payload codecs, by name (``none``: the rows as they are).
CODECS = ("none", "bf16", "fp16", "int8")
_HEADER = 8
_WIDTH = {"bf16": 2, "fp16": 2, "int8": 1}  # bytes per coded entry
_META = {"bf16": 0, "fp16": 4, "int8": 2}  # metadata per row: bytes (bf16, fp16), values of the data's dtype (int8)
#: How much one pass may change a term, relative to the magnitudes the bound scales: bf16 and fp16 per entry
#: (|A| |B|), int8 per row (|A| max_j |B|) since its step is a row's range over 255.
_RELATIVE = {"bf16": 2.0**-8, "fp16": 2.0**-11, "int8": 2.0 / 255}


def parse_compress(text: str) -> tuple[str, str] | str:
    """Not collective. ``(codec, scope)`` of an execution option ``compress``: ``CODEC`` codes every message
    (scope ``all``), ``inter:CODEC`` only the messages between groups (the topology's, or MPI's shared-memory
    nodes), ``auto:CODEC`` only those of the links where it pays (:mod:`~sparsewire.wire.codec_choice`), ``auto``
    is ``auto:bf16``; or the text of what is wrong with it."""
    text = str(text)
    scope, colon, codec = ("auto", ":", "bf16") if text == "auto" else text.rpartition(":")
    if codec not in CODECS or scope not in (("inter", "auto") if colon else ("",)) or (scope and codec == "none"):
        return (
            f"unknown compress {text!r}; choose {', '.join(CODECS)}, inter:CODEC (only between groups), or auto / "
            "auto:CODEC (only on the links where it pays)"
        )
    return codec, scope or "all"


def describe(name: str, passes: int) -> str:
    """Not collective. The codec's error bound in words (``explain()``), and C's for a plan whose terms cross at most
    ``passes`` coded messages (:func:`product_error_bound`)."""
    entry = {
        "bf16": "each entry within max(2^-8 |x|, 2^-134) of its value (nearest, ties to even), NaN and Inf kept, rows "
        "that would overflow sent whole",
        "fp16": "a power-of-two scale per row, each entry within 2^-11 |x| + 2^-39 max|row| (nearest, ties to even); rows "
        "with NaN or Inf sent whole",
        "int8": "an affine map per row, stochastic rounding (unbiased), each entry within (max - min) / 255 of its row; "
        "rows with NaN or Inf sent whole",
    }
    if name == "none":
        return "payloads at full width (bitwise)"
    scale = "(|A| |B|)_ij" if name != "int8" else "sum_k |a_ik| max_j |b_kj|"
    return (
        f"payloads {name}: {entry[name]}; so C_ij within about ((1 + {_RELATIVE[name]:.3g})^{passes} - 1) {scale} of the "
        "uncompressed product (sparsewire.wire.codecs.product_error_bound)"
    )


def _pad8(size: int) -> int:
    return (size + 7) // 8 * 8


def _layout(name: str, n: int, k: int, itemsize: int) -> tuple[int, int, int]:
    """Offsets of the metadata, the coded entries and the whole rows of a message of ``n`` x ``k`` entries of
    ``itemsize`` bytes."""
    meta = _HEADER + _pad8(n)
    coded = meta + _pad8(_META[name] * n * (itemsize if name == "int8" else 1))
    return meta, coded, coded + _pad8(_WIDTH[name] * n * k)


def coded_message_bytes(name: str, rows: int, k: int, itemsize: int) -> int:
    """Not collective. The bytes of a message of codec ``name`` with ``rows`` x ``k`` entries of ``itemsize`` bytes
    when every row is coded (none sent whole): header, flags, metadata and coded entries."""
    return _layout(name, rows, k, itemsize)[2]


def max_message_bytes(name: str, rows: int, k: int, itemsize: int) -> int:
    """Not collective. The most bytes a message of codec ``name`` with ``rows`` x ``k`` entries of ``itemsize``
    bytes can take (every row whole)."""
    return _layout(name, rows, k, itemsize)[2] + rows * k * itemsize


@functools.cache
def _float16_values() -> np.ndarray:
    """The float64 value of every float16 bit pattern (fp16's decoding table, 512 KiB)."""
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)


def _fp16_exponents(rows: np.ndarray) -> np.ndarray:
    """Per row the ``s`` of the scale ``2^-s`` that puts its largest magnitude in [2^14, 2^15)."""
    largest = np.abs(rows).max(axis=1, initial=0.0).astype(np.float64)
    return np.where(largest > 0, np.frexp(largest)[1] - 15, 0).astype(np.int32)


def encode(name: str, rows: np.ndarray, out: np.ndarray, rng: np.random.Generator | None = None) -> int:
    """Not collective. Write the message of ``rows`` (C-contiguous, (n, k), float32 or float64) coded by ``name``
    into ``out`` (uint8, at least :func:`max_message_bytes`); ``rng`` draws int8's rounding noise. Returns its bytes."""
    n, k = rows.shape
    out[:_HEADER].view(np.int32)[:] = (n, k)
    flags = out[_HEADER : _HEADER + n]
    meta, start, end = _layout(name, n, k, rows.itemsize)
    coded = out[start : start + _WIDTH[name] * n * k]
    kernels = compiled()
    scratch = np.empty(k)  # one row in float64, read as its bits
    if name == "bf16":
        kernels.bf16_encode(rows, coded.view(np.uint16).reshape(n, k), flags, scratch, scratch.view(np.uint64))
    elif name == "fp16":
        exponents = out[meta : meta + 4 * n].view(np.int32)
        halves = coded.view(np.uint16).reshape(n, k)
        kernels.fp16_encode(rows, halves, exponents, flags, float(np.finfo(rows.dtype).max), scratch, scratch.view(np.uint64))
    else:  # int8
        lo_step = out[meta : meta + 2 * n * rows.itemsize].view(rows.dtype).reshape(n, 2)
        seed = int((rng or np.random.default_rng()).integers(0, 2**63))
        kernels.int8_encode(rows, coded.reshape(n, k), lo_step, flags, rows.dtype == np.float32, seed)
    wide = np.flatnonzero(flags)
    if len(wide):
        size = len(wide) * k * rows.itemsize
        out[end : end + size].view(rows.dtype).reshape(len(wide), k)[:] = rows[wide]
        end += size
    return end


def decode(name: str, message: np.ndarray, out: np.ndarray) -> tuple[int, int]:
    """Not collective. The rows of a ``name`` ``message`` (uint8) written into ``out`` ((n, k), the data's dtype);
    returns the (rows, k) its sender wrote, checked against ``out``'s shape (InputError if they differ)."""
    n, k = (int(v) for v in message[:_HEADER].view(np.int32))
    if (n, k) != out.shape:
        raise InputError(f"a {name} message holds {n} x {k} entries but its receive buffer is {out.shape[0]} x {out.shape[1]}")
    flags = message[_HEADER : _HEADER + n].view(bool)
    meta, start, end = _layout(name, n, k, out.itemsize)
    coded = message[start : start + _WIDTH[name] * n * k]
    if name == "bf16":
        out[:] = (coded.view(np.uint16).reshape(n, k).astype(np.uint32) << 16).view(np.float32)
    elif name == "fp16":  # (rows sent whole hold zeros here; overwritten below)
        exponents = message[meta : meta + 4 * n].view(np.int32)
        compiled().fp16_decode(coded.view(np.uint16).reshape(n, k), exponents, out, _float16_values())
    else:
        lo_step = message[meta : meta + 2 * n * out.itemsize].view(out.dtype).reshape(n, 2)
        compiled().int8_decode(coded.reshape(n, k), lo_step, out)
    wide = np.flatnonzero(flags)
    if len(wide):
        out[wide] = message[end : end + len(wide) * k * out.itemsize].view(out.dtype).reshape(len(wide), k)
    return n, k


def error_bound(name: str, rows: np.ndarray) -> np.ndarray:
    """Not collective. The stated bound on ``|decoded - x|`` for each entry of ``rows`` (module docstring); 0 for NaN
    and Inf, and for the rows whose bound is not a number (a NaN, Inf or overflowing range: sent whole, bitwise)."""
    x = np.abs(np.asarray(rows, np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        if name == "bf16":
            bound = np.maximum(x * 2.0**-8, 2.0**-134)
        elif name == "fp16":
            bound = x * 2.0**-11 + np.ldexp(1.0, _fp16_exponents(np.asarray(rows)) - 25)[:, None]
        else:
            step = (np.asarray(rows).max(axis=1).astype(np.float64) - np.asarray(rows).min(axis=1)) / 255
            # the decoded value's rounding to the dtype, the step's rounding up to it, (x - lo) / step's
            rounding = 2.0**-22 if np.asarray(rows).dtype == np.float32 else 2.0**-40
            bound = step[:, None] + rounding * (x + step[:, None])
    return np.where(np.isfinite(x) & np.isfinite(bound), bound, 0.0)


def operator_change(name: str, passes: int, width: int) -> float:
    """Not collective. A bound on ``||dA X||_2 / || |A| ||_2`` when ``A X`` (X of ``width`` orthonormal columns) is
    computed through ``passes`` coded messages: ``(1 + r)^passes - 1`` for bf16 and fp16 (each entry of the
    product within that of ``(|A| |X|)``), times ``sqrt(width)`` for int8 (its error scales with a row's largest
    magnitude, at most that row's 2-norm). 0 for ``none``."""
    if name == "none":
        return 0.0
    grown = (1.0 + _RELATIVE[name]) ** passes - 1.0 + passes * 2.0**-38
    return grown * (math.sqrt(width) if name == "int8" else 1.0)


def product_error_bound(name: str, passes: int, scale, row_scale, operands, terms, dtype=np.float64) -> np.ndarray:
    """Not collective. How far each entry of C may move when its terms cross at most ``passes`` coded messages (a B
    row, a partial sum, a relay each one; the plan's exchanges bound it). With ``r`` the codec's relative change
    per pass (2^-8 bf16, 2^-11 fp16, 2/255 int8 of a row's largest magnitude): ``((1 + r)^passes - 1) S`` with
    ``S = scale = (|A| |B|)_ij`` for bf16 and fp16 and ``S = row_scale = sum_k |a_ik| max_j |b_kj|`` for int8; plus
    the absolute terms: bf16 ``passes 2^-134 (operands + terms)`` (``operands = sum_k |a_ik|``, ``terms`` the
    entry's nonzeros), fp16 ``passes 2^-38 row_scale``, and for float32 data the rounding of each decoded value,
    ``passes 2^-23 row_scale``. 0 for ``none``."""
    shape = np.broadcast(scale, row_scale, operands, terms).shape
    if name == "none":
        return np.zeros(shape)
    grown = (1.0 + _RELATIVE[name]) ** passes - 1.0
    row_scale = np.asarray(row_scale, np.float64)
    bound = grown * (row_scale if name == "int8" else np.asarray(scale, np.float64))
    if name == "bf16":
        bound = bound + passes * 2.0**-134 * (np.asarray(operands) + np.asarray(terms))
    elif name == "fp16":
        bound = bound + passes * 2.0**-38 * row_scale
    if np.dtype(dtype) == np.float32:
        bound = bound + passes * 2.0**-23 * row_scale
    return np.broadcast_to(bound, shape)
