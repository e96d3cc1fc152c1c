"""Every config class rejects unknown keywords like the CLI rejects unknown keys (issue 11, item 8)."""

from __future__ import annotations

import dataclasses

import pytest

import vertebrae
from vertebrae import ConfigError, StabilityConfig
from vertebrae._base.config import Config


def _config_classes() -> list[type]:
    found, todo = [], list(Config.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return sorted(found, key=lambda c: c.__name__)


def test_every_public_config_class_is_covered():
    public = {name for name in vertebrae.__all__ if isinstance(getattr(vertebrae, name), type)
              and issubclass(getattr(vertebrae, name), Config)}
    assert public <= {c.__name__ for c in _config_classes()}
    assert {"StabilityConfig", "OverlapScoringConfig", "SeparatixConfig", "RetrievalConfig"} <= public


@pytest.mark.parametrize("cls", _config_classes(), ids=lambda c: c.__name__)
def test_unknown_keyword_lists_the_allowed_fields(cls):
    allowed = sorted(f.name for f in dataclasses.fields(cls))
    with pytest.raises(ConfigError) as info:
        cls(no_such_field=1)
    message = str(info.value)
    assert f"{cls.__name__} got unknown field 'no_such_field'" in message
    assert f"allowed fields: {allowed}" in message


def test_typo_suggests_the_field_and_from_dict_says_the_same():
    with pytest.raises(ConfigError, match=r"unknown field 'repeat' \(did you mean 'repeats'\?\)") as keyword:
        StabilityConfig(repeat=5)
    with pytest.raises(ConfigError) as mapping:
        StabilityConfig.from_dict({"repeat": 5})
    assert str(keyword.value) == str(mapping.value)
    assert StabilityConfig(repeats=5).repeats == 5
