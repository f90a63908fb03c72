"""slime-compat: run THUDM/slime function-path modules unmodified (see README.md)."""

__version__ = "0.1.0"
