"""The inputs, outputs and initializer shapes of an ``.onnx`` file, read from its protobuf bytes.

The ONNX extractors check their arguments against the graph at construction, before any model of a
run loads: starting an onnxruntime session means loading every weight, and the ``onnx`` package is no
dependency.  Only the graph's structure is walked (memory-mapped; weight bytes are skipped, never
read), following ``onnx.proto``: ModelProto.graph = 7; GraphProto.initializer = 5, .input = 11,
.output = 12; ValueInfoProto.name = 1, .type = 2; TypeProto.tensor_type = 1; Tensor.elem_type = 1,
.shape = 2; TensorShapeProto.dim = 1; Dimension.dim_value = 1, .dim_param = 2; TensorProto.dims = 1,
.name = 8.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: TensorProto.DataType numbers, spelt as onnxruntime spells input types.
_ELEMENT_TYPES = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
                  9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64", 14: "complex64",
                  15: "complex128", 16: "bfloat16"}


class NotOnnx(ValueError):
    """The bytes are not an ONNX model; the message says why, in a user's words."""


#: Why bytes that break the protobuf wire format are refused (a text, a zip, a torch checkpoint, a truncated copy).
_NOT_PROTOBUF = "its bytes are not ONNX's protobuf encoding (another format, or a truncated copy?)"


@dataclass(frozen=True)
class GraphInput:
    """One graph input: its type as onnxruntime spells it (``"tensor(float)"``; None: not a tensor) and its shape,
    one entry per axis (an int: a fixed size; a str or None: free), None where the rank is not declared."""

    name: str
    type: str | None
    shape: tuple[int | str | None, ...] | None


@dataclass(frozen=True)
class OnnxGraph:
    """A model's graph inputs (in order), output names (in order) and initializer shapes, by name."""

    inputs: tuple[GraphInput, ...]
    outputs: tuple[str, ...]
    initializers: dict[str, tuple[int, ...]]

    @property
    def feeds(self) -> dict[str, GraphInput]:
        """The inputs a run must feed: those without an initializer (onnxruntime's ``get_inputs()``)."""
        return {i.name: i for i in self.inputs if i.name not in self.initializers}


def read_onnx_graph(path: Path) -> OnnxGraph:
    """The graph of the ONNX model at ``path``; :class:`NotOnnx` for bytes that are not one (``OSError`` as raised)."""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            raise NotOnnx("the file is empty")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            graphs = [value for number, value in _fields(data, 0, len(data)) if number == 7]
            if not graphs or not all(isinstance(g, tuple) for g in graphs):
                raise NotOnnx("it holds no graph")
            inputs: list[GraphInput] = []
            outputs: list[str] = []
            initializers: dict[str, tuple[int, ...]] = {}
            for start, end in graphs:  # a message field given twice is merged: its repeated fields concatenate
                for number, value in _fields(data, start, end):
                    if number == 5:
                        name, dims = _tensor(data, _span(value))
                        initializers[name] = dims
                    elif number == 11:
                        inputs.append(_value_info(data, _span(value)))
                    elif number == 12:
                        outputs.append(_value_info(data, _span(value)).name)
    if not outputs:
        raise NotOnnx("its graph has no outputs")
    return OnnxGraph(tuple(inputs), tuple(outputs), initializers)


def _fields(data: Any, start: int, end: int) -> Iterator[tuple[int, int | tuple[int, int] | None]]:
    """(field number, value) of one message: an int (varint), a (start, end) span (bytes, a sub-message) or None
    (fixed-width numbers, which the graph's structure does not use)."""
    position = start
    while position < end:
        key, position = _varint(data, position, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise NotOnnx(_NOT_PROTOBUF)
        if wire == 0:
            value, position = _varint(data, position, end)
            yield number, value
        elif wire == 2:
            length, position = _varint(data, position, end)
            if position + length > end:
                raise NotOnnx(_NOT_PROTOBUF)
            yield number, (position, position + length)
            position += length
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
            if position > end:
                raise NotOnnx(_NOT_PROTOBUF)
            yield number, None
        else:  # groups (3, 4) are not used by ONNX; 6 and 7 do not exist
            raise NotOnnx(_NOT_PROTOBUF)


def _varint(data: Any, position: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while position < end and shift < 70:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if byte < 0x80:
            return value, position
    raise NotOnnx(_NOT_PROTOBUF)


def _span(value: Any) -> tuple[int, int]:
    if not isinstance(value, tuple):
        raise NotOnnx(_NOT_PROTOBUF)
    return value


def _text(data: Any, value: Any) -> str:
    start, end = _span(value)
    return bytes(data[start:end]).decode("utf-8", errors="replace")


def _int64(value: int) -> int:
    """A varint as int64 (negative numbers are written as their 64-bit two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _tensor(data: Any, span: tuple[int, int]) -> tuple[str, tuple[int, ...]]:
    """A TensorProto's name and dims (packed or not); its data is skipped."""
    name, dims = "", []
    for number, value in _fields(data, *span):
        if number == 8:
            name = _text(data, value)
        elif number == 1 and isinstance(value, int):
            dims.append(_int64(value))
        elif number == 1 and isinstance(value, tuple):
            position, end = value
            while position < end:
                dim, position = _varint(data, position, end)
                dims.append(_int64(dim))
    return name, tuple(dims)


def _value_info(data: Any, span: tuple[int, int]) -> GraphInput:
    """A ValueInfoProto's name, tensor type and shape."""
    name, kind, shape = "", None, None
    for number, value in _fields(data, *span):
        if number == 1:
            name = _text(data, value)
        elif number == 2:
            for type_number, tensor in _fields(data, *_span(value)):
                if type_number == 1:
                    kind, shape = _tensor_type(data, _span(tensor))
    return GraphInput(name, kind, shape)


def _tensor_type(data: Any, span: tuple[int, int]) -> tuple[str, tuple[int | str | None, ...] | None]:
    element, shape = 0, None
    for number, value in _fields(data, *span):
        if number == 1 and isinstance(value, int):
            element = value
        elif number == 2:
            shape = tuple(_dimension(data, _span(dim)) for n, dim in _fields(data, *_span(value)) if n == 1)
    return f"tensor({_ELEMENT_TYPES.get(element, f'elem_type {element}')})", shape


def _dimension(data: Any, span: tuple[int, int]) -> int | str | None:
    for number, value in _fields(data, *span):
        if number == 1 and isinstance(value, int):
            return _int64(value)
        if number == 2:
            return _text(data, value)
    return None
