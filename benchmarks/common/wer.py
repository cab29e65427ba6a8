"""Word error rate as every table and test of this project computes it, so that their numbers
compare: lower-cased, punctuation removed, white space collapsed, apostrophes inside words kept."""

from __future__ import annotations

import re


def normalise_text(text: str) -> str:
    """Lowercase, punctuation removed, whitespace collapsed. Apostrophes stay, so "I'm" in the
    hypothesis matches "I'm" in the reference rather than splitting into two words."""
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())


def word_error_rate(reference: str, hypothesis: str) -> float | None:
    """Normalised WER; None when the reference has no words (WER is undefined there)."""
    import jiwer

    reference, hypothesis = normalise_text(reference), normalise_text(hypothesis)
    if not reference:
        return None
    return float(jiwer.wer(reference, hypothesis))
