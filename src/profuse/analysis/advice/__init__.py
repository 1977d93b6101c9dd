"""The advice wing: hotspots, interruptions, fusion, rooflines and the trace-level findings."""
