"""A plain OpenAI-client agent, trained by slime (examples/openai_agent/README.md).

Nothing here knows about slime but the decorator: the client is the official `openai`
package's, pointed at slime's agent API, which records every turn for training.
"""

from openai import AsyncOpenAI
from slime_agent import rollout_entrypoint


@rollout_entrypoint
async def rollout(client: AsyncOpenAI, model: str, prompt: str, label: str,
                  sampling: dict) -> float:
    """Ask the model for the sum; the reward is 1 for the exact answer, else 0."""
    reply = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        **sampling,  # slime's rollout settings: temperature, top_p, max_tokens
    )
    answer = (reply.choices[0].message.content or "").strip()
    return 1.0 if answer == label else 0.0
