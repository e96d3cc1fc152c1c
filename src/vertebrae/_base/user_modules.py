"""Importing a user's module named in a config or on the command line (metrics, custom stages).

One place for the messages: a module that cannot be found says how to make it importable;
a module whose own code fails says what broke.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import ConfigError


def import_user_module(module_name: str, where: str) -> ModuleType:
    """Import ``module_name`` for ``where`` (e.g. ``metric path 'm:f'``), or raise a ConfigError saying why not."""
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise ConfigError(f"{where}: {module_name!r} is not a module name; write e.g. 'my_project.stages'")
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(f"{where}: module {module_name!r} cannot be found; check the spelling and that it is "
                              "installed or on PYTHONPATH") from None
        raise ConfigError(f"{where}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:  # the module is user code: report whatever broke its import
        raise ConfigError(f"{where}: importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
