"""Code versions that cannot go stale: every shipped stage and extractor is pinned to a hash of its source.

A key holds a stage's ``version`` (its ``@stage`` declaration) and an extractor's class ``version``
(in its identity), never its source, so an edit that changes outputs must come with a version bump
or a store keeps serving what the old code computed.  This test pins ``[version, sha256 of the
source]`` of each in tests/code_versions.json and fails on any source change until the pin is
updated: bump the version when the outputs can change, then rewrite the pins with
``VERTEBRAE_UPDATE_CODE_PINS=1 pytest tests/test_code_versions.py``.

An extractor's source is its class's plus that of every vertebrae base class it inherits from
(``BatchedExtractor``, ``LayerPoolingExtractor``); a stage's is its function's.  Both add the source of
every vertebrae function and class their code names, transitively — module globals, attributes of an
imported vertebrae module and function-level imports — so an edit of a helper such as ``pool`` or
``run_stability_analysis`` cannot change outputs unversioned either.
"""

from __future__ import annotations

import dis
import hashlib
import importlib
import inspect
import types
import json
import os
import pathlib

from vertebrae.execution import registry

PINS = pathlib.Path(__file__).with_name("code_versions.json")
#: The modules whose classes are the shipped extractors and encoders.
EXTRACTOR_MODULES = ("vertebrae.extractors.base", "vertebrae.extractors.huggingface", "vertebrae.extractors.hf_vision",
                     "vertebrae.extractors.hf_audio", "vertebrae.extractors.sentence_transformers",
                     "vertebrae.extractors.onnx", "vertebrae.extractors.onnx_text", "vertebrae.extractors.torch", "vertebrae.extractors.keras",
                     "vertebrae.extractors.jax", "vertebrae.families.retrieval.extractors", "vertebrae.families.zero_shot.encoders",
                     "vertebrae.families.zero_shot.image_text", "vertebrae.inputs.multimodal")
STAGE_MODULES = ("vertebrae.families.labeled.stages", "vertebrae.families.retrieval.stages", "vertebrae.families.zero_shot.stages",
                 "vertebrae.selection.screening_stages")


def shipped_extractors() -> dict[str, type]:
    """Every class defined in an extractor module that declares its own code version (the identity rule's classes)."""
    found = {}
    for module_name in EXTRACTOR_MODULES:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == module_name and "version" in vars(value) \
                    and not getattr(value, "_is_protocol", False):
                found[f"{module_name}.{value.__qualname__}"] = value
    return found


def shipped_stages() -> dict[str, registry.StageDefinition]:
    for module_name in STAGE_MODULES:
        importlib.import_module(module_name)
    return {f"{d.pipeline}/{d.name}": d for stages in registry._REGISTRY.values() for d in stages.values()
            if d.function.__module__ in STAGE_MODULES}


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _ours(value: object) -> bool:
    return (inspect.isfunction(value) or inspect.isclass(value)) and getattr(value, "__module__", "").startswith(
        "vertebrae.")


def _code_objects(value: object) -> list[types.CodeType]:
    """The code of a function, or of every function defined in a class body (methods, properties, static ones)."""
    members = [value] if inspect.isfunction(value) else list(vars(value).values())
    found = []
    for member in members:
        for attribute in ("fget", "fset", "__func__"):
            member = getattr(member, attribute, member)
        if inspect.isfunction(member):
            found.append(member.__code__)
    return found


def _named(code: types.CodeType, module: types.ModuleType) -> list[object]:
    """The vertebrae functions and classes a code object names: globals, module attributes, function-level imports."""
    found: list[object] = []
    namespace = vars(module)
    modules = [v for v in namespace.values() if inspect.ismodule(v) and v.__name__.startswith("vertebrae")]
    imported: types.ModuleType | None = None
    for instruction in dis.get_instructions(code):
        if instruction.opname == "IMPORT_NAME":
            level = next((i.argval for i in dis.get_instructions(code) if i.offset == instruction.offset - 4), 0)
            name = ("." * int(level or 0)) + (instruction.argval or "")
            try:
                imported = importlib.import_module(importlib.util.resolve_name(name, module.__package__))
            except (ImportError, ValueError):
                imported = None
        elif instruction.opname == "IMPORT_FROM" and imported is not None:
            value = getattr(imported, instruction.argval, None)
            if inspect.ismodule(value) and value.__name__.startswith("vertebrae"):
                modules.append(value)
            found.append(value)
        elif instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            found.append(namespace.get(instruction.argval))
        elif instruction.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            found += [getattr(m, instruction.argval, None) for m in modules]
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found += _named(constant, module)
    return [value for value in found if _ours(value)]


def pinned_source(*roots: object) -> str:
    """The source of ``roots`` and of every vertebrae function and class they name, transitively, in a fixed order."""
    seen: dict[str, object] = {}
    pending = list(roots)
    while pending:
        value = pending.pop()
        name = f"{value.__module__}.{value.__qualname__}"
        if name in seen:
            continue
        seen[name] = value
        module = importlib.import_module(value.__module__)
        for code in _code_objects(value):
            pending += _named(code, module)
    return "".join(inspect.getsource(seen[name]) for name in sorted(seen))


def extractor_source(cls: type) -> str:
    return pinned_source(*(c for c in cls.__mro__ if c.__module__.startswith("vertebrae.")))


def current_pins() -> dict[str, list]:
    pins = {f"stage:{name}": [d.version, _sha256(pinned_source(d.function))] for name, d in shipped_stages().items()}
    pins.update({f"extractor:{name}": [cls.version, _sha256(extractor_source(cls))]
                 for name, cls in shipped_extractors().items()})
    return dict(sorted(pins.items()))


def test_every_stage_and_extractor_source_matches_its_pinned_version():
    current = current_pins()
    if os.environ.get("VERTEBRAE_UPDATE_CODE_PINS") == "1":
        PINS.write_text("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in current.items()) + "\n}\n")
    pinned = json.loads(PINS.read_text())
    problems = []
    for name, (version, digest) in current.items():
        if name not in pinned:
            problems.append(f"{name} (version {version}) is not pinned: add it")
        elif pinned[name][1] != digest and pinned[name][0] == version:
            problems.append(f"{name}'s source changed but its version is still {version}: if its outputs can change, "
                            f"bump its version to {version + 1}; then update the pin")
        elif pinned[name] != [version, digest]:
            problems.append(f"{name}: version {version} is not the pinned {pinned[name][0]}: update the pin")
    problems += [f"{name} is pinned but no longer shipped: remove its pin" for name in pinned if name not in current]
    assert current["extractor:vertebrae.extractors.huggingface.HFTextExtractor"][0] == 2  # longest-first batching
    assert len([name for name in current if name.startswith("extractor:")]) == 20
    assert not problems, ("\n".join(problems) + "\n(rewrite tests/code_versions.json with "
                                               "VERTEBRAE_UPDATE_CODE_PINS=1 pytest tests/test_code_versions.py)")

