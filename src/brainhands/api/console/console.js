// The brainhands console: the sessions list and one session, live from the API's event
// streams. Everything is rendered with textContent (never HTML from the data).
"use strict";

const KEY = "brainhands-key";
const $ = (id) => document.getElementById(id);
const key = () => sessionStorage.getItem(KEY) || "";

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (key()) h["Authorization"] = "Bearer " + key();
  return h;
}

function problem(text) {
  const p = $("problem");
  p.textContent = text || "";
  p.hidden = !text;
}

async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: headers({ "content-type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    problem(`${response.status} ${data.title || ""}: ${data.detail || response.statusText}`);
    throw new Error(data.detail || response.statusText);
  }
  problem("");
  return data;
}

// Server-sent events over fetch (so the key travels in a header, never in a URL).
async function follow(path, onEvent) {
  let last = null;
  for (;;) {
    try {
      const h = headers(last === null ? {} : { "Last-Event-ID": last });
      const response = await fetch(path, { headers: h });
      if (!response.ok) {
        const data = await response.json().catch(() => ({}));
        problem(`${response.status}: ${data.detail || response.statusText}`);
        return;
      }
      $("live").textContent = "live";
      $("live").className = "live on";
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0 || (cut = buffer.indexOf("\r\n\r\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + (buffer[cut] === "\r" ? 4 : 2));
          const event = {};
          for (const line of block.split(/\r?\n/)) {
            if (!line || line.startsWith(":")) continue;
            const at = line.indexOf(":");
            const field = at < 0 ? line : line.slice(0, at);
            const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
            event[field] = event[field] ? event[field] + "\n" + value : value;
          }
          if (event.data === undefined) continue;
          if (event.id !== undefined) last = event.id;
          onEvent(event.event || "message", JSON.parse(event.data));
        }
      }
    } catch (error) {
      // the stream broke: resume from the last event id
    }
    $("live").textContent = "reconnecting";
    $("live").className = "live";
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleTimeString() : "";
}

function showList() {
  $("list").hidden = false;
  showSchedules();
  follow("/events", (kind, data) => {
    const body = $("sessions");
    body.replaceChildren();
    for (const s of data.sessions) {
      const row = document.createElement("tr");
      row.dataset.session = s.id;
      const link = document.createElement("a");
      link.href = "/console/sessions/" + encodeURIComponent(s.id);
      link.textContent = s.id;
      cell(row, "").appendChild(link);
      cell(row, s.needs_action ? "needs action" : s.open ? "running" : "idle",
           s.needs_action ? "needs" : "");
      cell(row, String(s.version));
      cell(row, when(s.updated_at));
      body.appendChild(row);
    }
  });
}

// The tenant's schedules, read again after each act (they change by acts, not commits).
async function showSchedules() {
  const schedules = await call("GET", "/schedules").catch(() => null);
  if (schedules === null) return;
  const body = $("schedules");
  body.replaceChildren();
  for (const s of schedules) {
    const row = document.createElement("tr");
    row.dataset.schedule = s.id;
    cell(row, s.id);
    cell(row, s.state, s.state === "paused" ? "needs" : "");
    cell(row, s.cron ? `${s.cron} (${s.timezone})` : `every ${s.every} s`);
    cell(row, s.agent ? `agent ${s.agent}` : `task ${s.kind}`);
    cell(row, s.state === "active" ? new Date(s.next_tick_at * 1000).toLocaleString() : "");
    const actions = cell(row, "");
    const toggle = s.state === "active" ? "pause" : "resume";
    for (const [act, label, method, path] of [
      [toggle, toggle === "pause" ? "Pause" : "Resume", "POST", `/${toggle}`],
      ["delete", "Delete", "DELETE", ""],
    ]) {
      const button = document.createElement("button");
      button.id = `${act}-schedule-${s.id}`;
      button.className = act === "delete" ? "deny" : "approve";
      button.textContent = label;
      button.onclick = () => {
        button.disabled = true;
        call(method, "/schedules/" + encodeURIComponent(s.id) + path)
          .catch(() => {})
          .finally(showSchedules);
      };
      actions.appendChild(button);
    }
    body.appendChild(row);
  }
}

function summary(entry) {
  const body = entry.body || {};
  if (entry.kind === "user") return body.text;
  if (entry.kind === "model") {
    const message = body.message || {};
    const calls = (message.tool_calls || []).map((c) => (c.function || c).name);
    return (message.content || "") + (calls.length ? ` [calls: ${calls.join(", ")}]` : "");
  }
  if (entry.kind === "tool_result") {
    return `${body.name}: ${body.status}` + (body.error ? ` (${JSON.stringify(body.error)})` : "");
  }
  return JSON.stringify(body);
}

function renderTasks(view) {
  const children = {};
  for (const t of view.tasks) (children[t.parent_id || ""] ||= []).push(t);
  const build = (parent, into) => {
    for (const t of children[parent] || []) {
      const li = document.createElement("li");
      li.dataset.task = t.id;
      let text = `${t.kind} — ${t.status}`;
      if (t.status !== "terminal" && t.phase) text += ` @ ${t.phase}`;
      if (t.outcome) text += ` (${t.outcome})`;
      if (t.wait_signal) text += ` — waits for ${t.wait_signal}`;
      if (t.wake_at) text += ` — wakes ${when(t.wake_at)}`;
      li.textContent = text;
      const ul = document.createElement("ul");
      build(t.id, ul);
      if (ul.children.length) li.appendChild(ul);
      into.appendChild(li);
    }
  };
  const root = $("tasks");
  root.replaceChildren();
  build("", root);
}

let shownApprovals = null;

function renderApprovals(sessionId, view) {
  // Left as it is while the same calls wait: a reason being typed is not wiped out.
  const ids = view.approvals.map((a) => a.approval_id).join(" ");
  if (ids === shownApprovals) return;
  shownApprovals = ids;
  const body = $("approvals");
  body.replaceChildren();
  $("approvals-box").hidden = view.approvals.length === 0;
  for (const a of view.approvals) {
    const row = document.createElement("tr");
    row.dataset.approval = a.approval_id;
    cell(row, a.tool);
    cell(row, "").appendChild(document.createElement("code")).textContent =
      JSON.stringify(a.arguments);
    cell(row, a.agent);
    cell(row, when(a.since) + (a.escalated ? " (escalated)" : ""));
    const actions = cell(row, "");
    const approve = document.createElement("button");
    approve.className = "approve";
    approve.id = "approve-" + a.approval_id;
    approve.textContent = "Approve";
    const reason = document.createElement("input");
    reason.id = "reason-" + a.approval_id;
    reason.placeholder = "reason to deny";
    const deny = document.createElement("button");
    deny.className = "deny";
    deny.id = "deny-" + a.approval_id;
    deny.textContent = "Deny";
    const base = `/sessions/${encodeURIComponent(sessionId)}/approvals/${encodeURIComponent(a.approval_id)}`;
    approve.onclick = () => { approve.disabled = deny.disabled = true; call("POST", base + "/approve", {}).catch(() => {}); };
    deny.onclick = () => {
      approve.disabled = deny.disabled = true;
      call("POST", base + "/deny", { reason: reason.value || "denied in the console" }).catch(() => {});
    };
    actions.append(approve, reason, deny);
    body.appendChild(row);
  }
}

let shownCompensations = null;

function renderCompensations(sessionId, view) {
  // A task whose undo failed waits for an operator: retry the undo, or abandon the rest.
  const stops = view.compensations || [];
  const ids = stops.map((c) => `${c.task_id}/${c.attempt}`).join(" ");
  if (ids === shownCompensations) return;
  shownCompensations = ids;
  const body = $("compensations");
  body.replaceChildren();
  $("compensations-box").hidden = stops.length === 0;
  for (const c of stops) {
    const row = document.createElement("tr");
    cell(row, c.task_id);
    cell(row, `${c.failed.tool} ${c.failed.operation_id}` + (c.attempt ? ` (retried ${c.attempt})` : ""));
    cell(row, "").appendChild(document.createElement("code")).textContent = JSON.stringify(c.error);
    cell(row, c.not_compensated.map((e) => e.tool).join(", "));
    const actions = cell(row, "");
    const reason = document.createElement("input");
    reason.id = "undo-reason-" + c.task_id;
    reason.placeholder = "reason";
    const path = `/sessions/${encodeURIComponent(sessionId)}/compensations/${encodeURIComponent(c.task_id)}`;
    const buttons = [];
    for (const [action, label, css] of [["retry", "Retry undo", "approve"], ["abandon", "Abandon", "deny"]]) {
      if (action === "retry" && !c.retryable) continue;
      const button = document.createElement("button");
      button.className = css;
      button.id = `${action}-${c.task_id}`;
      button.textContent = label;
      button.onclick = () => {
        buttons.forEach((b) => { b.disabled = true; });
        call("POST", path, { action, reason: reason.value || `${action} in the console` }).catch(() => {});
      };
      buttons.push(button);
    }
    actions.append(reason, ...buttons);
    body.appendChild(row);
  }
}

// The session's workspaces: each version, the call that made it, what it changed, and
// its files as a tarball. Read again when the session or its calls move on.
let workspacesSeen = null;
async function showWorkspaces(sessionId, view) {
  const seenNow = `${view.version}:${view.operations.map((o) => o.status).join()}`;
  if (workspacesSeen === seenNow) return;
  workspacesSeen = seenNow;
  const base = `/sessions/${encodeURIComponent(sessionId)}/workspaces`;
  const spaces = await call("GET", base).catch(() => null);
  if (spaces === null) return;
  const rows = [];
  for (const space of spaces) {
    const path = `${base}/${encodeURIComponent(space.name)}`;
    const versions = await call("GET", `${path}/versions`).catch(() => []);
    for (const v of versions.reverse()) {
      const row = document.createElement("tr");
      row.dataset.workspace = `${v.name}@${v.version}`;
      cell(row, v.name);
      cell(row, String(v.version));
      cell(row, v.operation_id || "given by a client");
      cell(row, `${v.files} files, ${v.bytes} bytes`);
      const changes = cell(row, "");
      call("GET", `${path}/diff?before=${v.version - 1}&after=${v.version}`)
        .then((d) => {
          changes.textContent = Object.entries(d.paths).map(([p, c]) => `${c} ${p}`).join(", ");
        })
        .catch(() => {});
      const get = document.createElement("button");
      get.id = `download-${v.name}-${v.version}`;
      get.textContent = "Tarball";
      get.onclick = () => download(`${path}/versions/${v.version}/tarball`, `${v.name}-${v.version}.tar.gz`);
      cell(row, "").appendChild(get);
      rows.push(row);
    }
  }
  $("workspaces-box").hidden = rows.length === 0;
  $("workspaces").replaceChildren(...rows);
}

// A download with the key in a header (a link cannot carry it).
async function download(path, filename) {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) {
    problem(`${response.status}: ${filename} could not be downloaded`);
    return;
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = filename;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

function showSession(sessionId) {
  $("session").hidden = false;
  $("title").textContent = "Session " + sessionId;
  follow(`/sessions/${encodeURIComponent(sessionId)}/events`, (kind, view) => {
    if (kind === "progress") {
      $("note").textContent = `${when(Date.now() / 1000)} ${view.operation_id}: ${view.message} ${JSON.stringify(view.data)}`;
      return;
    }
    if (kind === "model") {  // the model's text as it comes; the stored answer replaces it
      const typing = $("typing");
      if (typing.dataset.task !== view.data.task_id) typing.textContent = "model: ";
      typing.dataset.task = view.data.task_id;
      typing.textContent += view.message;
      return;
    }
    $("typing").textContent = "";
    delete $("typing").dataset.task;
    const states = view.submissions.map((s) => `${s.request_id}: ${s.status}`);
    const stop = view.budget_exhausted;  // the agent's run stopped at its budget
    const budget = stop
      ? `BUDGET EXHAUSTED (${stop.limit}: used ${JSON.stringify(stop.used)} of ${JSON.stringify(stop.budget)}) — `
      : "";
    const undos = (view.compensations || []).length;
    const failed = undos ? `UNDO FAILED (${undos} task(s) waiting for retry or abandon) — ` : "";
    $("status").textContent =
      (view.needs_action ? "NEEDS ACTION — " : "") + budget + failed + states.join(", ") + ` — version ${view.version}`;
    $("status").className = view.needs_action ? "needs" : "";
    renderApprovals(sessionId, view);
    renderCompensations(sessionId, view);
    showWorkspaces(sessionId, view);
    const entries = $("entries");
    entries.replaceChildren();
    for (const e of view.entries) {
      const li = document.createElement("li");
      li.className = e.kind;
      li.textContent = `${e.kind}: ${summary(e)}`;
      entries.appendChild(li);
    }
    renderTasks(view);
    const ops = $("operations");
    ops.replaceChildren();
    for (const o of view.operations) {
      const row = document.createElement("tr");
      row.className = o.status === "uncertain" || o.status === "failed" ? o.status : "";
      cell(row, o.tool);
      cell(row, o.status);
      cell(row, String(o.attempts));
      cell(row, String(o.interruptions));
      cell(row, o.error ? JSON.stringify(o.error) : "");
      ops.appendChild(row);
    }
  });
}

$("login").onsubmit = (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $("key").value.trim());
  location.reload();
};
const match = location.pathname.match(/^\/console\/sessions\/(.+)$/);
if (match) showSession(decodeURIComponent(match[1]));
else showList();
