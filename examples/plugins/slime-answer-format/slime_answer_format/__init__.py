"""Example slime plugin: format reward."""
