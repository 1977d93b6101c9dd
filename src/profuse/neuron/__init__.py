"""AWS Neuron inputs that are not Kineto traces: the compiled NEFF and ``neuron-explorer`` Parquet tables."""
from __future__ import annotations
