"""Container checks before decoding: is the file complete, as its own header describes it?

FFmpeg decodes what is there and stops quietly at the end of the bytes, so a cut-off upload would
be transcribed as shorter audio. Where the header declares a size (WAV's data chunk, Matroska's
Segment), the bytes must be present; an Ogg stream must end with its end-of-stream page. Other
containers (MP3, FLAC, MP4) are checked after decoding, against the duration their header
declares (whosaid.audio.loading).
"""

from __future__ import annotations

from whosaid.errors import InvalidAudioError

_OGG_PAGE_HEADER_BYTES = 27
_OGG_END_OF_STREAM = 0x04
_OGG_BEGINNING_OF_STREAM = 0x02
_EBML_MAGIC = bytes.fromhex("1a45dfa3")
_MATROSKA_SEGMENT = bytes.fromhex("18538067")


def check_complete(data: bytes) -> None:
    """Raise InvalidAudioError when `data` is a WAV, Ogg or Matroska/WebM file cut short."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        check_wav_complete(data)
    elif data[:4] == b"OggS":
        check_ogg_complete(data)
    elif data[:4] == _EBML_MAGIC:
        check_matroska_complete(data)


def check_wav_complete(data: bytes) -> None:
    """FFmpeg clamps a WAV's declared data size to the bytes present and decodes the rest
    silently, so a cut-off upload would pass as shorter audio. Compare the header with the size;
    check the format chunk's fields agree with each other on the way."""
    offset = 12
    while offset + 8 <= len(data):
        chunk_id = data[offset : offset + 4]
        chunk_size = int.from_bytes(data[offset + 4 : offset + 8], "little")
        body = offset + 8
        if chunk_id == b"fmt " and body + chunk_size <= len(data):  # a cut one: "truncated" below
            check_wav_format(data[body : body + chunk_size])
        if chunk_id == b"data":
            present = len(data) - body
            # 0 and 0xFFFFFFFF mean "unknown length" (streamed WAV): nothing to compare.
            if chunk_size not in (0, 0xFFFFFFFF) and present < chunk_size:
                raise InvalidAudioError(
                    f"the WAV file is truncated: its header declares {chunk_size} bytes of audio "
                    f"but only {present} are present; send the complete file"
                )
            return
        offset = body + chunk_size + (chunk_size & 1)
    raise InvalidAudioError(
        "the WAV file is truncated: it ends before its audio data; send the complete file"
    )


def wav_declared_duration_s(data: bytes) -> float | None:
    """Seconds of audio a WAV's header declares (data chunk size over the format's byte rate);
    None for other files, a streamed WAV (size 0 or 0xFFFFFFFF) or a header without the fields."""
    if not (data[:4] == b"RIFF" and data[8:12] == b"WAVE"):
        return None
    offset, bytes_per_s = 12, 0
    while offset + 8 <= len(data):
        chunk_id = data[offset : offset + 4]
        chunk_size = int.from_bytes(data[offset + 4 : offset + 8], "little")
        body = offset + 8
        if chunk_id == b"fmt " and body + chunk_size <= len(data):
            try:
                check_wav_format(data[body : body + chunk_size])
            except InvalidAudioError:
                return None  # a corrupt format chunk declares nothing: check_complete says why
            bytes_per_s = int.from_bytes(data[body + 8 : body + 12], "little")
        if chunk_id == b"data":
            if chunk_size in (0, 0xFFFFFFFF) or bytes_per_s == 0:
                return None
            return chunk_size / bytes_per_s
        offset = body + chunk_size + (chunk_size & 1)
    return None


_WAV_PCM = 0x0001
_WAV_FLOAT = 0x0003
_WAV_EXTENSIBLE = 0xFFFE


def check_wav_format(fmt: bytes) -> None:
    """PCM and float WAVs: bits per sample a real sample size, block align and byte rate what
    the channels, the size and the rate make. FFmpeg trusts a corrupt bits-per-sample (7 read as
    8-bit samples of 16-bit data: noise twice as long, an empty 200); refuse it instead."""
    if len(fmt) < 16:
        raise InvalidAudioError("the WAV file is corrupt: its format chunk is too short; send the original file")
    tag = int.from_bytes(fmt[0:2], "little")
    channels = int.from_bytes(fmt[2:4], "little")
    rate_hz = int.from_bytes(fmt[4:8], "little")
    byte_rate = int.from_bytes(fmt[8:12], "little")
    block_align = int.from_bytes(fmt[12:14], "little")
    bits = int.from_bytes(fmt[14:16], "little")
    if channels == 0 or rate_hz == 0:
        raise InvalidAudioError(
            f"the WAV file is corrupt: its header says {channels} channels at {rate_hz} Hz; send the original file"
        )
    if tag not in (_WAV_PCM, _WAV_FLOAT, _WAV_EXTENSIBLE):
        return  # compressed formats (ADPCM, A-law, ...) lay out blocks their own way
    sample_bytes = (bits + 7) // 8
    valid_bits = (1, 2, 3, 4, 8) if tag != _WAV_FLOAT else (4, 8)
    if bits == 0 or sample_bytes not in valid_bits or block_align != channels * sample_bytes or (
        byte_rate != rate_hz * block_align
    ):
        raise InvalidAudioError(
            f"the WAV file is corrupt: its header's fields disagree ({bits} bits per sample, "
            f"{channels} channels, block align {block_align}, {byte_rate} bytes/s at {rate_hz} Hz); "
            "send the original file"
        )


def check_ogg_complete(data: bytes) -> None:
    """Every page whole, and every logical stream closed by a page flagged end-of-stream (libogg
    writes one when the encoder finishes). A cut anywhere leaves a partial page or no such page;
    FFmpeg would decode up to the cut and report the shorter duration as the file's."""
    offset = 0
    open_streams: set[bytes] = set()
    while offset < len(data):
        header = data[offset : offset + _OGG_PAGE_HEADER_BYTES]
        if len(header) < _OGG_PAGE_HEADER_BYTES or header[:4] != b"OggS":
            if len(header) < _OGG_PAGE_HEADER_BYTES and b"OggS".startswith(header[:4]):
                break  # a page header cut short: reported below
            raise InvalidAudioError(
                f"the Ogg file is corrupt: no page starts at byte {offset}; send the original file"
            )
        flags, serial, segments = header[5], header[14:18], header[26]
        table = data[offset + _OGG_PAGE_HEADER_BYTES : offset + _OGG_PAGE_HEADER_BYTES + segments]
        page_end = offset + _OGG_PAGE_HEADER_BYTES + segments + sum(table)
        if len(table) < segments or page_end > len(data):
            break
        if flags & _OGG_BEGINNING_OF_STREAM:
            open_streams.add(serial)
        if flags & _OGG_END_OF_STREAM:
            open_streams.discard(serial)
        offset = page_end
    else:
        if not open_streams:
            return
    raise InvalidAudioError(
        "the Ogg file is truncated: it ends before its end-of-stream page; send the complete file"
    )


def check_matroska_complete(data: bytes) -> None:
    """A Matroska/WebM Segment declares its size, except when written live (browser recordings
    say 'unknown'): then only the duration check after decoding can help."""
    offset = 0
    while offset < len(data):
        element_id, size, body = _ebml_element(data, offset)
        if element_id is None:
            return  # not parseable here: FFmpeg decides
        if element_id == _MATROSKA_SEGMENT:
            if size is not None and len(data) - body < size:
                raise InvalidAudioError(
                    f"the WebM/Matroska file is truncated: its header declares {size} bytes of "
                    f"content but only {len(data) - body} are present; send the complete file"
                )
            return
        if size is None:
            return
        offset = body + size


def _ebml_element(data: bytes, offset: int) -> tuple[bytes | None, int | None, int]:
    """(id, size or None when 'unknown', offset of the body) of the EBML element at `offset`."""
    id_length = _vint_length(data, offset, max_length=4)
    if id_length is None:
        return None, None, offset
    element_id = data[offset : offset + id_length]
    size_offset = offset + id_length
    size_length = _vint_length(data, size_offset, max_length=8)
    if size_length is None:
        return None, None, offset
    raw = int.from_bytes(data[size_offset : size_offset + size_length], "big")
    value = raw & ((1 << (7 * size_length)) - 1)
    unknown = value == (1 << (7 * size_length)) - 1
    return element_id, None if unknown else value, size_offset + size_length


def _vint_length(data: bytes, offset: int, *, max_length: int) -> int | None:
    if offset >= len(data) or data[offset] == 0:
        return None
    length = 9 - data[offset].bit_length()
    if length > max_length or offset + length > len(data):
        return None
    return length
