"""`whosaid serve --ray`: the server's app as a Ray Serve deployment on a local Ray cluster, with
real whisper-tiny.en: the README's request and an OpenAI SDK request answer as the engine does,
the API key, /health, /ready and /metrics work as on the plain server, and Ray reports the
autoscaling config the flags and the YAML file gave."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tests.support.ray_cluster import wait_until_idle
from tests.support.server import free_port
from whosaid.cli.ray_serve import DEPLOYMENT_NAME, DeploymentOptions

API_KEY = "ray-serve-test-key"


def test_options_are_the_defaults_then_the_yaml_file_then_the_flags(tmp_path: Path) -> None:
    config = tmp_path / "scale.yaml"
    config.write_text(
        "autoscaling_config:\n  min_replicas: 0\n  max_replicas: 8\n  downscale_delay_s: 300\n"
        "ray_actor_options:\n  num_gpus: 1\nmax_ongoing_requests: 4\n"
    )
    options = DeploymentOptions.build(config, max_replicas=3, num_cpus=2)
    assert options.autoscaling_config == {
        "min_replicas": 0, "max_replicas": 3, "target_ongoing_requests": 2, "downscale_delay_s": 300
    }
    assert options.ray_actor_options == {"num_cpus": 2, "num_gpus": 1}
    assert options.max_ongoing_requests == 4
    assert DeploymentOptions.build().deployment_options() == {
        "name": DEPLOYMENT_NAME,
        "autoscaling_config": {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 2},
        "ray_actor_options": {"num_cpus": 1, "num_gpus": 0},
    }
    with pytest.raises(ValueError, match=r"min_replicas \(3\) is above max_replicas \(2\)"):
        DeploymentOptions.build(min_replicas=3, max_replicas=2)
    config.write_text("replicas: 2\n")
    with pytest.raises(ValueError, match="a mapping with the keys autoscaling_config, ray_actor_options"):
        DeploymentOptions.build(config)


def test_ray_flags_without_ray_are_refused(capsys) -> None:
    from whosaid.cli.main import main

    assert main(["serve", "--max-replicas", "2", "--num-gpus", "1"]) == 2
    assert capsys.readouterr().err == "whosaid serve: --max-replicas, --num-gpus need --ray\n"


@pytest.mark.slow
def test_the_server_on_ray_serve_answers_as_the_plain_server(
    tmp_path: Path, ray_cluster: str, converted_model, tiny_en_engine, sample_wav: Path
) -> None:
    import requests
    from openai import OpenAI
    from ray import serve
    from ray.serve.context import _get_global_client

    from whosaid.cli.ray_serve import APP_NAME, application
    from whosaid.config import ModelSettings
    from whosaid.server.settings import ServerSettings

    config = tmp_path / "scale.yaml"
    config.write_text("autoscaling_config:\n  upscale_delay_s: 5\n  downscale_delay_s: 120\n")
    options = DeploymentOptions.build(
        config, min_replicas=1, max_replicas=2, target_ongoing_requests=3, num_cpus=1, max_ongoing_requests=4
    )
    model_settings = ModelSettings(asr_model=str(converted_model("whisper-tiny.en")), device="cpu")
    port = free_port()
    server_settings = ServerSettings(host="127.0.0.1", port=port, api_key=API_KEY)
    wait_until_idle()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(application(model_settings, server_settings, options), name=APP_NAME, route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {API_KEY}"}
        assert requests.get(f"{url}/health", timeout=30).status_code == 200
        ready = requests.get(f"{url}/ready", timeout=30)
        assert ready.status_code == 200, ready.text
        # Loaded by the app's own loader, before the replica took requests.
        assert ready.json()["status"] == "ready" and ready.json()["load_duration_s"] > 0.1

        # The README's request.
        audio = base64.b64encode(sample_wav.read_bytes()).decode()
        body = {"inputs": audio, "parameters": {"language": "en"}}
        refused = requests.post(f"{url}/", json=body, timeout=300)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        answer = requests.post(f"{url}/", json=body, headers=auth, timeout=300)
        assert answer.status_code == 200, answer.text
        expected = tiny_en_engine.run(sample_wav.read_bytes(), {"language": "en"})
        assert answer.json()["text"] == expected.text
        assert answer.json()["chunks"] == expected.to_dict()["chunks"]

        # The OpenAI SDK.
        client = OpenAI(base_url=f"{url}/v1", api_key=API_KEY)
        with sample_wav.open("rb") as file:
            transcription = client.audio.transcriptions.create(model="whisper-1", file=file, language="en")
        assert transcription.text == expected.text

        metrics = requests.get(f"{url}/metrics", headers=auth, timeout=30)
        assert metrics.status_code == 200
        assert 'whosaid_http_requests_total{method="POST",route="/",status="200"} 1.0' in metrics.text

        # What Ray reports for the deployment: the autoscaling config given.
        details = _get_global_client().get_serve_details()
        deployment = details["applications"][APP_NAME]["deployments"][DEPLOYMENT_NAME]
        reported = deployment["deployment_config"]
        scaling = reported["autoscaling_config"]
        assert (scaling["min_replicas"], scaling["max_replicas"], scaling["target_ongoing_requests"]) == (1, 2, 3)
        assert (scaling["upscale_delay_s"], scaling["downscale_delay_s"]) == (5, 120)
        assert reported["max_ongoing_requests"] == 4
        assert reported["ray_actor_options"]["num_cpus"] == 1
        assert deployment["status"] == "HEALTHY"
    finally:
        serve.shutdown()
