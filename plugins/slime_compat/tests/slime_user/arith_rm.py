"""--custom-rm-path: slime's `custom_rm(args, sample) -> float`, single and --group-rm."""

from slime.utils.types import Sample

from slime_user._record import record


def _score(sample: Sample) -> float:
    answer = sample.response.split("</s>")[0].strip()
    return 1.0 if answer == str(sample.label) else 0.0


async def custom_rm(args, sample: Sample) -> float:
    assert isinstance(sample, Sample) and sample.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
    assert args.n_samples_per_prompt >= 1 and args.rollout_max_response_len == 8
    sample.metadata["seen_by_rm"] = True
    # what slime code sees of the prompt filter and the template keywords
    record("custom_rm", prompt_len=len(sample.tokens) - sample.response_length,
           rollout_max_prompt_len=args.rollout_max_prompt_len,
           apply_chat_template_kwargs=args.apply_chat_template_kwargs)
    return _score(sample)


async def group_rm(args, samples: list[Sample]) -> list[float]:
    assert len(samples) == args.n_samples_per_prompt
    record("group_rm", n=len(samples))
    return [_score(s) for s in samples]
