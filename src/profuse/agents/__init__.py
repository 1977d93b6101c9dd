"""Profuse's records served to coding agents: ``mcp.py``, the Model Context Protocol server behind ``profuse mcp``.

A renderer like ``report`` and ``explorer``: it reads payload records and computes nothing of its own;
``trace``, ``analysis`` and ``payloads`` never import it.
"""
