"""vertebrae: choose a frozen representation for your own labeled data.

Embed a dataset with each candidate extractor, score how well the embedding space
separates the targets with OverlapIndex, and get reproducible JSON / Markdown /
DataFrame reports.  Heavy dependencies (pandas, scikit-learn, overlapindex,
separatix, dask) are imported lazily, so ``import vertebrae`` stays fast.

This module is the public face, ordered by theme below.  Internals live in their
subpackages: stores in :mod:`vertebrae.artifacts`, the OverlapIndex and Separatix
adapters in :mod:`vertebrae.scoring`, the execution core in :mod:`vertebrae.execution`.
"""

from ._version import __version__
from .errors import (ArtifactError, ArtifactIntegrityError, ArtifactNotFoundError, ArtifactRaceError,
                     ArtifactSignatureError, ArtifactWarning, CompressionWarning, ConfigError, ConfigTypeError,
                     DataWarning, DensificationBudgetError, DependencyError, ExecutionError, ExtractorError,
                     HistoryError, HistoryLockedError, HistoryWarning, InputTypeError, InputValidationError,
                     MemoryBudgetError, MetricError, PlanError, ScoringWarning, SerializationError, UserCodeError,
                     VertebraeError, VertebraeWarning)
from .families.labeled.benchmark import Benchmark
from .families.labeled.results import BenchmarkResult, ExtractorResult
from .families.retrieval import (PrecomputedPairExtractor, RetrievalBenchmark, RetrievalBenchmarkResult,
                                 RetrievalConfig, RetrievalDataset, TwoBranchExtractor)
from .families.zero_shot import (ImageTextEncoder, PrecomputedZeroShotEncoder, TextEncoder, ZeroShotBenchmark,
                                 ZeroShotBenchmarkResult, ZeroShotConfig, ZeroShotDataset)
from .inputs import relational
from .inputs.datasets import BenchmarkDataset
from .inputs.identity import DatasetIdentity
from .inputs.labels import LabelCatalog
from .inputs.multimodal import FieldExtractor, MultiModalInputs
from .inputs.segmentation import SegmentationDataset, spatial_feature_map
from .inputs.structured import UnitAnnotations, save_unit_artifact
from .inputs.views import LabelViewConfig, TargetView, TargetViewConfig
from .extractors import (CallableExtractor, Extractor, HFAudioExtractor, HFTextExtractor, HFVisionExtractor,
                         JAXExtractor, KerasExtractor, ONNXExtractor, ONNXTextExtractor, PrecomputedExtractor,
                         SentenceTransformerExtractor, SklearnExtractor, TorchExtractor)
from .extractors.compression import EmbeddingCompressionConfig
from .scoring.overlap import ContinuousOverlapScoringConfig, OverlapScoreResult, OverlapScoringConfig
from .scoring.stability import StabilityConfig, StabilityResult, run_stability_analysis
from .scoring.separatix import SeparatixConfig, SeparatixResult
from .scoring.memory import MemoryConfig
from .scoring.metric_result import MetricResult
from .scoring.metrics import CallableMetric, Metric, OverlapMetric, load_metric
from .scoring.knn_metric import KNNMetric
from .scoring.label_retrieval import LabelRetrievalMetric
from .scoring.linear_probe import LinearProbeMetric
from .scoring.logme import LogMEMetric
from .scoring.lda_probe import LDAProbeMetric
from .scoring.ridge_probe import RidgeProbeMetric
from .selection.screening import ScreeningConfig
from .artifacts.cache import CacheConfig
from .extractors.profiling import (DistributedResourceProfile, LocalResourceProfile, ResourceProfile,
                                   ResourceProfilingConfig)
from .monitoring import ConsoleReporter, RepresentationMonitor, read_history

__all__ = [
    # the front doors and their results
    "Benchmark", "BenchmarkResult", "ExtractorResult",
    "RetrievalBenchmark", "RetrievalBenchmarkResult", "RetrievalConfig", "RetrievalDataset",
    "PrecomputedPairExtractor", "TwoBranchExtractor",
    "ZeroShotBenchmark", "ZeroShotBenchmarkResult", "ZeroShotConfig", "ZeroShotDataset",
    "ImageTextEncoder", "PrecomputedZeroShotEncoder", "TextEncoder",
    # datasets and what they hold
    "BenchmarkDataset", "DatasetIdentity", "LabelCatalog", "LabelViewConfig", "TargetView", "TargetViewConfig",
    "FieldExtractor", "MultiModalInputs", "SegmentationDataset", "spatial_feature_map", "UnitAnnotations",
    "save_unit_artifact", "relational",
    # extractors and compression variants
    "Extractor", "CallableExtractor", "PrecomputedExtractor", "SklearnExtractor", "TorchExtractor",
    "HFTextExtractor", "HFVisionExtractor", "HFAudioExtractor", "SentenceTransformerExtractor", "ONNXExtractor", "ONNXTextExtractor",
    "KerasExtractor", "JAXExtractor", "EmbeddingCompressionConfig",
    # scoring: overlap, stability, Separatix, metrics and reference probes
    "OverlapScoringConfig", "ContinuousOverlapScoringConfig", "OverlapScoreResult",
    "StabilityConfig", "StabilityResult", "run_stability_analysis", "SeparatixConfig", "SeparatixResult",
    "MemoryConfig", "Metric", "MetricResult", "CallableMetric", "OverlapMetric", "load_metric",
    "KNNMetric", "LinearProbeMetric", "LogMEMetric", "LabelRetrievalMetric", "RidgeProbeMetric", "LDAProbeMetric",
    # selection across rounds, the cache, resources, monitoring
    "ScreeningConfig", "CacheConfig",
    "ResourceProfilingConfig", "ResourceProfile", "LocalResourceProfile", "DistributedResourceProfile",
    "RepresentationMonitor", "ConsoleReporter", "read_history",
    # every error and warning a user catches or filters
    "VertebraeError", "ConfigError", "ConfigTypeError", "InputValidationError", "InputTypeError", "ExtractorError",
    "UserCodeError", "MetricError", "SerializationError", "DependencyError", "DensificationBudgetError", "MemoryBudgetError",
    "ExecutionError", "PlanError", "HistoryError", "HistoryLockedError",
    "ArtifactError", "ArtifactNotFoundError", "ArtifactIntegrityError", "ArtifactSignatureError", "ArtifactRaceError",
    "VertebraeWarning", "ScoringWarning", "DataWarning", "CompressionWarning", "ArtifactWarning", "HistoryWarning",
    "__version__",
]
