"""What a message looks like on the wire: its path (direct, staged through host memory, or
encoded; :mod:`~sparsewire.wire.paths`), the staging threshold read from a transfer calibration
(:mod:`~sparsewire.wire.transfer_records`), the payload codecs (:mod:`~sparsewire.wire.codecs`, with
their compiled kernels in :mod:`~sparsewire.wire.codec_kernels`) and the choice of a codec for a
link (:mod:`~sparsewire.wire.codec_choice`). Used by the SpMM executor and by SpGEMM alike."""

from sparsewire.wire.codecs import CODECS, decode, encode, error_bound, max_message_bytes, parse_compress, product_error_bound

__all__ = ["CODECS", "parse_compress", "encode", "decode", "max_message_bytes", "error_bound", "product_error_bound"]
