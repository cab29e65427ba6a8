"""Speakers by word on conversations with fast turn-taking: whisper-base transcribes espeak-ng
conversations, the exact reference turns stand in for the diarizer's output, and the
concatenated-minimum-permutation word error rate (cpWER) must stay within 0.01 of the plain WER:
speaker attribution loses (almost) no words. One conversation is a meeting with one-word replies
and 0.15-0.6 s gaps; the other a fast exchange of one- and two-word replies 50-200 ms from the
other speakers' words, many of them inside another speaker's sentence.

`pytest tests/diarization/test_speaker_words.py -s` prints WER and cpWER of both."""

from __future__ import annotations

import itertools
import random
from typing import Mapping, Optional, Sequence

import jiwer
import pytest

from benchmarks.common.wer import normalise_text
from tests.support.conversation import FAST_EXCHANGE_SCRIPT, FAST_VOICES, Conversation, build_conversation
from whosaid.audio.loading import Audio, audio_from_array
from whosaid.config import InferenceConfig
from whosaid.engine import Engine
from whosaid.results import Diarization, SpeakerSegment, SpeakerTurn, Transcript
from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.attribution import assign_speakers

MAX_CPWER_OVER_WER = 0.01


class ReferenceTurns:
    """A Diarizer-compatible component whose output is the conversation's exact speaker turns."""

    def __init__(self, turns: Sequence[SpeakerTurn]) -> None:
        self.turns = tuple(turns)
        self.calls = 0

    def diarize(self, audio: Audio, hints: SpeakerHints) -> Diarization:
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
def fast_exchange() -> Conversation:
    return build_conversation(FAST_EXCHANGE_SCRIPT, FAST_VOICES)


@pytest.fixture(scope="module")
def with_reference_turns(converted_model, make_engine):
    """Transcribes a conversation with whisper-base and its exact turns as the diarizer's answer."""
    recognizer = make_engine(converted_model("whisper-base")).recognizer

    def transcribe(conversation: Conversation) -> Transcript:
        turns = ReferenceTurns([SpeakerTurn(line.start_s, line.end_s, line.speaker) for line in conversation.lines])
        config, _ = InferenceConfig.from_parameters({"language": "en"})
        transcript = Engine(recognizer, turns).transcribe(audio_from_array(conversation.samples, 16_000), config)
        assert turns.calls == 1
        return transcript

    return transcribe


@pytest.fixture(scope="module")
def diarized(with_reference_turns, conversation):
    return with_reference_turns(conversation)


def word_error_rates(conversation: Conversation, transcript: Transcript) -> tuple[float, float]:
    """(WER, cpWER) of the transcript against the conversation's script."""
    reference: dict[str, list[str]] = {}
    for line in conversation.lines:
        reference.setdefault(line.speaker, []).append(line.text)
    wer = jiwer.wer(normalise_text(conversation.text()), normalise_text(transcript.text))
    speaker_wer = cpwer(
        {speaker: " ".join(lines) for speaker, lines in reference.items()}, by_speaker(transcript.speakers)
    )
    lines = len(conversation.lines)
    print(f"\n{lines} lines: WER {wer:.4f}, cpWER {speaker_wer:.4f}, cpWER - WER {speaker_wer - wer:.4f}")
    return wer, speaker_wer


@pytest.mark.slow
def test_speakers_by_word_lose_no_more_than_a_hundredth(conversation, diarized) -> None:
    wer, speaker_wer = word_error_rates(conversation, diarized)
    assert wer < 0.25, diarized.text  # the transcript itself is usable
    assert speaker_wer - wer <= MAX_CPWER_OVER_WER, (speaker_wer, wer)


def jittered(turns: Sequence[SpeakerTurn], rng: random.Random, low_s: float, high_s: float) -> list[SpeakerTurn]:
    """Every start and end moved by low_s..high_s, earlier or later, as a diarizer's boundaries
    are off; overlaps that makes are cut in their middle (an exclusive view)."""

    def moved(time_s: float) -> float:
        return max(0.0, time_s + rng.choice((-1, 1)) * rng.uniform(low_s, high_s))

    shifted = []
    for turn in turns:
        start_s, end_s = moved(turn.start_s), moved(turn.end_s)
        shifted.append(SpeakerTurn(start_s, max(end_s, start_s + 0.05), turn.speaker))
    shifted.sort(key=lambda turn: turn.start_s)
    exclusive: list[SpeakerTurn] = []
    for current in shifted:
        if exclusive and exclusive[-1].end_s > current.start_s:
            previous = exclusive[-1]
            middle_s = (current.start_s + min(previous.end_s, current.end_s)) / 2
            exclusive[-1] = SpeakerTurn(previous.start_s, max(previous.start_s + 0.01, middle_s), previous.speaker)
            current = SpeakerTurn(middle_s, max(middle_s + 0.01, current.end_s), current.speaker)
        exclusive.append(current)
    return exclusive


@pytest.mark.slow
def test_boundary_jitter_does_not_split_sentences(conversation, diarized) -> None:
    """The meeting's reference turns with every boundary 0.1-0.25 s off (20 draws): the words
    stay with their sentences, so attribution loses at most a hundredth on average."""
    reference: dict[str, list[str]] = {}
    for line in conversation.lines:
        reference.setdefault(line.speaker, []).append(line.text)
    references = {speaker: " ".join(lines) for speaker, lines in reference.items()}
    wer = jiwer.wer(normalise_text(conversation.text()), normalise_text(diarized.text))
    turns = [SpeakerTurn(line.start_s, line.end_s, line.speaker) for line in conversation.lines]
    losses = [
        cpwer(references, by_speaker(assign_speakers(diarized.chunks, jittered(turns, random.Random(seed), 0.1, 0.25))))
        - wer
        for seed in range(20)
    ]
    print(f"\njittered boundaries: mean cpWER - WER {sum(losses) / len(losses):.4f}, worst {max(losses):.4f}")
    assert sum(losses) / len(losses) <= MAX_CPWER_OVER_WER, losses


@pytest.mark.slow
def test_short_replies_in_a_fast_exchange_keep_their_speaker(fast_exchange, with_reference_turns) -> None:
    transcript = with_reference_turns(fast_exchange)
    wer, speaker_wer = word_error_rates(fast_exchange, transcript)
    assert wer < 0.25, transcript.text
    assert speaker_wer - wer <= MAX_CPWER_OVER_WER, [(s.speaker, s.text) for s in transcript.speakers]
    # Every reply still has a segment of its own speaker: none was folded into its neighbour.
    replies = [line for line in fast_exchange.lines if len(line.text.split()) <= 2]
    assert len(replies) >= 8
    for line in replies:
        middle_s = (line.start_s + line.end_s) / 2
        assert any(
            segment.speaker == line.speaker and segment.start_s - 0.3 <= middle_s <= segment.end_s + 0.3
            for segment in transcript.speakers
        ), line


@pytest.mark.slow
def test_every_word_is_in_one_speaker_segment_in_order(diarized) -> None:
    words = [word for chunk in diarized.chunks for word in chunk.words]
    assert words, "a diarizer makes the engine time the words"
    assert [w for segment in diarized.speakers for piece in segment.chunks for w in piece.words] == words
    assert "words" not in diarized.to_dict()["chunks"][0]  # not asked for: not in the response
