"""Built-in plugin placeholder: filled in by the agentic-rollout work (issue 8)."""
