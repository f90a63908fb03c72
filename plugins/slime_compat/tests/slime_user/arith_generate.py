"""--custom-generate-function-path in slime's style: tokenizer from GenerateState, a POST to the
router's /generate with input_ids + sampling_params + return_logprob, the response tokens and
log-probs taken from meta_info.output_token_logprobs, the status from finish_reason."""

from slime.rollout.sglang_rollout import GenerateState
from slime.utils.http_utils import post
from slime.utils.types import Sample

from slime_user._record import record

CALLS = {"n": 0}


async def generate(args, sample: Sample, sampling_params) -> Sample:
    state = GenerateState(args)
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
    prompt_ids = state.tokenizer.encode(sample.prompt, add_special_tokens=False)
    payload = {"input_ids": prompt_ids, "sampling_params": sampling_params, "return_logprob": True}
    output = await post(url, payload)
    CALLS["n"] += 1
    record("generate", weight_version=output["meta_info"]["weight_version"])
    pairs = output["meta_info"]["output_token_logprobs"]
    response_ids = [p[1] for p in pairs]
    sample.tokens = prompt_ids + response_ids
    sample.response_length = len(response_ids)
    sample.response = output["text"]
    sample.rollout_log_probs = [p[0] for p in pairs]
    sample.loss_mask = [1] * len(response_ids)
    match output["meta_info"]["finish_reason"]["type"]:
        case "length":
            sample.status = Sample.Status.TRUNCATED
        case "abort":
            sample.status = Sample.Status.ABORTED
        case "stop":
            sample.status = Sample.Status.COMPLETED
    return sample
