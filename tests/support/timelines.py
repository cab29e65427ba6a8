"""Speaker time lines for the diarization tests: pyannote Annotations from (start, end, label)
tracks, and the output of segmentation-3.0 drawn from speech given in seconds."""

from __future__ import annotations

from typing import Any, Iterable, Sequence, Union

import numpy as np

Track = tuple[float, float, Any]


def annotation(tracks: Iterable[Track]):
    """A pyannote Annotation holding each (start_s, end_s, label) track."""
    from pyannote.core import Annotation, Segment

    result = Annotation(uri="call")
    for start_s, end_s, label in tracks:
        result[Segment(start_s, end_s)] = label
    return result


def segmentations(
    diarizer: Any,
    duration_s: float,
    step_s: float,
    local_speakers: Sequence[tuple[Sequence[tuple[float, float]], Union[int, Sequence[int]]]],
) -> tuple[Any, np.ndarray]:
    """What `BuiltinDiarizer.segment` and `cluster` would give for chunks of the segmentation
    model's length every `step_s` over `duration_s` (the last one padded, as pyannote pads it):
    local speaker i of every chunk is active on the frames whose centre lies in one of
    local_speakers[i]'s (start_s, end_s) stretches, and belongs to speaker local_speakers[i][1]
    (one speaker, or one per chunk; -2: this chunk does not hear it).
    Returns the (chunks, frames, local) SlidingWindowFeature and the (chunks, local) speakers."""
    from pyannote.core import SlidingWindow, SlidingWindowFeature

    frames = diarizer.segmentation_model.receptive_field
    num_frames = diarizer.segmentation_model.num_frames(int(diarizer.chunk_s * 16_000))
    num_chunks = int(np.ceil(max(duration_s - diarizer.chunk_s, 0.0) / step_s)) + 1
    data = np.zeros((num_chunks, num_frames, 3), np.float32)
    clusters = np.full((num_chunks, 3), -2)
    for chunk in range(num_chunks):
        centres_s = chunk * step_s + frames.start + frames.duration / 2 + np.arange(num_frames) * frames.step
        for local, (speech, speakers) in enumerate(local_speakers):
            speaker = speakers if isinstance(speakers, int) else speakers[chunk]
            if speaker < 0:
                continue
            for start_s, end_s in speech:
                data[chunk, :, local] += (centres_s >= start_s) & (centres_s < end_s)
            if data[chunk, :, local].any():
                clusters[chunk, local] = speaker
    window = SlidingWindow(start=0.0, duration=diarizer.chunk_s, step=step_s)
    return SlidingWindowFeature(np.minimum(data, 1.0), window), clusters
