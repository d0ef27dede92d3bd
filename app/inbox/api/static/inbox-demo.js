// Clarion's inbox demo: a recipient token (from the page's #token=… or typed in) reads the
// recipient's inbox with GET /v1/inbox and follows it live with GET /v1/inbox/stream.
// Everything a message says is put on the page as text, never as markup.
"use strict";

const page = {
  token: new URLSearchParams(location.hash.slice(1)).get("token") || "",
  messages: new Map(), // id -> message, newest first by id
  stream: null,
};

function $(id) { return document.getElementById(id); }

async function call(path, method = "GET") {
  const answer = await fetch(path, {
    method, headers: { Authorization: "Bearer " + page.token }, cache: "no-store",
  });
  if (!answer.ok) {
    const body = await answer.json().catch(() => ({}));
    throw new Error(answer.status + ": " + (body.detail || answer.statusText));
  }
  return answer.json();
}

function showProblem(error) {
  $("problem").textContent = String(error.message || error);
  $("problem").hidden = false;
}

function showCounts(counts) {
  const badge = $("unread");
  badge.textContent = String(counts.unread);
  badge.classList.toggle("zero", counts.unread === 0);
  document.title = counts.unread ? "(" + counts.unread + ") Inbox" : "Inbox";
}

function safeLink(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : "";
  } catch (_) {
    return "";
  }
}

function row(message) {
  const item = document.createElement("li");
  item.id = "m-" + message.id;
  item.dataset.id = message.id;
  item.className = message.read_at ? "read" : "unread";
  const text = document.createElement("div");
  text.className = "text";
  const title = document.createElement(safeLink(message.action_url) ? "a" : "div");
  title.className = "title";
  title.textContent = message.title;
  if (title.tagName === "A") { title.href = safeLink(message.action_url); title.rel = "noopener"; }
  const body = document.createElement("div");
  body.className = "body";
  body.textContent = message.body;
  const when = document.createElement("div");
  when.className = "when";
  when.textContent = new Date(message.created_at).toLocaleString();
  text.append(title, body, when);
  const toggle = document.createElement("button");
  toggle.type = "button";
  toggle.className = "toggle";
  toggle.textContent = message.read_at ? "Mark unread" : "Mark read";
  toggle.addEventListener("click", () => mark(message.id, message.read_at ? "unread" : "read"));
  const archive = document.createElement("button");
  archive.type = "button";
  archive.className = "archive";
  archive.textContent = "Archive";
  archive.addEventListener("click", () => mark(message.id, "archive"));
  item.append(text, toggle, archive);
  return item;
}

function render() {
  const list = $("messages");
  const ids = [...page.messages.keys()].sort().reverse();
  list.replaceChildren(...ids.map((id) => row(page.messages.get(id))));
  $("empty").hidden = ids.length > 0;
}

async function load() {
  const inbox = await call("/v1/inbox?limit=50");
  page.messages = new Map(inbox.messages.map((message) => [message.id, message]));
  showCounts(inbox.counts);
  render();
}

async function mark(id, action) {
  try {
    const message = await call("/v1/inbox/" + encodeURIComponent(id) + "/" + action, "POST");
    if (message.archived_at) page.messages.delete(id); else page.messages.set(id, message);
    render();
  } catch (error) { showProblem(error); }
}

function changed(event) {
  const data = JSON.parse(event.data);
  const known = page.messages.get(data.id);
  if (event.type === "archived") page.messages.delete(data.id);
  else if (known) page.messages.set(data.id, { ...known, read_at: data.read_at, seen_at: data.seen_at });
  else if (event.type === "unarchived") { load().catch(showProblem); return; }
  showCounts(data.counts);
  render();
}

function follow() {
  const stream = new EventSource("/v1/inbox/stream?token=" + encodeURIComponent(page.token));
  page.stream = stream;
  stream.addEventListener("open", () => { $("live").textContent = "live"; $("live").className = "on"; });
  stream.addEventListener("error", () => { $("live").textContent = "reconnecting…"; $("live").className = ""; });
  stream.addEventListener("counts", (event) => showCounts(JSON.parse(event.data)));
  stream.addEventListener("reset", () => load().catch(showProblem));
  // Newer streams of this recipient took this one's place: stop, rather than take theirs.
  stream.addEventListener("replaced", () => {
    stream.close();
    $("live").textContent = "paused: open in other tabs";
    $("live").className = "";
  });
  stream.addEventListener("message", (event) => {
    const data = JSON.parse(event.data);
    page.messages.set(data.message.id, data.message);
    showCounts(data.counts);
    render();
  });
  for (const kind of ["read", "unread", "seen", "archived", "unarchived"]) {
    stream.addEventListener(kind, changed);
  }
}

async function start() {
  if (!page.token) {
    $("sign-in").hidden = false;
    $("live").textContent = "";
    return;
  }
  try {
    await load();
    follow();
  } catch (error) { showProblem(error); $("live").textContent = ""; }
}

$("sign-in").addEventListener("submit", (event) => {
  event.preventDefault();
  page.token = $("token").value.trim();
  $("sign-in").hidden = true;
  start();
});
$("read-all").addEventListener("click", async () => {
  try { await call("/v1/inbox/read-all", "POST"); await load(); } catch (error) { showProblem(error); }
});
start();
