"""Diarization scoring on the real recordings with references: one RTTM reader, one DER set-up
per kind of recording, shared by the benchmarks and the tests.

Kinds, each scored as its data's README says:

- `meeting`: the ten AMI snippets (tests/data/ami, 30 s far-field meetings of 2-4 people),
  no collar, overlapped speech scored, each file on [0, 30];
- `conversation`: real two- and three-person conversations (../shared/data/conversations, read
  from there when it is present, never copied), a 0.25 s collar (their references are
  utterance-level), overlapped speech scored, each file on [0, its length];
- `sample`: pyannote's `sample.wav` (two people, 30 s), as the meetings.

DER: pyannote.metrics' `DiarizationErrorRate`; a kind's aggregate is the metric's `abs()` after
all its files (total error over total reference speech), as the READMEs of the data ask.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

REPO = Path(__file__).resolve().parents[2]
AMI_DIR = REPO / "tests" / "data" / "ami"
SHARED_DATA = REPO.parent / "shared" / "data"
CONVERSATIONS_DIR = SHARED_DATA / "conversations"

#: kind -> collar in seconds (each side of a reference boundary, as pyannote.metrics counts it).
COLLARS_S = {"meeting": 0.0, "conversation": 0.25, "sample": 0.0}

Turn = tuple[float, float, str]


def _speaker_lines(text: str) -> Iterable[tuple[str, Turn]]:
    """(file id, (start_s, end_s, speaker)) of each SPEAKER line, in order."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "SPEAKER":
            start_s = float(fields[3])
            yield fields[1], (start_s, start_s + float(fields[4]), fields[7])


def parse_rttm(text: str) -> dict[str, list[Turn]]:
    """file id -> [(start_s, end_s, speaker)] of RTTM text's SPEAKER lines."""
    turns: dict[str, list[Turn]] = defaultdict(list)
    for file_id, turn in _speaker_lines(text):
        turns[file_id].append(turn)
    return dict(turns)


def rttm_turns(text: str) -> list[Turn]:
    """(start_s, end_s, speaker) of every SPEAKER line of RTTM text, in order, whatever its file
    id (one recording's RTTM, such as an answer of the server)."""
    return [turn for _, turn in _speaker_lines(text)]


def rttm_speakers(text: str) -> set[str]:
    """The speaker names of RTTM text's SPEAKER lines."""
    return {speaker for _, _, speaker in rttm_turns(text)}


def read_rttm(path: Path) -> dict[str, list[Turn]]:
    """file id -> [(start_s, end_s, speaker)] of an RTTM file's SPEAKER lines."""
    return parse_rttm(path.read_text())


def sample_wav() -> Path:
    """pyannote's 30 s two-speaker sample (sample.rttm beside it)."""
    spec = importlib.util.find_spec("pyannote.audio")
    assert spec is not None and spec.origin is not None, "pyannote.audio is not installed"
    return Path(spec.origin).parent / "sample" / "sample.wav"


@dataclass(frozen=True)
class Recording:
    name: str
    kind: str
    path: Path
    reference: tuple[Turn, ...]

    @property
    def speakers(self) -> int:
        return len({speaker for _, _, speaker in self.reference})


def meetings(directory: Path = AMI_DIR) -> list[Recording]:
    references = read_rttm(directory / "ami-train.rttm")
    return [
        Recording(path.stem, "meeting", path, tuple(references[path.stem.removeprefix("ami_")]))
        for path in sorted(directory.glob("ami_*.wav"))
    ]


def conversations(directory: Path = CONVERSATIONS_DIR) -> list[Recording]:
    """The shared conversations; none where the folder is absent."""
    return [
        Recording(path.stem, "conversation", path, tuple(read_rttm(path.with_suffix(".rttm"))[path.stem]))
        for path in sorted(directory.glob("*.wav"))
    ]


def sample() -> list[Recording]:
    path = sample_wav()
    return [Recording("sample", "sample", path, tuple(next(iter(read_rttm(path.with_suffix(".rttm")).values()))))]


def recordings(kinds: Iterable[str] = ("meeting", "conversation", "sample")) -> list[Recording]:
    sources = {"meeting": meetings, "conversation": conversations, "sample": sample}
    return [recording for kind in kinds for recording in sources[kind]()]


def new_metric(collar_s: float = 0.0) -> Any:
    """pyannote.metrics' DER with overlapped speech scored; `collar_s` each side of a reference
    boundary (COLLARS_S[kind] for a kind of recording)."""
    from pyannote.metrics.diarization import DiarizationErrorRate

    return DiarizationErrorRate(collar=collar_s, skip_overlap=False)


def annotation(turns: Iterable[Turn]) -> Any:
    from pyannote.core import Annotation, Segment

    result = Annotation()
    for start_s, end_s, speaker in turns:
        result[Segment(start_s, end_s)] = speaker
    return result


def der(reference: Iterable[Turn], turns: Iterable[Turn], duration_s: float, metric: Any = None) -> float:
    """DER of `turns` against `reference` on [0, duration_s]; `metric` accumulates over files
    (None: a new one without collar)."""
    from pyannote.core import Segment, Timeline

    metric = metric if metric is not None else new_metric()
    return float(metric(annotation(reference), annotation(turns), uem=Timeline([Segment(0.0, duration_s)])))


def as_tracks(speaker_turns: Iterable[Any]) -> list[Turn]:
    """(start_s, end_s, speaker) of `whosaid.results.SpeakerTurn`s."""
    return [(turn.start_s, turn.end_s, turn.speaker) for turn in speaker_turns]


@dataclass
class Scores:
    """Per-file DER and speaker counts, and each kind's aggregate, as `score` accumulates them."""

    per_file: dict[str, tuple[str, float, int, int]]  # name -> (kind, DER, speakers found, reference)
    metrics: dict[str, Any]

    def aggregate(self, kind: Optional[str] = None) -> float:
        """A kind's aggregated DER; None: over every kind (each scored with its own collar)."""
        if kind is not None:
            return abs(self.metrics[kind])
        components = ("confusion", "missed detection", "false alarm")
        error = sum(metric.accumulated_[name] for metric in self.metrics.values() for name in components)
        return error / sum(metric.accumulated_["total"] for metric in self.metrics.values())

    def wrong_counts(self, kind: str) -> list[str]:
        return [name for name, (k, _, found, expected) in self.per_file.items() if k == kind and found != expected]


def score(outputs: Iterable[tuple[Recording, float, list[Turn]]]) -> Scores:
    """Scores of (recording, duration_s, hypothesis turns)."""
    scores = Scores(per_file={}, metrics={})
    for recording, duration_s, turns in outputs:
        metric = scores.metrics.setdefault(recording.kind, new_metric(COLLARS_S[recording.kind]))
        value = der(recording.reference, turns, duration_s, metric)
        found = len({speaker for _, _, speaker in turns})
        scores.per_file[recording.name] = (recording.kind, value, found, recording.speakers)
    return scores
