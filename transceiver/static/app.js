// rtcedge demo page: one WHIP session with a sendrecv audio transceiver (and the camera with
// ?video=1) and an "events" data channel. No framework, no build step. The server answers with a single host candidate (the
// relay's public address) and ignores ours, so the offer is sent at once, without trickle.
// When the transceiver is scaled down it asks the page to move ({"type": "session.migrate"} on
// the data channel): the page re-offers the same microphone track with the resume token and
// switches to the new connection once it carries audio (docs/transceiver.md, "Moving calls on
// scale-down").
// A page off loopback over plain http is no secure context: browsers then give it no
// microphone (navigator.mediaDevices is undefined), and the page says so in words, and what to
// do, instead of failing with a TypeError. The header names the backend the server says it has
// (GET /page.json). A call that fails, or ends, leaves Talk ready again and says how it ended.
// window.rtcedge is the hook the browser test (tests/transceiver/browser_harness.py) reads.
"use strict";

(() => {
  const WHIP_URL = "/whip"; // relative to this page's origin: works from any host
  const TICK_MS = 1000; // stats refresh and ping period
  const MAX_MESSAGES = 50; // kept for stats(); the page shows the newest few
  const SHOWN_MESSAGES = 8;
  const RESUME_HEADER = "X-Rtcedge-Resume"; // the resume token of an offer that moves a call
  const MAX_RESUME_ATTEMPTS = 20; // resume offers of one move (503s from draining pods retried)
  const SWITCH_AFTER_PACKETS = 10; // audio packets the new connection must carry first
  const MAX_MIGRATIONS = 20; // kept for state()
  // Chrome measures a remote track's audio (audioLevel, totalAudioEnergy) after the volume of
  // the element playing it: none, muted or volume 0 all read as silence. While a move waits
  // for audio, the new connection plays at this volume (-40 dB) under the old one.
  const STANDBY_VOLUME = 0.01;

  const $ = (id) => document.getElementById(id);
  const ui = {
    backend: $("backend"),
    notice: $("notice"),
    ended: $("ended"),
    talk: $("talk"),
    hangup: $("hangup"),
    pill: $("pill"),
    error: $("error"),
    pcState: $("pc-state"),
    iceState: $("ice-state"),
    rtt: $("rtt"),
    remoteAddr: $("remote-addr"),
    sent: $("sent"),
    received: $("received"),
    micLevel: $("mic-level"),
    echoLevel: $("echo-level"),
    dcState: $("dc-state"),
    messages: $("messages"),
    audio: $("remote-audio"),
    token: $("token"),
  };
  // A WHIP token (static, or short-lived and signed by the app's backend): from the field, which
  // ?token= in this page's address fills. Sent on every WHIP request, the DELETEs included.
  const query = new URLSearchParams(window.location.search);
  ui.token.value = query.get("token") || "";
  // ?video=1: also ask for the camera and offer it, as a video app's page does; the transceiver
  // answers its m-line inactive, so the call is audio-only (docs/transceiver.md, "Offers with
  // video"). ?bundle=balanced (browsers' default) or max-compat: that policy, not max-bundle.
  const offerVideo = query.get("video") === "1";
  const BUNDLE_POLICIES = ["balanced", "max-bundle", "max-compat"];
  const asked = query.get("bundle");
  const bundlePolicy = BUNDLE_POLICIES.includes(asked) ? asked : "max-bundle";

  function authorization() {
    const token = ui.token.value.trim();
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  // The one session of this page; null when idle.
  let session = null;
  // Kept after hang-up so the test (and the reader) see how the last call ended.
  let last = { connectionState: "new", iceConnectionState: "new" };
  let error = null;
  let messages = [];
  let dcRoundTripMs = null;
  let hangupStatus = null; // HTTP status of the last hang-up's DELETE
  // How the last call ended: {reason, failed, connected, durationMs} (see endCall); null before.
  let ended = null;
  const microphoneProblem = whyNoMicrophone();
  // How each move went: {outcome, statuses, ms, marks, gapMs} (see migrate).
  let migrations = [];

  function showError(text) {
    error = text;
    ui.error.textContent = text;
    ui.error.hidden = !text;
  }

  function setPill(state) {
    ui.pill.textContent = state;
    ui.pill.dataset.state = state;
  }

  function renderStates() {
    const pc = session && session.pc;
    const conn = pc ? pc.connectionState : last.connectionState;
    const ice = pc ? pc.iceConnectionState : last.iceConnectionState;
    ui.pcState.textContent = conn;
    ui.iceState.textContent = ice;
    setPill(session ? (session.connecting && conn === "new" ? "connecting" : conn) : "idle");
    ui.talk.disabled = !!session || !!microphoneProblem;
    ui.talk.textContent = !session ? "Talk" : conn === "connected" ? "Connected" : "Connecting…";
    ui.hangup.disabled = !session;
    const dc = session && session.dc;
    ui.dcState.textContent = dc ? dc.readyState : "closed";
  }

  // One event as the list shows it: its type first, then what it says in words or key=value
  // pairs. ``own``: the echo of this page's own ping (sent every second to time the round
  // trip), shown muted so that the server's own events stand out.
  function describeEvent(m) {
    const data = m.data;
    if (typeof data !== "object" || data === null || Array.isArray(data)) {
      return { type: "text", text: String(typeof data === "string" ? data : JSON.stringify(data)), own: false };
    }
    const inner = data.type === "echo" && data.event && typeof data.event === "object" ? data.event : null;
    if (inner && inner.type === "ping" && m.roundTripMs != null) {
      return { type: "ping", text: `echoed back in ${m.roundTripMs} ms`, own: true };
    }
    const fields = (o, skip) =>
      Object.entries(o)
        .filter(([k]) => k !== skip)
        .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
        .join("  ");
    if (inner) {
      return { type: `echo of ${inner.type || "an event"}`, text: fields(inner, "type"), own: false };
    }
    return { type: String(data.type || "event"), text: fields(data, "type"), own: false };
  }

  function renderMessages() {
    ui.messages.replaceChildren();
    // Consecutive echoes of our own pings are one line, with how many.
    const rows = [];
    for (const m of messages) {
      const shown = describeEvent(m);
      const prev = rows[rows.length - 1];
      if (shown.own && prev && prev.own) {
        prev.count += 1;
        prev.text = shown.text;
        prev.at = m.at;
      } else {
        rows.push({ ...shown, at: m.at, count: 1 });
      }
    }
    const newest = rows.slice(-SHOWN_MESSAGES).reverse();
    if (newest.length === 0) {
      const li = document.createElement("li");
      li.className = "muted empty";
      li.textContent = "Events from the server appear here, newest first.";
      ui.messages.append(li);
      return;
    }
    for (const row of newest) {
      const li = document.createElement("li");
      if (row.own) li.className = "own";
      const time = document.createElement("time");
      time.textContent = new Date(row.at).toLocaleTimeString();
      const type = document.createElement("span");
      type.className = "type";
      type.textContent = row.type;
      if (row.own) {
        const tag = document.createElement("span");
        tag.className = "tag";
        tag.textContent = row.count > 1 ? `this page's, ×${row.count}` : "this page's";
        type.append(tag);
      }
      const body = document.createElement("code");
      body.textContent = row.text;
      li.append(time, type, body);
      ui.messages.append(li);
    }
  }

  function onMessage(event) {
    let data = event.data;
    try {
      data = JSON.parse(event.data);
    } catch (_) {
      // not JSON: keep the text as it came
    }
    const m = { at: Date.now(), data, roundTripMs: null };
    messages.push(m);
    if (messages.length > MAX_MESSAGES) messages = messages.slice(-MAX_MESSAGES);
    const inner = data && data.type === "echo" ? data.event : null;
    if (inner && inner.type === "ping" && typeof inner.t === "number") {
      dcRoundTripMs = m.roundTripMs = Date.now() - inner.t;
    }
    if (data && data.type === "session.migrate" && session) migrate(session, data);
    renderMessages();
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // Our transceiver is being scaled down: offer the same microphone track again, with the
  // resume token, to the same WHIP URL (the load balancer picks another transceiver; a 503 from
  // a draining one is retried after its Retry-After, within the deadline); once the new
  // connection carries audio, listen to it, DELETE the old session and close the old
  // connection. If anything fails the page stays on its old call (which ends at the drain).
  // The record: ms from the ask to the switch; marks (ms since the ask): answerMs, audioMs (the
  // new connection carries audio), switchedMs; gapMs: how long the old connection had received
  // no audio when the page switched (the new one was carrying audio by then), the silence the
  // move put in what the caller hears, to within a packet.
  async function migrate(s, data) {
    if (s.moving || !s.stream || typeof data.resume_token !== "string") return;
    s.moving = true;
    const begun = performance.now();
    const deadline = begun + (Number(data.deadline_ms) || 0);
    const record = { outcome: "under way", statuses: [], ms: null, marks: {}, gapMs: null };
    const mark = (name) => {
      record.marks[name] = Math.round(performance.now() - begun);
    };
    migrations.push(record);
    if (migrations.length > MAX_MIGRATIONS) migrations = migrations.slice(-MAX_MIGRATIONS);
    const next = { pc: null, dc: null, stream: null };
    const standby = new Audio();
    standby.volume = STANDBY_VOLUME;
    try {
      const pc = new RTCPeerConnection({ iceServers: [], bundlePolicy });
      next.pc = pc;
      pc.addTransceiver(s.stream.getAudioTracks()[0], { direction: "sendrecv", streams: [s.stream] });
      next.dc = pc.createDataChannel("events");
      // Its events count from the start: the backend's session.started (resumed) comes first.
      next.dc.onmessage = onMessage;
      pc.ontrack = (event) => {
        next.stream = event.streams[0] || new MediaStream([event.track]);
        standby.srcObject = next.stream;
        standby.play().catch(() => {});
      };
      await pc.setLocalDescription(await pc.createOffer());
      let response = null;
      for (let attempt = 0; attempt < MAX_RESUME_ATTEMPTS; attempt++) {
        response = await fetch(WHIP_URL, {
          method: "POST",
          headers: {
            "Content-Type": "application/sdp",
            ...s.authorization,
            [RESUME_HEADER]: data.resume_token,
          },
          body: pc.localDescription.sdp,
        });
        record.statuses.push(response.status);
        if (response.status !== 503) break;
        const retry = Number(response.headers.get("Retry-After"));
        const waitMs = Number.isFinite(retry) ? retry * 1000 : 1000;
        if (performance.now() + waitMs >= deadline) break;
        await sleep(waitMs);
      }
      if (response.status !== 201) throw new Error(await httpError(response, "Move refused"));
      mark("answerMs");
      const location = response.headers.get("Location");
      await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
      if (!(await carriesAudio(pc, deadline))) throw new Error("Move: no audio on the new call");
      mark("audioMs");
      if (session !== s) throw new Error("Move: hung up meanwhile");
      const heard = await inboundAudio(s.pc);
      if (heard && heard.lastPacketReceivedTimestamp != null) {
        record.gapMs = Math.max(0, Math.round(heard.timestamp - heard.lastPacketReceivedTimestamp));
      }
      const old = { pc: s.pc, dc: s.dc, location: s.location };
      s.pc = pc;
      s.dc = next.dc;
      s.location = location ? new URL(location, response.url).href : null;
      wire(s, pc);
      if (next.stream) {
        ui.audio.srcObject = next.stream;
        ui.audio.play().catch(() => {});
      }
      record.outcome = "moved";
      mark("switchedMs");
      record.ms = record.marks.switchedMs;
      renderStates();
      if (old.location) {
        fetch(old.location, { method: "DELETE", headers: s.authorization }).catch(() => {});
      }
      if (old.dc) old.dc.close();
      if (old.pc) old.pc.close();
    } catch (e) {
      record.outcome = "failed";
      record.error = e.message || String(e);
      if (next.pc && (!session || session.pc !== next.pc)) next.pc.close();
    } finally {
      standby.srcObject = null;
      s.moving = false;
    }
  }

  // Whether the new connection carries audio before the deadline: packets whose decoded
  // energy is above silence (the echo of the microphone), or, close to the deadline, packets.
  async function carriesAudio(pc, deadline) {
    while (performance.now() < deadline) {
      const st = await inboundAudio(pc);
      const packets = (st && st.packetsReceived) || 0;
      const energy = (st && st.totalAudioEnergy) || 0;
      if (packets >= SWITCH_AFTER_PACKETS && (energy > 0 || deadline - performance.now() < 1000)) {
        return true;
      }
      await sleep(50);
    }
    return false;
  }

  // The connection's inbound audio stats (RTCInboundRtpStreamStats), or null before any.
  async function inboundAudio(pc) {
    let found = null;
    (await pc.getStats()).forEach((st) => {
      if (st.type === "inbound-rtp" && st.kind === "audio") found = st;
    });
    return found;
  }

  // One end of the selected candidate pair, or null when the report lacks it.
  function describeCandidate(candidate) {
    if (!candidate) return null;
    return {
      address: candidate.address ?? candidate.ip,
      port: candidate.port,
      candidateType: candidate.candidateType,
      protocol: candidate.protocol,
    };
  }

  // Reads the RTCStatsReport into the shape window.rtcedge.stats() promises.
  async function collectStats() {
    const out = {
      selectedLocal: null,
      selectedRemote: null,
      roundTripTimeS: null,
      inbound: {
        packetsReceived: 0,
        bytesReceived: 0,
        totalAudioEnergy: 0,
        audioLevel: 0,
        totalSamplesReceived: 0,
        concealedSamples: 0,
      },
      outbound: { packetsSent: 0, bytesSent: 0 },
      outboundVideo: { packetsSent: 0, bytesSent: 0 }, // ?video=1: none while answered inactive
      micLevel: 0,
      messages: messages.map((m) => m.data),
      dataChannelRoundTripMs: dcRoundTripMs,
      timings: session ? { ...session.timings } : last.timings || {},
    };
    const pc = session && session.pc;
    if (!pc) return out;
    const report = await pc.getStats();
    let pair = null;
    report.forEach((s) => {
      if (s.type === "transport" && s.selectedCandidatePairId) {
        pair = report.get(s.selectedCandidatePairId) || pair;
      }
    });
    if (!pair) {
      // Browsers without transport.selectedCandidatePairId: the nominated, succeeded pair.
      report.forEach((s) => {
        if (s.type === "candidate-pair" && (s.selected || (s.nominated && s.state === "succeeded"))) {
          pair = s;
        }
      });
    }
    if (pair) {
      out.roundTripTimeS = pair.currentRoundTripTime ?? null;
      out.selectedLocal = describeCandidate(report.get(pair.localCandidateId));
      out.selectedRemote = describeCandidate(report.get(pair.remoteCandidateId));
    }
    report.forEach((s) => {
      if (s.type === "inbound-rtp" && s.kind === "audio") {
        out.inbound = {
          packetsReceived: s.packetsReceived || 0,
          bytesReceived: s.bytesReceived || 0,
          totalAudioEnergy: s.totalAudioEnergy || 0,
          audioLevel: s.audioLevel || 0,
          totalSamplesReceived: s.totalSamplesReceived || 0,
          concealedSamples: s.concealedSamples || 0, // played out, but made up (loss, late)
        };
      } else if (s.type === "outbound-rtp" && s.kind === "audio") {
        out.outbound = { packetsSent: s.packetsSent || 0, bytesSent: s.bytesSent || 0 };
      } else if (s.type === "outbound-rtp" && s.kind === "video") {
        out.outboundVideo.packetsSent += s.packetsSent || 0;
        out.outboundVideo.bytesSent += s.bytesSent || 0;
      } else if (s.type === "media-source" && s.kind === "audio") {
        out.micLevel = s.audioLevel || 0;
      }
    });
    return out;
  }

  function formatBytes(n) {
    if (n < 1024) return `${n} B`;
    if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
    return `${(n / 1024 / 1024).toFixed(2)} MiB`;
  }

  async function tick() {
    const s = session;
    if (!s) return;
    if (s.dc && s.dc.readyState === "open") {
      s.dc.send(JSON.stringify({ type: "ping", t: Date.now() }));
    }
    let st;
    try {
      st = await collectStats();
    } catch (e) {
      return; // the session closed while we were reading
    }
    if (session !== s) return;
    const rtt = [];
    if (st.roundTripTimeS != null) rtt.push(`ICE ${(st.roundTripTimeS * 1000).toFixed(1)} ms`);
    if (dcRoundTripMs != null) rtt.push(`events ${dcRoundTripMs} ms`);
    ui.rtt.textContent = rtt.join(" · ") || "-";
    ui.remoteAddr.textContent = st.selectedRemote
      ? `${st.selectedRemote.address}:${st.selectedRemote.port}`
      : "-";
    ui.sent.textContent =
      `${st.outbound.packetsSent} packets · ${formatBytes(st.outbound.bytesSent)}`;
    ui.received.textContent =
      `${st.inbound.packetsReceived} packets · ${formatBytes(st.inbound.bytesReceived)}`;
    // audioLevel is linear 0..1; sqrt spreads quiet speech over a visible part of the bar.
    ui.micLevel.style.width = `${Math.min(100, Math.sqrt(st.micLevel) * 100)}%`;
    ui.echoLevel.style.width = `${Math.min(100, Math.sqrt(st.inbound.audioLevel) * 100)}%`;
  }

  async function httpError(response, what) {
    let reason = "";
    try {
      reason = (await response.text()).trim();
    } catch (_) {
      // no body
    }
    const status = `HTTP ${response.status}${response.statusText ? " " + response.statusText : ""}`;
    return `${what}: ${status}${reason ? " - " + reason : ""}`;
  }

  async function talk() {
    if (session) return;
    if (microphoneProblem) {
      showNotice(microphoneProblem);
      return;
    }
    showError(null);
    showEnded(null);
    messages = [];
    dcRoundTripMs = null;
    hangupStatus = null;
    migrations = [];
    renderMessages();
    const started = performance.now();
    const s = {
      pc: null,
      dc: null,
      stream: null,
      location: null,
      connecting: true,
      timer: null,
      authorization: {},
      connectedAt: null, // performance.now() when it connected: the call's duration from there
      startedAt: started,
    };
    // Milliseconds since Talk, to a tenth (also performance marks "rtcedge:<name>"): the
    // browser test's --repeat reads POST -> answer and answer -> connected from them.
    s.timings = {};
    const mark = (name) => {
      s.timings[name] = Math.round((performance.now() - started) * 10) / 10;
      performance.mark(`rtcedge:${name}`);
    };
    session = s;
    renderStates();
    try {
      try {
        s.stream = await navigator.mediaDevices.getUserMedia({ audio: true, video: offerVideo });
      } catch (e) {
        const what = offerVideo ? "Camera and microphone" : "Microphone";
        throw new Error(`${what}: ${e.name}: ${e.message}`);
      }
      mark("microphoneMs");
      if (session !== s) return; // hung up meanwhile
      const pc = new RTCPeerConnection({ iceServers: [], bundlePolicy });
      s.pc = pc;
      pc.addTransceiver(s.stream.getAudioTracks()[0], {
        direction: "sendrecv",
        streams: [s.stream],
      });
      for (const track of s.stream.getVideoTracks()) {
        pc.addTransceiver(track, { direction: "sendrecv", streams: [s.stream] });
      }
      s.dc = pc.createDataChannel("events");
      s.mark = mark;
      pc.ontrack = (event) => {
        if (event.track.kind !== "audio") return; // the page plays the echo only
        ui.audio.srcObject = event.streams[0] || new MediaStream([event.track]);
        ui.audio.play().catch(() => {}); // autoplay may wait for the element; not an error
      };
      wire(s, pc);

      await pc.setLocalDescription(await pc.createOffer());
      const headers = { "Content-Type": "application/sdp", ...authorization() };
      s.authorization = authorization(); // the DELETE uses the token this session started with
      let response;
      mark("postMs");
      try {
        response = await fetch(WHIP_URL, {
          method: "POST",
          headers,
          body: pc.localDescription.sdp,
        });
      } catch (e) {
        throw new Error(`Could not reach ${WHIP_URL}: ${e.message}`);
      }
      mark("answerMs");
      if (response.status !== 201) throw new Error(await httpError(response, "Offer refused"));
      const location = response.headers.get("Location");
      if (location) s.location = new URL(location, response.url).href;
      const answer = await response.text();
      if (session !== s) {
        // hung up while the offer was in flight: end the session we just made
        if (s.location) {
          fetch(s.location, { method: "DELETE", headers: s.authorization }).catch(() => {});
        }
        return;
      }
      await pc.setRemoteDescription({ type: "answer", sdp: answer });
      mark("answerAppliedMs");
      s.connecting = false;
      s.timer = setInterval(tick, TICK_MS);
      renderStates();
    } catch (e) {
      if (session === s) {
        const why = e.message || String(e);
        await endCall(why, true);
        showError(why);
      }
    }
  }

  // The handlers of a session's current connection and data channel (the first, or the one a
  // move switched to): a connection the session has left no longer speaks for it.
  function wire(s, pc) {
    s.dc.onmessage = onMessage;
    s.dc.onopen = () => {
      if (s.timings.dataChannelOpenMs == null) s.mark("dataChannelOpenMs");
      renderStates();
    };
    s.dc.onclose = renderStates;
    pc.onconnectionstatechange = () => {
      if (session !== s || s.pc !== pc) return;
      if (pc.connectionState === "connected" && s.timings.connectedMs == null) {
        s.mark("connectedMs");
        s.connectedAt = performance.now();
      }
      if (pc.connectionState === "failed") {
        // The call is over: end it here too, so that Talk can start the next one.
        const why = `Connection failed (ICE ${pc.iceConnectionState}). Is the relay reachable?`;
        endCall(why, true).then(() => showError(why));
        return;
      }
      if (pc.connectionState === "closed") {
        endCall("the server ended the call", false);
        return;
      }
      renderStates();
    };
    pc.oniceconnectionstatechange = () => {
      const ice = pc.iceConnectionState;
      if (session === s && s.pc === pc && (ice === "connected" || ice === "completed")) {
        if (s.timings.iceConnectedMs == null) s.mark("iceConnectedMs");
      }
      renderStates();
    };
  }

  async function hangUp() {
    await endCall("you hung up", false);
  }

  // "m:ss" of a call's duration, or "N.N s" under a minute.
  function formatDuration(ms) {
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(1)} s`;
    const whole = Math.round(s);
    return `${Math.floor(whole / 60)}:${String(whole % 60).padStart(2, "0")}`;
  }

  function showEnded(record) {
    ended = record;
    if (!record) {
      ui.ended.hidden = true;
      ui.ended.textContent = "";
      return;
    }
    const how = record.connected
      ? `Call ended after ${formatDuration(record.durationMs)}: ${record.reason}.`
      : `Call failed before it connected: ${record.reason}.`;
    ui.ended.textContent = `${how} Press Talk to call again.`;
    ui.ended.dataset.failed = String(record.failed);
    ui.ended.hidden = false;
  }

  // Ends the session, however it ends (hang-up, a refusal, a failed connection, the server):
  // the server's session deleted, the connection closed, the figures cleared, Talk ready
  // again, and a line that says how long the call lasted and why it ended.
  async function endCall(reason, failed) {
    const s = session;
    if (!s) return;
    session = null;
    clearInterval(s.timer);
    const now = performance.now();
    const connected = s.connectedAt != null;
    const finalState = s.pc && s.pc.connectionState === "failed" ? "failed" : "closed";
    if (s.pc) {
      last = { connectionState: finalState, iceConnectionState: "closed", timings: s.timings };
    }
    showEnded({
      reason,
      failed,
      connected,
      durationMs: connected ? Math.round(now - s.connectedAt) : null,
    });
    renderStates();
    // End the server's session first (WHIP DELETE), then close here: a server that saw our DTLS
    // close first may already have forgotten the session and answer 404.
    let deleteError = null;
    if (s.location) {
      try {
        const response = await fetch(s.location, {
          method: "DELETE",
          headers: s.authorization,
          signal: AbortSignal.timeout(5000),
        });
        hangupStatus = response.status;
        // 404: the session had already ended on the server, which is what we want.
        if (!response.ok && response.status !== 404) {
          deleteError = await httpError(response, "Hang up");
        }
      } catch (e) {
        deleteError = `Hang up: could not reach ${s.location}: ${e.message}`;
      }
    }
    if (s.dc) s.dc.close();
    if (s.pc) s.pc.close();
    if (s.stream) s.stream.getTracks().forEach((t) => t.stop());
    ui.audio.srcObject = null;
    ui.micLevel.style.width = "0";
    ui.echoLevel.style.width = "0";
    for (const field of [ui.rtt, ui.remoteAddr, ui.sent, ui.received]) field.textContent = "-";
    renderStates();
    if (deleteError) showError(deleteError);
  }

  // Closing the tab ends the server's session too, instead of waiting for consent to expire.
  window.addEventListener("pagehide", () => {
    if (session && session.location) {
      fetch(session.location, {
        method: "DELETE",
        headers: session.authorization,
        keepalive: true,
      }).catch(() => {});
    }
  });

  // Why this page cannot have the microphone, in words, with what to do; null when it can.
  function whyNoMicrophone() {
    const port = window.location.port ? `:${window.location.port}` : "";
    if (!window.isSecureContext) {
      return (
        `The microphone is unavailable: this page came over plain http from ` +
        `${window.location.host}, and browsers give the microphone only to secure pages ` +
        `(https, or http on this machine itself as localhost). Open it over https: start the ` +
        `server with \`rtcedge up --https\` and open https://${window.location.hostname}${port}/ ` +
        `(accept the warning about its self-signed certificate after comparing the SHA-256 ` +
        `fingerprint it prints); or, on the machine that runs it, open http://localhost${port}/.`
      );
    }
    if (!navigator.mediaDevices || typeof navigator.mediaDevices.getUserMedia !== "function") {
      return (
        "The microphone is unavailable: this browser gives pages no access to it " +
        "(navigator.mediaDevices is missing). Try a current Chrome, Firefox or Safari, " +
        "outside an embedded view."
      );
    }
    return null;
  }

  function showNotice(text) {
    ui.notice.textContent = text || "";
    ui.notice.hidden = !text;
  }

  // What answers the caller, as the server says (GET /page.json): the header names it.
  const BACKENDS = {
    echo: "The backend is an echo: you hear your own voice come back.",
    websocket: "The backend is a voice service over WebSocket (rtcedge's backend protocol).",
    realtime: "The backend is a model server speaking the Realtime API: talk to it.",
    "media-streams": "The backend is a telephony bot (Media Streams): talk to it.",
    grpc: "The backend is a gRPC service (rtcedge's backend protocol).",
    plugin: "The backend is a plugin running inside the transceiver.",
  };
  let backend = null; // the server's /page.json, once it answered

  async function askBackend() {
    try {
      const response = await fetch("/page.json", { signal: AbortSignal.timeout(5000) });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      backend = await response.json();
    } catch (e) {
      ui.backend.textContent = "(The server did not say which backend answers.)";
      return;
    }
    let text = BACKENDS[backend.backend] || `The backend is ${backend.backend}.`;
    if (backend.backend === "echo" && backend.audio_format === "opus") {
      text = text.replace(".", " (your Opus packets, passed through).");
    }
    ui.backend.textContent = text;
    document.title = `rtcedge · talk to the ${backend.backend === "echo" ? "echo" : "backend"}`;
  }

  ui.talk.addEventListener("click", talk);
  ui.hangup.addEventListener("click", hangUp);
  showNotice(microphoneProblem);
  renderStates();
  askBackend();

  window.rtcedge = {
    state: () => {
      const pc = session && session.pc;
      return {
        connectionState: pc ? pc.connectionState : session ? "new" : last.connectionState,
        iceConnectionState: pc ? pc.iceConnectionState : session ? "new" : last.iceConnectionState,
        error,
        hangupStatus,
        ended: ended ? { ...ended } : null,
        talkEnabled: !ui.talk.disabled,
        notice: microphoneProblem,
        backend,
        location: session ? session.location : null,
        migrations: migrations.map((m) => ({ ...m })),
      };
    },
    stats: collectStats,
    // The current connection's offer and answer (SDP), or nulls: what the browser test reads.
    descriptions: () => {
      const pc = session && session.pc;
      const sdp = (d) => (d ? d.sdp : null);
      return { offer: sdp(pc && pc.localDescription), answer: sdp(pc && pc.remoteDescription) };
    },
    talk,
    hangUp,
  };
})();
