// SPDX-License-Identifier: MIT
// beaconmux dashboard: polls /beaconmux/v1/dashboard once a second (never two requests at
// once) and renders it. Everything from the server goes into the page as text (textContent),
// never as markup.
"use strict";

const POLL_MS = 1000;
// relative to the page: /ui/ reads /beaconmux/v1/dashboard, and a page served under a prefix
// (a network's /{id}/ui/, a path key) reads the document under the same prefix
const DOC = location.pathname.replace(/ui\/[^/]*$/, "") + "beaconmux/v1/dashboard";

// A perceptually uniform ramp whose lightness grows monotonically (viridis): readable by
// colour-blind readers and in grey. Dark = the head arrived early, light = late.
const RAMP = ["#440154", "#482878", "#3e4a89", "#31688e", "#26828e", "#1f9e89", "#35b779",
  "#6ece58", "#b5de2b", "#fde725"];

const GOOD = new Set(["ready"]);
const BAD = new Set(["forked", "unreachable", "wrong-network"]);
const MARK_TEXT = {missed: "\u00d7", off_chain: "F", empty: "\u00b7", pending: "", unknown: "", ok: ""};
const MARK_WORD = {missed: "missed", off_chain: "another block (fork or re-orged)", empty: "empty slot",
  pending: "not judged yet", unknown: "chain unknown", ok: "canonical block"};

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}

function shortRoot(r) {
  return r ? r.slice(0, 10) + "\u2026" + r.slice(-4) : "\u2013";
}

function stateClass(s) {
  return GOOD.has(s) ? "good" : BAD.has(s) ? "bad" : "warn";
}

function cell(label, content, cls) {
  const td = el("td", {"data-label": label, class: cls || ""});
  td.append(content);
  return td;
}

function fmtMs(v) {
  return v === null || v === undefined ? "\u2013" : `${Math.round(v)} ms`;
}

// ---- the cluster ------------------------------------------------------------------------

function renderCluster(d) {
  const st = d.status || {};
  const head = st.cluster_head;
  const facts = [
    ["Current slot", d.slot !== undefined ? d.slot : "\u2013"],
    ["Cluster head", head ? `slot ${head.slot}` : "none yet"],
    ["Head root", head ? shortRoot(head.root) : "\u2013"],
    ["Head age", head ? `${Math.max(0, Math.round((d.now_ms - head.since_ms) / 1000))} s` : "\u2013"],
    ["First announced by", head && head.node ? head.node : "\u2013"],
    ["Finalized epoch", d.finalized_epoch !== undefined ? d.finalized_epoch : "not yet"],
    ["Head quorum", st.tracker ? st.tracker.quorum : "\u2013"],
    ["Ready nodes", `${(st.upstreams || []).filter((u) => u.state === "ready").length} of ${(st.upstreams || []).length}`],
  ];
  const dl = document.getElementById("cluster-facts");
  dl.replaceChildren(...facts.map(([k, v]) => el("div", {}, el("dt", {text: k}), el("dd", {text: String(v)}))));
  document.getElementById("version").textContent = st.version || "";
}

// ---- the nodes ---------------------------------------------------------------------------

function renderNodes(d) {
  const ups = (d.status && d.status.upstreams) || [];
  const rows = ups.map((u) => {
    const read = u.read || {};
    const errRate = read.error_rate !== undefined ? `${(read.error_rate * 100).toFixed(1)} %` : "\u2013";
    const lat = u.latency_ms ? `${fmtMs(u.latency_ms.p50)} / ${fmtMs(u.latency_ms.p99)}` : "\u2013";
    const head = u.head ? `slot ${u.head.slot}${u.head.optimistic ? " (optimistic)" : ""}` : "none";
    const tr = el("tr", {class: "node-row", "data-node": u.id, "data-state": u.state});
    tr.append(
      cell("Node", el("span", {}, el("strong", {text: u.id}),
        el("span", {class: "small", text: `${u.client || "unknown"} ${u.version || ""}`}))),
      cell("State", el("span", {class: `state ${stateClass(u.state)}`, text: u.state})),
      cell("Why", el("span", {class: "small", text: u.reason || ""})),
      cell("Head", el("span", {text: head})),
      cell("Lag", el("span", {text: u.lag === null || u.lag === undefined ? "\u2013" : `${u.lag} slot${u.lag === 1 ? "" : "s"}`}), "num"),
      cell("Latency", el("span", {text: lat}), "num"),
      cell("Errors", el("span", {text: errRate}), "num"),
      cell("Breaker", el("span", {text: read.breaker || "\u2013"})));
    return tr;
  });
  document.querySelector("#node-table tbody").replaceChildren(...rows);
}

// ---- the heatmap -------------------------------------------------------------------------

function rampColour(ms, slotMs) {
  const span = Math.log1p(Math.max(slotMs, 1000) / 50);
  const t = Math.min(1, Math.max(0, Math.log1p(Math.max(ms, 0) / 50) / span));
  const i = Math.min(RAMP.length - 1, Math.floor(t * RAMP.length));
  return {bg: RAMP[i], fg: i < RAMP.length / 2 ? "#ffffff" : "#000000"};
}

function renderHeat(d) {
  const a = d.arrivals;
  const heat = document.getElementById("heat");
  if (!a) {
    heat.replaceChildren(el("p", {class: "hint", text: "No chain information yet."}));
    return;
  }
  const from = BigInt(a.from_slot), to = BigInt(a.to_slot);
  const n = Number(to - from) + 1;
  heat.style.gridTemplateColumns = `max-content repeat(${n}, var(--cell))`;
  const kids = [el("div", {class: "name", role: "columnheader", text: "slot"})];
  for (let i = 0; i < n; i++) {
    const s = from + BigInt(i);
    // a label every 8 slots keeps the header readable
    kids.push(el("div", {class: "slot-label", role: "columnheader", text: s % 8n === 0n ? String(s) : ""}));
  }
  for (const node of a.nodes) {
    kids.push(el("div", {class: "name", role: "rowheader", text: node.id}));
    node.cells.forEach((c, i) => {
      const slot = String(from + BigInt(i));
      const words = [`${node.id}, slot ${slot}`, MARK_WORD[c.m] || c.m];
      if (c.d !== null) words.push(`arrived ${c.d} ms into the slot`);
      // a head beaconmux learnt by asking the node has no arrival time
      else if (c.m === "ok" || c.m === "off_chain") words.push("seen when asked, arrival time unknown");
      if (c.o) words.push("optimistic");
      const div = el("div", {class: `cell m-${c.m}${c.o ? " opt" : ""}`, role: "cell",
        "data-node": node.id, "data-slot": slot, "data-mark": c.m, title: words.join(", "),
        "aria-label": words.join(", ")});
      div.textContent = c.o && c.m === "ok" ? "?" : MARK_TEXT[c.m] || "";
      if (c.d !== null && (c.m === "ok" || c.m === "off_chain")) {
        const col = rampColour(c.d, d.slot_ms || 12000);
        div.style.background = col.bg;
        div.style.color = col.fg;
      }
      kids.push(div);
    });
  }
  heat.replaceChildren(...kids);
  const scroller = document.getElementById("heat-scroll");
  scroller.scrollLeft = scroller.scrollWidth; // the newest slots in view on a phone
}

function renderScale(slotMs) {
  const sc = document.getElementById("heat-scale");
  if (sc.childElementCount) return;
  // the stops of a 12-s slot (100 ms, 0.5 s, 1 s, 4 s), scaled to this chain's slots
  const stops = [0, 100, 500, 1000, 4000, 12000].map((ms) => Math.round(ms * slotMs / 12000));
  sc.append(el("span", {text: "arrival:"}));
  for (const ms of stops) {
    const sw = el("span", {class: "sw"});
    sw.style.background = rampColour(ms, slotMs).bg;
    sc.append(sw, el("span", {text: ms >= 1000 ? `${ms / 1000} s` : `${ms} ms`}));
  }
}

// ---- the fork view -----------------------------------------------------------------------

function renderForks(d) {
  const ups = (d.status && d.status.upstreams) || [];
  const groups = new Map();
  for (const u of ups) {
    if (!u.head) continue;
    const g = groups.get(u.head.root) || {root: u.head.root, slot: u.head.slot, rel: new Set(), nodes: []};
    g.nodes.push(u.id);
    if (u.relation) g.rel.add(u.forked ? "off (forked)" : u.relation);
    groups.set(u.head.root, g);
  }
  const disagree = ups.some((u) => u.forked || u.relation === "off") ||
    new Set([...groups.values()].map((g) => g.slot)).size < groups.size;
  const sec = document.getElementById("forks");
  sec.hidden = !disagree;
  if (!disagree) return;
  const rows = [...groups.values()].sort((x, y) => Number(y.slot) - Number(x.slot)).map((g) =>
    el("tr", {class: "fork-row"}, cell("Head root", el("code", {text: shortRoot(g.root)})),
      cell("Slot", el("span", {text: String(g.slot)})),
      cell("Relation", el("span", {text: [...g.rel].join(", ") || "unknown"})),
      cell("Nodes", el("span", {text: g.nodes.join(", ")}))));
  document.querySelector("#fork-table tbody").replaceChildren(...rows);
}

// ---- the journal -------------------------------------------------------------------------

const VERDICT_TEXT = {correct: "\u2714 correct", wrong: "\u2716 wrong", missed: "\u2716 missed",
  unknown: "? unknown", pending: "\u2026 pending"};

function verdictSpan(v) {
  return el("span", {class: `verdict-${v}`, text: VERDICT_TEXT[v] || v});
}

function renderJournal(d) {
  const sum = d.summary;
  const p = document.getElementById("journal-summary");
  if (!sum) {
    p.textContent = "The duty journal is off (journal.slots: 0).";
    return;
  }
  const fin = sum.final, prov = sum.provisional;
  const judged = (c) => c.correct + c.wrong + c.missed;
  // every served read is judged two slots after its slot (provisional), then again once
  // finalized: the first count is the newest, the second the exact one for older slots
  p.replaceChildren(
    el("strong", {class: "votes-saved", text: String(prov.saved)}),
    " votes saved by having several nodes, ",
    el("strong", {class: "votes-saved-final", text: String(fin.saved)}),
    ` of them final (${prov.lost} lost). Head correct: ${prov.correct} of ${judged(prov)} ` +
    `judged, ${fin.correct} of ${judged(fin)} final.`);
  const rows = [];
  const slots = (d.journal && d.journal.slots) || [];
  for (const s of slots.slice().reverse()) {
    const judgedCell = s.stage === "open" ? "open" :
      `${s.stage}${s.own_block === false ? " (empty slot)" : ""}`;
    if (!s.entries.length) continue;
    for (const e of s.entries) {
      const tr = el("tr", {class: "journal-row", "data-slot": s.slot, "data-verdict": e.verdict});
      const first = e.first && e.first.node ? `${e.first.node}: ` : "";
      tr.append(
        cell("Slot", el("span", {text: s.slot})),
        cell("Judged", el("span", {text: judgedCell})),
        cell("Duty", el("span", {text: e.duty.replaceAll("_", " ")})),
        cell("Served by", el("span", {text: `${e.served.node || "beaconmux"} (${e.served.class})`})),
        cell("Verdict", verdictSpan(e.verdict)),
        cell("First node alone", el("span", {}, first, verdictSpan(e.first_verdict),
          e.saved ? el("span", {class: "saved", text: " \u2605 vote saved"}) : null,
          e.lost ? el("span", {class: "saved", text: " \u2716 vote lost"}) : null)),
        cell("Requests", el("span", {text: String(e.requests)}), "num"),
        cell("Race", el("span", {text: `${e.race_ms} ms`}), "num"));
      rows.push(tr);
    }
  }
  document.querySelector("#journal-table tbody").replaceChildren(...rows);
}

// ---- polling -----------------------------------------------------------------------------

function render(d) {
  renderCluster(d);
  renderNodes(d);
  renderScale(d.slot_ms || 12000);
  renderHeat(d);
  renderForks(d);
  renderJournal(d);
  document.body.dataset.rendered = String(d.now_ms);
}

async function poll() {
  const conn = document.getElementById("conn");
  const started = Date.now();
  try {
    const r = await fetch(DOC, {cache: "no-store"});
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    render(await r.json());
    conn.textContent = "live";
    conn.className = "conn live";
  } catch (err) {
    conn.textContent = `disconnected (${err.message}), retrying`;
    conn.className = "conn down";
  }
  setTimeout(poll, Math.max(0, POLL_MS - (Date.now() - started)));
}

poll();
