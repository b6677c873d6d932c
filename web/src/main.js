// The studio's page: an editor per open spec (tabs), the figure and summary that follow it,
// the model's parameters as fields, a diff view and downloads. Everything it shows comes from
// the server, which runs what the command line runs (lbdl_dsl/serve/views.py); the page only
// lays it out and links the figure to the text.
import { basicSetup } from "codemirror";
import { EditorState } from "@codemirror/state";
import { EditorView, keymap } from "@codemirror/view";
import { setDiagnostics } from "@codemirror/lint";
import { indentWithTab } from "@codemirror/commands";
import { lbdl } from "./lbdl-mode.js";

// A keystroke is sent as soon as the editor has applied it (the changes of one event loop
// turn, a paste or an autoindent, are one check); while a check is on its way, newer text
// waits and only the newest is sent when its answer comes back. So a fast typist never
// queues stale checks, and a slow one waits for one check only, not for a fixed delay too.
const DEBOUNCE_MS = 0;
const $ = (sel) => document.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) node.append(c);
  return node;
}

// -- state ---------------------------------------------------------------------------------------
const tabs = []; // {path, state, saved, set, expand:Set, good, result, pending}
let current = null;
let files = [];
let sent = 0; // the id of the newest check asked for
let timer = null;
// When the last key went down, was sent, answered and its figure painted: what
// bench/studio.py reads to split a keystroke's time between the page and the server.
const timing = { key: 0, sent: 0, answered: 0, painted: 0, worker_ms: 0, latest: null };
window.addEventListener("keydown", () => { timing.key = performance.now(); }, true);
let inFlight = false; // a check is on its way (sent, not answered)
let waiting = false; // a newer text waits for that answer
let socket = null;
let socketReady = null;

const view = new EditorView({ parent: $("#editor") });

function extensions() {
  return [
    basicSetup,
    lbdl,
    EditorView.lineWrapping,
    keymap.of([
      indentWithTab,
      { key: "Mod-s", preventDefault: true, run: () => (save(), true) },
    ]),
    EditorView.updateListener.of((u) => {
      if (!current) return;
      if (u.docChanged) {
        current.state = u.state;
        markDirty();
        schedule();
      }
      if (u.selectionSet || u.docChanged) highlightCursor();
    }),
  ];
}

// -- the socket ----------------------------------------------------------------------------------
function connect() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
  socket = new WebSocket(url);
  socketReady = new Promise((resolve) => socket.addEventListener("open", resolve, { once: true }));
  socket.addEventListener("message", (e) => receive(JSON.parse(e.data)));
  socket.addEventListener("close", () => {
    setStatus("connection lost; reconnecting…");
    inFlight = false;
    setTimeout(() => { connect(); if (current) check(); }, 1000);
  });
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(check, DEBOUNCE_MS);
}

async function check() {
  if (!current) return;
  clearTimeout(timer);
  if (inFlight) { waiting = true; return; }
  inFlight = true;
  const tab = current;
  const id = ++sent;
  tab.pending = id;
  document.body.dataset.checking = "1";
  await socketReady;
  timing.sent = performance.now();
  socket.send(JSON.stringify({
    id, path: tab.path, text: tab.state.doc.toString(), set: tab.set, expand: [...tab.expand],
  }));
}

function receive(result) {
  timing.answered = performance.now();
  timing.worker_ms = result.worker_ms;
  if (result.id === sent) inFlight = false;
  if (waiting && !inFlight) { waiting = false; check(); }
  const tab = tabs.find((t) => t.pending === result.id);
  if (!tab) return; // an answer to a text since changed again
  tab.result = result;
  if (result.ok) tab.good = result;
  if (result.id === sent && !waiting) delete document.body.dataset.checking;
  if (tab === current) show(tab);
}

// -- showing a result ----------------------------------------------------------------------------
function show(tab) {
  const result = tab.result;
  const good = tab.good;
  const figure = $("#figure");
  if (good && figure.dataset.svgOf !== `${tab.path}#${good.id}`) {
    figure.innerHTML = good.svg;
    const shownFor = timing.key;
    requestAnimationFrame(() => {
      timing.painted = performance.now();
      const { latest, ...parts } = timing;
      timing.latest = { ...parts, key: shownFor, ms: timing.painted - shownFor };
    });
    figure.dataset.svgOf = `${tab.path}#${good.id}`;
    linkFigure(figure, good.boxes);
    highlightCursor();
  }
  if (!good) { figure.innerHTML = ""; delete figure.dataset.svgOf; }
  const broken = result && !result.ok;
  figure.classList.toggle("stale", Boolean(broken && good));
  $("#summary").innerHTML = good ? good.summary : "";
  const totals = good ? good.totals : null;
  $("#params-count").textContent = totals ? `${totals.params.toLocaleString("en-US")} params` : "";
  $("#macs-count").textContent = totals ? `${totals.macs.toLocaleString("en-US")} MACs` : "";
  showProblems(tab, broken ? result.diagnostics : []);
  if (good) showFields(tab, good.params);
  document.body.dataset.state = broken ? "error" : "ok";
  document.body.dataset.checked = String(result ? result.id : 0);
}

function showProblems(tab, diagnostics) {
  const box = $("#problems");
  box.replaceChildren(...diagnostics.map((d) => el("pre", { class: "problem" }, d.text || d.message)));
  box.hidden = diagnostics.length === 0;
  const doc = tab.state.doc;
  const marks = [];
  for (const d of diagnostics) {
    const s = d.span;
    if (!s || s.file !== tab.path || s.line > doc.lines) continue;
    const line = doc.line(s.line);
    const from = Math.min(line.from + s.column - 1, line.to);
    let to = from + 1;
    if (s.end_line <= doc.lines) {
      const endLine = doc.line(s.end_line);
      to = Math.min(endLine.from + s.end_column - 1, endLine.to);
    }
    if (to <= from) to = Math.min(from + 1, doc.length);
    const message = d.message + (d.hint ? `\nhint: ${d.hint}` : "");
    marks.push({ from, to: Math.max(to, from), severity: "error", message });
  }
  view.dispatch(setDiagnostics(view.state, marks));
  tab.state = view.state;
}

function showFields(tab, params) {
  const bar = $("#fields");
  const names = params.map((p) => p.name).join(",");
  if (bar.dataset.names !== names || bar.dataset.path !== tab.path) {
    bar.replaceChildren();
    for (const p of params) {
      const input = el("input", {
        type: p.kind === "number" ? "number" : "text",
        name: p.name,
        "data-param": p.name,
        placeholder: p.value === "" ? "free" : undefined, title: p.value === "" ? "left symbolic: give it a size" : undefined,
        oninput: () => {
          tab.set[p.name] = input.value;
          schedule();
        },
      });
      bar.append(el("label", {}, p.name, input));
    }
    if (params.length) {
      bar.append(el("button", {
        class: "quiet", title: "back to the spec's own values",
        onclick: () => { tab.set = {}; check(); bar.dataset.names = ""; },
      }, "reset"));
    }
    bar.dataset.names = names;
    bar.dataset.path = tab.path;
  }
  for (const p of params) {
    const input = bar.querySelector(`[data-param="${CSS.escape(p.name)}"]`);
    if (input && document.activeElement !== input) input.value = p.value;
  }
}

// -- the figure and the text ---------------------------------------------------------------------
function linkFigure(figure, boxes) {
  const xlink = "http://www.w3.org/1999/xlink";
  for (const g of figure.querySelectorAll("g.node, g.cluster")) {
    const title = g.querySelector(":scope > title");
    if (!title) continue;
    const id = title.textContent;
    title.remove();
    for (const a of g.querySelectorAll("a")) a.removeAttributeNS(xlink, "title");
    const info = boxes[id];
    if (!info) continue;
    g.dataset.id = id;
    g.classList.add("linked");
    if (info.opens) g.classList.add("opens", info.open ? "is-open" : "is-closed");
  }
}

function infoOf(g) {
  const tab = current;
  return tab && tab.good ? tab.good.boxes[g.dataset.id] : null;
}

function highlightCursor() {
  if (!current || !current.good) return;
  const line = view.state.doc.lineAt(view.state.selection.main.head).number;
  for (const g of document.querySelectorAll("#figure g.linked")) {
    const info = infoOf(g);
    const s = info && info.span;
    const on = Boolean(s && s.file === current.path && s.line <= line && line <= s.end_line
      && !(g.classList.contains("cluster") && s.line !== line));
    g.classList.toggle("current", on);
  }
}

async function goTo(span) {
  if (!span) return;
  if (span.file !== current.path) {
    if (!files.includes(span.file)) return;
    await open(span.file);
  }
  const doc = view.state.doc;
  const line = doc.line(Math.min(span.line, doc.lines));
  const pos = Math.min(line.from + span.column - 1, line.to);
  view.dispatch({ selection: { anchor: pos }, scrollIntoView: true });
  view.focus();
}

function setupFigure() {
  const figure = $("#figure");
  const tip = $("#tip");
  // A click on a box goes to its line; a click on a frame (its title or border) opens or closes
  // it; a double click on a block call or a composite box opens it (or closes its frame).
  const toggle = (info) => {
    if (info.open) current.expand.delete(info.opens);
    else current.expand.add(info.opens);
    check();
  };
  figure.addEventListener("click", (e) => {
    const g = e.target.closest("g.linked");
    const info = g && infoOf(g);
    if (!info) return;
    goTo(info.span);
    if (g.classList.contains("cluster") && info.opens) toggle(info);
  });
  figure.addEventListener("dblclick", (e) => {
    const g = e.target.closest("g.opens");
    const info = g && infoOf(g);
    if (!info || g.classList.contains("cluster")) return;
    e.preventDefault();
    window.getSelection()?.removeAllRanges();
    toggle(info);
  });
  figure.addEventListener("mousemove", (e) => {
    const g = e.target.closest("g.linked");
    const info = g && infoOf(g);
    if (!info) { tip.hidden = true; return; }
    tip.replaceChildren(...tipLines(g.dataset.id, info));
    tip.hidden = false;
    const { width, height } = tip.getBoundingClientRect();
    const left = e.clientX + 14 + width > innerWidth ? e.clientX - 14 - width : e.clientX + 14;
    const top = e.clientY + 14 + height > innerHeight ? e.clientY - 14 - height : e.clientY + 14;
    tip.style.left = `${Math.max(0, left)}px`;
    tip.style.top = `${Math.max(0, top)}px`;
  });
  figure.addEventListener("mouseleave", () => { tip.hidden = true; });
}

function tipLines(id, info) {
  const rows = [el("b", {}, `${info.op}`), el("span", { class: "path" }, ` ${id.replace(/^cluster:/, "")}`)];
  const add = (k, v) => { if (v) rows.push(el("div", {}, el("i", {}, k), ` ${v}`)); };
  add("in", (info.inputs || []).join(", "));
  add("out", info.output);
  add("params", info.params);
  add("MACs", info.macs);
  const hp = Object.entries(info.hp || {}).map(([k, v]) => `${k}=${v}`).join(" ");
  add("hyper-parameters", hp || info.hparams);
  if (info.span) add("line", `${info.span.file}:${info.span.line}`);
  if (info.opens) {
    const how = id.startsWith("cluster:") ? "click" : "double-click";
    rows.push(el("div", { class: "hint" }, `${how} to ${info.open ? "close" : "open"} ${info.opens}`));
  }
  return rows;
}

// -- tabs and files ------------------------------------------------------------------------------
function renderTabs() {
  const bar = $("#tabs");
  bar.replaceChildren(...tabs.map((t) => el("div", {
    class: `tab${t === current ? " active" : ""}${dirty(t) ? " dirty" : ""}`,
    "data-path": t.path,
    onclick: () => activate(t),
  }, t.path, el("button", {
    class: "close", title: "close", onclick: (e) => { e.stopPropagation(); closeTab(t); },
  }, "×"))));
}

function dirty(t) { return t.state.doc.toString() !== t.saved; }
function markDirty() { renderTabs(); }

function activate(tab) {
  if (current) current.state = view.state;
  current = tab;
  view.setState(tab.state);
  const figure = $("#figure");
  delete figure.dataset.svgOf;
  $("#fields").dataset.names = "";
  renderTabs();
  renderFiles();
  history.replaceState(null, "", `#${tab.path}`);
  if (tab.result) show(tab); else { figure.innerHTML = ""; check(); }
}

function newTab(path, text, saved) {
  const tab = {
    path, saved, set: {}, expand: new Set(), good: null, result: null, pending: 0,
    state: EditorState.create({ doc: text, extensions: extensions() }),
  };
  tabs.push(tab);
  activate(tab);
  return tab;
}

async function open(path) {
  const found = tabs.find((t) => t.path === path);
  if (found) { activate(found); return found; }
  const r = await fetch(`/api/file?path=${encodeURIComponent(path)}`);
  const body = await r.json();
  if (!r.ok) { setStatus(body.error); return null; }
  return newTab(path, body.text, body.text);
}

function closeTab(tab) {
  if (dirty(tab) && !confirm(`${tab.path} has unsaved changes; close it anyway?`)) return;
  const i = tabs.indexOf(tab);
  tabs.splice(i, 1);
  if (tab === current) {
    current = null;
    if (tabs.length) activate(tabs[Math.max(0, i - 1)]);
    else { view.setState(EditorState.create({ doc: "" })); $("#figure").innerHTML = ""; renderTabs(); }
  } else renderTabs();
}

async function loadFiles() {
  const r = await fetch("/api/files");
  const body = await r.json();
  files = body.files;
  $("#root").textContent = body.root;
  renderFiles();
  return body;
}

function renderFiles() {
  const list = $("#files");
  list.replaceChildren(...files.map((f) => el("li", {
    class: current && current.path === f ? "active" : "", "data-path": f, onclick: () => open(f),
  }, f)));
  const select = $("#diff-b");
  const keep = select.value;
  select.replaceChildren(...files.map((f) => el("option", { value: f }, f)));
  select.value = keep || (current ? current.path : files[0]);
}

async function save() {
  const tab = current;
  if (!tab) return;
  const text = tab.state.doc.toString();
  const r = await fetch("/api/file", {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ path: tab.path, text }),
  });
  const body = await r.json();
  if (!r.ok) { setStatus(`not saved: ${body.error}`); return; }
  tab.saved = text;
  renderTabs();
  setStatus(`saved ${tab.path} (${body.bytes.toLocaleString("en-US")} bytes)`);
  if (!files.includes(tab.path)) await loadFiles();
}

function newFile() {
  const name = prompt("name of the new spec (a path in the served folder)", "untitled.lbdl");
  if (!name) return;
  const path = name.endsWith(".lbdl") ? name : `${name}.lbdl`;
  const stem = path.split("/").pop().replace(/\.lbdl$/, "").replace(/[^\w]/g, "_");
  newTab(path, `model ${stem}(D=64):\n  input X: D\n  fc D\n  relu\n  fc 10\n  output Y\n`, null);
}

// -- diff and downloads --------------------------------------------------------------------------
function parseSettings(text) {
  const out = {};
  for (const item of text.split(/[\s,]+/).filter(Boolean)) {
    const [k, v] = item.split("=");
    if (k && v) out[k] = v;
  }
  return out;
}

async function diff() {
  const tab = current;
  if (!tab) return;
  const bPath = $("#diff-b").value;
  const bTab = tabs.find((t) => t.path === bPath);
  let bText = bTab ? bTab.state.doc.toString() : null;
  if (bText === null) {
    const r = await fetch(`/api/file?path=${encodeURIComponent(bPath)}`);
    bText = (await r.json()).text;
  }
  const body = {
    a: { path: tab.path, text: tab.state.doc.toString(), set: { ...tab.set, ...parseSettings($("#diff-set-a").value) } },
    b: { path: bPath, text: bText, set: parseSettings($("#diff-set-b").value) },
    expand: [...tab.expand],
  };
  $("#diff-out").classList.add("stale");
  const r = await fetch("/api/diff", {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  });
  const result = await r.json();
  $("#diff-out").classList.remove("stale");
  if (!result.ok) {
    $("#diff-table").textContent = (result.diagnostics || []).map((d) => d.text || d.message).join("\n") || result.error;
    $("#diff-figure").innerHTML = "";
    return;
  }
  $("#diff-figure").innerHTML = result.svg;
  $("#diff-table").textContent = result.table;
}

async function download(format) {
  const tab = current;
  if (!tab) return;
  setStatus(`preparing ${format}…`);
  const r = await fetch("/api/download", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      path: tab.path, text: tab.state.doc.toString(), set: tab.set, expand: [...tab.expand], format,
    }),
  });
  if (!r.ok) {
    const body = await r.json();
    setStatus((body.diagnostics || []).map((d) => d.message).join("; ") || body.error);
    return;
  }
  const blob = await r.blob();
  const name = (r.headers.get("content-disposition") || "").match(/filename="(.+)"/)?.[1] || `model.${format}`;
  const a = el("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setStatus(`downloaded ${name}`);
}

function setStatus(text) { $("#status").textContent = text || ""; }

function setupViews() {
  for (const b of document.querySelectorAll("[data-view]")) {
    b.addEventListener("click", () => {
      for (const o of document.querySelectorAll("[data-view]")) o.classList.toggle("active", o === b);
      for (const p of document.querySelectorAll(".view")) p.hidden = p.id !== `view-${b.dataset.view}`;
    });
  }
  for (const b of document.querySelectorAll("[data-download]")) {
    b.addEventListener("click", () => download(b.dataset.download));
  }
  $("#diff-run").addEventListener("click", diff);
  $("#save").addEventListener("click", save);
  $("#new").addEventListener("click", newFile);
  window.addEventListener("beforeunload", (e) => {
    if (tabs.some(dirty)) { e.preventDefault(); e.returnValue = ""; }
  });
}

async function main() {
  setupFigure();
  setupViews();
  connect();
  const body = await loadFiles();
  const wanted = decodeURIComponent(location.hash.slice(1)) || body.first || files[0];
  if (wanted) await open(wanted);
}

window.studio = { tabs, view, open, save, check, timing, get current() { return current; } };
main();
