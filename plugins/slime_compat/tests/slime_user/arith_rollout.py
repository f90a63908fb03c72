"""--rollout-function-path: a custom rollout built from slime's pieces (data_source.get_samples,
GenerateState's sampling params, generate_and_rm_group over the router), returning
RolloutFnTrainOutput."""

from slime.rollout.base_types import RolloutFnTrainOutput
from slime.rollout.sglang_rollout import GenerateState, generate_and_rm_group
from slime.utils.async_utils import run

from slime_user._record import record

CALLS = {"n": 0}


async def _groups(args, groups):
    import asyncio

    state = GenerateState(args)
    return await asyncio.gather(*(generate_and_rm_group(args, g, state.sampling_params.copy())
                                  for g in groups))


def generate_rollout(args, rollout_id, data_source, evaluation=False):
    assert not evaluation
    CALLS["n"] += 1
    record("rollout", rollout_id=rollout_id)
    groups = data_source.get_samples(args.rollout_batch_size)
    done = run(_groups(args, groups))
    return RolloutFnTrainOutput(samples=list(done), metrics={"rollout/custom_calls": CALLS["n"]})
