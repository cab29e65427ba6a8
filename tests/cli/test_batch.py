"""`whosaid batch`: inputs (files, folders, globs, manifests), the results table, and whole runs
on a local Ray cluster with real models: outputs equal `whosaid transcribe`'s, bad files are
rows with their error, and a run killed mid-way resumes without rewriting anything."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.ray_cluster import wait_until_idle
from whosaid.batch import results, storage
from whosaid.batch.inputs import InputError, expand_inputs
from whosaid.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[2]
AMI_DIR = REPO_ROOT / "tests" / "data" / "ami"
EMPTY_FILE_ERROR = "empty input: the audio file has no bytes"
CORRUPT_FILE_ERROR = (
    "could not decode the audio (Invalid data found when processing input): it is not in a common format, or it "
    "is corrupt or truncated; send a complete file in a common format (wav, flac, mp3, ogg/opus, m4a/aac, webm)"
)


def touch(path: Path, data: bytes = b"audio") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------------------------------
# Inputs


def test_files_folders_and_globs_name_their_outputs(tmp_path: Path) -> None:
    touch(tmp_path / "calls" / "a.wav")
    touch(tmp_path / "calls" / "day2" / "a.flac")
    touch(tmp_path / "calls" / "notes.txt")
    touch(tmp_path / "talks" / "x.mp3")
    touch(tmp_path / "talks" / "y.mp3")
    touch(tmp_path / "single.ogg")
    found = expand_inputs([str(tmp_path / "calls"), str(tmp_path / "talks" / "*.mp3"), str(tmp_path / "single.ogg")])
    assert [(Path(r.location).relative_to(tmp_path).as_posix(), r.output_name) for r in found] == [
        ("calls/a.wav", "a"),
        ("calls/day2/a.flac", "day2/a"),
        ("talks/x.mp3", "x"),
        ("talks/y.mp3", "y"),
        ("single.ogg", "single"),
    ]
    assert all(r.parameters == {} for r in found)
    # The same folder through a file:// URI (pyarrow's filesystems): the same recordings.
    by_uri = expand_inputs([f"file://{tmp_path / 'calls'}"])
    assert [(r.location, r.output_name) for r in by_uri] == [
        (f"file://{tmp_path}/calls/a.wav", "a"),
        (f"file://{tmp_path}/calls/day2/a.flac", "day2/a"),
    ]


def test_a_manifest_gives_paths_and_per_file_parameters(tmp_path: Path) -> None:
    touch(tmp_path / "archive" / "one.wav")
    touch(tmp_path / "archive" / "sub" / "two.wav")
    touch(tmp_path / "elsewhere" / "three.wav")
    (tmp_path / "archive" / "list.csv").write_text(
        "path,language,num_speakers,title\n"
        "one.wav,de,2,first\n"
        f"sub/two.wav,,,second\n"
        f"{tmp_path / 'elsewhere' / 'three.wav'},en,3,third\n"
    )
    warnings: list[str] = []
    found = expand_inputs([str(tmp_path / "archive" / "list.csv")], warnings=warnings)
    assert [(r.location, r.output_name, r.parameters) for r in found] == [
        (str(tmp_path / "archive" / "one.wav"), "one", {"language": "de", "num_speakers": 2}),
        (str(tmp_path / "archive" / "sub" / "two.wav"), "sub/two", {}),
        (str(tmp_path / "elsewhere" / "three.wav"), "three", {"language": "en", "num_speakers": 3}),
    ]
    manifest = tmp_path / "archive" / "list.csv"
    assert warnings == [f"manifest {manifest}: columns title are not parameters and were ignored"]
    # JSONL and Parquet manifests read the same way.
    import pyarrow as pa
    import pyarrow.parquet

    rows = [{"path": "one.wav", "language": "de"}, {"path": "sub/two.wav", "language": None}]
    (tmp_path / "archive" / "list.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    pyarrow.parquet.write_table(pa.Table.from_pylist(rows), tmp_path / "archive" / "list.parquet")
    for name in ("list.jsonl", "list.parquet"):
        found = expand_inputs([str(tmp_path / "archive" / name)])
        assert [(r.output_name, r.parameters) for r in found] == [("one", {"language": "de"}), ("sub/two", {})]


def test_inputs_that_cannot_be_used_are_refused_with_the_reason(tmp_path: Path) -> None:
    touch(tmp_path / "a" / "x.wav")
    touch(tmp_path / "b" / "x.wav")
    (tmp_path / "empty").mkdir()
    (tmp_path / "no-path.csv").write_text("file,language\nx.wav,en\n")
    cases = {
        str(tmp_path / "missing.wav"): f"{tmp_path / 'missing.wav'}: no such file or folder",
        str(tmp_path / "empty"): f"{tmp_path / 'empty'} holds no audio file",
        str(tmp_path / "*.flac"): f"{tmp_path / '*.flac'} matches no file",
        str(tmp_path / "no-path.csv"): (
            f"manifest {tmp_path / 'no-path.csv'} has no 'path' column (columns: file, language)"
        ),
        str(tmp_path / "missing.csv"): f"manifest {tmp_path / 'missing.csv'}: no such file",
    }
    for spec, message in cases.items():
        with pytest.raises(InputError) as raised:
            expand_inputs([spec])
        assert str(raised.value).startswith(message), spec
    with pytest.raises(InputError, match=r"a/x.wav and .*b/x.wav would both be written as x\.\*; rename one"):
        expand_inputs([str(tmp_path / "a" / "x.wav"), str(tmp_path / "b" / "x.wav")])
    # The same file named twice is one recording.
    assert len(expand_inputs([str(tmp_path / "a"), str(tmp_path / "a" / "x.wav")])) == 1


def test_the_cli_refuses_bad_arguments_before_starting_ray(tmp_path: Path, capsys) -> None:
    touch(tmp_path / "x.wav")
    assert main(["batch", str(tmp_path / "nothing"), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"whosaid batch: {tmp_path / 'nothing'}: no such file or folder\n"
    assert main(["batch", str(tmp_path / "x.wav"), "-o", str(tmp_path / "out"), "--num-speakers", "0"]) == 2
    assert "num_speakers" in capsys.readouterr().err
    assert main(["batch", str(tmp_path / "x.wav"), "-o", str(tmp_path / "out"), "--actors", "0"]) == 2
    assert "--actors must be at least 1" in capsys.readouterr().err
    argv = ["batch", str(tmp_path / "x.wav"), "-o", str(tmp_path / "out"), "--task", "translate", "-f", "diarized_json"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "whosaid batch: --format diarized_json is a transcription format: it cannot go with --task translate\n"
    )
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------------
# The results table


def test_a_recording_is_done_when_its_row_says_ok_and_its_output_is_there(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    ok = {"path": "/a.wav", "format": "srt", "status": "ok", "output": f"{out}/a.srt", "duration_s": 30.0,
          "speakers": ["SPEAKER_00"], "warnings": []}
    failed = {"path": "/b.wav", "format": "srt", "status": "error", "error": "empty input", "error_type": "X"}
    gone = {**ok, "path": "/c.wav", "output": f"{out}/sub/c.srt"}
    results.write_record(out, "a", ".srt", ok)
    results.write_record(out, "b", ".srt", failed)
    results.write_record(out, "sub/c", ".srt", gone)
    storage.write_atomically(f"{out}/a.srt", b"1\n")
    # An unfinished write (a temporary file) is neither an output nor a record.
    storage.write_atomically(f"{out}/.whosaid-batch/.d.srt.json.x.tmp", b"{")
    records = results.read_records(out)
    assert sorted(records) == ["a.srt.json", "b.srt.json", "sub/c.srt.json"]
    assert results.done_keys(out, records) == {"a.srt.json"}
    results.write_table(out, records.values())
    import pyarrow.parquet

    table = pyarrow.parquet.read_table(f"{out}/results.parquet")
    assert table.column_names == list(results.COLUMNS)
    lines = [json.loads(line) for line in Path(out, "results.jsonl").read_text().splitlines()]
    assert table.to_pylist() == lines
    assert [(row["path"], row["status"], row["error"]) for row in lines] == [
        ("/a.wav", "ok", None), ("/b.wav", "error", "empty input"), ("/c.wav", "ok", None)
    ]


# --------------------------------------------------------------------------------------------------
# Whole runs on a local Ray cluster, real models


@pytest.fixture(scope="module")
def model_flags(converted_model) -> list[str]:
    return ["--asr-model", str(converted_model("whisper-tiny.en")), "--diarization-model", "builtin", "--device", "cpu"]


def file_states(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file below `folder`: (inode, mtime_ns, bytes), to show that nothing was rewritten."""
    states = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            stat = path.stat()
            states[path.relative_to(folder).as_posix()] = (stat.st_ino, stat.st_mtime_ns, path.read_bytes())
    return states


@pytest.mark.slow
def test_batch_outputs_equal_transcribe_and_bad_files_are_rows(
    tmp_path: Path, ray_cluster: str, model_flags: list[str], sample_wav: Path, capsys
) -> None:
    archive = tmp_path / "archive"
    for name in ("ami_trn00.wav", "ami_trn01.wav"):
        touch(archive / "meetings" / name, (AMI_DIR / name).read_bytes())
    shutil.copyfile(sample_wav, archive / "sample.wav")
    touch(archive / "corrupt.wav", b"RIFF" + bytes(range(256)) * 8)
    touch(archive / "empty.wav", b"")
    out = tmp_path / "out"
    command = ["batch", str(archive), "-o", str(out), "--no-progress", "--address", ray_cluster, *model_flags]
    wait_until_idle()
    assert main(command) == 1  # two recordings failed
    err = capsys.readouterr().err
    assert f"whosaid batch: {archive / 'corrupt.wav'}: {CORRUPT_FILE_ERROR}\n" in err
    assert f"whosaid batch: {archive / 'empty.wav'}: {EMPTY_FILE_ERROR}\n" in err
    assert "whosaid batch: 5 files: done 3, failed 2, skipped 0 (done before); 0.0250 audio hours in" in err

    # The same files through `whosaid transcribe`, one process, the same settings: the same bytes.
    good = [archive / "meetings" / "ami_trn00.wav", archive / "meetings" / "ami_trn01.wav", archive / "sample.wav"]
    plain = tmp_path / "plain"
    assert main(["transcribe", *map(str, good), "-o", str(plain), "--no-progress", *model_flags]) == 0
    for name in ("ami_trn00", "ami_trn01"):
        assert (out / "meetings" / f"{name}.json").read_bytes() == (plain / f"{name}.json").read_bytes()
    assert (out / "sample.json").read_bytes() == (plain / "sample.json").read_bytes()
    assert not (out / "corrupt.json").exists() and not (out / "empty.json").exists()

    import pyarrow.parquet

    rows = pyarrow.parquet.read_table(out / "results.parquet").to_pylist()
    assert rows == [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_path = {Path(row["path"]).relative_to(archive).as_posix(): row for row in rows}
    assert sorted(by_path) == ["corrupt.wav", "empty.wav", "meetings/ami_trn00.wav", "meetings/ami_trn01.wav",
                               "sample.wav"]
    for name in ("corrupt.wav", "empty.wav"):
        row = by_path[name]
        assert (row["status"], row["error_type"], row["output"], row["duration_s"]) == (
            "error", "InvalidAudioError", None, None)
    assert by_path["corrupt.wav"]["error"] == CORRUPT_FILE_ERROR
    assert by_path["empty.wav"]["error"] == EMPTY_FILE_ERROR
    sample = json.loads((out / "sample.json").read_text())
    row = by_path["sample.wav"]
    assert (row["status"], row["output"], row["error"]) == ("ok", str(out / "sample.json"), None)
    assert (row["duration_s"], row["language"]) == (sample["duration"], sample["language"])
    assert row["speakers"] == list(dict.fromkeys(turn["speaker"] for turn in sample["turns"]))
    assert len(row["speakers"]) == 2
    assert row["elapsed_s"] >= row["decode_s"] + row["transcribe_s"] > 0

    # A second run skips what the table says is done (rewriting none of it) and tries the
    # failed recordings again.
    before = file_states(out)
    assert main(command) == 1
    assert "5 files: done 0, failed 2, skipped 3 (done before)" in capsys.readouterr().err
    after = file_states(out)
    for name in ("meetings/ami_trn00.json", "meetings/ami_trn01.json", "sample.json",
                 ".whosaid-batch/sample.json.json"):
        assert after[name] == before[name], name


@pytest.mark.slow
def test_a_run_killed_mid_way_resumes_and_rewrites_nothing(
    tmp_path: Path, ray_cluster: str, model_flags: list[str], capsys
) -> None:
    archive = tmp_path / "archive"
    names = [f"ami_trn0{index}.wav" for index in range(2, 6)]
    for name in names:
        touch(archive / name, (AMI_DIR / name).read_bytes())
    # A manifest: its rows' parameters reach the engine.
    counts = [1, 2, 2, 1]
    (archive / "manifest.csv").write_text(
        "path,num_speakers\n" + "".join(f"{name},{count}\n" for name, count in zip(names, counts, strict=True))
    )
    out = tmp_path / "out"
    command = ["batch", str(archive / "manifest.csv"), "-o", str(out), "--no-progress", "--address", ray_cluster,
               *model_flags]
    records = out / results.RECORDS_FOLDER
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    driver = subprocess.Popen(
        [sys.executable, "-m", "whosaid", *command], cwd=REPO_ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while not (records.is_dir() and any(records.glob("*.json"))):
            assert driver.poll() is None, "the driver ended before its first recording"
            assert time.monotonic() < deadline, "no recording finished in 300 s"
            time.sleep(0.05)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    # The killed job's actor may finish the recording it holds before the cluster stops it.
    wait_until_idle()
    killed = file_states(out)
    finished = sorted(name for name in killed if name.startswith(results.RECORDS_FOLDER))
    assert 1 <= len(finished) < len(names), finished
    assert not (out / "results.parquet").exists()

    assert main(command) == 0
    assert f"4 files: done {4 - len(finished)}, failed 0, skipped {len(finished)} (done before)" in (
        capsys.readouterr().err
    )
    resumed = file_states(out)
    for name, state in killed.items():
        assert resumed[name] == state, f"{name} was rewritten"
    assert sorted(name for name in resumed if name.endswith(".json") and "/" not in name) == [
        name.replace(".wav", ".json") for name in names
    ]
    import pyarrow.parquet

    rows = pyarrow.parquet.read_table(out / "results.parquet").to_pylist()
    assert [(Path(row["path"]).name, row["status"]) for row in rows] == [(name, "ok") for name in names]
    assert [len(row["speakers"]) for row in rows] == counts
