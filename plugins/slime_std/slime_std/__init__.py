"""slime-std: the standard records of slime as default plugins.

The core runs records and owns no named choice (issue 40's rule: if the config names it, it is
a record, and records live in plugins). Each subpackage here is one default plugin, loaded
through the entry-point group ``slime.defaults`` whatever ``--plugins`` selects, and held to
the plugin boundary (it imports ``slime_hookspecs``, ``slime_core.api`` and third-party
libraries only).
"""
