"""slime_compat shim of THUDM/slime's `slime.utils.http_utils` (see plugins/slime_compat/README.md)."""
import socket

from slime_compat.aio import get, post


def get_rollout_num_engines(args) -> int:
    return int(getattr(args, "rollout_num_engines", None) or 1)


def is_port_available(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def find_available_port(base_port: int) -> int:
    port = base_port
    while not is_port_available(port):
        port += 1
    return port


def init_http_client(args) -> None:
    """slime sets up its pooled client here; post() needs no set-up."""


__all__ = ["find_available_port", "get", "get_rollout_num_engines", "init_http_client",
           "is_port_available", "post"]
