"""Text of a turn while it is still being spoken, never taken back: local agreement of
successive hypotheses (LocalAgreement-2, as in whisper_streaming).

The turn's audio so far is transcribed again and again as it grows. A word is sent once two
hypotheses in a row agree on it and on every unsent word before it, and once it is not among
the last UNSETTLED_WORDS of the newest hypothesis (the audio may end inside them). A hypothesis's
unsent words are those after the words sent where it starts with them; where it does not
(Whisper heard an earlier word differently once more audio came), those whose middle lies after
the last sent word's end, by the words' times. Words are compared without case and punctuation
("Hello," then "hello."), the newest hypothesis's spelling is the one sent. Words from the third
time a phrase repeats on are never agreed (LOOP_PHRASE_WORDS).

When the turn ends its final transcript can differ from what was sent; `StablePrefix.complete`
keeps what was sent and adds the final transcript's words after the part that matches it, so the
deltas always join into the completed text. Where the final does not end-match what was sent
(Whisper heard the last sent words differently, or not at all), or matches only its last word
and at another time, the words' times decide: the final's words from the first whose middle lies
after the last sent word's end.
"""

from __future__ import annotations

import difflib
import re
from typing import Optional, Sequence

from whosaid.recognition.greedy import third_time_start

#: Each word of a hypothesis's text (split on spaces): its (start, end) in seconds from the turn's start.
WordTimes = Sequence[tuple[float, float]]

#: Words at the end of a hypothesis never sent: the audio may end inside the last one, and
#: Whisper often rewrites the one before it once the next words are heard.
UNSETTLED_WORDS = 2
#: A phrase of up to this many words said three times in a row is where a hypothesis loops
#: (greedy Whisper on a turn's first second: "Hello? Hello? Hello? ..."): no word from its third
#: time on is sent before the turn ends, even when two hypotheses agree on the loop.
LOOP_PHRASE_WORDS = 4
#: How far (seconds) the end of the last word sent may be from the end of the final's word that
#: matches it for the two to be taken as the same word.
JOIN_TOLERANCE_S = 0.5
_PUNCTUATION = re.compile(r"[^\w']+")


def normalised(word: str) -> str:
    return _PUNCTUATION.sub("", word.lower())


def loop_start(words: list[str]) -> int:
    """Where the third time in a row of a phrase of at most LOOP_PHRASE_WORDS words begins in
    `words` (compared as `normalised`); len(words) when no phrase repeats so."""
    return third_time_start([normalised(word) for word in words], LOOP_PHRASE_WORDS, shortest=1)


class StablePrefix:
    """The words of one turn sent so far."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self._previous: Optional[list[str]] = None
        self._sent_end_s: Optional[float] = None  # where the last sent word ends, when known

    @property
    def text(self) -> str:
        return " ".join(self.sent)

    def update(self, hypothesis: str, times: Optional[WordTimes] = None, *, at_pause: bool = False) -> str:
        """The delta to send for a new hypothesis of the turn so far ("" when nothing new is
        stable); `times`, when known, are its words' times. A hypothesis made `at_pause` ends
        between words: all the words it agrees on with the one before may go. An empty one
        made before a pause is no hypothesis: it changes nothing."""
        current = hypothesis.split()
        if not current and not at_pause:
            # A draft without words (its window failed Whisper's checks): the next hypothesis
            # is compared with the one before it, not with nothing.
            return ""
        rest = self._unsent(current, times)
        previous, self._previous = self._previous, rest
        if previous is None or rest is None:
            return ""
        unsettled = 0 if at_pause else UNSETTLED_WORDS
        skipped = len(current) - len(rest)
        limit = min(len(previous), len(rest) - unsettled, loop_start(current) - skipped)
        agreed = 0
        while agreed < limit and normalised(previous[agreed]) == normalised(rest[agreed]):
            agreed += 1
        if agreed == 0:
            return ""
        self._previous = rest[agreed:]
        return self._send(rest[:agreed], _end_of(times, skipped + agreed, len(current)))

    def _unsent(self, words: list[str], times: Optional[WordTimes]) -> Optional[list[str]]:
        """The words of a hypothesis after those sent: after the sent words where it starts with
        them; else (Whisper rewrote a word sent earlier, e.g. "need" as "needed") the words whose
        middle lies after the last sent word's end, when the times are known. None where it
        cannot be placed."""
        if self._extends_sent(words):
            return words[len(self.sent) :]
        if times is None or len(times) != len(words) or self._sent_end_s is None:
            return None
        start = next(
            (index for index, (begin, end) in enumerate(times) if (begin + end) / 2 > self._sent_end_s), len(words)
        )
        if start and normalised(words[start - 1]) != normalised(self.sent[-1]) and start < len(words):
            # Placed by time alone: the word before must be the last one sent, or the boundary is
            # unsure (a word lost or sent twice); wait for a hypothesis that places it.
            return None
        return words[start:]

    def complete(self, final: str, times: Optional[WordTimes] = None) -> str:
        """The last delta of the turn, given its final transcript (`times`: its words' times,
        when known): the final words after those that match what was sent. Afterwards `text`
        is the completed transcript."""
        final_words = final.split()
        if not self.sent:
            return self._send(final_words, _end_of(times, len(final_words), len(final_words)))
        matcher = difflib.SequenceMatcher(
            a=[normalised(word) for word in self.sent], b=[normalised(word) for word in final_words], autojunk=False
        )
        blocks = [block for block in matcher.get_matching_blocks() if block.size]
        last = max(blocks, key=lambda block: block.a + block.size) if blocks else None
        sent_end_s = self._sent_end_s
        timed = times is not None and len(times) == len(final_words) and sent_end_s is not None
        # The last word sent found in the final (with the word before it, or where the times
        # agree: a word as common as "a" may also match far later): the final from the word
        # after it. The times alone would repeat a word whose time moved ("doing checking" sent
        # from drafts of the turn alone; "checking" 0.6 s later in the final, heard after the
        # earlier speech).
        after_match = last.b + last.size if last is not None and last.a + last.size == len(self.sent) else None
        if after_match is not None and (
            not timed or last.size >= 2 or abs(times[after_match - 1][1] - sent_end_s) <= JOIN_TOLERANCE_S
        ):
            start = after_match
        elif timed:
            middles = [(begin + end) / 2 for begin, end in times]
            start = next((index for index, middle in enumerate(middles) if middle > sent_end_s), len(final_words))
        elif last is not None:
            start = last.b + last.size + (len(self.sent) - last.a - last.size)
        else:
            start = len(self.sent)
        start = min(start, len(final_words))
        return self._send(final_words[start:], _end_of(times, len(final_words), len(final_words)))

    def _extends_sent(self, words: list[str]) -> bool:
        return len(words) >= len(self.sent) and all(
            normalised(sent) == normalised(word) for sent, word in zip(self.sent, words[: len(self.sent)], strict=True)
        )

    def _send(self, words: list[str], end_s: Optional[float]) -> str:
        if not words:
            return ""
        delta = (" " if self.sent else "") + " ".join(words)
        self.sent.extend(words)
        self._sent_end_s = end_s
        return delta


def _end_of(times: Optional[WordTimes], count: int, words: int) -> Optional[float]:
    """The end of the `count`-th word of a hypothesis of `words` words with these `times`."""
    if times is None or len(times) != words or count == 0:
        return None
    return times[count - 1][1]
