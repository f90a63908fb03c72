"""slime sandbox record ``e2b``: tool code in E2B sandboxes through the ``e2b`` SDK."""

from sandbox_e2b.config import E2BSection

__all__ = ["E2BSection"]
