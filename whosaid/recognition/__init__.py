"""Whisper speech recognition: the `Recognizer` protocol (protocol) and its implementation
(recognizer), model loading (loading), the greedy loop (greedy), the decoding options and logits
rules (logits_rules), word timing (word_timing), the spans made into chunks (segments), and text
pieces as windows finish (text_deltas); its CPU kernels (kernels: the decoder step and the
linear products it multiplies with)."""
