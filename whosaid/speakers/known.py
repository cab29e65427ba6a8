"""Known speakers: names instead of SPEAKER_NN, from enrolled voices.

A known voice is the mean of its clips' embeddings by the built-in diarizer's `SpeakerEmbedder`
(CAM++), each clip's speech as Silero VAD finds it. After diarization, each speaker's clean
speech (its exclusive turns where no other speaker's turn overlaps) is embedded with the same
embedder; the speakers and the voices are paired one to one by cosine similarity (Hungarian
assignment), and a pair at or above the threshold (KNOWN_SPEAKER_THRESHOLD, by default the
embedder's `same_speaker_similarity`) renames the speaker. A speaker below it keeps its
SPEAKER_NN label; a voice that does not speak is never invented. Nothing here writes to disk.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Optional, Sequence

import numpy as np

from whosaid.audio.loading import Audio, load_audio, load_audio_file
from whosaid.audio.vad import VadOptions
from whosaid.config import MAX_KNOWN_SPEAKERS, WHISPER_SAMPLE_RATE_HZ, check_speaker_names
from whosaid.errors import AudioTooLongError, InvalidAudioError, InvalidParametersError, ModelLoadError
from whosaid.results import Diarization, SpeakerIdentity, SpeakerTurn
from whosaid.speakers.protocols import SpeakerEmbedder

logger = logging.getLogger(__name__)

# A reference needs this much speech to describe a voice (OpenAI asks for 2-10 s clips).
MIN_REFERENCE_SPEECH_S = 1.0
# Silero's default threshold (0.5) misses much of quiet far-field speech (meeting recordings) that
# a reference may be cut from; a reference is meant to hold one voice, so a lower one is safe.
REFERENCE_VAD = VadOptions(threshold=0.2)
# At most this much of a reference's, or of a speaker's, speech is embedded: a few tens of
# seconds describe a voice, and the encoder's cost grows with what it reads.
MAX_EMBEDDED_SPEECH_S = 30.0
# A speaker at most this much more similar to its best voice than to another is ambiguous between
# the two and keeps its SPEAKER_NN label (benchmarks/CHANGELOG.md, known speakers on conversations).
AMBIGUITY_MARGIN = 0.05
# A speaker's clean speech pieces shorter than this are boundary slivers, not words.
MIN_PIECE_S = 0.2
AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".mp4", ".webm", ".aac")
_DATA_URL = re.compile(r"^data:[^,;]*(;[^,;]*)*;base64,", re.IGNORECASE)


@dataclass(frozen=True)
class KnownVoice:
    name: str
    #: Unit-length mean of the clips' unit-length embeddings, (dimension,).
    embedding: np.ndarray
    clips: int = 1


def decode_reference(name: str, reference: Any, *, max_duration_s: Optional[float] = None) -> Audio:
    """A reference as a request carries it (a data URL `data:audio/wav;base64,...`, base64, or
    bytes) decoded into 16 kHz mono; InvalidAudioError naming the speaker when it is not audio."""
    if isinstance(reference, str):
        reference = _DATA_URL.sub("", reference.strip(), count=1)
        if reference.startswith("data:"):
            raise InvalidAudioError(
                f"known speaker {name!r}: the reference is a data URL without base64 data; send "
                "data:audio/wav;base64,<the clip>"
            )
        try:
            reference = base64.b64decode(reference, validate=False)
        except (binascii.Error, ValueError) as error:
            raise InvalidAudioError(f"known speaker {name!r}: the reference is not base64 audio: {error}") from error
    try:
        return load_audio(reference, max_duration_s=max_duration_s)
    except AudioTooLongError as error:
        raise AudioTooLongError(f"known speaker {name!r}: the reference is too long: {error}") from error
    except InvalidAudioError as error:
        raise InvalidAudioError(f"known speaker {name!r}: the reference is not usable audio: {error}") from error


class SpeakerIdentifier:
    """Embeds references and diarized speakers with one speaker embedder and names speakers.
    `threshold`: the cosine similarity from which a speaker takes a voice's name; None for the
    embedder's `same_speaker_similarity`."""

    def __init__(
        self,
        embedding: SpeakerEmbedder,
        vad: Any,
        library: Sequence[KnownVoice] = (),
        threshold: Optional[float] = None,
        margin: float = AMBIGUITY_MARGIN,
    ) -> None:
        self.embedding = embedding
        self.vad = vad
        self.library = tuple(library)
        self.threshold = embedding.same_speaker_similarity if threshold is None else threshold
        self.margin = margin

    def embed_samples(self, samples: np.ndarray) -> Optional[np.ndarray]:
        """Unit-length embedding of 16 kHz samples, or None when they are too short to embed."""
        import torch

        samples = np.ascontiguousarray(samples[: int(MAX_EMBEDDED_SPEECH_S * WHISPER_SAMPLE_RATE_HZ)], dtype=np.float32)
        if samples.size < self.embedding.min_num_samples:
            return None
        vector = self.embedding(torch.from_numpy(samples)[None, None])[0].astype(np.float64)
        norm = float(np.linalg.norm(vector))
        if not np.isfinite(norm) or norm == 0.0:
            return None
        return vector / norm

    def embed_reference(self, name: str, audio: Audio) -> np.ndarray:
        """The voice of a reference clip: its speech embedded; InvalidAudioError naming the
        speaker when it holds less than MIN_REFERENCE_SPEECH_S of speech."""
        if audio.duration_s < MIN_REFERENCE_SPEECH_S:
            raise InvalidAudioError(
                f"known speaker {name!r}: the reference lasts {audio.duration_s:.2f} s; it needs at least "
                f"{MIN_REFERENCE_SPEECH_S:g} s of that voice (2-10 s work best)"
            )
        regions = self.vad.speech_regions(audio.samples, options=REFERENCE_VAD)
        speech_s = sum(end_s - start_s for start_s, end_s in regions)
        if speech_s < MIN_REFERENCE_SPEECH_S:
            found = "no speech" if not regions else f"only {speech_s:.2f} s of speech"
            raise InvalidAudioError(
                f"known speaker {name!r}: the reference holds {found}; it needs at least "
                f"{MIN_REFERENCE_SPEECH_S:g} s of that voice speaking"
            )
        rate = audio.sample_rate_hz
        speech = np.concatenate([audio.samples[int(start * rate) : int(end * rate)] for start, end in regions])
        vector = self.embed_samples(speech)
        if vector is None:
            raise InvalidAudioError(f"known speaker {name!r}: the reference's speech is too short to embed")
        return vector

    def voices(self, references: Sequence[tuple[str, Audio]]) -> tuple[KnownVoice, ...]:
        """The library plus a request's references (for that request only): a reference under a
        library name adds a clip to that voice."""
        vectors: dict[str, list[np.ndarray]] = {}
        for voice in self.library:
            vectors.setdefault(voice.name, []).extend([voice.embedding] * voice.clips)
        for name, audio in references:
            vectors.setdefault(name, []).append(self.embed_reference(name, audio))
        return tuple(mean_voice(name, clips) for name, clips in vectors.items())

    def speaker_embeddings(
        self, audio: Audio, diarization: Diarization, speakers: Optional[Collection[str]] = None
    ) -> dict[str, np.ndarray]:
        """Each diarized speaker's (or each of `speakers`') unit-length embedding from its clean
        speech (its exclusive turns minus where another speaker's turn overlaps); failing that,
        all its exclusive speech, then its overlapped turns; speakers too brief to embed are left out."""
        rate = audio.sample_rate_hz
        result: dict[str, np.ndarray] = {}
        for speaker in sorted({turn.speaker for turn in diarization.turns}):
            if speakers is not None and speaker not in speakers:
                continue
            own = [(t.start_s, t.end_s) for t in diarization.exclusive_turns if t.speaker == speaker]
            others = [(t.start_s, t.end_s) for t in diarization.turns if t.speaker != speaker]
            # A speaker heard only over someone else has no exclusive turn: its overlapped turns.
            overlapped = [(t.start_s, t.end_s) for t in diarization.turns if t.speaker == speaker]
            for pieces in (_subtract(own, others), own, overlapped):
                pieces = _longest_first(pieces, MAX_EMBEDDED_SPEECH_S)
                if not pieces:
                    continue
                samples = np.concatenate([audio.samples[int(s * rate) : int(e * rate)] for s, e in pieces])
                vector = self.embed_samples(samples)
                if vector is not None:
                    result[speaker] = vector
                    break
        return result

    def identify(
        self, audio: Audio, diarization: Diarization, voices: Sequence[KnownVoice], *, with_embeddings: bool = False
    ) -> tuple[Diarization, tuple[SpeakerIdentity, ...]]:
        """The diarization with matched speakers renamed, and what was decided per speaker."""
        embeddings = self.speaker_embeddings(audio, diarization)
        speakers = sorted({turn.speaker for turn in diarization.turns} | set(embeddings))
        matches = match_speakers(embeddings, voices, self.threshold, self.margin)
        names = {speaker: match[0] for speaker, match in matches.items() if match[0] is not None}
        wanted = embeddings if with_embeddings else {}
        identities = tuple(
            SpeakerIdentity(
                speaker=names.get(speaker, speaker),
                diarized_as=speaker,
                name=names.get(speaker),
                similarity=matches[speaker][1] if speaker in matches else None,
                embedding=tuple(float(x) for x in wanted[speaker]) if speaker in wanted else None,
            )
            for speaker in speakers
        )
        return rename(diarization, names), identities


def mean_voice(name: str, clips: Sequence[np.ndarray]) -> KnownVoice:
    mean = np.mean(np.stack(clips), axis=0)
    return KnownVoice(name=name, embedding=mean / np.linalg.norm(mean), clips=len(clips))


def match_speakers(
    embeddings: Mapping[str, np.ndarray], voices: Sequence[KnownVoice], threshold: float, margin: float = 0.0
) -> dict[str, tuple[Optional[str], float]]:
    """speaker -> (name or None, similarity): one voice per speaker and one speaker per voice,
    maximising the summed cosine similarity (Hungarian); a pair below `threshold` names nobody,
    nor does a speaker whose two most similar voices lie within `margin` of each other
    (ambiguous between two voices). A speaker left without a voice (more speakers than voices)
    reports its best similarity."""
    from scipy.optimize import linear_sum_assignment

    speakers = sorted(embeddings)
    if not speakers or not voices:
        return {}
    scores = np.stack([embeddings[s] for s in speakers]) @ np.stack([v.embedding for v in voices]).T
    result: dict[str, tuple[Optional[str], float]] = {
        speaker: (None, round(float(scores[row].max()), 4)) for row, speaker in enumerate(speakers)
    }
    for row, column in zip(*linear_sum_assignment(scores, maximize=True), strict=True):
        score = float(scores[row, column])
        best_two = np.sort(scores[row])[-2:]
        ambiguous = len(best_two) == 2 and float(best_two[1] - best_two[0]) < margin
        if score >= threshold and not ambiguous:
            result[speakers[row]] = (voices[column].name, round(score, 4))
    return result


def name_speakers(
    embeddings: Mapping[str, np.ndarray], voices: Sequence[KnownVoice], threshold: float, margin: float = 0.0
) -> dict[str, Optional[str]]:
    """speaker -> the name `match_speakers` gives it, or None."""
    return {speaker: match[0] for speaker, match in match_speakers(embeddings, voices, threshold, margin).items()}


def rename(diarization: Diarization, names: Mapping[str, str]) -> Diarization:
    if not names:
        return diarization

    def renamed(turns: Sequence[SpeakerTurn]) -> tuple[SpeakerTurn, ...]:
        return tuple(
            SpeakerTurn(start_s=t.start_s, end_s=t.end_s, speaker=names.get(t.speaker, t.speaker)) for t in turns
        )

    return Diarization(turns=renamed(diarization.turns), exclusive_turns=renamed(diarization.exclusive_turns))


def load_voice_library(directory: Path, identifier: SpeakerIdentifier) -> tuple[KnownVoice, ...]:
    """VOICES_DIR: `NAME.wav` (one clip) or `NAME/*.wav` (several clips) per speaker, embedded
    once at start-up. A clip that cannot be used stops the start with its path in the message."""
    if not directory.is_dir():
        raise ModelLoadError(f"VOICES_DIR {directory} is not a directory")
    clips: dict[str, list[np.ndarray]] = {}
    for path in sorted(directory.iterdir()):
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES) if path.is_dir() else [path]
        for file in files:
            if file.suffix.lower() not in AUDIO_SUFFIXES:
                continue
            name = path.name if path.is_dir() else path.stem
            try:
                check_speaker_names([name])
                clips.setdefault(name, []).append(identifier.embed_reference(name, load_audio_file(file)))
            except (InvalidAudioError, InvalidParametersError, ValueError) as error:
                raise ModelLoadError(f"VOICES_DIR: cannot enrol {file}: {error}") from error
    if len(clips) > MAX_KNOWN_SPEAKERS:
        raise ModelLoadError(f"VOICES_DIR holds {len(clips)} voices; at most {MAX_KNOWN_SPEAKERS}")
    logger.info("voice library: %d voices from %s", len(clips), directory)
    return tuple(mean_voice(name, vectors) for name, vectors in clips.items())


def _subtract(pieces: Sequence[tuple[float, float]], holes: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of `pieces` outside every interval of `holes`; O((pieces + holes) log holes), so a
    long meeting's thousands of turns cost little."""
    import bisect

    merged: list[list[float]] = []
    for start, end in sorted(holes):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    ends = [end for _, end in merged]
    result = []
    for start, end in pieces:
        cursor = start
        index = bisect.bisect_right(ends, start)
        while index < len(merged) and merged[index][0] < end:
            hole_start, hole_end = merged[index]
            if hole_start > cursor:
                result.append((cursor, hole_start))
            cursor = max(cursor, hole_end)
            index += 1
        if cursor < end:
            result.append((cursor, end))
    return result


def _longest_first(pieces: Sequence[tuple[float, float]], budget_s: float) -> list[tuple[float, float]]:
    """The longest pieces (at least MIN_PIECE_S) that fit in `budget_s` (the one that crosses it
    included), back in time order: a long meeting is not copied whole to embed 30 s of it."""
    chosen, total_s = [], 0.0
    for piece in sorted((p for p in pieces if p[1] - p[0] >= MIN_PIECE_S), key=lambda p: (p[0] - p[1], p[0])):
        if total_s >= budget_s:
            break
        chosen.append(piece)
        total_s += piece[1] - piece[0]
    return sorted(chosen)
