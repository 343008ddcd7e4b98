// A voice agent over OpenAI's Realtime WebRTC flow, as OpenAI documents it for browsers:
//   pc = new RTCPeerConnection(); pc.addTrack(microphone); pc.createDataChannel("oai-events");
//   POST the offer's SDP to {base}/realtime/calls with the client secret as the bearer;
//   the answer's SDP is the body of the reply; events are JSON on the data channel.
// Nothing here is specific to rtcedge except the default base URL (this server's /v1).
// window.rtcedgeRealtime is the hook the browser test reads (events with their arrival times,
// and the received audio's energy over time from the inbound-rtp stats).
(() => {
  "use strict";

  const params = new URLSearchParams(window.location.search);
  const BASE = (params.get("base") || `${window.location.origin}/v1`).replace(/\/$/, "");
  const MAX_EVENTS = 2000; // kept for the hook; the list on the page shows the last 50
  const MAX_LEVELS = 6000; // 2 minutes of 20 ms samples
  const LEVEL_PERIOD_MS = 20;

  const $ = (id) => document.getElementById(id);
  const ui = {
    talk: $("talk"),
    hangup: $("hangup"),
    pill: $("pill"),
    key: $("key"),
    error: $("error"),
    transcript: $("transcript"),
    events: $("events"),
    dcState: $("dc-state"),
    audio: $("remote-audio"),
  };
  ui.key.value = params.get("key") || "";

  let call = null; // { pc, dc, stream, location, timer }
  const events = []; // { t, event }: t = performance.now() at arrival
  const levels = []; // { t, energy, duration }: cumulative inbound audio energy and seconds
  let error = null;

  function setState(state) {
    ui.pill.dataset.state = state;
    ui.pill.textContent = state;
  }

  function showError(message) {
    error = message;
    ui.error.textContent = message;
    ui.error.hidden = false;
  }

  function append(list, text, cls) {
    const empty = list.querySelector(".empty");
    if (empty) empty.remove();
    const li = document.createElement("li");
    li.textContent = text;
    if (cls) li.className = cls;
    list.appendChild(li);
    while (list.children.length > 50) list.firstChild.remove();
  }

  function onEvent(message) {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    if (events.length < MAX_EVENTS) events.push({ t: performance.now(), event });
    append(ui.events, event.type, event.type === "error" ? "error" : "");
    if (event.type === "conversation.item.input_audio_transcription.completed") {
      append(ui.transcript, `you: ${event.transcript}`, "you");
    } else if (event.type === "response.output_audio_transcript.done") {
      append(ui.transcript, `agent: ${event.transcript}`, "agent");
    } else if (event.type === "error") {
      append(ui.transcript, `error: ${event.error && event.error.message}`, "error");
    }
  }

  async function sampleLevels(pc) {
    let found = null;
    (await pc.getStats()).forEach((st) => {
      if (st.type === "inbound-rtp" && st.kind === "audio") found = st;
    });
    if (found && levels.length < MAX_LEVELS) {
      levels.push({
        t: performance.now(),
        energy: found.totalAudioEnergy || 0,
        duration: found.totalSamplesDuration || 0,
      });
    }
  }

  async function talk() {
    if (call) return;
    error = null;
    ui.error.hidden = true;
    ui.talk.disabled = true;
    setState("connecting");
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const pc = new RTCPeerConnection();
      call = { pc, stream, dc: null, location: null, timer: null };
      pc.ontrack = (e) => {
        ui.audio.srcObject = e.streams[0];
      };
      pc.addTrack(stream.getTracks()[0]);
      const dc = pc.createDataChannel("oai-events");
      call.dc = dc;
      dc.addEventListener("message", onEvent);
      dc.addEventListener("open", () => (ui.dcState.textContent = "open"));
      dc.addEventListener("close", () => (ui.dcState.textContent = "closed"));
      pc.onconnectionstatechange = () => {
        setState(pc.connectionState);
        if (pc.connectionState === "failed") showError("The call failed (ICE or DTLS).");
      };

      const offer = await pc.createOffer();
      await pc.setLocalDescription(offer);
      const response = await fetch(`${BASE}/realtime/calls`, {
        method: "POST",
        body: offer.sdp,
        headers: {
          Authorization: `Bearer ${ui.key.value.trim()}`,
          "Content-Type": "application/sdp",
        },
      });
      if (!response.ok) {
        throw new Error(`${response.status} ${(await response.text()).slice(0, 200)}`);
      }
      call.location = response.headers.get("Location");
      await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
      call.timer = setInterval(() => sampleLevels(pc).catch(() => {}), LEVEL_PERIOD_MS);
      ui.hangup.disabled = false;
    } catch (e) {
      showError(`Could not start the call: ${e.message || e}`);
      hangUp();
    }
  }

  // Send a client event on the data channel (the page's own controls, and the test).
  function send(event) {
    if (!call || !call.dc || call.dc.readyState !== "open") return false;
    call.dc.send(JSON.stringify(event));
    return true;
  }

  function hangUp() {
    const ending = call;
    call = null;
    ui.talk.disabled = false;
    ui.hangup.disabled = true;
    setState("idle");
    if (!ending) return;
    clearInterval(ending.timer);
    ending.pc.close();
    ending.stream.getTracks().forEach((t) => t.stop());
    if (ending.location) {
      const url = new URL(ending.location, BASE);
      fetch(url, { method: "DELETE", headers: { Authorization: `Bearer ${ui.key.value.trim()}` } })
        .catch(() => {});
    }
  }

  window.addEventListener("pagehide", hangUp);
  ui.talk.addEventListener("click", talk);
  ui.hangup.addEventListener("click", hangUp);

  window.rtcedgeRealtime = {
    state: () => ({
      connectionState: call ? call.pc.connectionState : "closed",
      dataChannel: call && call.dc ? call.dc.readyState : "closed",
      error,
    }),
    events: () => events.map((e) => ({ t: e.t, ...e.event })),
    levels: () => levels.slice(),
    now: () => performance.now(),
    talk,
    send,
    hangUp,
  };
})();
