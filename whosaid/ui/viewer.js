// whosaid's transcript viewer: one lane per speaker (overlapping turns visible), the transcript
// by speaker with the word being played highlighted, click a word or a turn to seek, rename a
// speaker in place, a speaker matched to a known voice shown with its similarity, download SRT/VTT/RTTM/JSON with the names given. The same script draws the
// server's page (/ui, fed by app.js) and the offline HTML file (fed by its embedded JSON).
//
// Long recordings: a segment's words become elements only while the segment is on screen
// (IntersectionObserver); off screen it is one text node. An hour is about a thousand segments.
"use strict";

(function () {
  const COLOURS = 10;
  const $ = (id) => document.getElementById(id);

  function clock(seconds) {
    const total = Math.max(0, Math.round(seconds * 1000));
    const h = Math.floor(total / 3600000), m = Math.floor(total / 60000) % 60;
    const s = Math.floor(total / 1000) % 60, ms = total % 1000;
    const two = (n) => String(n).padStart(2, "0");
    return { h, m, s, ms, short: (h ? h + ":" + two(m) : String(m)) + ":" + two(s),
      full: (sep) => two(h) + ":" + two(m) + ":" + two(s) + sep + String(ms).padStart(3, "0") };
  }

  // Index of the last element of the sorted `starts` at or before t; -1 when none.
  function lastAtOrBefore(starts, t) {
    let lo = 0, hi = starts.length - 1, found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (starts[mid] <= t) { found = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return found;
  }

  function el(tag, attributes, text) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  class Viewer {
    constructor(data, options) {
      this.data = data;
      this.fileName = options.fileName || "transcript";
      this.audio = $("audio");
      this.speakers = [];
      for (const segment of data.segments) this.addSpeaker(segment.speaker);
      for (const turn of data.turns) this.addSpeaker(turn.speaker);
      this.names = new Map(this.speakers.map((speaker) => [speaker, speaker]));
      // Speakers the server named after a known voice: speaker -> { name, similarity }.
      this.matches = new Map((data.identities || []).map((identity) => [identity.speaker, identity]));
      // Every word once, in order: [segment index, index in segment] and its start.
      this.wordStarts = [];
      this.wordPlace = [];
      data.segments.forEach((segment, s) => segment.words.forEach((word, w) => {
        this.wordStarts.push(word[1]);
        this.wordPlace.push([s, w]);
      }));
      this.spans = new Map();  // segment index -> its word elements, while on screen
      this.current = -1;
      if (options.audioSrc) this.audio.src = options.audioSrc;
      this.audio.hidden = !options.audioSrc;
      this.drawSpeakers();
      this.drawTimeline();
      this.drawTranscript();
      this.drawDownloads();
      this.onTime = () => this.follow(this.audio.currentTime);
      this.audio.addEventListener("timeupdate", this.onTime);
      this.audio.addEventListener("seeked", this.onTime);
      $("viewer").hidden = false;
    }

    // Before the next transcript takes the page: nothing of this one keeps listening.
    dispose() {
      this.audio.removeEventListener("timeupdate", this.onTime);
      this.audio.removeEventListener("seeked", this.onTime);
      if (this.observer) this.observer.disconnect();
      if (this.audio.src.startsWith("blob:")) URL.revokeObjectURL(this.audio.src);
    }

    addSpeaker(speaker) {
      if (speaker !== null && speaker !== undefined && !this.speakers.includes(speaker)) this.speakers.push(speaker);
    }

    colour(speaker) {
      const index = this.speakers.indexOf(speaker);
      return index < 0 ? "transparent" : "var(--s" + (index % COLOURS) + ")";
    }

    name(speaker) {
      return speaker === null || speaker === undefined ? "" : this.names.get(speaker);
    }

    rename(speaker, name) {
      this.names.set(speaker, name.trim() || speaker);
      document.querySelectorAll("[data-speaker]").forEach((node) => {
        if (node.dataset.speaker === speaker) node.textContent = this.name(speaker);
      });
      this.drawDownloads();
    }

    // Names in order of first speaking, for the speakers no known voice named.
    setNames(names) {
      const unnamed = this.speakers.filter((speaker) => !this.matches.has(speaker));
      names.forEach((name, index) => {
        if (index < unnamed.length && name.trim()) {
          const speaker = unnamed[index];
          this.rename(speaker, name);
          const input = document.querySelector('.speaker-name[data-for="' + CSS.escape(speaker) + '"]');
          if (input) input.value = this.name(speaker);
        }
      });
    }

    // " · 0.71" beside a speaker matched to a known voice; null for the others.
    similarity(speaker) {
      const match = this.matches.get(speaker);
      if (!match || typeof match.similarity !== "number") return null;
      return el("span", { class: "similarity", title: "sounds like the known voice " + match.name
        + " (cosine similarity " + match.similarity + ")" }, " \u00b7 " + match.similarity.toFixed(2));
    }

    drawSpeakers() {
      const box = $("speakers");
      box.replaceChildren();
      for (const speaker of this.speakers) {
        const label = el("label");
        label.append(el("span", { class: "swatch", style: "background:" + this.colour(speaker) }));
        const input = el("input", { class: "speaker-name", "data-for": speaker, "aria-label": "name of " + speaker });
        input.value = this.name(speaker);
        input.addEventListener("input", () => this.rename(speaker, input.value));
        label.append(input);
        const similarity = this.similarity(speaker);
        if (similarity) label.append(similarity);
        box.append(label);
      }
    }

    drawTimeline() {
      const box = $("timeline");
      box.replaceChildren();
      const duration = Math.max(this.data.duration, 1e-3);
      const place = (node, start, end) => {
        node.style.left = (100 * start / duration) + "%";
        node.style.width = (100 * (end - start) / duration) + "%";
      };
      box.hidden = this.speakers.length === 0;
      this.playheads = [];
      for (const speaker of this.speakers) {
        const lane = el("div", { class: "lane", role: "group" });
        const label = el("span", { class: "lane-label" });
        label.append(el("span", { "data-speaker": speaker }, this.name(speaker)));
        const similarity = this.similarity(speaker);
        if (similarity) label.append(similarity);
        lane.append(label);
        const track = el("div", { class: "track" });
        const others = this.data.turns.filter((turn) => turn.speaker !== speaker);
        for (const turn of this.data.turns.filter((turn) => turn.speaker === speaker)) {
          const when = clock(turn.start).short + " to " + clock(turn.end).short;
          const button = el("button", { type: "button", class: "turn", title: speaker + ", " + when,
            "aria-label": speaker + " " + when });
          place(button, turn.start, turn.end);
          button.style.backgroundColor = this.colour(speaker);
          button.addEventListener("click", () => this.seek(turn.start));
          track.append(button);
          // Where someone else talks at the same time: hatched over the turn.
          for (const other of others) {
            if (other.start < turn.end && turn.start < other.end) {
              const overlap = el("div", { class: "overlap", "aria-hidden": "true" });
              place(overlap, Math.max(turn.start, other.start), Math.min(turn.end, other.end));
              track.append(overlap);
            }
          }
        }
        const playhead = el("div", { class: "playhead", "aria-hidden": "true" });
        this.playheads.push(playhead);
        track.append(playhead);
        lane.append(track);
        box.append(lane);
      }
      this.movePlayhead(0);
    }

    drawTranscript() {
      const box = $("transcript");
      box.replaceChildren();
      this.observer = "IntersectionObserver" in window
        ? new IntersectionObserver((entries) => entries.forEach((entry) => this.visible(entry)), { rootMargin: "400px 0px" })
        : null;
      this.data.segments.forEach((segment, index) => {
        const row = el("div", { class: "segment", "data-index": String(index) });
        row.style.setProperty("--speaker", this.colour(segment.speaker));
        const who = el("button", { type: "button", class: "who", "aria-label": "play from " + clock(segment.start).short });
        who.append(el("span", { "data-speaker": segment.speaker || "" }, this.name(segment.speaker)));
        who.append(el("span", { class: "when" }, clock(segment.start).short));
        who.addEventListener("click", () => this.seek(segment.start));
        const text = el("p", { class: "text" });
        text.textContent = segment.words.map((word) => word[0]).join("").trim();
        row.append(who, text);
        box.append(row);
        if (this.observer) this.observer.observe(row); else this.expand(index, text);
      });
      box.onclick = (event) => {
        const word = event.target.closest(".w");
        if (word) this.seek(this.data.segments[+word.dataset.s].words[+word.dataset.w][1]);
      };
    }

    visible(entry) {
      const index = +entry.target.dataset.index;
      const text = entry.target.querySelector(".text");
      if (entry.isIntersecting && !this.spans.has(index)) this.expand(index, text);
      else if (!entry.isIntersecting && this.spans.has(index)) {
        this.spans.delete(index);
        text.textContent = this.data.segments[index].words.map((word) => word[0]).join("").trim();
      }
    }

    expand(index, text) {
      const nodes = [];
      const spans = this.data.segments[index].words.map((word, w) => {
        const space = word[0].length - word[0].trimStart().length;
        if (space && w > 0) nodes.push(word[0].slice(0, space));
        const span = el("span", { class: "w", "data-s": String(index), "data-w": String(w) }, word[0].slice(space));
        nodes.push(span);
        return span;
      });
      text.replaceChildren(...nodes);
      this.spans.set(index, spans);
      if (this.current >= 0) this.mark(this.current, true);
    }

    seek(seconds) {
      if (this.audio.src) this.audio.currentTime = seconds;
      this.follow(seconds);
    }

    follow(seconds) {
      this.movePlayhead(seconds);
      const index = lastAtOrBefore(this.wordStarts, seconds + 1e-6);
      if (index === this.current) return;
      if (this.current >= 0) this.mark(this.current, false);
      this.current = index;
      if (index >= 0) this.mark(index, true);
    }

    mark(index, on) {
      const [s, w] = this.wordPlace[index];
      const spans = this.spans.get(s);
      if (spans) spans[w].classList.toggle("now", on);
    }

    movePlayhead(seconds) {
      const left = (100 * seconds / Math.max(this.data.duration, 1e-3)) + "%";
      for (const playhead of this.playheads) playhead.style.left = left;
    }

    // Downloads, with the names as given on the page.
    label(speaker) {
      return (this.name(speaker) || "SPEAKER").replace(/\s+/g, "_");
    }

    cues() {
      return this.data.segments.map((segment) => ({
        start: segment.start, end: segment.end, speaker: segment.speaker,
        text: segment.words.map((word) => word[0]).join("").replace(/\s+/g, " ").trim(),
      }));
    }

    srt() {
      return this.cues().map((cue, i) => (i + 1) + "\n" + clock(cue.start).full(",") + " --> " + clock(cue.end).full(",")
        + "\n" + (cue.speaker ? this.name(cue.speaker) + ": " : "") + cue.text + "\n").join("\n");
    }

    vtt() {
      const escape = (text) => text.replace(/&/g, "&amp;").replace(/[<]/g, "&lt;").replace(/>/g, "&gt;");
      return "WEBVTT\n\n" + this.cues().map((cue) => clock(cue.start).full(".") + " --> " + clock(cue.end).full(".")
        + "\n" + (cue.speaker ? "<v " + escape(this.name(cue.speaker)) + ">" : "") + escape(cue.text) + "\n").join("\n");
    }

    rttm() {
      const uri = this.fileName.replace(/\s+/g, "_") || "audio";
      return this.data.turns.map((turn) => "SPEAKER " + uri + " 1 " + turn.start.toFixed(3) + " "
        + (turn.end - turn.start).toFixed(3) + " <NA> <NA> " + this.label(turn.speaker) + " <NA> <NA>\n").join("");
    }

    json() {
      const named = (speaker) => (speaker === null ? null : this.name(speaker));
      return JSON.stringify({
        duration: this.data.duration, language: this.data.language,
        turns: this.data.turns.map((turn) => ({ ...turn, speaker: named(turn.speaker) })),
        segments: this.data.segments.map((segment) => ({ ...segment, speaker: named(segment.speaker) })),
        identities: (this.data.identities || []).map((identity) => ({ ...identity, speaker: named(identity.speaker) })),
        warnings: this.data.warnings,
      }, null, 2) + "\n";
    }

    drawDownloads() {
      const box = $("downloads");
      for (const link of box.querySelectorAll("a")) URL.revokeObjectURL(link.href);
      box.replaceChildren("Download: ");
      const formats = [["srt", "application/x-subrip"], ["vtt", "text/vtt"], ["json", "application/json"]];
      if (this.speakers.length) formats.splice(2, 0, ["rttm", "text/plain"]);
      for (const [format, type] of formats) {
        const blob = new Blob([this[format]()], { type });
        const link = el("a", { href: URL.createObjectURL(blob), download: this.fileName + "." + format }, format.toUpperCase());
        box.append(link, " ");
      }
    }
  }

  window.WhosaidViewer = {
    show(data, options) {
      if (window.whosaidViewer) window.whosaidViewer.dispose();
      window.whosaidViewer = new Viewer(data, options || {});
      return window.whosaidViewer;
    },
  };

  // The offline file: its transcript is embedded, its audio beside it or inside it.
  const embedded = $("whosaid-data");
  if (embedded) {
    const data = JSON.parse(embedded.textContent);
    window.WhosaidViewer.show(data, { audioSrc: document.body.dataset.audio, fileName: document.title });
  }
})();
