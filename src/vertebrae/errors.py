"""One exception and warning hierarchy for the whole package.

Every error vertebrae raises on purpose derives from :class:`VertebraeError`; the
input errors also derive from ``ValueError`` / ``TypeError`` so callers that catch
the built-in types keep working.  Messages name the argument, the offending
row/class/key and the fix.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable


class VertebraeError(Exception):
    """Base class of every error raised deliberately by vertebrae."""


class ConfigError(VertebraeError, ValueError):
    """A configuration field has an invalid value, or an unknown/removed field was given."""


class InputValidationError(VertebraeError, ValueError):
    """User input (embeddings, targets, groups, ids) is malformed; raised before any work."""


class InputTypeError(VertebraeError, TypeError):
    """User input has the wrong type (e.g. non-numeric embeddings, a non-callable metric)."""


class ConfigTypeError(ConfigError, InputTypeError):
    """A config field or config argument has the wrong type.

    Both a :class:`ConfigError` (it is a configuration mistake) and an
    :class:`InputTypeError` (every wrong-type argument raises one).
    """


class ExtractorError(VertebraeError, ValueError):
    """An extractor failed or returned output that cannot be scored."""


class UserCodeError(ExtractorError):
    """An exception raised inside user code (an extractor's or encoder's fit, transform or encode): a failure
    of that code, not bad input (the CLI exits 1 and names the extractor, not 2).

    The original exception is the ``__cause__``; ``user_traceback`` is its formatted traceback (the user's
    frames), kept as text so that it survives the trip back from a dask worker.
    """

    def __init__(self, message: str, user_traceback: str = "") -> None:
        super().__init__(message)
        self.user_traceback = user_traceback

    def __reduce__(self):
        return type(self), (str(self), self.user_traceback), self.__dict__


class MetricError(VertebraeError, ValueError):
    """A metric failed or returned a payload that breaks the metric contract."""


class SerializationError(VertebraeError, ValueError):
    """A result cannot be written or read as strict JSON; the message names the path."""


class DependencyError(VertebraeError, ImportError):
    """An optional dependency needed for the requested feature is not installed."""


class DensificationBudgetError(VertebraeError, MemoryError):
    """A dense-only diagnostic would exceed the dense-memory budget and the policy is ``"fail"``."""


class HistoryError(VertebraeError, ValueError):
    """A monitor history file cannot be used: not a history, corrupted, or written for other data/settings."""


class HistoryLockedError(HistoryError):
    """Another writer holds the lock on a monitor history file (one writer at a time)."""


class MemoryBudgetError(VertebraeError, MemoryError):
    """Scoring would exceed ``MemoryConfig.max_scoring_bytes`` and the policy is ``"fail"`` (or nothing fits)."""


class ExecutionError(VertebraeError, RuntimeError):
    """A job could not be executed: its distributed worker died or the cluster lost it (not a user error)."""


class PlanError(VertebraeError, ValueError):
    """A staged run's plan file does not fit its inputs or its store (changed files, a phase not run yet)."""


class VertebraeWarning(UserWarning):
    """Base class of warnings emitted by vertebrae (they are also recorded in results)."""


class ScoringWarning(VertebraeWarning):
    """Scoring had to adapt (reduced k, zero rows, dependency warnings)."""


class DataWarning(VertebraeWarning):
    """Input data is usable but suspicious (unused labels, dropped columns)."""


class ArtifactError(VertebraeError):
    """An artifact or artifact store cannot be used as asked (bad key, bad array, unreachable store)."""


class ArtifactNotFoundError(ArtifactError, LookupError):
    """The store has no published artifact (no manifest) under the requested key."""


class ArtifactIntegrityError(ArtifactError):
    """A stored artifact disagrees with its manifest (checksum, size, shape, unsafe content); never read as data."""


class ArtifactRaceError(ArtifactError):
    """Concurrent writers kept replacing an artifact while it was read: nothing was read, nothing is corrupt."""


class ArtifactSignatureError(ArtifactIntegrityError):
    """A manifest lacks a valid signature under the cache's secret (unsigned, or forged); never read as data."""


class ArtifactWarning(VertebraeWarning):
    """A store problem that did not stop the run (an unreadable manifest skipped, an object stat that failed)."""


class HistoryWarning(VertebraeWarning):
    """A monitor history had an incomplete last line (a crash mid-write); it was set aside."""


class CompressionWarning(VertebraeWarning):
    """A compression variant could not be applied as requested (e.g. wider than the embedding)."""


def warn_result_notes(name: str, notes: Iterable[str], category: type[Warning] = ScoringWarning,
                      stacklevel: int = 2) -> None:
    """Warn each distinct note of one result once, named: ``"<name>: <note>"``.

    The front doors call this after a run, so a warning names the extractor it concerns
    and points at the user's call (``stacklevel`` counts from the caller), however many
    stages or repeats produced the note and whether or not its stage came from the cache.
    """
    for note in dict.fromkeys(notes):
        warnings.warn(f"{name}: {note}", category, stacklevel=stacklevel + 1)
