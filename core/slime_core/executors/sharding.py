"""Split a step's samples across data-parallel trainer ranks.

Whole groups go to one rank (advantages are computed per group, on each rank's share), and
ranks are balanced by token count: groups are taken largest first and each goes to the rank
with the fewest tokens so far (ties: the lower rank), the classic longest-processing-time
rule, which keeps the largest share within 4/3 of the optimum. The split is deterministic
(it depends only on the group ids and lengths), and each rank keeps its samples in batch
order so micro-batching stays reproducible.
"""

from __future__ import annotations


def shard_by_tokens(group_ids: list[int], lengths: list[int], world_size: int) -> list[list[int]]:
    """Sample indices of each rank; groups are never split.

    ``group_ids[i]`` is sample ``i``'s group and ``lengths[i]`` its token count (prompt +
    response). With fewer groups than ranks some ranks get an empty share.
    """
    if world_size < 1:
        raise ValueError(f"shard_by_tokens: world_size must be >= 1, got {world_size}")
    if len(group_ids) != len(lengths):
        raise ValueError(
            f"shard_by_tokens: {len(group_ids)} group ids but {len(lengths)} lengths"
        )
    members: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        members.setdefault(g, []).append(i)
    groups = list(members.values())  # first-appearance order breaks ties between equal sizes
    cost = [sum(lengths[i] for i in g) for g in groups]
    order = sorted(range(len(groups)), key=lambda k: -cost[k])
    load = [0] * world_size
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for k in order:
        rank = min(range(world_size), key=lambda r: (load[r], r))
        load[rank] += cost[k]
        shards[rank].extend(groups[k])
    return [sorted(s) for s in shards]


def imbalance(lengths: list[int], shards: list[list[int]]) -> float:
    """Largest share's tokens over the mean share's (1.0 is a perfect balance)."""
    loads = [sum(lengths[i] for i in s) for s in shards]
    mean = sum(loads) / len(loads) if loads else 0.0
    return max(loads) / mean if mean > 0 else 1.0
