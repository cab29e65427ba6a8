"""GPU check: the core on CUDA (fp16 + SDPA, whatever transformers the GPU image has): the batched
path, speculative decoding with both assistant kinds (still token-identical in fp16?), routing.

Models are random (a base-sized main model, a distil-style and a seq2seq assistant) with the real
tokenizer, so it needs only the small tokenizer files of a converted model, no weights:

    python -m scripts.gpu_check --tokenizer-dir models/whisper-base --audio sample.wav   # from the repository root

Timings with random weights say nothing about speculative decoding's gain (a random assistant's
drafts are all rejected); they show that every path runs on the device.
"""
import argparse, json, os, sys, time, statistics
import numpy as np, torch
import transformers
from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration, WhisperProcessor
from whosaid.audio import load_audio_file, audio_from_array
from whosaid.config import ModelSettings, InferenceConfig
from whosaid.engine import Engine

arguments = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
arguments.add_argument("--tokenizer-dir", default="models/whisper-base")
arguments.add_argument("--audio", required=True, help="a 30 s speech file, e.g. pyannote's sample.wav")
arguments.add_argument("--models-dir", default="/tmp/gpu-check-models")
options = arguments.parse_args()
print("torch", torch.__version__, "CUDA build", torch.version.cuda, "transformers", transformers.__version__, torch.cuda.get_device_name(0), flush=True)
TOK = options.tokenizer_dir
proc = WhisperProcessor.from_pretrained(TOK); gen = GenerationConfig.from_pretrained(TOK); base = WhisperConfig.from_pretrained(TOK)
root = options.models_dir

def build(name, seed, d_model, enc, dec, heads, encoder_of=None, max_length=96):
    torch.manual_seed(seed)
    c = WhisperConfig(vocab_size=base.vocab_size, num_mel_bins=80, d_model=d_model, encoder_layers=enc, decoder_layers=dec,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=4*d_model, decoder_ffn_dim=4*d_model,
        max_source_positions=1500, max_target_positions=448, decoder_start_token_id=base.decoder_start_token_id,
        pad_token_id=base.pad_token_id, bos_token_id=base.bos_token_id, eos_token_id=base.eos_token_id)
    m = WhisperForConditionalGeneration(c).eval()
    if encoder_of is not None:
        m.model.encoder.load_state_dict(WhisperForConditionalGeneration.from_pretrained(encoder_of).model.encoder.state_dict())
    g = GenerationConfig.from_dict(gen.to_dict()); g.max_length = max_length; m.generation_config = g
    path = f"{root}/{name}"; m.save_pretrained(path); proc.save_pretrained(path); return path

main = build("main", 0, 512, 6, 6, 8)            # whisper-base sized, random
distil = build("distil", 1, 512, 6, 2, 8, encoder_of=main)
s2s = build("s2s", 2, 256, 2, 2, 4)
sample = load_audio_file(options.audio).samples
short = audio_from_array(sample[:8 * 16000], 16000)
long60 = audio_from_array(np.concatenate([sample, sample]), 16000)
results = {}

def timed(fn, repeats=5):
    fn(); torch.cuda.synchronize(); times = []
    for _ in range(repeats):
        t = time.perf_counter(); out = fn(); torch.cuda.synchronize(); times.append(time.perf_counter() - t)
    return out, statistics.median(times)

for kind, assistant in (("distil", distil), ("seq2seq", s2s)):
    engine = Engine.from_settings(ModelSettings(asr_model=main, assistant_model=assistant))
    r = engine.recognizer
    # no silent fall-back: DEVICE=auto must have put the model on the GPU, in float16
    assert engine.runtime.device.startswith("cuda") and engine.runtime.dtype == "float16", engine.runtime
    print(kind, "runtime", engine.runtime.as_labels(), flush=True)
    print(kind, "device", r.model.device, r.model.dtype, r.model.config._attn_implementation, type(r.assistant).__name__, flush=True)
    same = 0; total = 0
    for start in (0, 7, 14, 21):
        audio = audio_from_array(sample[start * 16000:(start + 8) * 16000], 16000)
        greedy = r._transcribe_generate(audio, {"language": "en", "task": "transcribe"})
        assisted = r._transcribe_generate(audio, {"language": "en", "task": "transcribe"}, assistant=r.assistant)
        total += 1; same += greedy == assisted
    results[f"{kind}_identical_clips"] = f"{same}/{total}"
    cfg = lambda **p: InferenceConfig.from_parameters(dict(language="en", **p))[0]
    for clip_name, clip in (("short8s", short), ("long60s", long60)):
        for mode, params in (("assisted", dict(assisted=True)), ("not_assisted_b24", dict(assisted=False, batch_size=24)), ("auto", {})):
            out, t = timed(lambda: engine.transcribe(clip, cfg(**params)))
            results[f"{kind}_{clip_name}_{mode}_s"] = round(t, 4); results[f"{kind}_{clip_name}_{mode}_decoding"] = out.decoding
    print(json.dumps(results, indent=1), flush=True)
    del engine; torch.cuda.empty_cache()
print("peak GPU memory GiB", torch.cuda.max_memory_allocated() / 2**30)
