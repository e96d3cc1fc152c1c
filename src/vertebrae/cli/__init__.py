"""The ``vertebrae`` command: run configs, model configs, the staged workflow, the demos."""
