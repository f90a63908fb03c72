"""slime_compat shim of THUDM/slime's package (see plugins/slime_compat/README.md)."""
