"""slime_compat shim of THUDM/slime's package (see plugins/slime_compat/README.md)."""
__slime_compat_shim__ = True  # tells a real THUDM/slime from this shim
