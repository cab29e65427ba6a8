"""Known speakers on real voices: enrol the AMI speakers who recur across snippets, name them in
the other snippets, and measure the scores the matching threshold is chosen from.

    .venv/bin/python -m benchmarks.known_speakers [--ami-dir tests/data/ami] [--threshold 0.45]

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
from pathlib import Path

import numpy as np

from whosaid.audio.loading import Audio, load_audio_file
from whosaid.audio.vad import VoiceActivityDetector
from whosaid.results import Diarization, SpeakerTurn
from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.builtin import BuiltinDiarizer
from whosaid.speakers.known import SpeakerIdentifier, match_speakers, mean_voice, rename

FRAME_S = 0.01


def read_rttm(path: Path) -> dict[str, list[tuple[float, float, str]]]:
    turns: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "SPEAKER":
            start = float(fields[3])
            turns[fields[1]].append((start, start + float(fields[4]), fields[7]))
    return dict(turns)


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
    file: str,
) -> None:
    """Adds one snippet's seconds: enrolled speakers' time (outside their enrolment snippet) and
    how much of it carries their name (or another enrolled name); unenrolled speakers' time alone
    (no enrolled speaker talking) and how much of it carries a name."""
    duration_s = len(next(iter(reference.values()))) * FRAME_S
    named_system = activity([(t.start_s, t.end_s, t.speaker) for t in named.exclusive_turns], duration_s)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ami-dir", type=Path, default=Path("tests/data/ami"))
    parser.add_argument("--threshold", type=float, help="default: the embedder's same_speaker_similarity")
    parser.add_argument(
        "--sweep", default="0.3,0.35,0.4,0.45,0.5,0.55,0.6", help="thresholds to score on the same diarizations"
    )
    args = parser.parse_args()

    references = read_rttm(args.ami_dir / "ami-train.rttm")
    files = sorted(references)
    audios = {file: load_audio_file(args.ami_dir / f"ami_{file}.wav") for file in files}
    diarizer = BuiltinDiarizer.load()
    identifier = SpeakerIdentifier(diarizer.embedding, VoiceActivityDetector.load(), threshold=args.threshold)

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
                print(f"{speaker}: not from {file} ({error})")
                continue
            enrolled_from[speaker] = file
            print(f"enrolled {speaker} from {file}: {len(pieces)} clean pieces, {sum(e - s for s, e in pieces):.2f} s")
            break
        else:
            print(f"not enrolled: {speaker}")

    # Oracle segments: every clean reference piece of at least 1 s, outside the enrolment snippet.
    # (Scores of pieces not enrolled at all count as different.)
    piece_same, piece_different = [], []
    for file in files:
        for speaker in sorted({who for _, _, who in references[file]}):
            for piece in clean_pieces(references[file], speaker, 1.0):
                if enrolled_from.get(speaker) == file:
                    continue
                vector = identifier.embed_samples(cut(audios[file], [piece]).samples)
                for voice in voices:
                    (piece_same if voice.name == speaker else piece_different).append(float(vector @ voice.embedding))

    same, different = [], []
    totals = defaultdict(float)
    oracle = defaultdict(float)
    runs = []
    for file in files:
        audio = audios[file]
        diarization = diarizer.diarize(audio, SpeakerHints())
        embeddings = identifier.speaker_embeddings(audio, diarization)
        named, identities = identifier.identify(audio, diarization, voices)
        reference = activity(references[file], audio.duration_s)
        system = activity([(t.start_s, t.end_s, t.speaker) for t in diarization.exclusive_turns], audio.duration_s)
        for speaker, vector in embeddings.items():
            mapped = max(reference, key=lambda who: (reference[who] & system.get(speaker, False)).sum())
            for voice in voices:
                score = float(vector @ voice.embedding)
                if voice.name == mapped and enrolled_from.get(mapped) != file:
                    same.append(score)
                elif voice.name != mapped:
                    different.append(score)
        print(file, ", ".join(f"{i.diarized_as}->{i.name} ({i.similarity})" for i in identities))
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
        for identity in oracle_identities:
            seconds = reference[identity.diarized_as].sum() * FRAME_S
            if identity.diarized_as in enrolled_from and enrolled_from[identity.diarized_as] != file:
                oracle["enrolled_s"] += seconds
                oracle["right_s"] += seconds * (identity.name == identity.diarized_as)
            elif identity.diarized_as not in enrolled_from:
                oracle["unenrolled_s"] += seconds
                oracle["false_s"] += seconds * (identity.name is not None)
        tally(totals, named, reference, enrolled_from, file)
        runs.append((file, diarization, embeddings, reference, oracle_identities))

    def describe(scores: list[float]) -> str:
        values = np.array(scores)
        return (
            f"n={len(values)} mean {values.mean():.3f} sd {values.std():.3f} min {values.min():.3f} "
            f"max {values.max():.3f}"
        )

    print(f"\nthreshold {identifier.threshold}")
    print(f"clean reference pieces >= 1 s vs enrolled voices: same {describe(piece_same)}")
    print(f"    different {describe(piece_different)}")
    print(f"    same below threshold: {sum(s < identifier.threshold for s in piece_same)}; different at or above: "
          f"{sum(d >= identifier.threshold for d in piece_different)}")
    print("diarized speakers vs enrolled voices:")
    print(f"same speaker:      {describe(same)}")
    print(f"different speaker: {describe(different)}")
    print(f"same below threshold: {sum(s < identifier.threshold for s in same)}; different at or above: "
          f"{sum(d >= identifier.threshold for d in different)}")
    print(f"identification accuracy: {totals['right_s'] / totals['enrolled_s']:.3f} "
          f"({totals['right_s']:.1f} of {totals['enrolled_s']:.1f} s); talking alone: "
          f"{totals['right_alone_s'] / totals['enrolled_alone_s']:.3f} of {totals['enrolled_alone_s']:.1f} s")
    print(f"wrong-name rate: {totals['wrong_s'] / totals['enrolled_s']:.3f}")
    print(f"false-name rate: {totals['false_s'] / totals['unenrolled_s']:.3f} "
          f"({totals['false_s']:.1f} of {totals['unenrolled_s']:.1f} s of unenrolled speakers talking)")
    print(f"on the reference diarization: accuracy {oracle['right_s'] / oracle['enrolled_s']:.3f} of "
          f"{oracle['enrolled_s']:.1f} s, false names {oracle['false_s'] / oracle['unenrolled_s']:.3f} of "
          f"{oracle['unenrolled_s']:.1f} s")

    print("\n| threshold | accuracy | talking alone | wrong name | false names | accuracy, reference diarization |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for threshold in (float(value) for value in args.sweep.split(",")):
        swept: dict[str, float] = defaultdict(float)
        oracle_right = 0.0
        for file, diarization, embeddings, reference, _ in runs:
            names = {s: m[0] for s, m in match_speakers(embeddings, voices, threshold).items() if m[0] is not None}
            tally(swept, rename(diarization, names), reference, enrolled_from, file)
        for file, _, _, reference, oracle_identities in runs:
            truth_embeddings = {i.diarized_as: np.array(i.embedding) for i in oracle_identities if i.embedding}
            for speaker, (name, _) in match_speakers(truth_embeddings, voices, threshold).items():
                if speaker in enrolled_from and enrolled_from[speaker] != file and name == speaker:
                    oracle_right += reference[speaker].sum() * FRAME_S
        print(
            f"| {threshold:.2f} | {swept['right_s'] / swept['enrolled_s']:.3f} | "
            f"{swept['right_alone_s'] / swept['enrolled_alone_s']:.3f} | "
            f"{swept['wrong_s'] / swept['enrolled_s']:.3f} | "
            f"{swept['false_s'] / swept['unenrolled_s']:.3f} | {oracle_right / oracle['enrolled_s']:.3f} |"
        )


if __name__ == "__main__":
    main()

