// The server's page (/ui): pick, drop or record a file, send it to the OpenAI route with
// stream=true, show the text as it arrives, then hand the transcript to the viewer (viewer.js).
// The API key, when the server wants one, is asked once and kept in this tab (sessionStorage).
// Known voices: (name, clip) pairs sent as known_speaker_names[] / known_speaker_references[]
// (the clips as data URLs); the server's own library (GET /v1/voices) is listed, read-only.
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
