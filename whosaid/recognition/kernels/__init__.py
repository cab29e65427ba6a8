"""The recognizer's CPU kernels, beside the decoding logic that calls them: one decoder step over
the model's weights (decoder_step) and the linear products it multiplies with (products)."""
