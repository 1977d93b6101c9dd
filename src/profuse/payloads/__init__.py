"""Payloads: typed records (msgspec Structs) of what every renderer sends or prints, built by pure
functions from analysis results. The JSON report, the explorer's routes and the HTML report use the
same records, so a key means one thing everywhere.

Imports go one way: ``trace`` -> ``analysis`` -> ``payloads`` -> ``report`` / ``explorer``; this
package never imports a renderer, the front end, torch or capture.
"""
from __future__ import annotations
