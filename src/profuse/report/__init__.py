"""Renderers: they read analysis results and write text, JSON or HTML; they compute nothing."""
