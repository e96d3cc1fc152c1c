"""The inputs, outputs and initializer shapes of an ``.onnx`` file, read from its protobuf bytes.

The ONNX extractors check their arguments against the graph at construction, before any model of a
run loads: starting an onnxruntime session means loading every weight, and the ``onnx`` package is no
dependency.  Only the graph's structure is walked (memory-mapped; weight bytes are skipped, never
read), following ``onnx.proto``: ModelProto.graph = 7; GraphProto.node = 1, .initializer = 5, .input = 11,
.output = 12; ValueInfoProto.name = 1, .type = 2; TypeProto.tensor_type = 1; Tensor.elem_type = 1,
.shape = 2; TensorShapeProto.dim = 1; Dimension.dim_value = 1, .dim_param = 2; TensorProto.dims = 1,
.data_type = 2, .int32_data = 5, .int64_data = 7, .name = 8, .raw_data = 9; NodeProto.input = 1, .output = 2,
.op_type = 4, .attribute = 5; AttributeProto.name = 1, .i = 3, .t = 5.

Where a graph holds a position table (an initializer named ``...position_embeddings.weight``, as Hugging Face
models name it in their exports), its nodes are read too, to find the position a text's first token takes
(:attr:`OnnxGraph.position_starts`); the only tensor data ever read are the scalar constants on that path.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
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
    """A model's graph inputs (in order), output names (in order) and initializer shapes, by name.

    ``position_starts`` holds, for each position table (a 2-D initializer named ``...position_embeddings.weight``)
    that the graph indexes by counting attended tokens, the row a text's first token takes: a RoBERTa-style
    export (RobertaModel, XLM-R, CamemBERT) computes position ids as ``cumsum(input_ids != padding_idx) * mask +
    padding_idx``, so its first token takes row ``padding_idx + 1`` and a table of ``n`` rows embeds ``n -
    (padding_idx + 1)`` tokens.  A table indexed otherwise (BERT's slice of an ``arange`` buffer) or along a path
    not recognized is absent: its first token takes row 0.
    """

    inputs: tuple[GraphInput, ...]
    outputs: tuple[str, ...]
    initializers: dict[str, tuple[int, ...]]
    position_starts: dict[str, int] = field(default_factory=dict)

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
            spans: dict[str, tuple[int, int]] = {}  # where each initializer's TensorProto lies (read: scalars only)
            nodes: list[tuple[int, int]] = []
            for start, end in graphs:  # a message field given twice is merged: its repeated fields concatenate
                for number, value in _fields(data, start, end):
                    if number == 1 and isinstance(value, tuple):
                        nodes.append(value)
                    elif number == 5:
                        name, dims = _tensor(data, _span(value))
                        initializers[name] = dims
                        spans[name] = _span(value)
                    elif number == 11:
                        inputs.append(_value_info(data, _span(value)))
                    elif number == 12:
                        outputs.append(_value_info(data, _span(value)).name)
            tables = {name: dims[0] for name, dims in initializers.items()
                      if name.endswith("position_embeddings.weight") and len(dims) == 2}
            try:  # a refinement of the limit: nodes that do not parse leave it at the table's size, as before
                starts = _position_starts(data, nodes, spans, tables) if tables else {}
            except NotOnnx:
                starts = {}
    if not outputs:
        raise NotOnnx("its graph has no outputs")
    return OnnxGraph(tuple(inputs), tuple(outputs), initializers, starts)


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
        elif number == 1:
            _read_ints(data, value, dims)
    return name, tuple(dims)


def _read_ints(data: Any, value: int | tuple[int, int] | None, out: list[int], limit: int | None = None) -> None:
    """Append a repeated int field's values to ``out`` (one varint, or a packed run of them), up to ``limit``."""
    if isinstance(value, int):
        out.append(_int64(value))
    elif isinstance(value, tuple):
        position, end = value
        while position < end and (limit is None or len(out) < limit):
            item, position = _varint(data, position, end)
            out.append(_int64(item))


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


#: Nodes whose first input passes to their output with its values unchanged (types and shapes aside).
_PASS_THROUGH = frozenset({"Cast", "CastLike", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand"})
#: The longest path followed back from a position lookup to its count (RoBERTa's is 3 nodes deep).
_PATH_LIMIT = 32


@dataclass(frozen=True)
class _Node:
    op: str
    inputs: tuple[str, ...]
    attributes: tuple[tuple[int, int], ...]  # AttributeProto spans, read only where needed


def _node(data: Any, span: tuple[int, int]) -> tuple[_Node, list[str]]:
    """A NodeProto's op type, inputs and attribute spans, and its outputs."""
    op, inputs, outputs, attributes = "", [], [], []
    for number, value in _fields(data, *span):
        if number == 1:
            inputs.append(_text(data, value))
        elif number == 2:
            outputs.append(_text(data, value))
        elif number == 4:
            op = _text(data, value)
        elif number == 5:
            attributes.append(_span(value))
    return _Node(op, tuple(inputs), tuple(attributes)), outputs


def _attribute(data: Any, node: _Node, name: str) -> int | tuple[int, int] | None:
    """An attribute's int (``i``) or tensor span (``t``); None when the node does not set it."""
    for span in node.attributes:
        found, value = None, None
        for number, item in _fields(data, *span):
            if number == 1:
                found = _text(data, item)
            elif number == 3 and isinstance(item, int):
                value = _int64(item)
            elif number == 5 and isinstance(item, tuple):
                value = item
        if found == name:
            return value
    return None


def _scalar(data: Any, span: tuple[int, int]) -> int | None:
    """The value of a TensorProto holding one int32 or int64 (None: another type, size or an external file)."""
    dims, kind, values, raw = [], 0, [], None
    for number, value in _fields(data, *span):
        if number == 1:
            _read_ints(data, value, dims)
        elif number == 2 and isinstance(value, int):
            kind = value
        elif number in (5, 7):
            _read_ints(data, value, values, limit=2)  # two are enough to tell it is not a scalar
        elif number == 9 and isinstance(value, tuple):
            raw = value
    if kind not in (6, 7) or any(dim != 1 for dim in dims):
        return None
    if raw is not None:
        start, end = raw
        if end - start != (4 if kind == 6 else 8):
            return None
        return int.from_bytes(bytes(data[start:end]), "little", signed=True)
    return values[0] if len(values) == 1 else None


def _position_starts(data: Any, nodes: list[tuple[int, int]], initializers: dict[str, tuple[int, int]],
                     tables: dict[str, int]) -> dict[str, int]:
    """For each position table the graph indexes with counted positions, the row its first token takes.

    A ``Gather`` of the table along axis 0 whose indices are, through value-preserving nodes
    (:data:`_PASS_THROUGH`), ``CumSum(mask) * mask`` plus scalar integer constants ``c`` (``Add`` nodes before or
    after the product: RoBERTa's ``padding_idx``, older exports' ``past_key_values_length`` of 0) takes rows
    from ``1 + sum(c)`` on (an inclusive cumulative sum counts the first attended token as 1).  A table gathered
    more than once takes its largest start; any other shape (BERT's sliced ``arange``, an exclusive or reversed
    sum, a start outside the table) leaves the table out.
    """
    producers: dict[str, _Node] = {}
    gathers: list[_Node] = []
    for span in nodes:
        node, outputs = _node(data, span)
        for output in outputs:
            producers[output] = node
        if node.op == "Gather" and len(node.inputs) == 2 and node.inputs[0] in tables:
            gathers.append(node)

    def constant(name: str) -> int | None:
        if name in initializers:
            return _scalar(data, initializers[name])
        node = producers.get(name)
        if node is None or node.op != "Constant":
            return None
        value = _attribute(data, node, "value")
        if isinstance(value, tuple):
            return _scalar(data, value)
        value = _attribute(data, node, "value_int")
        return value if isinstance(value, int) else None

    def counted_from(name: str, budget: int) -> int | None:
        """The first row of ``name`` where it counts attended tokens from 1 plus constants; None otherwise."""
        added = 0
        for _ in range(budget):
            node = producers.get(name)
            if node is None or not node.inputs:
                return None
            if node.op in _PASS_THROUGH:
                name = node.inputs[0]
            elif node.op == "Add" and len(node.inputs) == 2:
                values = [constant(i) for i in node.inputs]
                known = [(value, other) for value, other in zip(values, reversed(node.inputs)) if value is not None]
                if len(known) != 1:  # no constant, or two
                    return None
                added, name = added + known[0][0], known[0][1]
            elif node.op == "Mul" and len(node.inputs) == 2:  # the count times the mask (1 on attended tokens)
                if any(constant(i) is not None for i in node.inputs):
                    return None
                found = [start for start in (counted_from(i, budget // 2) for i in node.inputs) if start is not None]
                return added + found[0] if len(found) == 1 else None
            elif node.op == "CumSum":
                if _attribute(data, node, "exclusive") or _attribute(data, node, "reverse"):
                    return None
                return added + 1
            else:
                return None
        return None

    starts: dict[str, int] = {}
    for node in gathers:
        table = node.inputs[0]
        start = counted_from(node.inputs[1], _PATH_LIMIT) if _attribute(data, node, "axis") in (None, 0, -2) else None
        if start is None or not 0 < start < tables[table]:
            continue
        starts[table] = max(start, starts.get(table, 0))
    return starts
