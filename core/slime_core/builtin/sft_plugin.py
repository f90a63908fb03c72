"""Built-in plugin (filled in by the GRPO end-to-end work)."""
