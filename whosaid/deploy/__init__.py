"""Create, inspect, update and remove the GPU Inference Endpoint, and upload the handler repo.

One module per stage: `handler_repo` (which files the handler repo ships), `spec` (what `create`
sends), `api` (huggingface_hub calls, failures explained), `output` (what is printed) and `cli`
(`python -m whosaid deploy`). The Hugging Face token reaches the endpoint only as a secret
(`model.secrets.HF_TOKEN`): never as an environment variable, never printed, never logged.
"""
