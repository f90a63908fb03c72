"""slime-lora: LoRA RL for slime on peft (adapters trained, synced, saved, merged)."""

__version__ = "0.1.0"
