"""ZeroShotDataset: a single-label dataset plus the ordered prompt declaration of every class.

The prompts *are* the zero-shot protocol: change one word and the classifier
changes.  So the declaration is validated completely when the dataset is built
(every observed class has at least one non-empty prompt, no prompt twice within a
class, no prompt shared by two classes) and its ordered form — classes in label
catalog order, each class's prompts in the order given — is fingerprinted and stored
in every result.  Class display text comes from the label catalog, so typed labels
(``1``, ``"1"``, ``True``) stay distinct classes.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Mapping, Sequence
from typing import Any

from ...inputs.datasets import BenchmarkDataset, FactAnswer, dataset_fact, inputs_sha256, targets_sha256
from ...errors import InputTypeError, InputValidationError
from ..._base.fingerprint import content_sha256
from ...inputs.labels import semantic_key
from ...inputs.targets import SingleLabelTargets

_FINGERPRINT_VERSION = "vertebrae.families.zero_shot.prompts/1"


@dataclasses.dataclass(frozen=True, eq=False)
class ZeroShotDataset:
    """A single-label source dataset and, per class (catalog order), its ordered prompts.

    Build it with :meth:`from_templates` (one prompt per template and class) or
    :meth:`from_prompts` (fully rendered prompts per class).
    """

    source: BenchmarkDataset
    #: Per class, in catalog order: the class's prompts in declaration order.
    prompts: tuple[tuple[str, ...], ...]
    #: The templates the prompts were rendered from (None for rendered prompts).
    templates: tuple[str, ...] | None
    #: Class key -> the text put into ``{label}`` (from the catalog unless overridden).
    label_text: Mapping[str, str]
    fingerprint: str

    # -- views -----------------------------------------------------------------
    @property
    def identity(self) -> Any:
        return self.source.identity

    @property
    def targets(self) -> SingleLabelTargets:
        return self.source.targets

    @property
    def catalog(self) -> Any:
        return self.source.targets.catalog

    @property
    def n_samples(self) -> int:
        return self.source.n_samples

    @property
    def n_classes(self) -> int:
        return len(self.prompts)

    @property
    def sample_input(self) -> Any:
        """What encoders embed as samples: the source's raw inputs, or its embedding matrix."""
        return self.source.extractor_input

    @property
    def flat_prompts(self) -> list[str]:
        """Every prompt, class after class (the order the prompt branch embeds them in)."""
        return [prompt for group in self.prompts for prompt in group]

    @property
    def prompt_classes(self) -> list[int]:
        """The class code of each entry of :attr:`flat_prompts`."""
        return [code for code, group in enumerate(self.prompts) for _ in group]

    # -- facts that artifact keys hash (see vertebrae.execution.context) --------------------
    def fact(self, name: str, view: tuple[str, str] | None, extractor: Any) -> FactAnswer:
        """Context fact ``name`` (``RunContext.fact``): each depends on the dataset alone (no target views)."""
        return dataset_fact(self, name, ("inputs", "targets", "prompts"))

    def inputs_fingerprint(self) -> str:
        return inputs_sha256(self.sample_input)

    def targets_fingerprint(self) -> str:
        return targets_sha256(self.targets)

    def prompts_fingerprint(self) -> str:
        return self.fingerprint

    # -- constructors ----------------------------------------------------------
    @classmethod
    def from_templates(cls, source_dataset: BenchmarkDataset, templates: Sequence[str] = ("a photo of {label}",), *,
                       label_text: Mapping[Any, str] | Sequence[tuple[Any, str]] | None = None) -> "ZeroShotDataset":
        """One prompt per template and class: ``template.format(label=<class text>)``.

        The class text is the catalog's display text unless ``label_text`` maps a
        typed label to another text (e.g. ``{0: "negative"}`` for integer codes); give
        pairs instead of a dict when labels such as ``1`` and ``True`` both occur.
        """
        source = _single_label_source(source_dataset)
        catalog = source.targets.catalog
        if isinstance(templates, str) or not isinstance(templates, Sequence) or not templates:
            raise InputTypeError(f"templates must be a non-empty list of strings with a {{label}} placeholder, e.g. "
                                 f"['a photo of {{label}}'], got {templates!r}")
        for i, template in enumerate(templates):
            _check_template(template, f"templates[{i}]")
        texts = {key: catalog.display(key) for key in catalog.keys}
        given = dict(_label_pairs(label_text, catalog, "label_text"))
        for key, value in given.items():
            if not isinstance(value, str) or not value.strip():
                raise InputValidationError(f"label_text for class {catalog.display(key)!r} must be a non-empty "
                                           f"string, got {value!r}")
            texts[key] = value
        missing = [catalog.display(key) for key in catalog.keys if key not in given]
        if given and missing:  # a partial mapping would mix its texts with display texts such as '2'
            raise InputValidationError(f"label_text gives no text for class(es) {missing[:10]}; give every class "
                                       "a text, or drop label_text to use the display text of every class")
        declaration = []
        for key in catalog.keys:
            rendered = []
            for i, template in enumerate(templates):
                try:
                    rendered.append(template.format(label=texts[key]))
                except (KeyError, IndexError, ValueError) as exc:
                    raise InputValidationError(f"templates[{i}] = {template!r} cannot be rendered ({type(exc).__name__}:"
                                               f" {exc}); use only the {{label}} placeholder and double other "
                                               "braces ({{ }})") from None
            declaration.append((key, rendered))
        return cls._build(source, declaration, tuple(templates), texts)

    @classmethod
    def from_prompts(cls, source_dataset: BenchmarkDataset,
                     prompts: Mapping[Any, str | Sequence[str]] | Sequence[tuple[Any, str | Sequence[str]]]
                     ) -> "ZeroShotDataset":
        """Fully rendered prompts: a mapping (or ``(label, prompts)`` pairs) of typed label -> prompt(s)."""
        source = _single_label_source(source_dataset)
        catalog = source.targets.catalog
        given = dict(_label_pairs(prompts, catalog, "prompts"))
        missing = [catalog.display(k) for k in catalog.keys if k not in given]
        if missing:
            raise InputValidationError(f"prompts has no entry for class(es) {missing[:10]}; every class of the "
                                       "dataset needs at least one prompt")
        declaration = []
        for key in catalog.keys:
            value = given[key]
            declaration.append((key, [value] if isinstance(value, str) else value))
        return cls._build(source, declaration, None, {key: catalog.display(key) for key in catalog.keys})

    @classmethod
    def _build(cls, source: BenchmarkDataset, declaration: list[tuple[str, Any]], templates: tuple[str, ...] | None,
               texts: dict[str, str]) -> "ZeroShotDataset":
        catalog = source.targets.catalog
        owner: dict[str, str] = {}
        groups = []
        for key, values in declaration:
            name = catalog.display(key)
            if isinstance(values, str) or not isinstance(values, Sequence):
                raise InputTypeError(f"prompts for class {name!r} must be a string or a list of strings, got "
                                     f"{type(values).__name__}")
            if not values:
                raise InputValidationError(f"class {name!r} has no prompt; give it at least one non-empty prompt")
            seen: set[str] = set()
            for i, prompt in enumerate(values):
                if not isinstance(prompt, str) or not prompt.strip():
                    raise InputValidationError(f"prompt {i} of class {name!r} is {prompt!r}; every prompt must be a "
                                               "non-empty string")
                if prompt in seen:
                    raise InputValidationError(f"class {name!r} lists the prompt {prompt!r} twice; drop the "
                                               "duplicate (it would silently weight the prompt ensemble)")
                if prompt in owner and owner[prompt] != key:
                    raise InputValidationError(f"the prompt {prompt!r} is declared for classes "
                                               f"{_typed(catalog, owner[prompt])} and {_typed(catalog, key)}; a "
                                               "prompt must name one class (check label_text or the templates)")
                seen.add(prompt)
                owner[prompt] = key
            groups.append(tuple(values))
        fingerprint = content_sha256([_FINGERPRINT_VERSION, [[key, list(group)] for (key, _), group
                                                             in zip(declaration, groups)]])
        return cls(source, tuple(groups), templates, dict(texts), fingerprint)

    # -- protocol --------------------------------------------------------------
    def declaration(self) -> list[dict[str, Any]]:
        """The complete ordered prompt declaration (stored in every result)."""
        catalog = self.catalog
        return [{"label_key": key, "display": catalog.display(key), "label_text": self.label_text[key],
                 "prompts": list(group)} for key, group in zip(catalog.keys, self.prompts)]

    def summary(self) -> dict[str, Any]:
        return {**self.source.summary(), "n_prompts": len(self.flat_prompts),
                "templates": None if self.templates is None else list(self.templates),
                "prompts_fingerprint": self.fingerprint, "label_catalog": self.catalog.to_dict()}


def _check_template(template: Any, where: str) -> None:
    """A template names ``label`` and no other field; conversions and format specs (``{label!s}``,
    ``{label:>20}``) follow ``str.format``, as rendering does."""
    _fix = "use only the {label} placeholder and double other braces ({{ }})"
    fields: set[str | None] = set()
    if isinstance(template, str):
        try:
            fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
        except ValueError as exc:
            raise InputValidationError(f"{where} = {template!r} cannot be rendered (ValueError: {exc}); {_fix}") \
                from None
    other = sorted(fields - {"label"})
    if other:
        named = ", ".join(f"{{{name}}}" for name in other)
        raise InputValidationError(f"{where} = {template!r} cannot be rendered: it names {named}; {_fix}")
    if "label" not in fields:
        raise InputValidationError(f"{where} = {template!r} must be a string containing the placeholder {{label}}, "
                                   "e.g. 'a {label} tweet'")


def _typed(catalog: Any, key: str) -> str:
    """A class as its typed value, e.g. ``1 (int)`` or ``'1 (int)' (str)``: two classes' displays can coincide
    (1 shows as '1 (int)' beside '1'), their typed values never do."""
    return f"{catalog.value(key)!r} ({key.partition(':')[0]})"


def _single_label_source(source: Any) -> BenchmarkDataset:
    if not isinstance(source, BenchmarkDataset):
        raise InputTypeError(f"source_dataset must be a BenchmarkDataset, got {type(source).__name__}; build one "
                             "with BenchmarkDataset.from_arrays(texts, labels, identity=...)")
    if not isinstance(source.targets, SingleLabelTargets):
        raise InputValidationError(f"source_dataset has {source.target_type} targets; zero-shot classification "
                                   "needs single-label targets (one class per sample)")
    return source


def _label_pairs(value: Any, catalog: Any, argument: str) -> list[tuple[str, Any]]:
    """(class key, value) pairs of a mapping or a list of pairs keyed by typed labels, checked against the catalog."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, str) and all(
            isinstance(item, (list, tuple)) and len(item) == 2 for item in value):
        items = [tuple(item) for item in value]
    else:
        raise InputTypeError(f"{argument} must be a mapping of class label -> value or a list of (label, value) "
                             f"pairs, got {type(value).__name__}")
    pairs: dict[str, Any] = {}
    for label, item in items:
        try:
            key = semantic_key(label)
        except (ValueError, TypeError) as exc:
            raise InputValidationError(f"{argument}: label {label!r}: {exc}") from None
        if key not in catalog:
            raise InputValidationError(f"{argument} names {label!r} ({key.partition(':')[0]}), which is not a class "
                                       f"of the dataset; classes: {[e.display for e in catalog.entries][:10]}. "
                                       "Note that 1, '1' and True are different classes.")
        if key in pairs:
            raise InputValidationError(f"{argument} gives class {catalog.display(key)!r} twice")
        pairs[key] = item
    return list(pairs.items())
