"""slime's rollout-side flags beside the generate function: --buffer-filter-path,
--rollout-sample-filter-path, --rollout-all-samples-process-path and the custom rollout / eval
log functions, with slime's signatures (slime/rollout/data_source.py,
slime/rollout/sglang_rollout.py, slime/observability/rollout_metrics.py)."""

from slime.utils.types import Sample

from slime_user._record import record


def pop_last(args, rollout_id, buffer: list[list[Sample]], num_samples: int) -> list[list[Sample]]:
    """A LIFO variant of slime's pop_first: the newest groups first, removed from the buffer."""
    assert all(isinstance(s, Sample) for g in buffer for s in g)
    n = min(len(buffer), num_samples)
    picked = buffer[len(buffer) - n:]
    del buffer[len(buffer) - n:]
    record("buffer_filter", buffer=n + len(buffer), picked=n, left=len(buffer),
           flag=getattr(args, "my_custom_flag", None))
    return picked


def drop_truncated(args, data: list[list[Sample]]) -> None:
    """slime marks samples to leave out of training with remove_sample (loss mask zeroed)."""
    marked = 0
    for group in data:
        for sample in group:
            if sample.status == Sample.Status.TRUNCATED:
                sample.remove_sample = True
                marked += 1
    record("sample_filter", groups=len(data), marked=marked)


def count_all(args, all_samples: list[list[Sample]], data_source) -> None:
    """Every generated group, the ones the dynamic filter dropped included."""
    assert len(all_samples) >= args.rollout_batch_size
    record("all_samples", groups=len(all_samples), has_add_samples=hasattr(data_source, "add_samples"))


def log_rollout(rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> bool:
    rewards = [s.get_reward_value(args) for s in samples]
    record("log_rollout", rollout_id=rollout_id, n=len(samples),
           mean_reward=sum(rewards) / len(rewards), has_metrics=isinstance(rollout_extra_metrics, dict))
    return False  # let the default logging run too


def log_eval(rollout_id, args, data, extra_metrics) -> bool:
    rewards = data["eval"]["rewards"]
    record("log_eval", rollout_id=rollout_id, n=len(rewards),
           samples=len(data["eval"]["samples"]), truncated=len(data["eval"]["truncated"]))
    return False
