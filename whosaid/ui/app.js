// The server's page (/ui): pick, drop or record a file, send it to the OpenAI route with
// stream=true, show the text as it arrives, then hand the transcript to the viewer (viewer.js).
// The API key, when the server wants one, is asked once and kept in this tab (sessionStorage).
// Known voices: (name, clip) pairs sent as known_speaker_names[] / known_speaker_references[]
// (the clips as data URLs); the server's own library (GET /v1/voices) is listed, read-only.
// Live captions: the microphone streamed to /v1/realtime (OpenAI's Realtime transcription
// protocol, 24 kHz PCM16); each turn's text grows as it is decoded, the viewer's lanes and
// transcript grow turn by turn, and the stopped session is the viewer's, downloads included.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const KEY = "whosaid-api-key";
  const needsKey = document.body.dataset.auth === "bearer";
  const voices = [];  // { file, name: <input> } per known voice, in the order added
  let chosen = null;  // the File or recorded Blob to send
  let recorder = null;

  function showError(text) {
    $("error").textContent = text;
    $("error").hidden = false;
  }

  function clearError() {
    $("error").hidden = true;
    $("error").textContent = "";
  }

  function status(text) {
    $("status").textContent = text;
  }

  function askForKey() {
    $("key-form").hidden = false;
    $("upload-form").hidden = true;
    $("api-key").focus();
  }

  function ready() {
    $("key-form").hidden = true;
    $("upload-form").hidden = false;
    showLibrary();
  }

  function authHeaders() {
    const key = sessionStorage.getItem(KEY);
    return key ? { Authorization: "Bearer " + key } : {};
  }

  // The server's voice library, read-only; no control at all when the server cannot match voices.
  async function showLibrary() {
    let body;
    try {
      const response = await fetch("/v1/voices", { headers: authHeaders() });
      if (!response.ok) return;  // a wrong key or models loading: transcribing will say so
      body = await response.json();
    } catch (ignored) { return; }
    $("voices").hidden = !body.known_speakers;
    const names = body.voices.map((voice) => voice.name + (voice.clips > 1 ? " (" + voice.clips + " clips)" : ""));
    $("library").textContent = "Known to the server: " + names.join(", ") + ".";
    $("library").hidden = names.length === 0;
  }

  function addVoice(file) {
    const row = document.createElement("li");
    const name = document.createElement("input");
    name.className = "voice-name";
    name.value = file.name.replace(/\.[^.]*$/, "");
    name.setAttribute("aria-label", "name of the voice in " + file.name);
    const clip = document.createElement("span");
    clip.className = "voice-clip";
    clip.textContent = file.name;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "Remove";
    remove.setAttribute("aria-label", "remove the voice in " + file.name);
    const voice = { file, name };
    remove.addEventListener("click", () => {
      voices.splice(voices.indexOf(voice), 1);
      row.remove();
    });
    row.append(name, " ", clip, " ", remove);
    $("voice-list").append(row);
    voices.push(voice);
  }

  function dataUrl(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }

  function choose(file, label) {
    chosen = file;
    status(label || "Chosen: " + file.name);
  }

  // The API's error body as it came: status, code, message, and when to retry a 429/503.
  async function apiError(response) {
    let message = response.statusText, code = "";
    try {
      const body = await response.json();
      message = body.error.message;
      code = body.error.code;
    } catch (ignored) { /* not our JSON: the status says it */ }
    let text = "Error " + response.status + (code ? " (" + code + ")" : "") + ": " + message;
    const retry = response.headers.get("Retry-After");
    if (retry) text += (/[.!?]$/.test(text) ? " " : ". ") + "Retry in " + retry + " s.";
    return { text, status: response.status };
  }

  async function formData() {
    const form = new FormData();
    const name = chosen.name || "recording.webm";
    form.append("file", chosen, name);
    form.append("model", "whisper-1");
    form.append("response_format", "json");
    form.append("stream", "true");
    form.append("timestamp_granularities[]", "word");
    for (const [id, field] of [["language", "language"], ["num-speakers", "num_speakers"],
      ["min-speakers", "min_speakers"], ["max-speakers", "max_speakers"]]) {
      const value = $(id).value.trim();
      if (value) form.append(field, value);
    }
    if ($("multichannel").checked) form.append("multichannel", "true");
    for (const voice of voices) {
      const name = voice.name.value.trim();
      const reference = await dataUrl(voice.file);
      form.append("known_speaker_names[]", name);
      form.append("known_speaker_references[]", reference);
    }
    return form;
  }

  // Server-sent events from a fetch body: "event: NAME\ndata: JSON\n\n", comments ignored.
  async function* events(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trim();
        }
        if (data) yield { name, payload: JSON.parse(data) };
      }
    }
  }

  async function transcribe(event) {
    event.preventDefault();
    clearError();
    if (!chosen) {
      showError("Choose, drop or record an audio file first.");
      return;
    }
    const headers = authHeaders();
    const file = chosen;
    $("submit").disabled = true;
    $("live-text").textContent = "";
    $("live-text").hidden = false;
    $("viewer").hidden = true;
    status("Sending " + (file.name || "the recording") + "...");
    let body;
    try {
      body = await formData();
    } catch (error) {
      showError(error.message);
      status("");
      $("live-text").hidden = true;
      $("submit").disabled = false;
      return;
    }
    try {
      const response = await fetch("/v1/audio/transcriptions", { method: "POST", headers, body });
      if (!response.ok) {
        const error = await apiError(response);
        showError(error.text);
        status("");
        if (error.status === 401) {
          sessionStorage.removeItem(KEY);
          askForKey();
        }
        return;
      }
      status("Transcribing: the text arrives as it is decoded, then the speakers.");
      for await (const { name, payload } of events(response)) {
        if (name === "transcript.text.delta") {
          $("live-text").textContent += payload.delta;
        } else if (name === "error") {
          showError("Error (" + payload.error.code + "): " + payload.error.message);
          status("");
        } else if (name === "transcript.text.done") {
          $("live-text").hidden = true;
          const viewer = window.WhosaidViewer.show(payload.view, {
            audioSrc: URL.createObjectURL(file), fileName: (file.name || "recording").replace(/\.[^.]*$/, ""),
          });
          viewer.setNames($("names").value.split(","));
          const speakers = viewer.speakers.length;
          status("Done: " + payload.view.segments.length + " segments" + (speakers ? ", " + speakers + " speakers." : "."));
        }
      }
    } catch (error) {
      showError("The server could not be reached: " + error.message);
      status("");
    } finally {
      $("submit").disabled = false;
    }
  }

  async function record() {
    const button = $("record");
    if (recorder) {
      recorder.stop();
      return;
    }
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const parts = [];
      recorder = new MediaRecorder(stream);
      recorder.ondataavailable = (event) => parts.push(event.data);
      recorder.onstop = () => {
        stream.getTracks().forEach((track) => track.stop());
        const blob = new Blob(parts, { type: recorder.mimeType || "audio/webm" });
        recorder = null;
        button.textContent = "Record from the microphone";
        button.setAttribute("aria-pressed", "false");
        choose(new File([blob], "recording.webm", { type: blob.type }), "Recorded: ready to transcribe.");
      };
      recorder.start();
      button.textContent = "Stop recording";
      button.setAttribute("aria-pressed", "true");
      status("Recording...");
    } catch (error) {
      showError("The microphone is not available: " + error.message);
    }
  }


  // ---- Live captions -------------------------------------------------------------------------
  const LIVE_RATE = 24000;
  let live = null;  // the running session: socket, audio graph, captured samples, turns

  function socketUrl() {
    const url = new URL("/v1/realtime", window.location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("intent", "transcription");
    const key = sessionStorage.getItem(KEY);
    if (key) url.searchParams.set("api_key", key);
    return url.toString();
  }

  function sessionUpdate() {
    const transcription = { model: "whisper-1" };
    const language = $("language").value.trim();
    if (language) transcription.language = language;
    return {
      type: "session.update",
      session: {
        type: "transcription",
        audio: {
          input: {
            format: { type: "audio/pcm", rate: LIVE_RATE },
            transcription,
            turn_detection: { type: "server_vad", silence_duration_ms: 500 },
          },
        },
      },
    };
  }

  function base64Pcm(floats) {
    const bytes = new Uint8Array(floats.length * 2);
    const view = new DataView(bytes.buffer);
    for (let i = 0; i < floats.length; i++) {
      const v = Math.max(-1, Math.min(1, floats[i]));
      view.setInt16(2 * i, v < 0 ? v * 0x8000 : v * 0x7fff, true);
    }
    let text = "";
    for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return { b64: btoa(text), bytes };
  }

  // The captured audio as a WAV file, for the viewer's player and downloads.
  function wavBlob(parts) {
    const size = parts.reduce((total, part) => total + part.length, 0);
    const header = new DataView(new ArrayBuffer(44));
    const text = (offset, value) => { for (let i = 0; i < value.length; i++) header.setUint8(offset + i, value.charCodeAt(i)); };
    text(0, "RIFF"); header.setUint32(4, 36 + size, true); text(8, "WAVE"); text(12, "fmt ");
    header.setUint32(16, 16, true); header.setUint16(20, 1, true); header.setUint16(22, 1, true);
    header.setUint32(24, LIVE_RATE, true); header.setUint32(28, LIVE_RATE * 2, true);
    header.setUint16(32, 2, true); header.setUint16(34, 16, true); text(36, "data"); header.setUint32(40, size, true);
    return new Blob([header, ...parts], { type: "audio/wav" });
  }

  // The session so far in the viewer's shape: a turn's speaker parts when the server diarizes,
  // else the turn itself (no speaker).
  function liveView(session) {
    const segments = [], turns = [];
    for (const turn of session.order.map((id) => session.turns[id])) {
      if (!turn.done) continue;
      const parts = turn.parts.length ? turn.parts : [{ speaker: null, start: turn.start, end: turn.end, text: turn.text }];
      for (const part of parts) {
        if (!part.text.trim()) continue;
        segments.push({ speaker: part.speaker, start: part.start, end: part.end, words: [[" " + part.text.trim(), part.start, part.end]] });
        if (part.speaker !== null) turns.push({ speaker: part.speaker, start: part.start, end: part.end });
      }
    }
    const duration = session.samples / LIVE_RATE;
    return { duration, language: $("language").value.trim() || null, turns, segments, identities: [], warnings: [] };
  }

  function showLive(session, audioSrc) {
    const view = liveView(session);
    if (!view.segments.length) return;
    const viewer = window.WhosaidViewer.show(view, { audioSrc: audioSrc || "", fileName: "live-captions" });
    viewer.setNames($("names").value.split(","));
  }

  function liveTurn(session, itemId) {
    if (!session.turns[itemId]) {
      session.turns[itemId] = { text: "", start: 0, end: 0, parts: [], done: false };
      session.order.push(itemId);
    }
    return session.turns[itemId];
  }

  function onLiveEvent(session, event) {
    const type = event.type;
    if (type === "input_audio_buffer.speech_started") {
      liveTurn(session, event.item_id).start = event.audio_start_ms / 1000;
      status("Listening: someone is speaking...");
    } else if (type === "input_audio_buffer.speech_stopped") {
      liveTurn(session, event.item_id).end = event.audio_end_ms / 1000;
    } else if (type === "conversation.item.input_audio_transcription.delta") {
      const turn = liveTurn(session, event.item_id);
      turn.text += event.delta;
      $("live-text").textContent = turn.text;
    } else if (type === "conversation.item.input_audio_transcription.segment") {
      liveTurn(session, event.item_id).parts.push({ speaker: event.speaker, start: event.start, end: event.end, text: event.text });
    } else if (type === "conversation.item.input_audio_transcription.completed") {
      const turn = liveTurn(session, event.item_id);
      turn.text = event.transcript;
      turn.done = true;
      $("live-text").textContent = "";
      showLive(session);
      status("Listening: " + session.order.filter((id) => session.turns[id].done).length + " turns so far.");
    } else if (type === "conversation.item.input_audio_transcription.failed" || type === "error") {
      showError("Error (" + event.error.code + "): " + event.error.message);
    }
    if (session.stopping && session.order.every((id) => session.turns[id].done)) finishLive(session);
  }

  function finishLive(session) {
    if (session.finished) return;
    session.finished = true;
    clearTimeout(session.timer);
    if (session.socket.readyState <= 1) session.socket.close(1000);
    $("live-text").hidden = true;
    const audio = URL.createObjectURL(wavBlob(session.parts));
    showLive(session, audio);
    const done = session.order.filter((id) => session.turns[id].done).length;
    status("Live session ended: " + done + " turns; download it below.");
    $("live").textContent = "Live captions";
    $("live").setAttribute("aria-pressed", "false");
    $("live").disabled = false;
    live = null;
  }

  function stopLive() {
    const session = live;
    session.stopping = true;
    $("live").disabled = true;
    session.stream.getTracks().forEach((track) => track.stop());
    session.processor.disconnect();
    session.context.close();
    status("Finishing the last turn...");
    if (session.socket.readyState === 1) session.socket.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
    // A turn the server never completes (the socket dropped) does not hold the page forever.
    session.timer = setTimeout(() => finishLive(session), 60000);
    if (session.order.every((id) => session.turns[id].done)) setTimeout(() => finishLive(session), 2000);
  }

  async function startLive() {
    clearError();
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true } });
    } catch (error) {
      showError("The microphone is not available: " + error.message);
      return;
    }
    const context = new AudioContext({ sampleRate: LIVE_RATE });
    const source = context.createMediaStreamSource(stream);
    const processor = context.createScriptProcessor(4096, 1, 1);
    const socket = new WebSocket(socketUrl());
    const session = { socket, stream, context, processor, parts: [], samples: 0, turns: {}, order: [], stopping: false };
    live = session;
    socket.onopen = () => socket.send(JSON.stringify(sessionUpdate()));
    socket.onmessage = (message) => onLiveEvent(session, JSON.parse(message.data));
    socket.onclose = (event) => {
      if (!session.stopping && !session.finished) {
        showError("The live session was closed by the server (" + event.code + (event.reason ? ": " + event.reason : "") + ").");
        stopLive();
      }
      if (session.stopping) finishLive(session);
    };
    processor.onaudioprocess = (event) => {
      if (session.stopping || socket.readyState !== 1) return;
      const { b64, bytes } = base64Pcm(event.inputBuffer.getChannelData(0));
      session.parts.push(bytes);
      session.samples += bytes.length / 2;
      socket.send(JSON.stringify({ type: "input_audio_buffer.append", audio: b64 }));
    };
    source.connect(processor);
    processor.connect(context.destination);
    $("live").textContent = "Stop live captions";
    $("live").setAttribute("aria-pressed", "true");
    $("live-text").textContent = "";
    $("live-text").hidden = false;
    status("Listening...");
  }

  function toggleLive() {
    if (live) stopLive(); else startLive();
  }

  const drop = $("drop-zone");
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    if (event.dataTransfer.files.length) choose(event.dataTransfer.files[0]);
  });
  $("file").addEventListener("change", () => { if ($("file").files.length) choose($("file").files[0]); });
  $("record").addEventListener("click", record);
  $("live").addEventListener("click", toggleLive);
  $("voice-file").addEventListener("change", () => {
    for (const file of $("voice-file").files) addVoice(file);
    $("voice-file").value = "";
  });
  $("upload-form").addEventListener("submit", transcribe);
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, $("api-key").value);
    $("api-key").value = "";
    clearError();
    ready();
  });
  if (needsKey && !sessionStorage.getItem(KEY)) askForKey(); else ready();
})();
