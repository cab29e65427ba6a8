"""whosaid: what was said in a recording, and who said it.

Whisper speech recognition (transformers), optional speculative decoding with an assistant model,
and optional pyannote speaker diarization, behind one core shared by the Inference Endpoints
handler (`handler.py`), the self-hosted server and the CLI.
"""

__version__ = "0.1.0"
