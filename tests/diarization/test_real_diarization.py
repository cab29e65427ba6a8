"""The built-in diarizer and known speakers on real two- and three-person conversations that it was
not fitted on alone (../shared/data/conversations; skipped where that folder is absent), scored as
benchmarks/common/scoring.py sets out: a 0.25 s collar, overlapped speech scored, no speaker count given.
benchmarks/CHANGELOG.md ("Who spoke when on recordings it was not tuned on") has the figures these
bounds sit near and the commands that measure them."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.common.scoring import CONVERSATIONS_DIR, as_tracks, conversations, score
from benchmarks.diarization import known_conversations
from whosaid.audio.loading import load_audio_file
from whosaid.audio.vad import VoiceActivityDetector
from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.builtin import BuiltinDiarizer
from whosaid.speakers.known import SpeakerIdentifier, name_speakers

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not any(CONVERSATIONS_DIR.glob("*.wav")), reason=f"no conversations in {CONVERSATIONS_DIR}"),
]


def test_conversations_find_their_speakers_without_a_count(builtin_diarizer: BuiltinDiarizer) -> None:
    found = []
    for recording in conversations():
        audio = load_audio_file(recording.path)
        found.append((recording, audio.duration_s, as_tracks(builtin_diarizer.diarize(audio, SpeakerHints()).turns)))
    scores = score(found)
    print({name: (round(der, 3), speakers, expected) for name, (_, der, speakers, expected) in scores.per_file.items()})
    # Every two-person conversation is two speakers (one of them was five with centroid linkage);
    # the three-person excerpt's third voice (5 s, never alone for a second in an embedded
    # chunk) joins another.
    for name, (_, _, speakers, expected) in scores.per_file.items():
        assert speakers == expected if expected == 2 else 2 <= speakers <= expected, name
    assert scores.aggregate("conversation") <= 0.39  # measured 0.381 (0.482 before)
    assert max(der for _, der, _, _ in scores.per_file.values()) <= 0.51  # measured 0.500


def test_known_speakers_on_the_second_half_of_each_conversation(builtin_diarizer: BuiltinDiarizer) -> None:
    identifier = SpeakerIdentifier(builtin_diarizer.embedding, VoiceActivityDetector.load())
    halves = known_conversations.prepare(builtin_diarizer, identifier, say=lambda *_: None)
    assert sum(len(half.voices) for half in halves) == 5  # speakers with a clean 3 s turn in the first half

    def match(embeddings, voices):
        return name_speakers(embeddings, voices, identifier.threshold, identifier.margin)

    rates = known_conversations.rates(halves, match)
    print({key: round(float(value), 3) for key, value in rates.items()})
    # The matching itself is right on every speaker; what is lost is the diarization's: a cluster
    # that holds some of the other person's speech carries the name over it.
    assert rates["accuracy"] >= 0.69  # measured 0.714
    assert rates["false"] <= 0.25  # measured 0.231
    assert rates["wrong"] <= 0.10  # measured 0.086
    # The diarizer's own centroids name the same speakers as a second embedding pass.
    for half in halves:
        centroids = {speaker: np.array(vector) for speaker, vector in half.diarization.centroids}
        voices = list(half.voices.values())
        assert match(centroids, voices) == match(half.embeddings, voices), half.file
