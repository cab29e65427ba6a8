"""Whisper speech recognition: the `Recognizer` protocol (protocol) and its implementation
(recognizer), model loading (loading), the greedy loop (greedy) and its decoder step
(decoder_step) with its CPU linear products (products), the decoding options and logits rules
(logits_rules), word timing (word_timing), the spans made into chunks (segments), and text
pieces as windows finish (text_deltas)."""
