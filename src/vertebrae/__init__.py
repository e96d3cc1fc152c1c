"""vertebrae: choose a frozen representation for your own labeled data.

Embed a dataset with each candidate extractor, score how well the embedding space
separates the targets with OverlapIndex, and get reproducible JSON / Markdown /
DataFrame reports.  Heavy dependencies (pandas, scikit-learn, overlapindex,
separatix) are imported lazily, so ``import vertebrae`` stays fast.
"""

from .artifacts import FsspecStore, MemoryStore, StoredArtifact, open_store
from .benchmark import Benchmark
from .cache import CacheConfig
from .compression import EmbeddingCompressionConfig
from .datasets import BenchmarkDataset
from .errors import (ArtifactError, ArtifactIntegrityError, ArtifactNotFoundError, ConfigError, ExtractorError, InputTypeError, InputValidationError, MetricError,
                     SerializationError, VertebraeError, VertebraeWarning)
from .errors import ConfigTypeError, DataWarning, DependencyError, DensificationBudgetError, ScoringWarning
from .errors import HistoryError, HistoryLockedError, HistoryWarning
from .errors import ExecutionError, MemoryBudgetError
from .errors import ArtifactRaceError
from .extractors import CallableExtractor, Extractor, PrecomputedExtractor, SklearnExtractor
from .extractors import HFTextExtractor, ONNXExtractor, SentenceTransformerExtractor, TorchExtractor
from .identity import DatasetIdentity
from .labels import LabelCatalog
from . import relational
from .multimodal import FieldExtractor, MultiModalInputs
from .segmentation import SegmentationDataset, spatial_feature_map
from .structured import UnitAnnotations, save_unit_artifact
from .monitoring import ConsoleReporter, RepresentationMonitor, read_history
from .profiling import DistributedResourceProfile, LocalResourceProfile, ResourceProfile, ResourceProfilingConfig
from .results import BenchmarkResult, ExtractorResult
from .retrieval import (PrecomputedPairExtractor, RetrievalBenchmark, RetrievalBenchmarkResult, RetrievalConfig,
                        RetrievalDataset, TwoBranchExtractor)
from .scoring.knn_metric import KNNMetric
from .scoring.label_retrieval import LabelRetrievalMetric
from .scoring.linear_probe import LinearProbeMetric
from .scoring.logme import LogMEMetric
from .scoring.memory import MemoryConfig
from .scoring.metric_result import MetricResult
from .scoring.metrics import CallableMetric, Metric, OverlapMetric, load_metric
from .scoring.overlap import (ContinuousOverlapScoringConfig, OverlapIndexScorer, OverlapScoreResult,
                              OverlapScoringConfig)
from .scoring.separatix import SeparatixConfig, SeparatixResult, SeparatixScorer
from .scoring.stability import StabilityConfig, StabilityResult, run_stability_analysis
from .screening import ScreeningConfig
from .views import LabelViewConfig, TargetView, TargetViewConfig
from .zero_shot import (PrecomputedZeroShotEncoder, TextEncoder, ZeroShotBenchmark, ZeroShotBenchmarkResult,
                        ZeroShotConfig, ZeroShotDataset)

from ._version import __version__

__all__ = [
    "Benchmark", "BenchmarkDataset", "BenchmarkResult", "CallableExtractor", "ConfigError",
    "ContinuousOverlapScoringConfig", "DatasetIdentity", "Extractor", "ExtractorError", "ExtractorResult",
    "InputTypeError", "InputValidationError", "LabelCatalog", "MetricError", "MetricResult", "OverlapIndexScorer",
    "OverlapScoreResult", "OverlapScoringConfig", "PrecomputedExtractor", "SeparatixConfig", "SeparatixResult",
    "SeparatixScorer", "SerializationError", "SklearnExtractor", "StabilityConfig", "StabilityResult",
    "run_stability_analysis", "ScreeningConfig",
    "CallableMetric", "LabelRetrievalMetric", "Metric", "OverlapMetric", "load_metric",
    "KNNMetric", "LinearProbeMetric", "LogMEMetric",
    "PrecomputedPairExtractor", "RetrievalBenchmark", "RetrievalBenchmarkResult", "RetrievalConfig",
    "RetrievalDataset", "TwoBranchExtractor",
    "LabelViewConfig", "TargetView", "TargetViewConfig",
    "PrecomputedZeroShotEncoder", "TextEncoder", "ZeroShotBenchmark", "ZeroShotBenchmarkResult", "ZeroShotConfig",
    "ZeroShotDataset",
    "VertebraeError", "VertebraeWarning", "__version__",
    "ArtifactError", "ArtifactIntegrityError", "ArtifactNotFoundError", "ArtifactRaceError", "FsspecStore",
    "MemoryStore", "StoredArtifact",
    "open_store", "CacheConfig",
    "HFTextExtractor", "ONNXExtractor", "SentenceTransformerExtractor", "TorchExtractor",
    "ConfigTypeError", "DataWarning", "DependencyError", "DensificationBudgetError", "ScoringWarning",
    "ConsoleReporter", "HistoryError", "HistoryLockedError", "HistoryWarning", "RepresentationMonitor", "read_history",
    "EmbeddingCompressionConfig",
    "relational", "FieldExtractor", "MultiModalInputs", "SegmentationDataset", "spatial_feature_map",
    "UnitAnnotations", "save_unit_artifact",
    "ExecutionError", "MemoryBudgetError", "MemoryConfig",
    "DistributedResourceProfile", "LocalResourceProfile", "ResourceProfile", "ResourceProfilingConfig",
]
