"""segmentation-3.0 over overlapping chunks, with the first convolution computed once per stretch.

pyannote's `Inference` runs the whole model on every 10 s chunk. At the built-in diarizer's step
(2.5 s) each sample is in four chunks, so the SincNet front end's first layer, 80 band-pass filters
of 251 taps at a 10-sample stride on the raw waveform, is computed four times over, and it is
about a third of the model's cost. That layer is linear, and the only thing before it, the
per-chunk normalisation of the waveform, is affine:

    conv(g * (x - mean) / std + b) = (g / std) * conv(x) + (b - g * mean / std) * sum(filter)

with the mean and standard deviation of each chunk. So for a batch of consecutive chunks the
filters run once over the stretch of audio the batch covers, and each chunk takes its slice with
its own scale and offset. The rest of the model (the other SincNet layers, which normalise per
chunk, the LSTM and the classifier) runs per chunk as pyannote runs it, on the model's own modules.
Chunk positions, the zero-padded last chunk and the powerset-to-multilabel conversion are those of
`pyannote.audio.Inference(skip_aggregation=True)`, which stays the path for any model or step this
does not fit; the outputs agree with it up to float rounding (tests/diarization/test_segmentation.py).
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np
import torch
import torch.nn.functional as F

from whosaid.audio.store import Samples, SpilledSamples
from whosaid.runtime.parallel import map_batches

__all__ = ["ChunkSegmentation"]

# Chunks per batch on CPU, where batches run side by side on one thread each: the LSTM's cost per
# chunk is lowest around 4 (benchmarks/CHANGELOG.md), and the first convolution still covers 17.5 s
# for four 10 s chunks at the 2.5 s step.
CPU_BATCH_CHUNKS = 4


class ChunkSegmentation:
    """(chunks, frames, local speakers) 0/1 activity of a segmentation model on chunks of its own
    duration every `step_s`, as a pyannote `SlidingWindowFeature`."""

    def __init__(self, model: Any, step_s: float, batch_size: int) -> None:
        from pyannote.audio import Inference
        from pyannote.audio.utils.powerset import Powerset

        self.model = model
        self.chunk_s = float(model.specifications.duration)
        self.step_s = step_s
        self.batch_size = batch_size
        sample_rate = model.audio.sample_rate
        self.chunk_samples = model.audio.get_num_samples(self.chunk_s)
        self.step_samples = round(step_s * sample_rate)
        self.inference = Inference(
            model, duration=self.chunk_s, step=step_s, skip_aggregation=True, batch_size=batch_size
        )
        specifications = model.specifications
        self.shared = _shares_front_end(model) and self.step_samples % model.sincnet.stride == 0
        if self.shared:
            self.conversion = Powerset(len(specifications.classes), specifications.powerset_max_classes).to(
                self.device
            )

    def __call__(self, samples: Samples) -> Any:
        from pyannote.core import SlidingWindow, SlidingWindowFeature

        if not self.shared:
            waveform = torch.from_numpy(np.ascontiguousarray(samples[0 : len(samples)], dtype=np.float32))
            with torch.inference_mode():
                return self.inference({"waveform": waveform[None], "sample_rate": self.model.audio.sample_rate})
        # A spilled recording is read batch by batch, the stretch each batch covers.
        source = samples if isinstance(samples, SpilledSamples) else torch.from_numpy(
            np.ascontiguousarray(samples, dtype=np.float32)
        )
        outputs = [self.conversion(scores).cpu().numpy() for scores in self.scores(source)]
        frames = SlidingWindow(start=0.0, duration=self.chunk_s, step=self.step_s)
        return SlidingWindowFeature(np.vstack(outputs), frames)

    def scores(self, waveform: Union[torch.Tensor, SpilledSamples]) -> list[torch.Tensor]:
        """The model's powerset log-probabilities, (chunks, frames, classes), per batch of chunks
        in order (the shared path only). On CPU, small batches side by side, one thread each
        (whosaid.runtime.parallel)."""
        starts = self.chunk_starts(len(waveform))
        on_cpu = self.device.type == "cpu"
        size = CPU_BATCH_CHUNKS if on_cpu else self.batch_size
        batches = [starts[i : i + size] for i in range(0, len(starts), size)]
        return map_batches(lambda batch: self._batch_scores(waveform, batch), batches, side_by_side=on_cpu)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def chunk_starts(self, num_samples: int) -> list[int]:
        """First sample of each chunk, as pyannote's `Inference.slide` places them: every full
        chunk, then one zero-padded chunk for the rest, if any."""
        length, step = self.chunk_samples, self.step_samples
        full = (num_samples - length) // step + 1 if num_samples >= length else 0
        starts = [index * step for index in range(full)]
        if num_samples < length or (num_samples - length) % step > 0:
            starts.append(full * step)
        return starts

    def _batch_scores(self, waveform: Union[torch.Tensor, SpilledSamples], starts: list[int]) -> torch.Tensor:
        sincnet = self.model.sincnet
        first, length = starts[0], self.chunk_samples
        stretch = waveform[first : starts[-1] + length]
        if isinstance(stretch, np.ndarray):
            stretch = torch.from_numpy(stretch)
        stretch = F.pad(stretch, (0, starts[-1] + length - first - stretch.numel())).to(self.device)
        chunks = stretch.unfold(0, length, self.step_samples)  # views: (chunks, samples)

        # The waveform normalisation of each chunk, as the affine map it is.
        norm = sincnet.wav_norm1d
        variance, mean = torch.var_mean(chunks, dim=1, correction=0)
        scale = norm.weight / torch.sqrt(variance + norm.eps)  # (chunks,)
        offset = norm.bias - scale * mean
        encoder = sincnet.conv1d[0]
        filter_sums = encoder.filterbank.filters().sum(dim=-1).reshape(1, -1, 1)  # (1, 80, 1)
        filtered = encoder(stretch.reshape(1, 1, -1))  # (1, 80, frames of the stretch)

        stride = sincnet.stride
        chunk_frames = (length - encoder.filterbank.kernel_size) // stride + 1
        # Each chunk's frames of the stretch, as views: (chunks, 80, frames); then one pass writes
        # the scaled frames and one takes their magnitude.
        slices = filtered[0].unfold(1, chunk_frames, self.step_samples // stride).transpose(0, 1)
        outputs = torch.addcmul(offset.reshape(-1, 1, 1) * filter_sums, slices, scale.reshape(-1, 1, 1)).abs_()
        outputs = F.leaky_relu(sincnet.norm1d[0](sincnet.pool1d[0](outputs)))
        for conv, pool, norm1d in zip(sincnet.conv1d[1:], sincnet.pool1d[1:], sincnet.norm1d[1:], strict=True):
            outputs = F.leaky_relu(norm1d(pool(conv(outputs))))

        outputs, _ = self.model.lstm(outputs.transpose(1, 2))
        for linear in self.model.linear:
            outputs = F.leaky_relu(linear(outputs))
        return self.model.activation(self.model.classifier(outputs))


def _shares_front_end(model: Any) -> bool:
    """Whether `model` is a pyannote PyanNet this module knows how to split: a SincNet front end
    (a filterbank encoder after the waveform normalisation) and one monolithic LSTM."""
    try:
        from pyannote.audio.models.segmentation import PyanNet
    except ImportError:
        return False
    if not isinstance(model, PyanNet) or not model.hparams.lstm.get("monolithic", False):
        return False
    if not model.specifications.powerset:
        return False
    encoder = model.sincnet.conv1d[0]
    return getattr(encoder, "padding", None) == 0 and getattr(encoder, "stride", None) == model.sincnet.stride

