"""The built-in ``torch`` trainer backend."""
