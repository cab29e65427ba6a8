"""Known speakers on real voices: enrol the AMI speakers who recur across snippets, name them in
the other snippets, and measure the scores the matching threshold is chosen from.

    .venv/bin/python -m benchmarks.diarization.known_speakers [--ami-dir tests/data/ami] [--threshold 0.45]

Enrolment: each speaker heard in two or more snippets is enrolled once, from the snippet holding
their longest clean turn (no other reference speaker talking), cut from the reference RTTM. Every
snippet is then diarized by the built-in diarizer and its speakers matched against all enrolled
voices at once (whosaid.speakers.known). Printed:

- score distributions: cosine of each diarized speaker (mapped to the reference speaker it shares
  most exclusive time with) against its own enrolled voice (same) and every other voice
  (different); the enrolment snippet itself is left out of `same`;
- identification accuracy: an enrolled speaker's reference time, outside their enrolment
  snippet, labelled with their name, divided by that time (also on the time they talk alone);
- false-name rate: the time unenrolled speakers talk alone labelled with any name, divided by
  that time; wrong-name rate: an enrolled speaker's time labelled with another enrolled name.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from benchmarks.common.scoring import annotation, as_tracks, new_metric, read_rttm
from whosaid.audio.loading import Audio, load_audio_file
from whosaid.audio.vad import VoiceActivityDetector
from whosaid.results import Diarization, SpeakerTurn
from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.builtin import BuiltinDiarizer
from whosaid.speakers.known import KnownVoice, SpeakerIdentifier, match_speakers, mean_voice, rename

FRAME_S = 0.01


def activity(turns, duration_s: float) -> dict[str, np.ndarray]:
    """speaker -> (frames,) bool at FRAME_S."""
    frames = int(round(duration_s / FRAME_S))
    result: dict[str, np.ndarray] = {}
    for start, end, speaker in turns:
        row = result.setdefault(speaker, np.zeros(frames, bool))
        row[int(round(start / FRAME_S)) : int(round(end / FRAME_S))] = True
    return result


def clean_pieces(reference, speaker: str, min_piece_s: float = 0.3) -> list[tuple[float, float]]:
    """The stretches of at least `min_piece_s` in which the speaker talks and no other reference
    speaker does."""
    others = [(s, e) for s, e, who in reference if who != speaker]
    result = []
    for start, end, who in reference:
        if who != speaker:
            continue
        pieces = [(start, end)]
        for o_start, o_end in others:
            pieces = [
                part for a, b in pieces for part in ((a, min(b, o_start)), (max(a, o_end), b)) if part[1] > part[0]
            ]
        result.extend(piece for piece in pieces if piece[1] - piece[0] >= min_piece_s)
    return sorted(result)


def cut(audio: Audio, pieces: list[tuple[float, float]]) -> Audio:
    rate = audio.sample_rate_hz
    return Audio(np.concatenate([audio.samples[int(s * rate) : int(e * rate)] for s, e in pieces]))


def tally(
    totals: dict[str, float], named: Diarization, reference: dict[str, np.ndarray], enrolled_from: dict[str, str],
    file: str, *, view: str = "exclusive",
) -> None:
    """Adds one snippet's seconds: enrolled speakers' time (outside their enrolment snippet) and
    how much of it carries their name (or another enrolled name); unenrolled speakers' time alone
    (no enrolled speaker talking) and how much of it carries a name. `view`: "exclusive" labels
    each instant with at most one speaker (what words are attributed on); "turns" is the
    overlap-aware diarization (RTTM), where two people talking at once both carry their labels."""
    duration_s = len(next(iter(reference.values()))) * FRAME_S
    turns = named.exclusive_turns if view == "exclusive" else named.turns
    named_system = activity([(t.start_s, t.end_s, t.speaker) for t in turns], duration_s)
    talking = sum(row.astype(int) for row in reference.values())
    enrolled_talking = sum((row for who, row in reference.items() if who in enrolled_from), np.zeros_like(talking))
    for who, row in reference.items():
        labelled_self = named_system.get(who, np.zeros_like(row))
        labelled_name = sum((r for name, r in named_system.items() if name in enrolled_from), np.zeros_like(row))
        alone = row & (talking == 1)
        if who in enrolled_from:
            if enrolled_from[who] == file:
                continue
            totals["enrolled_s"] += row.sum() * FRAME_S
            totals["right_s"] += (row & labelled_self).sum() * FRAME_S
            totals["enrolled_alone_s"] += alone.sum() * FRAME_S
            totals["right_alone_s"] += (alone & labelled_self).sum() * FRAME_S
            totals["wrong_s"] += (row & labelled_name.astype(bool) & ~labelled_self).sum() * FRAME_S
        else:
            free = row & (enrolled_talking == 0)
            totals["unenrolled_s"] += free.sum() * FRAME_S
            totals["false_s"] += (free & labelled_name.astype(bool)).sum() * FRAME_S


def name_by_reference(diarization: Diarization, reference: list[tuple[float, float, str]]) -> Diarization:
    """Each diarized speaker named after a reference speaker, one to one, by pyannote.metrics'
    optimal mapping (the most time shared): perfect naming of a diarization."""
    truth, system = annotation(reference), annotation(as_tracks(diarization.turns))
    return rename(diarization, new_metric().optimal_mapping(truth, system))


@dataclass
class Run:
    """One snippet: its diarization, the speakers' embeddings, the reference activity, the
    identities on the reference diarization, and the oracle-clustered diarization, named."""

    file: str
    diarization: Diarization
    embeddings: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    oracle_identities: tuple
    oracle_named: Diarization


@dataclass
class Measurement:
    voices: list[KnownVoice]
    enrolled_from: dict[str, str]
    runs: list[Run]
    piece_same: list[float] = field(default_factory=list)
    piece_different: list[float] = field(default_factory=list)
    same: list[float] = field(default_factory=list)
    different: list[float] = field(default_factory=list)

    def rates(self, threshold: float, view: str = "exclusive") -> dict[str, float]:
        """accuracy, talking alone, wrong name and false names at `threshold` on `view`."""
        totals: dict[str, float] = defaultdict(float)
        for run in self.runs:
            matches = match_speakers(run.embeddings, self.voices, threshold)
            names = {s: m[0] for s, m in matches.items() if m[0] is not None}
            tally(totals, rename(run.diarization, names), run.reference, self.enrolled_from, run.file, view=view)
        return {
            "accuracy": totals["right_s"] / totals["enrolled_s"],
            "alone": totals["right_alone_s"] / totals["enrolled_alone_s"],
            "wrong": totals["wrong_s"] / totals["enrolled_s"],
            "false": totals["false_s"] / totals["unenrolled_s"],
            "enrolled_s": totals["enrolled_s"],
            "right_s": totals["right_s"],
            "unenrolled_s": totals["unenrolled_s"],
            "false_s": totals["false_s"],
        }

    def reference_diarization_accuracy(self, threshold: float) -> float:
        """The matching alone: the reference speakers as the diarization, each named or not."""
        right = enrolled = 0.0
        for run in self.runs:
            truth = {i.diarized_as: np.array(i.embedding) for i in run.oracle_identities if i.embedding}
            matches = match_speakers(truth, self.voices, threshold)
            for speaker, row in run.reference.items():
                if speaker in self.enrolled_from and self.enrolled_from[speaker] != run.file:
                    enrolled += row.sum() * FRAME_S
                    right += row.sum() * FRAME_S * (matches.get(speaker, (None,))[0] == speaker)
        return right / enrolled

    def oracle_clustering_accuracy(self, view: str = "exclusive") -> float:
        """The accuracy of the diarizer's own segmentation with oracle clustering and perfect
        names: about what better clustering or matching on it can reach. Not a strict bound
        (the oracle gives a local speaker to the reference speaker it overlaps most, which need
        not be the best choice for every speaker's time)."""
        totals: dict[str, float] = defaultdict(float)
        for run in self.runs:
            tally(totals, run.oracle_named, run.reference, self.enrolled_from, run.file, view=view)
        return totals["right_s"] / totals["enrolled_s"]


def measure(ami_dir: Path, threshold: Optional[float] = None, *, verbose: bool = True) -> tuple[Measurement, float]:
    """Enrols the recurring speakers, diarizes and names every snippet; (the measurement, the
    threshold the identifier used)."""
    from benchmarks.diarization.builtin import oracle_diarization

    say = print if verbose else (lambda *args: None)
    references = read_rttm(ami_dir / "ami-train.rttm")
    files = sorted(references)
    audios = {file: load_audio_file(ami_dir / f"ami_{file}.wav") for file in files}
    diarizer = BuiltinDiarizer.load()
    identifier = SpeakerIdentifier(diarizer.embedding, VoiceActivityDetector.load(), threshold=threshold)

    heard_in: dict[str, list[str]] = defaultdict(list)
    for file in files:
        for speaker in sorted({who for _, _, who in references[file]}):
            heard_in[speaker].append(file)
    voices, enrolled_from = [], {}
    for speaker, snippets in sorted(heard_in.items()):
        if len(snippets) < 2:
            continue
        # The snippet with the most clean speech that enrols (a snippet's pieces may hold too
        # little speech for the voice activity detector).
        candidates = sorted(
            ((f, clean_pieces(references[f], speaker)) for f in snippets), key=lambda x: -sum(e - s for s, e in x[1])
        )
        for file, pieces in candidates:
            if not pieces:
                continue
            try:
                voices.append(mean_voice(speaker, [identifier.embed_reference(speaker, cut(audios[file], pieces))]))
            except ValueError as error:  # InvalidAudioError: under 1 s of speech
                say(f"{speaker}: not from {file} ({error})")
                continue
            enrolled_from[speaker] = file
            say(f"enrolled {speaker} from {file}: {len(pieces)} clean pieces, {sum(e - s for s, e in pieces):.2f} s")
            break
        else:
            say(f"not enrolled: {speaker}")
    result = Measurement(voices, enrolled_from, [])

    # Oracle segments: every clean reference piece of at least 1 s, outside the enrolment snippet.
    # (Scores of pieces not enrolled at all count as different.)
    for file in files:
        for speaker in sorted({who for _, _, who in references[file]}):
            for piece in clean_pieces(references[file], speaker, 1.0):
                if enrolled_from.get(speaker) == file:
                    continue
                vector = identifier.embed_samples(cut(audios[file], [piece]).samples)
                for voice in voices:
                    scores = result.piece_same if voice.name == speaker else result.piece_different
                    scores.append(float(vector @ voice.embedding))

    for file in files:
        audio = audios[file]
        diarization = diarizer.diarize(audio, SpeakerHints())
        embeddings = identifier.speaker_embeddings(audio, diarization)
        matches = match_speakers(embeddings, voices, identifier.threshold)
        reference = activity(references[file], audio.duration_s)
        system = activity([(t.start_s, t.end_s, t.speaker) for t in diarization.exclusive_turns], audio.duration_s)
        for speaker, vector in embeddings.items():
            mapped = max(reference, key=lambda who: (reference[who] & system.get(speaker, False)).sum())
            for voice in voices:
                score = float(vector @ voice.embedding)
                if voice.name == mapped and enrolled_from.get(mapped) != file:
                    result.same.append(score)
                elif voice.name != mapped:
                    result.different.append(score)
        speakers = sorted({turn.speaker for turn in diarization.turns} | set(embeddings))
        say(file, ", ".join("{}->{} ({})".format(speaker, *matches.get(speaker, (None, None))) for speaker in speakers))
        # The matching alone: the reference speakers as the diarization (clean pieces as the
        # exclusive view), each named or not as a whole.
        truth = Diarization(
            turns=tuple(SpeakerTurn(s, e, who) for s, e, who in sorted(references[file])),
            exclusive_turns=tuple(
                sorted(
                    (SpeakerTurn(s, e, who) for who in reference for s, e in clean_pieces(references[file], who, 0.0)),
                    key=lambda t: t.start_s,
                )
            ),
        )
        _, oracle_identities = identifier.identify(audio, truth, voices, with_embeddings=True)
        oracle_named = name_by_reference(oracle_diarization(diarizer, audio, references[file]), references[file])
        result.runs.append(Run(file, diarization, embeddings, reference, oracle_identities, oracle_named))
    return result, identifier.threshold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ami-dir", type=Path, default=Path("tests/data/ami"))
    parser.add_argument("--threshold", type=float, help="default: the embedder's same_speaker_similarity")
    parser.add_argument(
        "--sweep", default="0.3,0.35,0.4,0.45,0.5,0.55,0.6", help="thresholds to score on the same diarizations"
    )
    args = parser.parse_args()
    result, threshold = measure(args.ami_dir, args.threshold)

    def describe(scores: list[float]) -> str:
        values = np.array(scores)
        return (
            f"n={len(values)} mean {values.mean():.3f} sd {values.std():.3f} min {values.min():.3f} "
            f"max {values.max():.3f}"
        )

    print(f"\nthreshold {threshold}")
    print(f"clean reference pieces >= 1 s vs enrolled voices: same {describe(result.piece_same)}")
    print(f"    different {describe(result.piece_different)}")
    print(f"    same below threshold: {sum(s < threshold for s in result.piece_same)}; different at or above: "
          f"{sum(d >= threshold for d in result.piece_different)}")
    print("diarized speakers vs enrolled voices:")
    print(f"same speaker:      {describe(result.same)}")
    print(f"different speaker: {describe(result.different)}")
    print(f"same below threshold: {sum(s < threshold for s in result.same)}; different at or above: "
          f"{sum(d >= threshold for d in result.different)}")
    for view in ("exclusive", "turns"):
        rates = result.rates(threshold, view)
        print(f"{view}: identification accuracy {rates['accuracy']:.3f} ({rates['right_s']:.1f} of "
              f"{rates['enrolled_s']:.1f} s); talking alone {rates['alone']:.3f}; wrong name {rates['wrong']:.3f}; "
              f"false names {rates['false']:.3f} ({rates['false_s']:.1f} of {rates['unenrolled_s']:.1f} s); "
              f"the segmentation with oracle clustering and names: {result.oracle_clustering_accuracy(view):.3f}")

    print("\n| threshold | accuracy | talking alone | wrong name | false names | accuracy, overlap-aware turns "
          "| accuracy, reference diarization |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for value in (float(v) for v in args.sweep.split(",")):
        rates, turns = result.rates(value), result.rates(value, "turns")
        print(
            f"| {value:.2f} | {rates['accuracy']:.3f} | {rates['alone']:.3f} | {rates['wrong']:.3f} | "
            f"{rates['false']:.3f} | {turns['accuracy']:.3f} | {result.reference_diarization_accuracy(value):.3f} |"
        )


if __name__ == "__main__":
    main()
