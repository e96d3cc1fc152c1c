"""Content fingerprints: what artifact keys hash.

A key must change when anything its stage reads changes and stay put otherwise, so
values are hashed by *content*, never by ``repr`` (NumPy abbreviates long arrays in
its repr).  Arrays hash their dtype, shape and bytes; sparse matrices hash their
canonical CSR form (sorted indices, duplicates summed) under a type-independent tag,
so ``csr_matrix`` and ``csr_array`` holding the same data agree.  Containers hash
their items in order (mappings by sorted key), each item tagged with its type, so
``1``, ``1.0``, ``True`` and ``"1"`` never collide.  A container of lazily loaded inputs
(image files, audio) declares its content digest with a ``__vertebrae_content__()`` method.

Callables are identified by what they compute, never by name alone: a module-level
function by its qualified name, a hash of its source, its default values and the module globals
it reads (followed through the functions of its own module it calls); anything else by a declared
identity (a ``__vertebrae_identity__()`` method any object may define, or a
``cache_identity`` string).  What cannot be identified that way (a lambda, a closure, a
bound method of an opaque object, an estimator with ``random_state=None``, an object
with no content hash) becomes an :data:`UNIDENTIFIED` marker in the canonical
document; :func:`identified` finds it, and the run context then keys that object by a
token unique to it within the run and never reuses its artifacts across runs.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import dis
import functools
import hashlib
import inspect
import math
import types
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from .sparse import is_sparse
from ..errors import InputTypeError


def content_sha256(value: Any) -> str:
    """SHA-256 of ``value``'s content (arrays, sparse matrices, scalars, strings, containers)."""
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()


#: The key :func:`canonical` writes where it met a value whose behaviour it cannot identify.
UNIDENTIFIED = "__unidentified__"


def canonical(value: Any) -> Any:
    """A JSON-safe canonical stand-in for ``value``: arrays become ``{"sha256": ...}`` of their content.

    Used for recipes and parameters, so a key is readable JSON yet content-aware.  A value
    that cannot be identified across runs becomes ``{UNIDENTIFIED: <its type or name>}``
    (see :func:`identified`).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else {"float": repr(value)}
    if not isinstance(value, type) and callable(getattr(type(value), "__vertebrae_identity__", None)):
        return {"declared": callable_name(type(value)), "identity": canonical(value.__vertebrae_identity__())}
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, type):  # before the estimator test: an estimator class has get_params too, unbound
        return {"type": f"{value.__module__}.{value.__qualname__}"}
    if hasattr(value, "get_params") and callable(value.get_params):  # a nested scikit-learn estimator
        params = value.get_params(deep=False)
        document = {"estimator": f"{type(value).__module__}.{type(value).__qualname__}", "params": canonical(params)}
        if "random_state" in params and params["random_state"] is None:  # unseeded: each fit may differ
            document[UNIDENTIFIED] = "random_state=None"
        return document
    if callable(value):
        return _callable(value)
    try:
        return {"content": content_sha256(value)}
    except InputTypeError:
        return _declared_or_unidentified(value)


def identified(document: Any) -> bool:
    """False when a canonical document holds an :data:`UNIDENTIFIED` marker at any depth."""
    if isinstance(document, Mapping):
        return UNIDENTIFIED not in document and all(identified(v) for v in document.values())
    if isinstance(document, (list, tuple)):
        return all(identified(v) for v in document)
    return True


def callable_identity(fn: Any, cache_identity: str | None = None) -> Any:
    """What stands for a wrapper's function in its identity.

    With the wrapper's declared ``cache_identity`` (which vouches for the code) a function
    that cannot be identified is named instead of marked; otherwise it is :func:`canonical`.
    """
    document = canonical(fn)
    if cache_identity is not None and not identified(document):
        return {"callable": callable_name(fn)}
    return document


def function_source(fn: Any) -> str | None:
    """The source of a plain module-level function (or a method of a module-level class), else None.

    Lambdas, closures and nested functions can capture state their source does not show, and a
    function defined in a REPL has no source to read.
    """
    if not (isinstance(fn, types.FunctionType) and fn.__closure__ is None and fn.__name__ != "<lambda>"
            and "<locals>" not in fn.__qualname__):
        return None
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def source_identity(fn: Any, source: str) -> dict[str, Any]:
    """A function's qualified name and the SHA-256 of its source."""
    return {"callable": callable_name(fn), "source_sha256": hashlib.sha256(source.encode()).hexdigest()}


def function_document(fn: Any, _seen: frozenset[int] = frozenset()) -> dict[str, Any] | None:
    """A module-level function's identity: its name and source hash plus what the source names but does not
    hold — default values and the module globals it reads — or None when it has no source (a lambda, a closure).

    ``W = np.eye(6); def f(X): return X @ W`` reads ``W``: rebinding ``W`` changes what ``f`` computes, so its
    content is part of ``f``'s identity.  A global that cannot be hashed (an open model, a random generator)
    makes the function unidentified, so it is cached only with a declared ``cache_identity``.
    """
    source = function_source(fn)
    if source is None:
        return None
    document = source_identity(fn, source)
    if fn.__defaults__ or fn.__kwdefaults__:
        document["defaults"] = canonical([list(fn.__defaults__ or ()), dict(fn.__kwdefaults__ or {})])
    seen = _seen | {id(fn)}
    read = {name: _global_value(fn.__globals__[name], fn.__module__, seen)
            for name in sorted(_global_names(fn.__code__)) if name in fn.__globals__}
    if read:
        document["globals"] = read
    return document


def _global_names(code: types.CodeType) -> set[str]:
    """The global names ``code`` loads, nested code (comprehensions, inner functions, lambdas) included."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _global_value(value: Any, module: str, seen: frozenset[int]) -> Any:
    """What stands for one global a function reads: a module by name, a function of the same module with its own
    globals (once: recursion is named, not followed), a function or routine of another module by name and source,
    anything else by content (:func:`canonical`).  Code another module supplies (a module, its functions, classes
    and estimators) also carries the version of the installed distribution it comes from, since what it computes
    changes with that version, not with anything the key could read; data is its content under any version."""
    if isinstance(value, types.FunctionType) and value.__module__ == module:
        if id(value) in seen:
            return {"callable": callable_name(value)}
        document = function_document(value, seen)
        return document if document is not None else _callable(value)
    if isinstance(value, types.ModuleType):
        document, owner = {"module": value.__name__}, value.__name__
    elif isinstance(value, types.FunctionType):
        source = function_source(value)
        document = source_identity(value, source) if source is not None else _callable(value)
        owner = value.__module__
    elif inspect.isroutine(value) or isinstance(value, np.ufunc):  # builtins, NumPy functions and ufuncs
        document, owner = {"callable": callable_name(value)}, getattr(value, "__module__", None)
    elif isinstance(value, type) or callable(getattr(value, "get_params", None)):  # code: a class, an estimator
        document = canonical(value)
        owner = value.__module__ if isinstance(value, type) else type(value).__module__
    else:  # data, by content: the same content computes the same under any version
        return canonical(value)
    distribution = _distribution_of(owner)
    if distribution is not None and isinstance(document, dict):
        document = {**document, "distribution": f"{distribution}=={package_version(distribution)}"}
    return document


@functools.lru_cache(maxsize=None)
def _distribution_of(module: str | None) -> str | None:
    """The installed distribution that provides ``module`` (``scipy.signal`` -> ``scipy``), or None: the standard
    library, a script, a module of the user's own that is not installed, or builtins."""
    if not module:
        return None
    found = _import_names().get(module.split(".", 1)[0])
    return sorted(found)[0] if found else None


@functools.lru_cache(maxsize=1)
def _import_names() -> dict[str, list[str]]:
    from importlib.metadata import packages_distributions

    return packages_distributions()


def _callable(fn: Any) -> Any:
    document = function_document(fn)
    if document is not None:
        return document
    if isinstance(fn, functools.partial):
        return {"partial": canonical(fn.func), "args": canonical(list(fn.args)), "keywords": canonical(fn.keywords)}
    if isinstance(fn, types.MethodType):  # the method's code and the object it is bound to
        return {"method": canonical(fn.__func__), "self": canonical(fn.__self__)}
    return _declared_or_unidentified(fn)


def _declared_or_unidentified(value: Any) -> dict[str, Any]:
    """A declared ``cache_identity`` string, else the :data:`UNIDENTIFIED` marker."""
    declared = getattr(value, "cache_identity", None)
    if isinstance(declared, str) and declared.strip():
        return {"callable": callable_name(value), "cache_identity": declared}
    return {UNIDENTIFIED: callable_name(value)}


@functools.cache
def package_version(name: str) -> str:
    """Installed version of a distribution (cached: keys and results ask for it many times per run)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not-installed"


def declared_identity(owner: Any, document: Mapping[str, Any]) -> dict[str, Any]:
    """The one rule for the identity of a shipped extractor or encoder (what keys its embeddings).

    ``document`` says what it computes: every constructor argument but the ones its class
    declares ``speed_only`` (proven by a test to leave the outputs bitwise identical), models by
    content.  Added here: the class's code ``version`` (pinned to its source by
    tests/test_code_versions.py, so a change of outputs cannot go unversioned) and the installed
    version of each distribution it declares in ``computes_with`` (none when it declares none).
    """
    cls = type(owner)
    return {**{k: v for k, v in document.items() if k != "name"},
            "code": {"class": callable_name(cls), "version": cls.version},
            "packages": {name: package_version(name) for name in getattr(owner, "computes_with", ())}}


def check_cache_identity(owner: str, cache_identity: Any) -> str | None:
    """A declared identity of user code: a non-empty string you change whenever the code's behaviour does."""
    if cache_identity is not None and (not isinstance(cache_identity, str) or not cache_identity.strip()):
        raise InputTypeError(f"{owner}: cache_identity must be a non-empty string that changes whenever the "
                             f"function's behaviour does (e.g. 'my_features-v2'), got {cache_identity!r}")
    return cache_identity


def callable_name(fn: Any) -> str:
    """``module.qualname`` of a function, or of the type of a callable object."""
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(target, '__module__', '?')}.{target.__qualname__}"


def _feed(digest: Any, value: Any) -> None:
    if is_sparse(value):
        csr = value if value.format == "csr" else value.tocsr()
        if not csr.has_canonical_format:  # hash one canonical form; copy only when it differs
            csr = csr.copy()
            csr.sum_duplicates()
        digest.update(f"sparse|{csr.shape}|{csr.dtype.str}|".encode())
        for part in (csr.indptr, csr.indices):  # index dtype (int32/int64) must not change the hash
            _feed_chunked(digest, part, np.int64)
        _feed_chunked(digest, csr.data, csr.data.dtype)
        return
    declared = getattr(type(value), "__vertebrae_content__", None)
    if declared is not None:  # lazily loaded inputs (image files, audio) hash what they load, not their Python form
        digest.update(f"declared|{declared(value)}|".encode())
        return
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            digest.update(f"objarray|{value.shape}|".encode())
            for item in value.ravel().tolist():
                _feed(digest, item)
            return
        digest.update(f"array|{value.shape}|{value.dtype.str}|".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
        return
    tag, payload = _scalar(value)
    if tag is not None:
        digest.update(f"{tag}:{len(payload)}:".encode())
        digest.update(payload)
        return
    if isinstance(value, Mapping):
        digest.update(f"map|{len(value)}|".encode())
        for key in sorted(value, key=lambda k: content_sha256(k)):
            _feed(digest, key)
            _feed(digest, value[key])
        return
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=content_sha256) if isinstance(value, (set, frozenset)) else value
        digest.update(f"{type(value).__name__ if isinstance(value, (set, frozenset)) else 'seq'}|{len(value)}|".encode())
        for item in items:
            _feed(digest, item)
        return
    raise InputTypeError(f"cannot fingerprint a {type(value).__name__} by content; pass arrays, sparse matrices, "
                         "strings, bytes, numbers or lists of them, or declare the dataset's identity")


_CHUNK = 1 << 20


def _feed_chunked(digest: Any, array: np.ndarray, dtype: Any) -> None:
    """Feed ``array`` as ``dtype`` in bounded chunks (no full-size converted copy)."""
    for start in range(0, array.size, _CHUNK):
        digest.update(np.ascontiguousarray(array[start:start + _CHUNK], dtype=dtype).tobytes())


def _scalar(value: Any) -> tuple[str | None, bytes]:
    """(type tag, canonical bytes) of a scalar, or (None, b"") when ``value`` is not one."""
    if value is None:
        return "none", b""
    if isinstance(value, (bool, np.bool_)):
        return "bool", b"1" if value else b"0"
    if isinstance(value, (int, np.integer)):
        return "int", str(int(value)).encode()
    if isinstance(value, (float, np.floating)):
        return "float", float(value).hex().encode()
    if isinstance(value, str):
        return "str", value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes", bytes(value)
    if isinstance(value, decimal.Decimal):
        return "decimal", str(value).encode()
    if isinstance(value, uuid.UUID):
        return "uuid", value.bytes
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return type(value).__name__, value.isoformat().encode()
    if isinstance(value, np.generic):
        return f"np.{value.dtype.str}", value.tobytes()
    return None, b""
