"""Stop-string detection on the decoded text of generated token ids.

Each step decodes only a window of the newest tokens (long enough to hold the longest stop
string), so a check costs the same at token 10 and at token 10,000. Because every step is
checked, the first step whose window text contains a stop string is the step whose token
completed it; generation ends there with that token included.
"""

from __future__ import annotations

from typing import Any


class StopStrings:
    """Per-row stop strings, fed one token per step."""

    def __init__(self, tokenizer: Any, stops: list[str]) -> None:
        self.tokenizer = tokenizer
        self.stops = [s for s in stops if s]
        longest = max((len(s) for s in self.stops), default=0)
        # A token decodes to at least one character except for special tokens and partial
        # UTF-8 bytes; the margin covers runs of those.
        self.window = 2 * longest + 8
        self.ids: list[int] = []

    def push(self, token_id: int) -> bool:
        """Append a generated token; True when a stop string now appears in the text."""
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids[-self.window:], skip_special_tokens=True)
        return any(s in text for s in self.stops)
