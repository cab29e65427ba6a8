"""Words Whisper adds where a turn's audio ends: it may repeat the last phrase again and again
("aren't they suing you? Aren't they suing you? ..." in a 1.4 s turn of a far-field meeting),
and the word timing, finding no audio left for the repeats, squeezes them into the last frames.
A live turn ends where its speaker paused, so its audio ends right after its last words far more
often than a file's 30 s window does."""

from __future__ import annotations

from typing import Sequence

from whosaid.live.agreement import normalised

#: A phrase repeated right after itself with its words squeezed into less than this each (their
#: times' span over their number) is not speech: Whisper repeats the last phrase where the audio
#: ends ("aren't they suing you? Aren't they suing you? ..." in a 1.4 s turn), and the word
#: timing finds no audio left for the repeats. Spoken words take a tenth of a second or more.
CRAMMED_S_PER_WORD = 0.03
#: Longest repeated phrase looked for, in words: a loop may repeat a whole short sentence or two
#: ("And it's great joy. Aren't they suing you?" three times). A single word repeated is left
#: alone (a stutter's words are short too).
CRAMMED_PHRASE_WORDS = 12


def crammed_repeats(words: Sequence[tuple[str, float, float]]) -> set[int]:
    """Indices of the words (text, start, end) that repeat the phrase of 2 to CRAMMED_PHRASE_WORDS
    words just before them, squeezed into next to no time (CRAMMED_S_PER_WORD)."""
    plain = [normalised(text) for text, _, _ in words]
    dropped: set[int] = set()
    index = 0
    while index < len(words):
        for size in range(2, CRAMMED_PHRASE_WORDS + 1):
            copy = range(index, index + size)
            if index < size or copy.stop > len(words) or plain[index - size : index] != plain[index : copy.stop]:
                continue
            if words[copy.stop - 1][2] - words[index][1] < CRAMMED_S_PER_WORD * size:
                dropped.update(copy)
                index = copy.stop - 1
                break
        index += 1
    return dropped
