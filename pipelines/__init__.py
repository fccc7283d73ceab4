"""memagent-pipelines: train and serve MemAgent memory agents on Ray."""

__version__ = "0.1.0"
