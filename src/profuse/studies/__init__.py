"""Case studies that record, analyse and compare real variants of a model piece. Need torch."""
