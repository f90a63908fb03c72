"""Ground floor shared by every layer: process groups, durable writes, per-process settings,
accelerator selection. Imports nothing above it."""
