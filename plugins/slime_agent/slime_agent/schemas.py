"""JSON schemas of what the agent API and the rollout buffer accept and hand out.

Checked with :func:`slime_agent.validation.check` (integers are ``int`` only, numbers
finite). They are the wire contract documented in ``docs/agentic.md``; the limits below are
the ones a trainer can take without harm: token ids fit an int32 tensor, log-probs are
finite and <= 0, rewards finite.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Status

INT32_MAX = 2**31 - 1
# rollout.max_abs_reward's default: the bound where no trainer config says otherwise (a task
# started without one, an AgentApiServer built by hand); a test keeps the two equal
DEFAULT_MAX_ABS_REWARD = 1e6
INT64 = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
NAT = {"type": "integer", "minimum": 0, "maximum": INT32_MAX}
FINITE = {"type": "number"}  # finite by the validator's definition of "number"

REWARD: dict[str, Any] = {
    "anyOf": [{"type": "null"}, FINITE,
              {"type": "object", "additionalProperties": FINITE, "maxProperties": 256}],
}

# one Sample.to_dict(); the field list is kept equal to the dataclass's by a test
SAMPLE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "group_index": INT64,
        "index": INT64,
        "rollout_id": INT64,
        "prompt": {"type": ["string", "array"], "items": {"type": "object"}},
        "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                               "maximum": INT32_MAX}},
        "response": {"type": "string"},
        "response_length": NAT,
        "label": {},
        "reward": REWARD,
        "loss_mask": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1}},
        "rollout_log_probs": {"type": "array", "items": {"type": "number", "maximum": 0}},
        "weight_versions": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                        "maximum": 2**63 - 1}},
        "status": {"enum": [s.value for s in Status]},
        "remove_sample": {"type": "boolean"},
        "metadata": {"type": "object"},
        "train_metadata": {"type": "object"},
        "session_id": {"type": ["string", "null"], "maxLength": 1024},
        "error": {"type": ["string", "null"]},
        # slime_hookspecs.RoutedExperts.to_dict(): routing replay's record (docs/moe.md); its
        # byte count is checked against the shape by the type, its length against the tokens
        # by Sample.validate, its ids against the model by the trainer
        "rollout_routed_experts": {"anyOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False,
            "required": ["shape", "dtype", "data"],
            "properties": {"shape": {"type": "array", "items": NAT, "minItems": 3,
                                     "maxItems": 3},
                           "dtype": {"enum": ["uint8", "int16"]},
                           "data": {"type": "string"}}}]},
    },
}

INSTANCE_ID = {"type": "string", "minLength": 1, "maxLength": 1024}
# where a request carries samples, each is checked against SAMPLE on its own (with its path),
# together with the invariants of Sample.validate, by the buffer's state
SAMPLE_REF = {"type": "object"}

# -- rollout buffer ---------------------------------------------------------------------------

# POST /start_rollout: the task; anything beyond these keys is handed to workers as it is
TASK: dict[str, Any] = {
    "type": "object",
    "required": ["group_size"],
    "properties": {
        "group_size": {"type": "integer", "minimum": 1, "maximum": 65536},
        "vocab_size": {"type": "integer", "minimum": 1, "maximum": INT32_MAX},
        # the trainer's bounds on written samples: rollout.max_abs_reward (0: none; absent:
        # DEFAULT_MAX_ABS_REWARD) and prompt + response tokens (absent or null: no cap)
        "max_abs_reward": {"type": "number", "minimum": 0},
        "max_context_len": {"type": ["integer", "null"], "minimum": 1, "maximum": INT32_MAX},
        "engine": {"type": ["object", "null"], "properties": {
            "base_url": {"type": "string"}, "token": {"type": "string"},
            "model": {"type": "string"}}},
        "sampling": {"type": ["object", "null"]},
        "tools": {"type": ["array", "null"], "items": {"type": "string"}},
        "max_turns": {"type": ["integer", "null"], "minimum": 1, "maximum": 65536},
        "task_type": {"type": ["string", "null"]},
        "task_kwargs": {"type": ["object", "null"]},
    },
}

PROMPTS: dict[str, Any] = {
    "type": "object",
    "required": ["instances"],
    "additionalProperties": False,
    "properties": {"instances": {"type": "array", "items": {
        "type": "object",
        "required": ["instance_id", "samples"],
        "additionalProperties": False,
        "properties": {"instance_id": INSTANCE_ID,
                       "samples": {"type": "array", "minItems": 1, "maxItems": 65536,
                                   "items": SAMPLE_REF}},
    }}},
}

WRITE: dict[str, Any] = {
    "type": "object",
    "required": ["instance_id", "slot"],
    "additionalProperties": False,
    "properties": {
        "instance_id": INSTANCE_ID,
        "slot": {"type": "integer", "minimum": 0, "maximum": 65535},
        "samples": {"type": "array", "minItems": 1, "maxItems": 4096, "items": SAMPLE_REF},
        "sample": SAMPLE_REF,  # one of the two (checked by the state, with a plain message)
    },
}

WAIT = {"type": "number", "minimum": 0, "maximum": 86400}

GET_DATA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"num_groups": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                   "wait": WAIT},
}

TASK_QUERY: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "properties": {"wait": WAIT},
}

# what GET /task answers a worker (documented in docs/agentic.md; tested against lease())
JOB_RESPONSE: dict[str, Any] = {
    "type": "object",
    "required": ["success", "job", "stopped", "task"],
    "properties": {
        "success": {"const": True},
        "stopped": {"type": "boolean"},
        "task": {"anyOf": [{"type": "null"}, TASK]},
        "job": {"anyOf": [{"type": "null"}, {
            "type": "object",
            "required": ["instance_id", "slot", "group_size", "lease_s", "sample"],
            "additionalProperties": False,
            "properties": {"instance_id": INSTANCE_ID, "slot": NAT, "group_size": NAT,
                           "lease_s": {"type": "number", "exclusiveMinimum": 0},
                           "sample": SAMPLE},
        }]},
    },
}

# -- agent API --------------------------------------------------------------------------------

ROLES = ("system", "developer", "user", "assistant", "tool")

TEXT_PART = {"type": "object", "required": ["type", "text"],
             "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}

TOOL_CALL = {"type": "object", "required": ["function"], "properties": {
    "id": {"type": "string"}, "type": {"const": "function"},
    "function": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "arguments": {"type": "string"}}}}}

MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {  # other keys of OpenAI message objects (refusal, audio, ...) are ignored
        "role": {"enum": list(ROLES)},
        "content": {"type": ["string", "array", "null"], "items": TEXT_PART},
        "name": {"type": ["string", "null"], "maxLength": 256},
        "tool_call_id": {"type": ["string", "null"]},
        "tool_calls": {"type": ["array", "null"], "items": TOOL_CALL},
    },
}

TOOL = {"type": "object", "required": ["type", "function"], "properties": {
    "type": {"const": "function"},
    "function": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 256},
        "description": {"type": ["string", "null"]},
        "parameters": {"type": ["object", "null"]},
        "strict": {"type": ["boolean", "null"]}}}}}

OPT_INT = {"type": ["integer", "null"]}
OPT_NUM = {"type": ["number", "null"]}
OPT_STR = {"type": ["string", "null"]}
OPT_BOOL = {"type": ["boolean", "null"]}

CHAT: dict[str, Any] = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string", "maxLength": 256},
        "messages": {"type": "array", "minItems": 1, "maxItems": 4096, "items": MESSAGE},
        "max_tokens": {**OPT_INT, "minimum": 1, "maximum": INT32_MAX},
        "max_completion_tokens": {**OPT_INT, "minimum": 1, "maximum": INT32_MAX},
        "temperature": {**OPT_NUM, "minimum": 0, "maximum": 2},
        "top_p": {**OPT_NUM, "exclusiveMinimum": 0, "maximum": 1},
        "top_k": {**OPT_INT, "minimum": -1, "maximum": INT32_MAX, "not": {"const": 0}},
        "stop": {"type": ["string", "array", "null"], "maxItems": 16,
                 "items": {"type": "string", "minLength": 1}},
        "seed": {**OPT_INT, "minimum": 0, "maximum": 2**63 - 1},
        "n": {**OPT_INT, "minimum": 1, "maximum": 128},
        "stream": OPT_BOOL,
        "stream_options": {"type": ["object", "null"], "additionalProperties": False,
                           "properties": {"include_usage": OPT_BOOL,
                                          "include_obfuscation": OPT_BOOL}},
        "logprobs": OPT_BOOL,
        "top_logprobs": {**OPT_INT, "minimum": 0, "maximum": 20},
        "tools": {"type": ["array", "null"], "maxItems": 256, "items": TOOL},
        "tool_choice": {"type": ["string", "object", "null"]},
        "parallel_tool_calls": OPT_BOOL,
        "user": {**OPT_STR, "maxLength": 1024},
        "response_format": {"type": ["object", "null"], "required": ["type"],
                            "properties": {"type": {"type": "string"}}},
        "frequency_penalty": {**OPT_NUM, "minimum": -2, "maximum": 2},
        "presence_penalty": {**OPT_NUM, "minimum": -2, "maximum": 2},
        "logit_bias": {"type": ["object", "null"]},
        "metadata": {"type": ["object", "null"]},
        "store": OPT_BOOL,
        "service_tier": OPT_STR,
        "prompt_cache_key": OPT_STR,
        "safety_identifier": OPT_STR,
        # known to OpenAI, refused by the server unless absent / null (see api.UNSUPPORTED)
        "reasoning_effort": {}, "verbosity": {}, "modalities": {}, "audio": {},
        "prediction": {}, "web_search_options": {}, "functions": {}, "function_call": {},
    },
}

FINISH: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"reward": REWARD, "label": {}, "metadata": {"type": ["object", "null"]},
                   "rollout_id": INT64},
}
