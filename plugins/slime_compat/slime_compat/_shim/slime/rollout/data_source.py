"""slime_compat shim of THUDM/slime's `slime.rollout.data_source` (see plugins/slime_compat/README.md)."""
import abc


class DataSource(abc.ABC):
    """slime's data-source interface (what a data_source_path class implements)."""

    def __init__(self, args):
        self.args = args

    @abc.abstractmethod
    def get_samples(self, num_samples: int): ...

    @abc.abstractmethod
    def add_samples(self, samples): ...

    def save(self, rollout_id): ...

    def load(self, rollout_id=None): ...


def pop_first(args, rollout_id, buffer, num_samples):
    """slime's default buffer filter: the oldest groups first, removed from the buffer."""
    n = min(len(buffer), num_samples)
    out = buffer[:n]
    del buffer[:n]
    return out


__all__ = ["DataSource", "pop_first"]
