"""slime-rlve: adaptive verifiable environments over reasoning-gym (data source ``rlve``)."""
