"""Target views and label hierarchies: several labelings of one sample axis, one result per view.

A *target view* is a named alternative target (single-label, multi-label or
regression) for the dataset's rows; a *label hierarchy* gives every row a path of
labels (``("animal", "dog", "terrier")``) whose levels become views.  A view is a
different task, so a benchmark scores every view separately (extraction is shared:
the embedding does not depend on the labels), and rankings, quality cohorts and
recommendations are computed within a view, never across views.

Level labels are structural: level ``i`` of a row is the tuple of its path's first
``i + 1`` parts (one part for the top level), so a child name that appears under two
parents stays two classes, and no delimiter is ever joined into a label.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._base.config import Config, FrozenDict
from ..errors import ConfigError, ConfigTypeError, InputTypeError, InputValidationError
from .targets import Targets, build_targets

#: View names appear inside result names (``extractor[target=coarse]``): no brackets, '=' or ':'.
_VIEW_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@ -]*")
TARGET, LEVEL = "target", "level"


def check_view_name(owner: str, name: Any) -> str:
    if not isinstance(name, str):
        raise InputTypeError(f"{owner}: a view name must be a string, got {type(name).__name__}")
    if not _VIEW_NAME.fullmatch(name):
        raise InputValidationError(f"{owner}: view name {name!r} must be letters, digits, spaces and _ . @ - "
                                   "(no brackets, '=' or ':', which result names use)")
    return name


@dataclasses.dataclass(frozen=True)
class TargetView:
    """A named alternative target for every row; validated when attached to a dataset."""

    name: str
    targets: Any
    target_type: str | None = None
    target_names: Sequence[str] | None = None
    label_names: Sequence[Any] | None = None

    def build(self, n_samples: int) -> Targets:
        """Validate exactly like the dataset's own targets, naming the view in every message."""
        return build_targets(self.targets, target_type=self.target_type, label_names=self.label_names,
                             target_names=self.target_names, n_samples=n_samples,
                             argument=f"target view {self.name!r}")


def build_target_views(views: Sequence[Any], n_samples: int, existing: Mapping[str, Targets]) -> dict[str, Targets]:
    if isinstance(views, (str, bytes, TargetView)) or not isinstance(views, Sequence):
        raise InputTypeError("with_target_views expects a list of TargetView(name, targets, ...)")
    built = dict(existing)
    for i, view in enumerate(views):
        if not isinstance(view, TargetView):
            raise InputTypeError(f"target views[{i}] is a {type(view).__name__}, not a TargetView(name, targets)")
        check_view_name(f"target views[{i}]", view.name)
        if view.name in built:
            raise InputValidationError(f"target views[{i}]: a view named {view.name!r} already exists; give every "
                                       "target view a unique name")
        built[view.name] = view.build(n_samples)
    return built


def build_label_levels(label_paths: Any, level_names: Sequence[str], n_samples: int,
                       dataset_target_type: str) -> dict[str, Targets]:
    """One single-label target per level, each label the structural prefix of the row's path."""
    if dataset_target_type == "regression":
        raise InputValidationError("with_label_hierarchy: label hierarchies are classification labels, but this "
                                   "dataset's targets are regression; attach the hierarchy to a classification "
                                   "dataset, or add continuous targets with with_target_views")
    if isinstance(level_names, (str, bytes)) or not isinstance(level_names, Sequence) or not level_names:
        raise InputTypeError("with_label_hierarchy: level_names must be a non-empty sequence of level names, "
                             "e.g. ('family', 'genus')")
    names = [check_view_name(f"level_names[{i}]", name) for i, name in enumerate(level_names)]
    if len(set(names)) != len(names):
        raise InputValidationError(f"with_label_hierarchy: level_names {names} repeat a name")
    if isinstance(label_paths, (str, bytes)) or not hasattr(label_paths, "__len__"):
        raise InputTypeError("with_label_hierarchy: label_paths must be a sequence with one path (a tuple of "
                             f"{len(names)} labels) per row")
    paths = list(label_paths)
    if len(paths) != n_samples:
        raise InputValidationError(f"with_label_hierarchy: label_paths has {len(paths)} paths but the dataset has "
                                   f"{n_samples} rows; give one path per row, in dataset order")
    for row, path in enumerate(paths):
        if isinstance(path, (str, bytes)) or not isinstance(path, Sequence) or len(path) != len(names):
            raise InputValidationError(f"with_label_hierarchy: label_paths[{row}] = {path!r} must be a sequence of "
                                       f"{len(names)} labels, one per level {names}")
    levels = {}
    for depth, name in enumerate(names):
        labels = [path[0] if depth == 0 else tuple(path[:depth + 1]) for path in paths]
        levels[name] = build_targets(labels, target_type="single_label", n_samples=n_samples,
                                     argument=f"label level {name!r}")
    return levels


# ----------------------------------------------------------------------------- benchmark configuration
def _view_tuple(owner: str, field: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigTypeError(f"{owner}.{field} must be a sequence of view names, got {type(value).__name__}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str):
            raise ConfigTypeError(f"{owner}.{field} holds a {type(name).__name__}; view names are strings")
    if len(set(names)) != len(names):
        raise ConfigError(f"{owner}.{field} repeats a view: {list(names)}")
    return names


def _output_mapping(owner: str, field: str, value: Any) -> FrozenDict:
    if not isinstance(value, Mapping):
        raise ConfigTypeError(f"{owner}.{field} must map output names to view names, got {type(value).__name__}")
    return FrozenDict({str(output): _view_tuple(owner, f"{field}[{output!r}]", names)
                       for output, names in value.items()})


@dataclasses.dataclass(frozen=True)
class TargetViewConfig(Config):
    """Which named target views to score: ``views`` for every output, ``output_views`` per named output."""

    views: tuple[str, ...] = ()
    output_views: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=FrozenDict)

    def _validate(self) -> None:
        self._set("views", _view_tuple("TargetViewConfig", "views", self.views))
        self._set("output_views", _output_mapping("TargetViewConfig", "output_views", self.output_views))


@dataclasses.dataclass(frozen=True)
class LabelViewConfig(Config):
    """Which hierarchy levels to score: ``levels`` for every output, ``output_levels`` per named output."""

    levels: tuple[str, ...] = ()
    output_levels: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=FrozenDict)

    def _validate(self) -> None:
        self._set("levels", _view_tuple("LabelViewConfig", "levels", self.levels))
        self._set("output_levels", _output_mapping("LabelViewConfig", "output_levels", self.output_levels))


def view_label(view: tuple[str, str] | None) -> str | None:
    """``target=coarse`` / ``level=family``: the suffix inside a result name's brackets (None: no view)."""
    return None if view is None else f"{view[0]}={view[1]}"


def view_name(target_view: str | None, label_view: str | None) -> str | None:
    """The view a result's ``target_view``/``label_view`` fields name: ``target=<name>``, ``level=<name>`` or None."""
    if target_view is not None:
        return view_label(("target", target_view))
    return None if label_view is None else view_label(("level", label_view))


def plan_views(target_config: TargetViewConfig | None, label_config: LabelViewConfig | None, dataset: Any,
               outputs: Sequence[str | None]) -> dict[str | None, list[tuple[str, str]] | None]:
    """Output -> views to score (None: the dataset's own targets), checked against the dataset and outputs."""
    if target_config is None and label_config is None:
        return {output: None for output in outputs}
    available = {TARGET: dict(dataset.target_views), LEVEL: dict(dataset.label_levels)}
    configs = [(TARGET, target_config, "views", "output_views", "with_target_views([...])"),
               (LEVEL, label_config, "levels", "output_levels", "with_label_hierarchy(...)")]
    outputs = list(dict.fromkeys(outputs))
    named_outputs = {o for o in outputs if o is not None}
    chosen: dict[str | None, list[tuple[str, str]]] = {output: [] for output in outputs}
    for kind, config, field, per_output, how in configs:
        if config is None:
            continue
        owner = type(config).__name__
        default = getattr(config, field) or tuple(available[kind])
        if not default and not getattr(config, per_output):
            raise ConfigError(f"{owner}: the dataset has no {kind} views; add them with dataset.{how}")
        mapping = getattr(config, per_output)
        for output, names in [(None, default), *mapping.items()]:
            unknown = [n for n in names if n not in available[kind]]
            if unknown:
                raise ConfigError(f"{owner}: unknown {kind} view(s) {unknown}; the dataset has "
                                  f"{sorted(available[kind])} (add them with dataset.{how})")
        unknown_outputs = sorted(set(mapping) - named_outputs)
        if unknown_outputs:
            raise ConfigError(f"{owner}.{per_output} names output(s) {unknown_outputs} that no extractor produces; "
                              f"outputs: {sorted(named_outputs)}")
        for output in outputs:
            chosen[output] += [(kind, name) for name in mapping.get(output, default)]
    return chosen
