"""A benchmark run as a plan of stage jobs over artifacts with deterministic keys.

extract -> score -> (analysis stages: stability, diagnose, ...) -> assemble, one
chain per extractor.  A job's key is a hash of
the dataset identity, the extractor recipe and every config that influences the
stage, so the same inputs always map to the same artifact: a store can reuse it and
a distributed runner can execute the same jobs on workers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ..reports.json_codec import encode


@dataclasses.dataclass(frozen=True)
class StageJob:
    stage: str
    extractor: str
    key: str
    needs: tuple[str, ...] = ()


def artifact_key(stage: str, *parts: Any) -> str:
    """``stage/<sha256 prefix>`` of the canonical JSON of ``parts``."""
    text = json.dumps(encode(list(parts)), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return f"{stage}/{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def build_plan(dataset_fingerprint: str, recipes: Sequence[tuple[str, dict[str, Any]]],
               settings: Any) -> list[StageJob]:
    """All extract jobs first (so bad extractor output fails before any scoring), then scoring.

    ``settings.analysis_stages()`` lists the optional stages (name, config fingerprint)
    that read the extract and score artifacts; each becomes one job per extractor.
    """
    extract = {name: artifact_key("extract", dataset_fingerprint, recipe) for name, recipe in recipes}
    jobs = [StageJob("extract", name, extract[name]) for name, _ in recipes]
    scoring = settings.scoring_fingerprint()
    for name, _ in recipes:
        score = StageJob("score", name, artifact_key("score", extract[name], scoring), (extract[name],))
        analyses = [StageJob(stage, name, artifact_key(stage, score.key, fingerprint), (extract[name], score.key))
                    for stage, fingerprint in settings.analysis_stages()]
        needs = (extract[name], score.key, *(job.key for job in analyses))
        assemble = StageJob("assemble", name, artifact_key("assemble", needs, settings.fingerprint()), needs)
        jobs += [score, *analyses, assemble]
    return jobs
