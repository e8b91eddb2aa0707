"""SIMD registers and memory hints for the Numba kernels (:mod:`sparsewire.kernels.numba_csr`).

Numba has no vector type, and its SLP vectoriser, which could turn scalar accumulators into vector
registers, is off by default because it has miscompiled code (numba/numba#8852). The CSR product
keeps a row of C in registers instead through the type :class:`Lanes`: one register of
:data:`LINE_BYTES` bytes (8 float64 or 16 float32 values, one cache line), an LLVM vector
``<n x double>`` that LLVM maps to the widest registers the CPU has (zmm with AVX-512, two ymm with
AVX2, four xmm with SSE2 or NEON). The intrinsics below load, scale, fuse-multiply-add and store
such registers.

Rounding: :func:`lanes_fma` is ``llvm.fmuladd``, which is what ``fastmath={"contract"}`` makes of
``c += a * x`` in the scalar kernels, so a vector lane and a scalar loop give the same bits.

Numba's on-disk cache (``cache=True``) is keyed on the file of the function it compiled, not on
the files that function calls into: after editing this module, delete the ``*.nbi``/``*.nbc`` files
in ``kernels/__pycache__`` (or touch ``numba_csr.py``), or the kernels keep the old code.
"""

from __future__ import annotations

from llvmlite import ir

from sparsewire._lib.aligned import CACHE_LINE_BYTES
from sparsewire._lib.jit import cgutils, intrinsic, models, register_model, types

#: Bytes of one :class:`Lanes` register: a cache line, so a register is one line of a B row.
LINE_BYTES = CACHE_LINE_BYTES


class Lanes(types.Type):
    """One SIMD register of :data:`LINE_BYTES` bytes of ``dtype`` values (a Numba type), or with
    ``half`` of half as many (a C row of 8 float32 or 4 float64 values: :func:`half_load`)."""

    def __init__(self, dtype: types.Float, half: bool = False):
        self.dtype, self.half = dtype, half
        self.count = LINE_BYTES // (dtype.bitwidth // 8) // (2 if half else 1)
        super().__init__(name=f"Lanes({dtype}x{self.count})")


@register_model(Lanes)
class _LanesModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(dmm.lookup(fe_type.dtype).get_value_type(), fe_type.count))


def _element_address(context, builder, array_type, array, row, column):
    """Integer address of ``array[row, column]`` (2-D, rows of contiguous elements)."""
    view = context.make_array(array_type)(context, builder, array)
    row_stride = cgutils.unpack_tuple(builder, view.strides, 2)[0]
    itemsize = context.get_constant(types.intp, array_type.dtype.bitwidth // 8)
    offset = builder.add(builder.mul(row, row_stride), builder.mul(column, itemsize))
    return builder.add(builder.ptrtoint(view.data, offset.type), offset)


def _splat(builder, value, count):
    vector_type = ir.VectorType(value.type, count)
    single = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(
        single, ir.Constant(vector_type, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), count), [0] * count)
    )


@intrinsic
def lanes_load(typingctx, array, row, column):
    """The register ``array[row, column : column + count]`` (any alignment)."""
    lanes = Lanes(array.dtype)

    def codegen(context, builder, sig, args):
        address = _element_address(context, builder, sig.args[0], *args)
        pointer = builder.inttoptr(address, context.get_value_type(lanes).as_pointer())
        return builder.load(pointer, align=array.dtype.bitwidth // 8)

    return lanes(array, types.intp, types.intp), codegen


@intrinsic
def half_load(typingctx, array, row, column):
    """The half register ``array[row, column : column + count // 2]`` (any alignment)."""
    lanes = Lanes(array.dtype, half=True)

    def codegen(context, builder, sig, args):
        address = _element_address(context, builder, sig.args[0], *args)
        pointer = builder.inttoptr(address, context.get_value_type(lanes).as_pointer())
        return builder.load(pointer, align=array.dtype.bitwidth // 8)

    return lanes(array, types.intp, types.intp), codegen


@intrinsic
def half_zero(typingctx, array):
    """A half register of zeros of ``array``'s dtype."""
    lanes = Lanes(array.dtype, half=True)

    def codegen(context, builder, sig, args):
        return ir.Constant(context.get_value_type(lanes), None)

    return lanes(array), codegen


@intrinsic
def lanes_store(typingctx, array, row, column, value):
    """``array[row, column : column + count] = value`` (any alignment)."""

    def codegen(context, builder, sig, args):
        address = _element_address(context, builder, sig.args[0], *args[:3])
        builder.store(args[3], builder.inttoptr(address, args[3].type.as_pointer()), align=array.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.void(array, types.intp, types.intp, value), codegen


@intrinsic
def lanes_stream(typingctx, array, row, column, value):
    """:func:`lanes_store` as a non-temporal store: the line goes to memory without first being
    read into the cache. The address must be a multiple of :data:`LINE_BYTES` (the caller checks);
    call :func:`store_fence` before other threads or MPI read what was streamed."""

    def codegen(context, builder, sig, args):
        address = _element_address(context, builder, sig.args[0], *args[:3])
        store = builder.store(args[3], builder.inttoptr(address, args[3].type.as_pointer()), align=LINE_BYTES)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.void(array, types.intp, types.intp, value), codegen


@intrinsic
def lanes_put(typingctx, array, row, column, value, stream):
    """:func:`lanes_stream` where ``stream`` is true, else :func:`lanes_store`: one branch in the
    generated code, where a Numba function choosing between the two would be inlined (its IR
    copied and typed again) at each of the CSR product's stores."""

    def codegen(context, builder, sig, args):
        address = _element_address(context, builder, sig.args[0], *args[:3])
        pointer = builder.inttoptr(address, args[3].type.as_pointer())
        with builder.if_else(args[4]) as (streamed, cached):
            with streamed:
                store = builder.store(args[3], pointer, align=LINE_BYTES)
                store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
            with cached:
                builder.store(args[3], pointer, align=array.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.void(array, types.intp, types.intp, value, types.boolean), codegen


@intrinsic
def lanes_zero(typingctx, array):
    """A register of zeros of ``array``'s dtype."""
    lanes = Lanes(array.dtype)

    def codegen(context, builder, sig, args):
        return ir.Constant(context.get_value_type(lanes), None)

    return lanes(array), codegen


@intrinsic
def lanes_scale(typingctx, scalar, value):
    """``scalar * value`` (one rounding per lane)."""

    def codegen(context, builder, sig, args):
        factor = context.cast(builder, args[0], sig.args[0], value.dtype)
        return builder.fmul(_splat(builder, factor, value.count), args[1])

    return value(scalar, value), codegen


@intrinsic
def lanes_fma(typingctx, accumulator, scalar, value):
    """``accumulator + scalar * value``, fused where the CPU has FMA (``llvm.fmuladd``)."""

    def codegen(context, builder, sig, args):
        factor = context.cast(builder, args[1], sig.args[1], value.dtype)
        vector_type = args[2].type
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vector_type, [vector_type] * 3), f"llvm.fmuladd.v{value.count}f{value.dtype.bitwidth}"
        )
        return builder.call(function, [_splat(builder, factor, value.count), args[2], args[0]])

    return accumulator(accumulator, scalar, value), codegen


@intrinsic
def store_fence(typingctx):
    """Order streamed stores before every later store (``sfence`` on x86, whose non-temporal
    stores are weakly ordered; a full fence elsewhere)."""

    def codegen(context, builder, sig, args):
        if builder.module.triple.startswith(("x86_64", "i686", "i386")):
            fence = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
            builder.call(fence, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def prefetch(typingctx, address):
    """``llvm.prefetch`` (read, keep in all cache levels) of the byte at ``address``; a hint that
    never faults, so any address is safe."""

    def codegen(context, builder, sig, args):
        pointer_type = ir.PointerType(ir.IntType(8))
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [pointer_type, i32, i32, i32]), "llvm.prefetch.p0"
        )
        builder.call(
            function, [builder.inttoptr(args[0], pointer_type), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        )
        return context.get_dummy_value()

    return types.void(types.intp), codegen


@intrinsic
def element(typingctx, array, index):
    """``array[index]`` of a contiguous 1-D array, for an index the caller knows is in range and not
    negative. Numba's own ``array[index]`` wraps negative signed indices around (a sign test, a
    mask and an add per load); in the CSR product's inner loop that was 8 of the 14 instructions of
    a nonzero (k = 8 float32), and the extra live values spilled the loop's pointers to the stack."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        view = context.make_array(sig.args[0])(context, builder, args[0])
        position = context.cast(builder, args[1], sig.args[1], types.intp)
        if sig.args[0].layout == "C":
            return builder.load(builder.gep(view.data, [position], inbounds=True))
        stride = cgutils.unpack_tuple(builder, view.strides, 1)[0]  # a strided view: its byte stride
        address = builder.add(builder.ptrtoint(view.data, stride.type), builder.mul(position, stride))
        return builder.load(builder.inttoptr(address, view.data.type))

    return array.dtype(array, index), codegen


@intrinsic
def lanes_in(typingctx, array):
    """The number of ``array``'s elements in one :class:`Lanes` register, as a constant the
    compiler folds into the addresses (``array.itemsize`` is a run-time value to Numba)."""
    count = Lanes(array.dtype).count

    def codegen(context, builder, sig, args):
        return context.get_constant(types.intp, count)

    return types.intp(array), codegen
