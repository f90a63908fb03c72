"""Backend-independent algorithm plumbing: advantages and loss composition through hooks."""
