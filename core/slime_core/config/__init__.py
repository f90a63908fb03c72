"""Typed TOML configuration: sections contributed through ``slime_add_config``."""

from slime_core.config.loader import load_config, parse_override
from slime_core.config.model import Config, ConfigError
from slime_core.config.schema import ConfigSchema

__all__ = ["Config", "ConfigError", "ConfigSchema", "load_config", "parse_override"]
