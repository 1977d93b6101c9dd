"""The advisor's fusion, interruptions and roofline passes as they were before they were made
set-based: plain Python over one row at a time, kept only here, as the oracle of
tests/test_advice_differential.py. Not part of the package; never imported by it."""
