"""Text of a turn while it is still being spoken, never taken back: local agreement of
successive hypotheses (LocalAgreement-2, as in whisper_streaming).

The turn's audio so far is transcribed again and again as it grows. A word is sent once two
hypotheses in a row agree on it and on every word before it, and once it is not among the last
UNSETTLED_WORDS of the newest hypothesis (the audio may end inside them). Words are compared without case and
punctuation ("Hello," then "hello."), the newest hypothesis's spelling is the one sent. Words
from the third time a phrase repeats on are never agreed (LOOP_PHRASE_WORDS).

When the turn ends its final transcript can differ from what was sent; `StablePrefix.complete`
keeps what was sent and adds the final transcript's words after the part that matches it, so the
deltas always join into the completed text.
"""

from __future__ import annotations

import difflib
import re
from typing import Optional

#: Words at the end of a hypothesis never sent: the audio may end inside the last one, and
#: Whisper often rewrites the one before it once the next words are heard.
UNSETTLED_WORDS = 2
#: A phrase of up to this many words said three times in a row is where a hypothesis loops
#: (greedy Whisper on a turn's first second: "Hello? Hello? Hello? ..."): no word from its third
#: time on is sent before the turn ends, even when two hypotheses agree on the loop.
LOOP_PHRASE_WORDS = 4
_PUNCTUATION = re.compile(r"[^\w']+")


def normalised(word: str) -> str:
    return _PUNCTUATION.sub("", word.lower())


def loop_start(words: list[str]) -> int:
    """Where the third time in a row of a phrase of at most LOOP_PHRASE_WORDS words begins in
    `words` (compared as `normalised`); len(words) when no phrase repeats so."""
    plain = [normalised(word) for word in words]
    for start in range(len(plain)):
        for size in range(1, LOOP_PHRASE_WORDS + 1):
            phrase = plain[start : start + size]
            if len(phrase) == size and plain[start + size : start + 3 * size] == phrase * 2:
                return start + 2 * size
    return len(plain)


class StablePrefix:
    """The words of one turn sent so far."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self._previous: Optional[list[str]] = None

    @property
    def text(self) -> str:
        return " ".join(self.sent)

    def update(self, hypothesis: str) -> str:
        """The delta to send for a new hypothesis of the turn so far ("" when nothing new is stable)."""
        current = hypothesis.split()
        previous, self._previous = self._previous, current
        if previous is None:
            return ""
        agreed = 0
        limit = min(len(previous), len(current) - UNSETTLED_WORDS, loop_start(current))
        while agreed < limit and normalised(previous[agreed]) == normalised(current[agreed]):
            agreed += 1
        if agreed <= len(self.sent) or not self._extends_sent(current):
            return ""
        return self._send(current[len(self.sent) : agreed])

    def complete(self, final: str) -> str:
        """The last delta of the turn, given its final transcript: the final words after those
        that match what was sent. Afterwards `text` is the completed transcript."""
        final_words = final.split()
        if not self.sent:
            return self._send(final_words)
        matcher = difflib.SequenceMatcher(
            a=[normalised(word) for word in self.sent], b=[normalised(word) for word in final_words], autojunk=False
        )
        blocks = [block for block in matcher.get_matching_blocks() if block.size]
        if blocks:
            last = max(blocks, key=lambda block: block.a + block.size)
            start = last.b + last.size + (len(self.sent) - last.a - last.size)
        else:
            start = len(self.sent)
        return self._send(final_words[min(start, len(final_words)) :])

    def _extends_sent(self, words: list[str]) -> bool:
        return len(words) >= len(self.sent) and all(
            normalised(sent) == normalised(word) for sent, word in zip(self.sent, words[: len(self.sent)], strict=True)
        )

    def _send(self, words: list[str]) -> str:
        if not words:
            return ""
        delta = (" " if self.sent else "") + " ".join(words)
        self.sent.extend(words)
        return delta
