"""Which device the models run on, and a loud failure when the machine has a GPU that torch
cannot use.

A torch wheel built for a newer CUDA than the host's NVIDIA driver supports loads fine, but
`torch.cuda.is_available()` is then False: without this check DEVICE=auto would quietly serve
from the CPU, an order of magnitude slower, with nothing in the logs that says why.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import subprocess
from dataclasses import dataclass
from typing import Any, Optional

from whosaid.errors import ModelLoadError

logger = logging.getLogger(__name__)

#: NVIDIA_VISIBLE_DEVICES values that mean "no GPU for this container" (NVIDIA container toolkit).
NO_GPU_VALUES = frozenset({"", "void", "none"})
#: The newest torch/torchaudio whose PyPI wheels target CUDA 12 (what requirements.txt pins).
CUDA_12_TORCH = "torch==2.10.0 and torchaudio==2.10.0 (CUDA 12.8, PyPI's default Linux wheels)"
#: The oldest NVIDIA driver series that runs each CUDA major version.
MINIMUM_DRIVER_SERIES = {11: "450", 12: "525", 13: "580"}
NVIDIA_SMI_TIMEOUT_S = 10


def declared_gpu() -> Optional[str]:
    """Why this machine looks like it has an NVIDIA GPU, or None: device files (/dev/nvidia0,
    /dev/nvidiactl) or NVIDIA_VISIBLE_DEVICES set by the container runtime."""
    device_files = sorted(glob.glob("/dev/nvidia[0-9]*") + glob.glob("/dev/nvidiactl"))
    if device_files:
        return f"NVIDIA device files are present ({', '.join(device_files)})"
    visible = os.environ.get("NVIDIA_VISIBLE_DEVICES")
    if visible is not None and visible.strip().lower() not in NO_GPU_VALUES:
        return f"NVIDIA_VISIBLE_DEVICES={visible.strip()}"
    return None


def nvidia_driver_version() -> str:
    """The NVIDIA driver's version from nvidia-smi or /proc/driver/nvidia/version, else 'unknown'."""
    try:
        completed = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
        versions = completed.stdout.split()
        if completed.returncode == 0 and versions:
            return versions[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as file:
            # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
            match = re.search(r"Kernel Module\s+(\S+)", file.read())
        if match:
            return match.group(1)
    except OSError:
        pass
    return "unknown"


def torch_cuda_build() -> str:
    """What CUDA the installed torch was built for, in words: 'CUDA 12.8' or 'no CUDA (CPU-only build)'."""
    import torch

    return f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA (a CPU-only build)"


def cuda_fix(torch_cuda: Optional[str]) -> str:
    """What to do when a torch built for `torch_cuda` (torch.version.cuda) cannot use the GPU."""
    if not torch_cuda:
        return f"install a CUDA build of torch, e.g. {CUDA_12_TORCH}"
    major = int(torch_cuda.split(".")[0])
    if major > 12:
        return (
            f"install a torch built for the driver's CUDA version, e.g. {CUDA_12_TORCH}, or upgrade "
            f"the NVIDIA driver to the {MINIMUM_DRIVER_SERIES.get(major, 'newest')} series or newer"
        )
    return (
        f"this torch needs an NVIDIA driver that runs CUDA {major} (the "
        f"{MINIMUM_DRIVER_SERIES.get(major, 'matching')} series or newer) and a container that is "
        "given the GPU (nvidia-smi lists it there); with an older driver install a torch built for "
        "the driver's CUDA version"
    )


def cuda_unusable_message(reason: str) -> str:
    """Says that torch cannot use the GPU, with the versions that explain why and the fix."""
    import torch

    return (
        f"torch cannot use the GPU ({reason}; torch.cuda.is_available() is False): torch "
        f"{torch.__version__} is built for {torch_cuda_build()}, the NVIDIA driver is "
        f"{nvidia_driver_version()}. Fix: {cuda_fix(torch.version.cuda)}. On a machine without "
        "a GPU set DEVICE=cpu."
    )


def resolve_device(requested: str) -> str:
    """The torch device for a DEVICE setting (auto, cpu, cuda, cuda:N, mps).

    'auto' is cuda:0 when torch can use a GPU, else cpu, logging an error when the machine
    declares a GPU that torch cannot use. 'cuda' and 'cuda:N' never fall back: they raise
    ModelLoadError saying why CUDA is unusable.
    """
    import torch

    if requested == "auto":
        if torch.cuda.is_available():
            return "cuda:0"
        reason = declared_gpu()
        if reason is not None:
            logger.error("DEVICE=auto runs on the CPU: %s", cuda_unusable_message(reason))
        return "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            reason = declared_gpu() or "no NVIDIA GPU is visible to this container"
            raise ModelLoadError(f"DEVICE={requested} cannot start: {cuda_unusable_message(reason)}")
        index = int(requested.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ModelLoadError(
                f"DEVICE={requested} cannot start: torch sees {torch.cuda.device_count()} GPU(s), "
                f"numbered from 0; set DEVICE=cuda:0 or DEVICE=auto"
            )
    return requested


@dataclass(frozen=True)
class ModelRuntime:
    """Where and how the ASR model runs, as /ready, /metrics and the start-up log report it."""

    device: str  # "cuda:0", "cpu"
    dtype: str  # "float16", "float32"
    attn_implementation: str  # "sdpa", "eager", "flash_attention_2"
    asr_model: str
    #: Set when the model runs on the CPU of a machine that declares a GPU torch cannot use.
    gpu_unusable: Optional[str] = None

    @classmethod
    def of(cls, model: Any) -> "ModelRuntime":
        """Read from a loaded transformers model: what it really runs with, not what was asked."""
        import torch

        gpu_unusable = None
        if model.device.type == "cpu" and not torch.cuda.is_available():
            reason = declared_gpu()
            gpu_unusable = cuda_unusable_message(reason) if reason else None
        return cls(
            device=str(model.device),
            dtype=str(model.dtype).removeprefix("torch."),
            attn_implementation=str(getattr(model.config, "_attn_implementation", None) or "unknown"),
            asr_model=str(getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")),
            gpu_unusable=gpu_unusable,
        )

    def as_labels(self) -> dict[str, str]:
        return {
            "device": self.device,
            "dtype": self.dtype,
            "attn_implementation": self.attn_implementation,
            "asr_model": self.asr_model,
        }


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is the device running out of memory: a 5xx worth a retry, never the
    input's fault."""
    import torch

    if isinstance(error, torch.OutOfMemoryError):  # raised by torch's CUDA caching allocator
        return True
    # MPS's allocator and failed CUDA calls ("CUDA error: out of memory") raise no type of their own.
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()
