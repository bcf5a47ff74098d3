"""Type stubs for the private Rust extension. Users import from ``guided``, not from here."""

__version__: str
