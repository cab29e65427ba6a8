"""`whosaid transcribe` and `whosaid serve` over the same core: formats to stdout or files,
several files, failures per file, argument checks before any model loads, and the embedded
default model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from tests.support.audio_bombs import flac_bomb
from tests.support.audio_files import encode
from tests.support.threads import torch_threads
from whosaid.cli import model_options
from whosaid.cli.main import main
from whosaid.cli.transcribe import PROGRESS_TEXT_CHARS, text_progress
from whosaid.errors import ModelLoadError
from whosaid.server.schemas import TranscriptResponse


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Inference runs in this process: on a busy two-core machine torch's default of two
    threads makes a tiny model many times slower than one thread does."""
    with torch_threads(1):
        yield


@pytest.fixture(autouse=True)
def no_model_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ASR_MODEL", "ASSISTANT_MODEL", "DIARIZATION_MODEL", "DEVICE", "DTYPE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def tiny(tiny_whisper) -> Path:
    return tiny_whisper("cli-main", seed=11)


@pytest.fixture(scope="module")
def clips(sample_audio, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("clips")
    paths = []
    # Speech in both: sample.wav is silent before 6.7 s, and silence now transcribes to nothing.
    for index, (start_s, kind) in enumerate([(7, "wav"), (12, "flac")]):
        path = folder / f"clip{index}.{kind}"
        path.write_bytes(encode(sample_audio.samples[start_s * 16_000 : (start_s + 3) * 16_000], 16_000, kind))
        paths.append(path)
    return paths


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    status = main(["transcribe", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_one_file_json_is_the_servers_response(capsys, tiny: Path, clips: list[Path]) -> None:
    status, out, _ = run_cli(capsys, str(clips[0]), "--asr-model", str(tiny), "--device", "cpu")
    assert status == 0
    transcript = TranscriptResponse.model_validate_json(out)
    assert transcript.duration == 3.0 and transcript.text and transcript.decoding == "batched"


def test_many_files_to_stdout_are_json_lines_or_headed_text(capsys, tiny: Path, clips: list[Path]) -> None:
    files = [str(path) for path in clips]
    status, out, _ = run_cli(capsys, *files, "--asr-model", str(tiny), "--format", "verbose_json", "--language", "en")
    assert status == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["file"] for line in lines] == files
    assert all(line["language"] == "english" and line["segments"] for line in lines)
    status, out, _ = run_cli(capsys, *files, "--asr-model", str(tiny), "--format", "text")
    assert status == 0 and re.findall(r"^==> (.*) <==$", out, re.MULTILINE) == files


def test_output_dir_gets_one_file_per_input(capsys, tiny: Path, clips: list[Path], tmp_path: Path) -> None:
    status, out, _ = run_cli(
        capsys, *map(str, clips), "--asr-model", str(tiny), "-f", "srt", "-o", str(tmp_path / "out")
    )
    assert status == 0 and out == ""
    written = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert written == ["clip0.srt", "clip1.srt"]
    assert (tmp_path / "out" / "clip0.srt").read_text().startswith("1\n00:00:")


def test_a_bad_file_fails_alone(capsys, tiny: Path, clips: list[Path], tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.mp3"
    garbage.write_bytes(np.random.default_rng(0).bytes(2048))
    status, out, err = run_cli(capsys, str(garbage), str(clips[0]), "--asr-model", str(tiny), "-f", "text")
    assert status == 1
    assert f"{garbage}: could not decode the audio" in err
    assert f"==> {clips[0]} <==" in out


def test_audio_over_max_audio_duration_s_fails_alone_with_the_servers_message(
    capsys, monkeypatch, tiny: Path, clips: list[Path], tmp_path: Path
) -> None:
    monkeypatch.setenv("MAX_AUDIO_DURATION_S", "30")
    bomb = tmp_path / "ten-minutes.flac"
    bomb.write_bytes(flac_bomb(600.0, declare=False))  # only decoding can tell its length
    status, out, err = run_cli(capsys, str(bomb), str(clips[0]), "--asr-model", str(tiny), "-f", "text")
    assert status == 1
    assert f"{bomb}: the audio lasts more than 30 s (decoding stopped there), longer than the limit of 30 s" in err
    assert f"==> {clips[0]} <==" in out


def test_diarized_formats_with_a_diarization_model(
    capsys, tiny: Path, clips: list[Path], random_diarizer_dir: Path
) -> None:
    status, out, _ = run_cli(
        capsys, str(clips[0]), "--asr-model", str(tiny), "--diarization-model", str(random_diarizer_dir), "-f", "rttm"
    )
    assert status == 0 and out
    assert all(
        re.fullmatch(r"SPEAKER clip0 1 \S+ \S+ <NA> <NA> SPEAKER_\d\d <NA> <NA>", line) for line in out.splitlines()
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num-speakers", "0"], "'num_speakers'"),
        (["--min-speakers", "3", "--max-speakers", "2"], "greater than max_speakers"),
        (["-f", "rttm"], "--format rttm needs a diarization model"),
        (["-f", "diarized_json"], "--format diarized_json needs a diarization model"),
        (
            ["--task", "translate", "-f", "diarized_json"],
            "--format diarized_json is a transcription format: it cannot go with --task translate",
        ),
        (
            ["--task", "translate", "-f", "diarized_json", "--url", "http://127.0.0.1:9", "-o", "out"],
            "--format diarized_json is a transcription format: it cannot go with --task translate",
        ),
    ],
)
def test_argument_errors_stop_before_models_load(capsys, clips: list[Path], argv: list[str], message: str) -> None:
    # The ASR model does not exist: reaching the loader would fail differently.
    status, _, err = run_cli(capsys, str(clips[0]), "--asr-model", "/nonexistent/model", *argv)
    assert status == 2 and message in err


def test_an_unknown_format_lists_the_choices_json_first(capsys, clips: list[Path]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["transcribe", str(clips[0]), "-f", "docx"])
    assert stopped.value.code == 2
    # The formats' own test pins the whole list; here, the order the CLI gives it.
    choices = "'json', 'verbose_json', 'diarized_json', 'text', 'srt', 'vtt', 'rttm'"
    assert f"invalid choice: 'docx' (choose from {choices}" in capsys.readouterr().err


def test_duplicate_output_names_are_refused(capsys, clips: list[Path], tmp_path: Path) -> None:
    twin = tmp_path / "twin" / clips[0].name
    twin.parent.mkdir()
    twin.write_bytes(clips[0].read_bytes())
    status, _, err = run_cli(capsys, str(clips[0]), str(twin), "-o", str(tmp_path / "out"))
    assert status == 2 and "rename one" in err


def test_embedded_default_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(model_options, "EMBEDDED_ASR_MODEL_DIR", tmp_path)
    assert model_options.resolve_model_settings().asr_model == str(tmp_path)
    assert model_options.resolve_model_settings(asr_model="openai/whisper-tiny").asr_model == "openai/whisper-tiny"
    monkeypatch.setenv("ASR_MODEL", "from/environment")
    assert model_options.resolve_model_settings().asr_model == "from/environment"
    monkeypatch.delenv("ASR_MODEL")
    monkeypatch.setattr(model_options, "EMBEDDED_ASR_MODEL_DIR", tmp_path / "missing")
    with pytest.raises(ModelLoadError, match=r"python -m whosaid\.cli\.setup_models"):
        model_options.resolve_model_settings()


def test_commands_without_any_model_say_what_to_do(
    capsys, monkeypatch: pytest.MonkeyPatch, clips: list[Path], tmp_path: Path
) -> None:
    monkeypatch.setattr(model_options, "EMBEDDED_ASR_MODEL_DIR", tmp_path / "missing")
    assert main(["serve", "--port", "0"]) == 1
    assert "set ASR_MODEL" in capsys.readouterr().err
    status, _, err = run_cli(capsys, str(clips[0]))
    assert status == 1 and "set ASR_MODEL" in err


def test_a_folder_keeps_its_subfolders_and_resume_skips_finished_outputs(
    capsys, tiny: Path, clips: list[Path], tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    for day, clip in zip(("monday", "tuesday"), clips, strict=True):
        (folder / day).mkdir(parents=True)
        (folder / day / f"call{clip.suffix}").write_bytes(clip.read_bytes())
    (folder / "notes.txt").write_text("not audio, not picked up")
    out = tmp_path / "out"
    status, _, _ = run_cli(capsys, str(folder), "--asr-model", str(tiny), "-f", "text", "-o", str(out))
    assert status == 0
    written = sorted(path.relative_to(out).as_posix() for path in out.rglob("*.txt"))
    assert written == ["monday/call.txt", "tuesday/call.txt"]
    (out / "monday" / "call.txt").write_text("kept\n")
    (out / "tuesday" / "call.txt").unlink()
    status, _, _ = run_cli(capsys, str(folder), "--asr-model", str(tiny), "-f", "text", "-o", str(out), "--resume")
    assert status == 0
    assert (out / "monday" / "call.txt").read_text() == "kept\n"
    assert (out / "tuesday" / "call.txt").read_text().strip()
    status, _, err = run_cli(capsys, str(folder), "--asr-model", str(tiny), "--resume")
    assert status == 2 and "--resume needs --output-dir" in err


def test_the_progress_bar_shows_the_end_of_the_text_as_windows_finish() -> None:
    import io

    from tqdm import tqdm

    out = io.StringIO()
    progress = tqdm(["talk.mp3"], file=out, disable=False)
    on_text = text_progress(progress, "talk.mp3")
    on_text("Hello there.")
    assert progress.postfix == "talk.mp3: ...Hello there."
    on_text(" " + "word " * 20 + "the  end.\n")
    assert progress.postfix.endswith("word word the end.") and progress.postfix.startswith("talk.mp3: ...")
    assert len(progress.postfix) == len("talk.mp3: ...") + PROGRESS_TEXT_CHARS
    progress.close()
