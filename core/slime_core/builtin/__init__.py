"""The core's built-in plugins: ordinary plugins registered through the same hooks."""
