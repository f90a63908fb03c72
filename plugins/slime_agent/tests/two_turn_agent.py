"""The agent of test_run.py: two turns through the official async client, and a reward that
can be recomputed from the batch's prompt tokens alone."""

from openai import AsyncOpenAI
from slime_agent import rollout_entrypoint


def reward_of(prompt: str) -> float:
    a, b = prompt.rstrip("=").split("+")
    return (int(a) + int(b)) % 7 / 10


@rollout_entrypoint
async def rollout(client: AsyncOpenAI, model: str, prompt: str, sampling: dict) -> float:
    messages = [{"role": "user", "content": prompt}]
    first = await client.chat.completions.create(model=model, messages=messages, **sampling)
    # the second turn extends the conversation: only the new user turn is tokenized (masked)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": prompt}]
    await client.chat.completions.create(model=model, messages=messages, **sampling)
    return reward_of(prompt)
