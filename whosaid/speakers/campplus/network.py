"""CAM++ (context-aware masking) speaker encoder, after Wang et al., "CAM++: A Fast and Efficient
Network for Speaker Verification Using Context-Aware Masking" (Interspeech 2023) and 3D-Speaker's
reference implementation, whose parameter names this module keeps so that its published state
dicts load as they are.

    fbank (B, T, 80)
      -> head: 2-D convolutions over (frequency, time), frequency strided down 8x -> (B, 320, T)
      -> TDNN, kernel 5, time stride 2                                             -> (B, 128, T/2)
      -> three densely connected blocks of CAM layers (12, 24, 16 layers; growth 32;
         dilation 1, 2, 2), each followed by a transit layer halving the channels   -> (B, 512, T/2)
      -> mean and standard deviation over time                                     -> (B, 1024)
      -> 1x1 projection + batch norm without affine parameters                     -> (B, 192)

Every layer also accepts a frame mask, so that utterances of different lengths share one padded
batch: padded frames are zeroed before each convolution that mixes time (exactly the zero padding
an unpadded utterance sees at its end), and the time averages (the CAM layers' context and the
statistics pooling) count valid frames only. The result for each row is the result for that
utterance alone.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

FBANK_BINS = 80
EMBEDDING_SIZE = 192
HEAD_CHANNELS = 32
TDNN_CHANNELS = 128
GROWTH_CHANNELS = 32  # channels each CAM layer adds to its block
BOTTLENECK_CHANNELS = 4 * GROWTH_CHANNELS
DENSE_BLOCKS = ((12, 1), (24, 2), (16, 2))  # (layers, dilation); kernel 3 everywhere
CONTEXT_SEGMENT_FRAMES = 100  # CAM layers' segment-level context: 100 frames at the TDNN's rate

# A frame mask is a float tensor of ones (valid frame) and zeros (padding), shaped to broadcast
# over the activations: (B, 1, T) for 1-D layers, (B, 1, 1, T) for the 2-D head.
Mask = Optional[torch.Tensor]


def _zero_padding(x: torch.Tensor, mask: Mask) -> torch.Tensor:
    return x if mask is None else x * mask


def _batchnorm_relu(channels: int) -> nn.Sequential:
    return nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(channels), relu=nn.ReLU(inplace=True)))


def _time_mean(x: torch.Tensor, mask: Mask) -> torch.Tensor:
    """(B, C, T) -> (B, C, 1)."""
    if mask is None:
        return x.mean(dim=-1, keepdim=True)
    return (x * mask).sum(dim=-1, keepdim=True) / mask.sum(dim=-1, keepdim=True)


def _segment_means(x: torch.Tensor, mask: Mask) -> torch.Tensor:
    """The mean of each run of CONTEXT_SEGMENT_FRAMES frames; the last run may be shorter and
    averages the valid frames it has: (B, C, T) -> (B, C, ceil(T / CONTEXT_SEGMENT_FRAMES))."""
    if mask is None:
        return F.avg_pool1d(x, CONTEXT_SEGMENT_FRAMES, CONTEXT_SEGMENT_FRAMES, ceil_mode=True)
    padding = -x.shape[-1] % CONTEXT_SEGMENT_FRAMES
    sums = F.pad(x * mask, (0, padding)).unflatten(-1, (-1, CONTEXT_SEGMENT_FRAMES)).sum(dim=-1)
    counts = F.pad(mask, (0, padding)).unflatten(-1, (-1, CONTEXT_SEGMENT_FRAMES)).sum(dim=-1)
    return sums / counts.clamp(min=1.0)


class _ResidualBlock(nn.Module):
    """Two 3x3 convolutions with a skip connection; `stride` subsamples frequency only."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut: Optional[nn.Sequential] = None
        if stride != 1:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels, channels, 1, stride=(stride, 1), bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor, mask: Mask) -> torch.Tensor:
        """x: (B, C, F, T), zero on padded frames."""
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(_zero_padding(y, mask)))
        skip = x if self.shortcut is None else self.shortcut(x)
        return F.relu(y + skip)


class _Head(nn.Module):
    """The front convolution module: (B, T, 80) fbank -> (B, 32 * 10, T)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, HEAD_CHANNELS, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(HEAD_CHANNELS)
        self.layer1 = nn.ModuleList([_ResidualBlock(HEAD_CHANNELS, 2), _ResidualBlock(HEAD_CHANNELS, 1)])
        self.layer2 = nn.ModuleList([_ResidualBlock(HEAD_CHANNELS, 2), _ResidualBlock(HEAD_CHANNELS, 1)])
        self.conv2 = nn.Conv2d(HEAD_CHANNELS, HEAD_CHANNELS, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(HEAD_CHANNELS)
        self.out_channels = HEAD_CHANNELS * (FBANK_BINS // 8)

    def forward(self, features: torch.Tensor, mask: Mask) -> torch.Tensor:
        mask_2d = None if mask is None else mask.unsqueeze(1)
        x = _zero_padding(features.transpose(1, 2).unsqueeze(1), mask_2d)
        x = F.relu(self.bn1(self.conv1(x)))
        for block in (*self.layer1, *self.layer2):
            x = block(_zero_padding(x, mask_2d), mask_2d)
        x = F.relu(self.bn2(self.conv2(_zero_padding(x, mask_2d))))
        return x.flatten(1, 2)


class _TDNN(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, 5, stride=2, padding=2, bias=False)
        self.nonlinear = _batchnorm_relu(out_channels)

    def forward(self, x: torch.Tensor, mask: Mask) -> torch.Tensor:
        return self.nonlinear(self.linear(_zero_padding(x, mask)))


class _CAMLayer(nn.Module):
    """A dilated convolution whose output channels are gated by a context (utterance mean plus
    segment means) seen through a small bottleneck: the context-aware mask."""

    def __init__(self, channels: int, out_channels: int, dilation: int) -> None:
        super().__init__()
        self.linear_local = nn.Conv1d(channels, out_channels, 3, padding=dilation, dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(channels, channels // 2, 1)
        self.linear2 = nn.Conv1d(channels // 2, out_channels, 1)

    def forward(self, x: torch.Tensor, mask: Mask) -> torch.Tensor:
        local = self.linear_local(_zero_padding(x, mask))
        # The context is constant over each segment, so the gate is computed once per segment.
        context = (_time_mean(x, mask) + _segment_means(x, mask)).contiguous()
        gate = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return local * gate.repeat_interleave(CONTEXT_SEGMENT_FRAMES, dim=-1)[..., : x.shape[-1]]


class _CAMDenseLayer(nn.Module):
    def __init__(self, in_channels: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = _batchnorm_relu(in_channels)
        self.linear1 = nn.Conv1d(in_channels, BOTTLENECK_CHANNELS, 1, bias=False)
        self.nonlinear2 = _batchnorm_relu(BOTTLENECK_CHANNELS)
        self.cam_layer = _CAMLayer(BOTTLENECK_CHANNELS, GROWTH_CHANNELS, dilation)

    def forward(self, x: torch.Tensor, mask: Mask) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))), mask)


class _CAMDenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, in_channels: int, dilation: int) -> None:
        super().__init__(
            {
                f"tdnnd{index + 1}": _CAMDenseLayer(in_channels + index * GROWTH_CHANNELS, dilation)
                for index in range(num_layers)
            }
        )

    def forward(self, x: torch.Tensor, mask: Mask) -> torch.Tensor:
        for layer in self.values():
            x = torch.cat([x, layer(x, mask)], dim=1)
        return x


class _Transit(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.nonlinear = _batchnorm_relu(in_channels)
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class _Dense(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)
        self.nonlinear = nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(out_channels, affine=False)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C) -> (B, out_channels)."""
        return self.nonlinear(self.linear(x.unsqueeze(-1))).squeeze(-1)


def _statistics(x: torch.Tensor, mask: Mask) -> torch.Tensor:
    """Mean and (unbiased) standard deviation over valid frames: (B, C, T) -> (B, 2C)."""
    if mask is None:
        return torch.cat([x.mean(dim=-1), x.std(dim=-1)], dim=-1)
    count = mask.sum(dim=-1)
    mean = (x * mask).sum(dim=-1) / count
    variance = (((x - mean.unsqueeze(-1)) * mask) ** 2).sum(dim=-1) / (count - 1)
    return torch.cat([mean, variance.sqrt()], dim=-1)


class _XVector(nn.Module):
    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.tdnn = _TDNN(in_channels, TDNN_CHANNELS)
        channels = TDNN_CHANNELS
        for index, (num_layers, dilation) in enumerate(DENSE_BLOCKS, start=1):
            self.add_module(f"block{index}", _CAMDenseBlock(num_layers, channels, dilation))
            channels += num_layers * GROWTH_CHANNELS
            self.add_module(f"transit{index}", _Transit(channels, channels // 2))
            channels //= 2
        self.out_nonlinear = _batchnorm_relu(channels)
        self.dense = _Dense(2 * channels, EMBEDDING_SIZE)

    def forward(self, x: torch.Tensor, mask: Mask) -> torch.Tensor:
        x = self.tdnn(x, mask)
        if mask is not None:
            mask = mask[..., ::2]  # the TDNN's output frame t reads input frames around 2t
        for index in range(1, len(DENSE_BLOCKS) + 1):
            x = getattr(self, f"block{index}")(x, mask)
            x = getattr(self, f"transit{index}")(x)
        return self.dense(_statistics(self.out_nonlinear(x), mask))


class CamPlusPlus(nn.Module):
    """CAM++ with its 192-dimensional output (3D-Speaker's `CAMPPlus(feat_dim=80,
    embedding_size=192)`): 937 tensors, 6.93 M parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.head = _Head()
        self.xvector = _XVector(self.head.out_channels)
        # oneDNN's 2-D convolutions run faster on channels-last tensors; loading a state dict
        # keeps the layout.
        self.head.to(memory_format=torch.channels_last)

    def forward(self, features: torch.Tensor, frame_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """features: (B, T, 80) mean-normalised log-mel fbank, zero beyond each row's length.
        frame_mask: (B, T) bool, True on each row's valid frames, which must come first; None when
        every row is T frames long. Returns (B, 192) embeddings (not length-normalised)."""
        mask = None if frame_mask is None else frame_mask.to(features.dtype).unsqueeze(1)
        return self.xvector(self.head(features, mask), mask)
