"""Testing tools for opreg operators (placeholder; the real module is written separately)."""

__version__ = "0.1.0"
