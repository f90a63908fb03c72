"""Modules written as a slime user writes them (slime's signatures and imports, bodies ours):
they must run unmodified under slime_compat."""
