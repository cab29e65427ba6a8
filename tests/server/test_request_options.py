"""Every request option reaches every edge: declared once on `InferenceConfig`
(whosaid.config.request_options), it is a flag of `whosaid transcribe` and `whosaid batch`, a field
of the OpenAI form, a parameter the remote client sends, and a column of a batch manifest; or it
says what stands for it on an edge that takes it otherwise."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from starlette.datastructures import UploadFile

from whosaid.batch.inputs import read_manifest
from whosaid.cli.main import build_parser
from whosaid.cli.remote import openai_form_fields
from whosaid.cli.transcribe import request_parameters
from whosaid.config import InferenceConfig, RequestOption, request_options
from whosaid.server.routes.openai import AudioForm

OPTIONS = {option.name: option for option in request_options()}


def sample(option: RequestOption) -> Any:
    """A valid value of the option that is not its default, so that a lost value shows."""
    if option.kind == "flag":
        return True
    if option.kind == "choice":
        return next(choice for choice in reversed(option.choices) if choice != str(option.field.default))
    if option.kind == "int":
        lowest = [bound.ge for bound in option.field.metadata if hasattr(bound, "ge")]
        return max([2, *lowest])
    if option.kind == "float":
        return 10.0
    if option.kind == "str":
        return "de"
    if option.kind == "list":
        return ["Alice"]
    return {"Alice": "UklGRg=="}


def expected(option: RequestOption) -> Any:
    """The sample as the validated config holds it."""
    value = sample(option)
    return {"true": True, "false": False}.get(value, value) if option.kind == "choice" else value


def as_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def form(fields: list[tuple[str, str]], response_format: str = "json") -> Any:
    """The OpenAI form as FastAPI fills it from repeated multipart fields."""
    values: dict[str, Any] = {"file": UploadFile(io.BytesIO(b""), filename="a.wav"), "response_format": response_format}
    list_fields = {field.alias or name for name, field in AudioForm.model_fields.items() if field.default_factory}
    for name, value in fields:
        if name in list_fields:
            values.setdefault(name, []).append(value)
        else:
            values[name] = value
    return AudioForm.model_validate(values)


def test_every_option_is_on_every_edge_or_says_what_stands_for_it() -> None:
    for option in OPTIONS.values():
        assert option.kind  # raises for a type no edge knows
        if option.cli_flag is None or option.form_name is None:
            assert option.edges.by_hand, f"{option.name} is not on every edge and does not say why"
    # POST / and the batch manifest take the model's fields themselves.
    assert set(InferenceConfig.model_json_schema()["properties"]) == set(OPTIONS)


@pytest.mark.parametrize("command", ["transcribe", "batch"])
@pytest.mark.parametrize("name", [name for name, option in OPTIONS.items() if option.cli_flag])
def test_cli_flag_reaches_the_config(command: str, name: str) -> None:
    option = OPTIONS[name]
    required = [command, "a.wav"] + (["--output", "out"] if command == "batch" else [])
    if command == "batch" and name == "assisted":
        # Ray's actors decode batched: `batch` does not take --assisted.
        with pytest.raises(SystemExit):
            build_parser(command).parse_args([*required, "--assisted", "true"])
        return
    value = sample(option)
    if option.kind == "flag":
        flag = [option.cli_flag]
    elif option.kind == "list":  # repeated, one value each time
        flag = [part for item in value for part in (option.cli_flag, item)]
    else:
        flag = [option.cli_flag, str(value)]
    args = build_parser(command).parse_args([*required, *flag])
    parameters = request_parameters(args)
    assert set(parameters) == {name}
    config, warnings = InferenceConfig.from_parameters(parameters)
    assert (getattr(config, name), warnings) == (expected(option), [])


def test_unset_flags_leave_the_defaults() -> None:
    args = build_parser("transcribe").parse_args(["transcribe", "a.wav"])
    assert request_parameters(args) == {}


@pytest.mark.parametrize("name", [name for name, option in OPTIONS.items() if option.form_name])
def test_form_field_reaches_the_config(name: str) -> None:
    option = OPTIONS[name]
    values = sample(option) if option.kind == "list" else [sample(option)]
    parameters = form([(option.form_name, as_text(value)) for value in values])
    config, _ = InferenceConfig.from_parameters(parameters.parameters("transcribe"))
    assert getattr(config, name) == expected(option)


@pytest.mark.parametrize("name", [name for name in OPTIONS if name not in ("task", "sampling_rate")])
def test_remote_client_sends_each_parameter_so_the_form_gives_it_back(name: str) -> None:
    option = OPTIONS[name]
    value = expected(option)
    if name == "known_speaker_names":
        given = {"known_speaker_names": ["Alice"], "known_speaker_references": ["data:audio/wav;base64,UklGRg=="]}
    elif name == "known_speaker_references":
        given = {"known_speaker_names": ["Bob"], "known_speaker_references": ["UklGRg=="]}
    else:
        given = {name: value}
    original, _ = InferenceConfig.from_parameters(given)
    response_format = "verbose_json" if name == "return_timestamps" else "json"
    sent = form(openai_form_fields(given), response_format).parameters("transcribe")
    received, warnings = InferenceConfig.from_parameters(sent)
    assert warnings == []
    if name == "known_speakers":
        # The form carries the pair as OpenAI's lists, the clip as a data URL.
        assert received.known_speaker_references_given() == [("Alice", "data:audio/*;base64,UklGRg==")]
    else:
        assert received == original


def test_options_the_routes_take_in_their_own_way() -> None:
    """The task is the route, and sampling_rate belongs to raw PCM arrays, which no form carries."""
    assert openai_form_fields({"task": "translate", "sampling_rate": 8000}) == []


def test_manifest_columns_are_the_parameters(tmp_path: Path) -> None:
    (tmp_path / "a.wav").write_bytes(b"")
    scalars = [option for option in OPTIONS.values() if option.kind in ("flag", "int", "float", "str", "choice")]
    header = ["path"] + [option.name for option in scalars]
    row = ["a.wav"] + [as_text(sample(option)) for option in scalars]
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(",".join(header) + "\n" + ",".join(f'"{cell}"' for cell in row) + "\n")
    (recording,) = read_manifest(str(manifest))
    assert set(recording.parameters) == {option.name for option in scalars}
    # Each column's value is the option's, one at a time (some options exclude each other).
    for option in scalars:
        config, _ = InferenceConfig.from_parameters({option.name: recording.parameters[option.name]})
        assert getattr(config, option.name) == expected(option), option.name
