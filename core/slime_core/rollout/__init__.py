"""The rollout manager and what it builds: data sources, engine clients, hook answers.

Below the executors (they build these in whichever process hosts the rollout manager)."""
