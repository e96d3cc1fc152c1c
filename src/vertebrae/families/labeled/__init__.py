"""The labeled-data family: Benchmark, its stages and its results."""
