"""Speakers by word on a conversation with fast turn-taking: whisper-base transcribes an espeak-ng
meeting, the exact reference turns stand in for the diarizer's output, and the
concatenated-minimum-permutation word error rate (cpWER) must stay within 0.01 of the plain WER:
speaker attribution loses (almost) no words."""

from __future__ import annotations

import itertools
from typing import Mapping, Optional, Sequence

import jiwer
import pytest

from benchmarks.wer import normalise_text
from tests.support.conversation import Conversation, build_conversation
from whosaid.audio import Audio, audio_from_array
from whosaid.config import InferenceConfig
from whosaid.engine import Engine
from whosaid.results import Diarization, SpeakerSegment, SpeakerTurn

MAX_CPWER_OVER_WER = 0.01


class ReferenceTurns:
    """A Diarizer-compatible component whose output is the conversation's exact speaker turns."""

    def __init__(self, turns: Sequence[SpeakerTurn]) -> None:
        self.turns = tuple(turns)
        self.calls = 0

    def diarize(self, audio: Audio, speaker_parameters: dict[str, int]) -> Diarization:
        self.calls += 1
        return Diarization(turns=self.turns, exclusive_turns=self.turns)


def errors(reference: str, hypothesis: str) -> int:
    if not reference:
        return len(hypothesis.split())
    output = jiwer.process_words(reference, hypothesis)
    return output.substitutions + output.deletions + output.insertions


def cpwer(reference: Mapping[str, str], hypothesis: Mapping[str, str]) -> float:
    """Each speaker's words concatenated; speakers paired to minimise the errors (a speaker
    without a partner is compared with nothing)."""
    references = {speaker: normalise_text(text) for speaker, text in reference.items()}
    hypotheses = {speaker: normalise_text(text) for speaker, text in hypothesis.items()}
    slots: list[Optional[str]] = [*hypotheses, *[None] * len(references)]
    best = min(
        sum(
            errors(references[speaker], hypotheses[partner] if partner else "")
            for speaker, partner in zip(references, pairing, strict=False)
        )
        + sum(len(hypotheses[speaker].split()) for speaker in hypotheses if speaker not in pairing)
        for pairing in itertools.permutations(slots, len(references))
    )
    return best / sum(len(text.split()) for text in references.values())


def by_speaker(segments: Sequence[SpeakerSegment]) -> dict[str, str]:
    texts: dict[str, list[str]] = {}
    for segment in segments:
        texts.setdefault(segment.speaker, []).append(segment.text)
    return {speaker: " ".join(parts) for speaker, parts in texts.items()}


def test_cpwer_pairs_speakers_and_counts_every_word() -> None:
    reference = {"a": "hello there", "b": "yes indeed"}
    assert cpwer(reference, {"X": "yes indeed", "Y": "hello there"}) == 0.0
    # b's words are in the wrong speaker: missing from b and extra in a
    assert cpwer(reference, {"X": "hello there yes indeed"}) == 1.0
    assert cpwer(reference, {"X": "hello", "Y": "yes indeed", "Z": "extra"}) == 0.5


@pytest.fixture(scope="module")
def conversation() -> Conversation:
    return build_conversation()


@pytest.fixture(scope="module")
def diarized(converted_model, make_engine, conversation):
    recognizer = make_engine(converted_model("whisper-base")).recognizer
    turns = ReferenceTurns([SpeakerTurn(line.start_s, line.end_s, line.speaker) for line in conversation.lines])
    engine = Engine(recognizer, turns)
    config, _ = InferenceConfig.from_parameters({"language": "en"})
    transcript = engine.transcribe(audio_from_array(conversation.samples, 16_000), config)
    assert turns.calls == 1
    return transcript


@pytest.mark.slow
def test_speakers_by_word_lose_no_more_than_a_hundredth(conversation, diarized) -> None:
    reference: dict[str, list[str]] = {}
    for line in conversation.lines:
        reference.setdefault(line.speaker, []).append(line.text)
    wer = jiwer.wer(normalise_text(conversation.text()), normalise_text(diarized.text))
    speaker_wer = cpwer(
        {speaker: " ".join(lines) for speaker, lines in reference.items()}, by_speaker(diarized.speakers)
    )
    assert wer < 0.25, diarized.text  # the transcript itself is usable
    assert speaker_wer - wer <= MAX_CPWER_OVER_WER, (speaker_wer, wer)


@pytest.mark.slow
def test_every_word_is_in_one_speaker_segment_in_order(diarized) -> None:
    words = [word for chunk in diarized.chunks for word in chunk.words]
    assert words, "a diarizer makes the engine time the words"
    assert [w for segment in diarized.speakers for piece in segment.chunks for w in piece.words] == words
    assert "words" not in diarized.to_dict()["chunks"][0]  # not asked for: not in the response
