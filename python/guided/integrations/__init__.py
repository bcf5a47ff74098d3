"""Adapters that plug guided into other libraries' generation loops.

Each submodule imports the library it adapts (``guided.integrations.transformers`` imports
transformers and torch); this package itself imports nothing.
"""
