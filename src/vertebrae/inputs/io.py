"""Reading embedding matrices, labels and config files from disk for the CLI.

Formats: ``.npy`` (dense), ``.npz`` (SciPy sparse via ``save_npz``, or a NumPy archive
holding one array), ``.parquet`` and ``.csv`` (numeric columns; a CSV header is
detected).  Errors name the file and say what was expected.

Config files are read within bounds (a hostile or mistaken file must fail fast, not fill memory):
at most :data:`MAX_CONFIG_BYTES`, and a YAML document at most :data:`MAX_CONFIG_NODES` values with
its aliases expanded (a YAML "billion laughs" of a few hundred bytes otherwise expands to gigabytes
when the config is hashed or written into a plan); recursive aliases and nesting deeper than Python's
recursion limit are refused too.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from .._base.files import NotRegularFileError, check_regular, open_regular
from ..errors import DependencyError, InputValidationError
from .._base.extras import install_hint
from .targets import TargetSource

MATRIX_SUFFIXES = (".npy", ".npz", ".parquet", ".csv")
#: Largest run configuration file read: a config names its data files, it does not hold data.
MAX_CONFIG_BYTES = 1 << 20
#: Most values (scalars, lists, mappings) a YAML config may hold once its aliases are expanded.
MAX_CONFIG_NODES = 100_000


def _existing(path: str | pathlib.Path, what: str) -> pathlib.Path:
    """``path`` if it is a regular file; a FIFO, socket or device is refused by name (opening one would hang or
    never end), anything else does not exist."""
    path = pathlib.Path(path)
    try:
        check_regular(path)
    except NotRegularFileError as exc:
        raise InputValidationError(f"the {what} file {str(path)!r} is {exc.kind}, not a regular file; vertebrae "
                                   "reads only regular files: point the config at the file itself") from None
    if not path.is_file():
        found = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise InputValidationError(f"{what} file {str(path)!r} {found}")
    return path


def load_matrix(path: str | pathlib.Path) -> Any:
    """Load an embedding matrix (dense ndarray or CSR) from one of MATRIX_SUFFIXES."""
    path = _existing(path, "embeddings")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _load_numpy(path, "embeddings")
    if suffix == ".npz":
        from scipy import sparse

        with _load_numpy(path, "embeddings") as archive:
            names = list(archive.files)
            if {"format", "shape", "data"} <= set(names):
                return sparse.load_npz(path)
            if len(names) != 1 and "embeddings" not in names:
                raise InputValidationError(f"{path}: a .npz must be a scipy.sparse.save_npz file or hold one array "
                                           f"(or one named 'embeddings'); found {names}")
            return archive["embeddings" if "embeddings" in names else names[0]]
    if suffix == ".parquet":
        return _numeric_frame(_read_parquet(path), path)
    if suffix == ".csv":
        import pandas as pd

        return _numeric_frame(pd.read_csv(path, header=0 if _csv_has_header(path) else None), path)
    raise InputValidationError(f"{path}: unsupported embeddings format {suffix!r}; use one of {list(MATRIX_SUFFIXES)}")


def _load_numpy(path: pathlib.Path, what: str) -> Any:
    """``np.load`` of a ``.npy`` file or ``.npz`` archive, never unpickling, with a message naming the file instead of
    numpy's (a text file named ``.npy`` reads as "pickled (object) data" there)."""
    import zipfile

    if path.suffix.lower() == ".npz":
        expected, right_kind = "a .npz archive (numpy.savez or scipy.sparse.save_npz)", zipfile.is_zipfile(path)
    else:
        with open_regular(path) as handle:
            expected, right_kind = "a .npy file (numpy.save)", handle.read(6) == b"\x93NUMPY"
    if not right_kind:
        raise InputValidationError(f"{path}: the {what} file is not {expected}; save the array with numpy, or name "
                                   "the file with the suffix of its real format")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        reason = "it holds Python objects, which are never unpickled" if "pickle" in str(exc) else str(exc)
        raise InputValidationError(f"{path}: the {what} file cannot be read as {expected}: {reason}; save a "
                                   "numeric (or string) array with numpy") from None


def _read_parquet(path: pathlib.Path) -> Any:
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except ImportError as exc:  # pandas needs pyarrow (or fastparquet) for parquet
        raise DependencyError(f"{path}: reading parquet needs pyarrow; {install_hint('parquet')} ({exc})") from None


def _csv_has_header(path: pathlib.Path) -> bool:
    """A first line that is not all numbers, or is exactly 0, 1, ..., d-1 (what ``DataFrame.to_csv`` writes
    for unnamed columns), is a header."""
    with path.open(encoding="utf-8") as handle:
        first = handle.readline().strip().split(",")
    try:
        values = [float(field) for field in first]
    except ValueError:
        return True
    return values == [float(i) for i in range(len(values))]


def _numeric_frame(frame: Any, path: pathlib.Path) -> np.ndarray:
    bad = [str(c) for c, dtype in frame.dtypes.items() if not (dtype.kind in "biuf")]
    if bad:
        raise InputValidationError(f"{path}: embedding columns must be numeric; non-numeric column(s) {bad[:5]}")
    return frame.to_numpy()


def load_column(path: str | pathlib.Path, column: str | None, what: str) -> Any:
    """Load labels / groups / regression targets: one value per row.

    ``.npy`` arrays are used as they are (2-D allowed for indicators and multi-output
    regression); ``.txt`` is one string per line; ``.csv`` / ``.parquet`` need
    ``column`` unless the table has exactly one column (a list of columns is allowed
    for multi-output regression).
    """
    path = _existing(path, what)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _load_numpy(path, what)
    if suffix == ".txt":
        lines = path.read_text(encoding="utf-8").splitlines()
        _reject_lines(path, what, [n for n, line in enumerate(lines, 1) if not line.strip()], "are blank",
                      header=False)
        return lines
    if suffix in (".csv", ".parquet"):
        import pandas as pd

        if suffix == ".csv":
            _check_csv_lines(path, what)
        # labels are text: "NA" or "None" are class names here; only an empty cell is missing
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""]) if suffix == ".csv" else _read_parquet(path)
        if column is None:
            if frame.shape[1] != 1:
                several = (", or a list of them (0/1 multi-label indicators, named by their columns, or regression "
                           "targets)") if what == "labels" else ""
                raise InputValidationError(f"{path} has columns {list(frame.columns)}; name the {what} column in the "
                                           f"config ({what}_column = \"...\"{several})")
            return frame.iloc[:, 0].tolist()
        columns = [column] if isinstance(column, str) else list(column)
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise InputValidationError(f"{path}: {what} column(s) {missing} not found; columns are {list(frame.columns)}")
        return frame[columns[0]].tolist() if isinstance(column, str) else frame[columns].to_numpy()
    raise InputValidationError(f"{path}: unsupported {what} format {suffix!r}; use .npy, .txt, .csv or .parquet")


def labels_source(path: str | pathlib.Path, given: str | pathlib.Path, column: Any,
                  role: str = "labels") -> TargetSource:
    """Where a labels file's rows are, for messages: the file as the config names it, its column, and (for
    ``.txt`` and ``.csv``) the line an editor shows for each row.  Read after :func:`load_column` accepted
    the file, so every line holds one row."""
    import csv

    path = pathlib.Path(path)
    columns = "" if column is None else f", column {column!r}" if isinstance(column, str) else f", columns {list(column)}"
    description = f"the {role} file {str(given)!r}{columns}"
    suffix = path.suffix.lower()
    if suffix == ".txt":
        return TargetSource(description, tuple(range(1, len(path.read_text(encoding="utf-8").splitlines()) + 1)))
    if suffix != ".csv":
        return TargetSource(description)
    lines = []
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None) or []
        if column is None and len(header) == 1:  # the file's only column, named by its header
            description += f", column {header[0]!r}"
        end = reader.line_num
        for _ in reader:  # a quoted cell may span lines: a row starts on the line after the previous one ends
            lines.append(end + 1)
            end = reader.line_num
    return TargetSource(description, tuple(lines))


def _reject_lines(path: pathlib.Path, what: str, numbers: list[int], problem: str, *, header: bool = True) -> None:
    """Name the offending lines (1-based, as editors number them) instead of letting rows shift."""
    if numbers:
        shown = ", ".join(map(str, numbers[:5])) + (", ..." if len(numbers) > 5 else "")
        lines = "every line after the header" if header else "every line (a .txt file has no header)"
        raise InputValidationError(f"{path}: line(s) {shown} of the {what} file {problem} ({len(numbers)} line(s)); "
                                   f"{lines} must hold one row: fix or delete those lines")


def _check_csv_lines(path: pathlib.Path, what: str) -> None:
    """Blank lines (which pandas skips silently) and lines whose field count differs from the header's."""
    import csv

    blank, malformed = [], []
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise InputValidationError(f"{path}: the {what} file is empty")
        for row in reader:
            if not row or (len(row) == 1 and row[0] and not row[0].strip()):  # '""' is an empty cell, not blank
                blank.append(reader.line_num)
            elif len(row) != len(header):
                malformed.append((reader.line_num, len(row)))
    _reject_lines(path, what, blank, "are blank")
    _reject_lines(path, what, [n for n, _ in malformed],
                  f"have a field count other than the header's {len(header)} "
                  f"(line {malformed[0][0]} has {malformed[0][1]})" if malformed else "")


def file_record(role: str, given: str | pathlib.Path, path: pathlib.Path) -> dict[str, Any]:
    """Provenance of one input file: the path as the user wrote it, its size and SHA-256 of its bytes."""
    import hashlib

    digest = hashlib.sha256()
    with open_regular(_existing(path, role)) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"role": role, "path": str(given), "size_bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def load_config_file(path: str | pathlib.Path) -> dict[str, Any]:
    """Parse a TOML (``.toml``) or YAML (``.yaml``/``.yml``) run configuration, within the bounds above."""
    path = _existing(path, "config")
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise InputValidationError(f"{path}: config must be .toml, .yaml or .yml, got {suffix!r}")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise InputValidationError(f"{path}: the config file has {size} bytes, more than the {MAX_CONFIG_BYTES} a run "
                                   "configuration may have; keep data in the files the config names")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputValidationError(f"{path}: the config file is not UTF-8 text ({exc})") from None
    try:
        data = _parse_toml(path, text) if suffix == ".toml" else _parse_yaml(path, text)
    except RecursionError:
        raise InputValidationError(f"{path}: the config is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise InputValidationError(f"{path}: the YAML document must be a mapping of sections")
    return data


def _parse_toml(path: pathlib.Path, text: str) -> Any:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputValidationError(f"{path}: invalid TOML: {exc}") from None


def _parse_yaml(path: pathlib.Path, text: str) -> Any:
    """``yaml.safe_load`` that measures the document with its aliases expanded before building it."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        def get_single_data(self) -> Any:
            node = self.get_single_node()
            if node is None:
                return None
            _check_expanded_size(path, node)
            return self.construct_document(node)

    try:
        return yaml.load(text, Loader=BoundedLoader)  # a SafeLoader subclass: no Python objects
    except yaml.YAMLError as exc:
        raise InputValidationError(f"{path}: invalid YAML: {_yaml_problem(exc, text)}") from None


def _yaml_problem(exc: Any, text: str) -> str:
    """PyYAML's multi-line message (naming ``<unicode string>`` and quoting the text) as one line with the line
    and column, 1-based, as TOML's errors and editors give them."""
    import yaml

    def at(line: int, column: int) -> str:
        return f"line {line + 1}, column {column + 1}"

    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow: a position in the text
        before = text[:exc.position]
        shown = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        return f"unacceptable character {shown}: {exc.reason} (at {at(before.count(chr(10)), len(before) - before.rfind(chr(10)) - 1)})"
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return " ".join(str(exc).replace('in "<unicode string>", ', "").split())
    message = f"{exc.problem} (at {at(exc.problem_mark.line, exc.problem_mark.column)}"
    if exc.context:
        start = exc.context_mark
        message += f"; {exc.context}" + ("" if start is None else f" started at {at(start.line, start.column)}")
    return message + ")"


def _check_expanded_size(path: pathlib.Path, root: Any) -> None:
    """Count the values of a composed YAML document as if every alias were copied out (each node once, memoized,
    so a nested alias bomb costs its text size, not its expansion), refusing cycles and more than
    MAX_CONFIG_NODES values."""
    import yaml

    def children(node: Any) -> list[Any]:
        if isinstance(node, yaml.MappingNode):
            return [part for pair in node.value for part in pair]
        return list(node.value) if isinstance(node, yaml.SequenceNode) else []

    sizes: dict[int, int] = {}
    entered: set[int] = set()
    stack = [root]
    while stack:
        node = stack[-1]
        if id(node) in sizes:
            stack.pop()
        elif id(node) not in entered:
            entered.add(id(node))
            for child in children(node):
                if id(child) in entered and id(child) not in sizes:
                    raise InputValidationError(f"{path}: the YAML config refers to itself through an alias "
                                               f"(line {child.start_mark.line + 1}); write the values out")
                stack.append(child)
        else:
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children(node))
            if sizes[id(node)] > MAX_CONFIG_NODES:
                raise InputValidationError(f"{path}: the YAML config holds more than {MAX_CONFIG_NODES} values with "
                                           "its aliases (&anchor / *alias) expanded (at the value on line "
                                           f"{node.start_mark.line + 1}); keep data in the files the config names")
            stack.pop()
