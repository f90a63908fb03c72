"""The ``core`` command line (click). Listing commands never import torch."""
