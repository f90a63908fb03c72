"""Mixture-of-experts support: routers, routing records and rollout routing replay."""
