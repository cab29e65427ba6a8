"""Known speakers on real conversations: enrol each speaker from one clean turn of the first half,
name the second half.

    .venv/bin/python -m benchmarks.diarization.known_conversations [--threshold 0.5]

For each conversation of `benchmarks.common.scoring.conversations()`: every speaker with a turn of at
least 3 s where nobody else talks in the first half is enrolled from it (at most its middle 10 s,
as a user would cut a reference clip); the second half is then diarized by the built-in diarizer
as a request of its own and its speakers matched against the enrolled voices
(whosaid.speakers.known), once with every enrollable speaker enrolled and once per speaker with
that speaker alone enrolled. Scored on the exclusive view (what words are attributed on), at
FRAME_S:

- accuracy: an enrolled speaker's time in the second half labelled with their name, over that time;
- wrong name: that time labelled with another enrolled speaker's name;
- false names: an unenrolled speaker's time (no enrolled speaker talking) labelled with any name.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

import numpy as np

from benchmarks.common.scoring import Recording, conversations
from benchmarks.diarization.known_speakers import FRAME_S, activity, clean_pieces, tally
from whosaid.audio.loading import Audio, load_audio_file
from whosaid.results import Diarization
from whosaid.speakers.known import KnownVoice, SpeakerIdentifier, mean_voice, rename

MIN_ENROLMENT_S = 3.0
MAX_ENROLMENT_S = 10.0


@dataclass
class Half:
    """A conversation's second half, diarized, with each speaker's embedding and the enrolled voices."""

    file: str
    diarization: Diarization
    embeddings: dict[str, np.ndarray]
    centroids: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    voices: dict[str, KnownVoice]


def enrolment(recording: Recording, half_s: float) -> dict[str, tuple[float, float]]:
    """speaker -> (start_s, end_s) of the clip each enrollable speaker is enrolled from."""
    clips = {}
    for speaker in sorted({who for _, _, who in recording.reference}):
        pieces = [(s, min(e, half_s)) for s, e in clean_pieces(list(recording.reference), speaker) if s < half_s]
        pieces = [(s, e) for s, e in pieces if e - s >= MIN_ENROLMENT_S]
        if pieces:
            start_s, end_s = max(pieces, key=lambda piece: (piece[1] - piece[0], -piece[0]))
            excess_s = max(0.0, end_s - start_s - MAX_ENROLMENT_S)
            clips[speaker] = (start_s + excess_s / 2, end_s - excess_s / 2)
    return clips


def prepare(diarizer, identifier: SpeakerIdentifier, say=print) -> list[Half]:
    from whosaid.speaker_hints import SpeakerHints

    halves = []
    for recording in conversations():
        audio = load_audio_file(recording.path)
        half_s = audio.duration_s / 2
        rate = audio.sample_rate_hz
        clips = enrolment(recording, half_s)
        voices = {
            speaker: mean_voice(
                speaker, [identifier.embed_reference(speaker, Audio(audio.samples[int(s * rate) : int(e * rate)]))]
            )
            for speaker, (s, e) in clips.items()
        }
        second = Audio(audio.samples[int(half_s * rate) :])
        diarization = diarizer.diarize(second, SpeakerHints())
        reference = [(max(0.0, s - half_s), e - half_s, who) for s, e, who in recording.reference if e > half_s]
        halves.append(
            Half(
                file=recording.name,
                diarization=diarization,
                embeddings=identifier.speaker_embeddings(second, diarization),
                centroids={speaker: np.array(vector) for speaker, vector in diarization.centroids},
                reference=activity(reference, second.duration_s),
                voices=voices,
            )
        )
        say(
            f"{recording.name}: enrolled {', '.join(f'{k} {e - s:.1f} s' for k, (s, e) in clips.items())}; "
            f"second half {second.duration_s:.1f} s, {len({t.speaker for t in diarization.turns})} speakers found"
        )
    return halves


def rates(halves: list[Half], match, embeddings: str = "embeddings") -> dict[str, float]:
    """accuracy, wrong name and false names over every half and enrolment (all voices, then each
    voice alone), with `match(speaker embeddings, voices) -> {speaker: name or None}`."""
    totals: dict[str, float] = defaultdict(float)
    for half in halves:
        enrolments = [list(half.voices)] + ([[name] for name in half.voices] if len(half.voices) > 1 else [])
        for enrolled in enrolments:
            names = match(getattr(half, embeddings), [half.voices[name] for name in enrolled])
            named = rename(half.diarization, {s: n for s, n in names.items() if n is not None})
            tally(totals, named, half.reference, {name: "" for name in enrolled}, half.file)
    return {
        "accuracy": totals["right_s"] / totals["enrolled_s"],
        "wrong": totals["wrong_s"] / totals["enrolled_s"],
        "false": totals["false_s"] / max(totals["unenrolled_s"], FRAME_S),
        "enrolled_s": totals["enrolled_s"],
        "unenrolled_s": totals["unenrolled_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, help="similarity that names a speaker; default: the embedder's")
    args = parser.parse_args()

    from whosaid.audio.vad import VoiceActivityDetector
    from whosaid.speakers.builtin import BuiltinDiarizer
    from whosaid.speakers.known import name_speakers

    diarizer = BuiltinDiarizer.load("cpu")
    identifier = SpeakerIdentifier(diarizer.embedding, VoiceActivityDetector.load(), threshold=args.threshold)
    halves = prepare(diarizer, identifier)

    def match(embeddings: dict[str, np.ndarray], voices: list[KnownVoice]) -> dict[str, Optional[str]]:
        return name_speakers(embeddings, voices, identifier.threshold, identifier.margin)

    print("| speakers' voices from | accuracy | wrong name | false names |")
    print("| --- | ---: | ---: | ---: |")
    for source in ("embeddings", "centroids"):
        result = rates(halves, match, source)
        print(f"| {source} | {result['accuracy']:.3f} | {result['wrong']:.3f} | {result['false']:.3f} |")
    print(f"(enrolled speakers' time {result['enrolled_s']:.1f} s, unenrolled {result['unenrolled_s']:.1f} s)")


if __name__ == "__main__":
    main()
