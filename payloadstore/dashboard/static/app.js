// payloadstore dashboard: plain DOM, no framework, no build step.
// Every value from a job (error messages, tracebacks, ids) is attacker-controlled text: it is
// only ever put in the page with textContent, never as HTML.
"use strict";

(function () {
  const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
  const refreshMs = Number(document.querySelector('meta[name="refresh-ms"]').content) || 3000;
  const STATES = ["queued", "running", "failed", "cancelled", "succeeded"];
  const RETRYABLE = new Set(["failed", "payload_lost", "payload_corrupt", "cancelled"]);
  const CANCELLABLE = new Set(["queued", "running"]);
  const PAGE = 50;

  const view = {
    queue: null,
    state: "failed",
    cursor: null,   // the cursor of the page shown (null: the first page)
    nextCursor: null,
    jobId: null,
    job: null,
    payloadsOf: null, // "job id/state" whose arguments and result are shown
  };

  const $ = (id) => document.getElementById(id);

  // A table row that opens something: by click, or by Enter/Space when focused.
  function activate(row, open) {
    row.tabIndex = 0;
    row.addEventListener("click", open);
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        open();
      }
    });
  }

  // Rows are redrawn at each refresh: keep the keyboard focus on the same queue or job.
  function replaceRows(body, rows, key) {
    const active = document.activeElement;
    const focused = active && body.contains(active) ? active.dataset[key] : null;
    body.replaceChildren(...rows);
    if (focused) {
      const again = rows.find((row) => row.dataset[key] === focused);
      if (again) again.focus();
    }
  }

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  // -- talking to the dashboard server (never to the control plane directly) -------------

  async function api(path, method, body) {
    const init = { method: method || "GET", headers: { Accept: "application/json" }, credentials: "same-origin" };
    if (init.method === "POST") {
      init.headers["Content-Type"] = "application/json";
      init.headers["X-CSRF-Token"] = csrfToken;
      init.body = JSON.stringify(body || {});
    }
    const response = await fetch(path, init);
    let answer = null;
    try {
      answer = await response.json();
    } catch (e) {
      answer = null;
    }
    if (!response.ok) {
      const error = (answer && answer.error) || {};
      throw new Error(error.message || ("HTTP " + response.status));
    }
    return answer;
  }

  function notify(text, bad) {
    const box = $("notice");
    box.textContent = text;
    box.classList.toggle("bad", Boolean(bad));
    box.hidden = false;
  }

  // -- formatting -------------------------------------------------------------------------

  function age(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    const s = Math.max(0, seconds);
    if (s < 60) return Math.floor(s) + "s";  // floored, as `queues` and `top` (59.6 s is not a minute)
    if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + String(Math.floor((s % 86400) / 3600)).padStart(2, "0") + "h";
  }

  // A job id is a ULID: its first 10 characters are its creation time in ms (Crockford base32).
  const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

  function createdAt(job) {
    if (typeof job.created_at === "number") return job.created_at;
    const id = String(job.job_id || "");
    if (!/^[0-9A-HJKMNP-TV-Z]{26}$/.test(id)) return null;
    let ms = 0;
    for (const c of id.slice(0, 10)) ms = ms * 32 + CROCKFORD.indexOf(c);
    return ms / 1000;
  }

  function when(epoch) {
    if (typeof epoch !== "number") return "-";
    const date = new Date(epoch * 1000);
    return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC") + " (" + age(Date.now() / 1000 - epoch) + " ago)";
  }

  function bytes(n) {
    if (typeof n !== "number") return "-";
    const units = ["B", "KiB", "MiB", "GiB"];
    let value = n;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return (unit ? value.toFixed(1) : String(value)) + " " + units[unit];
  }

  function retried(count) {
    if (typeof count !== "number" || count < 1) return "never";
    return count === 1 ? "once" : count + " times";
  }

  function stateBadge(state) {
    return el("span", state, "state state-" + String(state).replace(/[^a-z_]/g, ""));
  }

  // A size the control plane gives (args_size, result_size), else the S3 reference's.
  function sizeOf(size, ref) {
    if (typeof size === "number") return bytes(size);
    if (ref && typeof ref.size === "number") return bytes(ref.size);
    return "-";
  }

  // -- queues -----------------------------------------------------------------------------

  async function refreshQueues() {
    const answer = await api("/api/queues");
    const body = $("queues").tBodies[0];
    const rows = [];
    for (const q of answer.queues) {
      const row = el("tr");
      row.dataset.queue = q.name;
      if (q.name === view.queue) row.classList.add("selected");
      const failed = typeof q.failed === "number" ? q.failed : 0;
      row.append(
        el("td", q.name, "wrap"),
        el("td", q.queued, "num count-queued"),
        el("td", q.in_flight, "num count-running"),
        el("td", failed, "num count-failed" + (failed > 0 ? " bad" : "")),
        el("td", age(q.oldest_queued_age_s), "num"),
      );
      activate(row, () => selectQueue(q.name));
      rows.push(row);
    }
    replaceRows(body, rows, "queue");
    $("queues-empty").hidden = rows.length > 0;
  }

  // The view is in the address (#/QUEUE/STATE[/JOB]): a link to a job can be shared.
  function saveView() {
    const parts = [view.queue, view.state, view.jobId].filter(Boolean).map(encodeURIComponent);
    history.replaceState(null, "", parts.length ? "#/" + parts.join("/") : "#");
  }

  function loadView() {
    const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
    if (parts[1] && STATES.includes(parts[1])) view.state = parts[1];
    renderTabs();
    if (parts[0]) selectQueue(parts[0]);
    if (parts[2]) selectJob(parts[2]);
  }

  function selectQueue(name) {
    view.queue = name;
    view.cursor = null;
    view.jobId = null;
    saveView();
    $("detail-panel").hidden = true;
    for (const row of $("queues").tBodies[0].rows) row.classList.toggle("selected", row.dataset.queue === name);
    $("queue-name").textContent = name;
    $("jobs-panel").hidden = false;
    refreshJobs().catch((e) => notify(e.message, true));
    refreshThroughput().catch((e) => notify(e.message, true));
  }

  // -- throughput: succeeded and failed per minute over the last hour, an inline SVG -------

  async function refreshThroughput() {
    const queue = view.queue;
    const path = "/api/throughput" + (queue ? "?" + new URLSearchParams({ queue }) : "");
    const answer = await api(path);
    if (queue !== view.queue) return;
    $("throughput-scope").textContent = queue ? "queue " + queue : "every queue";
    drawChart(answer);
  }

  function svg(tag, attrs, text) {
    // The chart's own namespace (the HTML parser gives an <svg> element SVG's): no URL here.
    const node = document.createElementNS($("throughput-chart").namespaceURI, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function minuteText(epoch) {
    return clockText(epoch) + " UTC";
  }

  function clockText(epoch) {
    return new Date(epoch * 1000).toISOString().slice(11, 16);
  }

  // The y axis's ticks: whole numbers, each one distinct, 1 to 4 steps of 1, 2 or 5 x 10^k above
  // 0, the top one at or above the busiest minute (an empty chart reads 0 and 1, not "1" twice).
  function yTicks(peak) {
    let step = 1;
    for (let m = 1; ; m *= 10) {
      const found = [1, 2, 5].map((b) => b * m).find((c) => Math.ceil(peak / c) <= 4);
      if (found) {
        step = found;
        break;
      }
    }
    const top = Math.max(step, Math.ceil(peak / step) * step);
    const ticks = [];
    for (let v = 0; v <= top; v += step) ticks.push(v);
    return ticks;
  }

  // Text extents, estimated for the chart's 11px sans-serif digits (the labels are digits and
  // ':'): used for the margins and for leaving out x labels that would collide.
  const CHAR_W = 7;
  let lastChart = null;

  function drawChart(answer) {
    lastChart = answer;
    const chart = $("throughput-chart");
    const ok = answer.succeeded || [];
    const bad = answer.failed || [];
    const n = Math.max(ok.length, bad.length, 1);
    const sum = (xs) => xs.reduce((a, b) => a + b, 0);
    $("throughput-succeeded").textContent = sum(ok);
    $("throughput-failed").textContent = sum(bad);
    // Drawn at the element's own width (1 unit = 1 CSS px), so labels keep their size at any
    // window width and the x axis gets as many labels as fit.
    const width = Math.max(Math.round(chart.clientWidth) || 360, 200), height = 160;
    chart.setAttribute("viewBox", "0 0 " + width + " " + height);
    let peak = 0;
    for (let i = 0; i < n; i++) peak = Math.max(peak, (ok[i] || 0) + (bad[i] || 0));
    const ticks = yTicks(peak);
    const yMax = ticks[ticks.length - 1];
    const labelW = Math.max(...ticks.map((v) => String(v).length)) * CHAR_W;
    const left = labelW + 10, right = 6, bottom = 20, top = 8;
    const plotW = width - left - right, plotH = height - bottom - top;
    const step = plotW / n;
    const barW = Math.max(step - 1, 1);
    const nodes = [];
    for (const v of ticks) {
      const y = top + plotH - (v / yMax) * plotH;
      nodes.push(svg("line", { x1: left, x2: width - right, y1: y, y2: y, class: v === 0 ? "axis" : "grid" }));
      nodes.push(svg("text", { x: left - 5, y: y + 4, "text-anchor": "end", class: "y-label" }, v));
    }
    const start = answer.start || 0;
    const bucket = answer.bucket_s || 60;
    for (let i = 0; i < n; i++) {
      const s = ok[i] || 0, f = bad[i] || 0;
      const x = left + i * step + 0.5;
      // A minute with any job shows at least 2 px of it: 3 failures beside 1,004 successes
      // would otherwise be a fraction of a pixel (the tooltip gives the exact counts).
      const visible = (count) => (count > 0 ? Math.max((count / yMax) * plotH, 2) : 0);
      const hS = visible(s), hF = visible(f);
      const group = svg("g", { "data-minute": i });
      group.append(svg("title", {}, minuteText(start + i * bucket) + ": " + s + " succeeded, " + f + " failed"));
      if (s > 0) group.append(svg("rect", { x, y: top + plotH - hS, width: barW, height: hS, class: "bar-succeeded" }));
      if (f > 0) group.append(svg("rect", { x, y: top + plotH - hS - hF, width: barW, height: hF, class: "bar-failed" }));
      // An invisible full-height target, so the minute's tooltip shows over empty minutes too.
      group.append(svg("rect", { x, y: top, width: barW, height: plotH, fill: "transparent" }));
      nodes.push(group);
    }
    // x labels at whole 5, 10, 15 or 30 minutes (UTC, as the legend says), as many as fit
    // without touching; one whose box would leave the plot's width is left out.
    const textW = 5 * CHAR_W, gap = 14;
    const every = [5, 10, 15, 30, 60].find((k) => (k * step) >= textW + gap) || 60;
    let lastEnd = -Infinity;
    for (let i = 0; i < n; i++) {
      const epoch = start + i * bucket;
      if (Math.round(epoch / 60) % every !== 0) continue;
      const x = left + i * step + step / 2;
      // Not under the y labels, not past the right edge, not on the previous label.
      if (x - textW / 2 < left || x + textW / 2 > width || x - textW / 2 < lastEnd + gap) continue;
      nodes.push(svg("text", { x, y: height - 5, "text-anchor": "middle", class: "x-label" }, clockText(epoch)));
      lastEnd = x + textW / 2;
    }
    chart.replaceChildren(...nodes);
  }

  if (typeof ResizeObserver === "function") {
    let drawnWidth = 0;
    new ResizeObserver(() => {
      const width = Math.round($("throughput-chart").clientWidth);
      if (lastChart && width !== drawnWidth) {
        drawnWidth = width;
        drawChart(lastChart);
      }
    }).observe($("throughput-chart"));
  }

  // -- jobs of a queue --------------------------------------------------------------------

  function renderTabs() {
    const tabs = STATES.map((state) => {
      const tab = el("button", state);
      tab.type = "button";
      tab.setAttribute("role", "tab");
      tab.dataset.state = state;
      tab.setAttribute("aria-selected", String(state === view.state));
      tab.addEventListener("click", () => {
        view.state = state;
        view.cursor = null;
        saveView();
        renderTabs();
        refreshJobs().catch((e) => notify(e.message, true));
      });
      return tab;
    });
    $("state-tabs").replaceChildren(...tabs);
  }

  async function refreshJobs() {
    if (!view.queue) return;
    const params = new URLSearchParams({ state: view.state, limit: String(PAGE) });
    if (view.cursor) params.set("cursor", view.cursor);
    const shown = { queue: view.queue, state: view.state, cursor: view.cursor };
    const answer = await api("/api/queues/" + encodeURIComponent(view.queue) + "/jobs?" + params);
    if (shown.queue !== view.queue || shown.state !== view.state || shown.cursor !== view.cursor) return;
    view.nextCursor = answer.next_cursor || null;
    const now = Date.now() / 1000;
    const rows = answer.jobs.map((job) => {
      const row = el("tr");
      row.dataset.jobId = job.job_id;
      if (job.job_id === view.jobId) row.classList.add("selected");
      const idCell = el("td", job.job_id, "mono");
      const stateCell = el("td");
      stateCell.append(stateBadge(job.state));
      const error = job.error ? job.error.type : "";
      const created = createdAt(job);
      const shownAge = created === null ? "-" : age(now - created);
      row.append(idCell, stateCell, el("td", job.attempts, "num"), el("td", job.tier || "-"), el("td", shownAge), el("td", error, "wrap"));
      activate(row, () => selectJob(job.job_id));
      return row;
    });
    replaceRows($("jobs").tBodies[0], rows, "jobId");
    $("jobs-empty").hidden = rows.length > 0;
    $("next-page").disabled = !view.nextCursor;
    $("first-page").disabled = !view.cursor;
  }

  // -- one job ----------------------------------------------------------------------------

  function selectJob(jobId) {
    view.jobId = jobId;
    saveView();
    for (const row of $("jobs").tBodies[0].rows) row.classList.toggle("selected", row.dataset.jobId === jobId);
    refreshJob().catch((e) => notify(e.message, true));
  }

  function field(list, name, value) {
    list.push(el("dt", name));
    const dd = el("dd");
    if (value instanceof Node) dd.append(value);
    else dd.textContent = value === undefined || value === null ? "-" : String(value);
    list.push(dd);
  }

  async function refreshJob() {
    if (!view.jobId) return;
    const jobId = view.jobId;
    const job = await api("/api/jobs/" + encodeURIComponent(jobId));
    if (jobId !== view.jobId) return;
    view.job = job;
    $("detail-id").textContent = job.job_id;
    const items = [];
    field(items, "State", stateBadge(job.state));
    field(items, "Queue", job.queue);
    field(items, "Attempts", job.attempts);
    field(items, "Tier", job.tier);
    field(items, "Arguments size", sizeOf(job.args_size, job.payloadRef));
    field(items, "Result size", sizeOf(job.result_size, job.resultRef));
    field(items, "Retried", retried(job.retries));
    field(items, "Created", when(createdAt(job)));
    field(items, "Updated", when(job.updated_at));
    if (job.cancel_requested && (job.state === "queued" || job.state === "running")) field(items, "Cancel", "requested");
    $("detail-fields").replaceChildren(...items);
    // Arguments and result: read again only when the job or its state changed (an S3 value's
    // preview costs the dashboard server a ranged GET).
    const shown = job.job_id + "/" + job.state;
    if (view.payloadsOf !== shown) {
      view.payloadsOf = shown;
      refreshPayloads(job.job_id).catch((e) => {
        view.payloadsOf = null;
        notify(e.message, true);
      });
    }
    const error = job.error;
    $("detail-error").hidden = !error;
    $("error-type").textContent = error ? error.type || "" : "";
    $("error-message").textContent = error ? error.message || "" : "";
    $("traceback").textContent = error && error.traceback ? error.traceback : "(no traceback)";
    $("retry").disabled = !RETRYABLE.has(job.state);
    $("cancel").disabled = !CANCELLABLE.has(job.state);
    $("detail-panel").hidden = false;
  }

  // -- a job's arguments and result: a preview decoded by the dashboard server --------------

  function showPayload(kind, jobId, value, absent) {
    const meta = $(kind + "-meta");
    const pre = $(kind + "-preview");
    const link = $(kind + "-download");
    pre.classList.remove("empty");
    if (!value) {
      meta.textContent = "";
      pre.textContent = absent;
      pre.classList.add("empty");
      link.hidden = true;
      return;
    }
    const facts = [value.tier === "s3" ? "S3" : "inline"];
    if (typeof value.size === "number") facts.push(bytes(value.size));
    if (value.key) facts.push(value.key);
    meta.textContent = "(" + facts.join(", ") + ")";
    if (value.gone) {
      pre.textContent = value.gone === "not_kept" ? "not kept: an inline job's arguments are freed when it succeeds" : "gone: " + value.gone;
      pre.classList.add("empty");
    } else if (typeof value.preview === "string" && !value.preview_error) {
      pre.textContent = value.preview + (value.truncated ? "\n… (truncated)" : "");
    } else {
      pre.textContent = value.preview_error || "no preview";
      pre.classList.add("empty");
    }
    link.hidden = Boolean(value.gone);
    link.href = "/api/jobs/" + encodeURIComponent(jobId) + "/" + kind + "/download";
    link.setAttribute("download", jobId + "-" + kind + ".msgpack");
  }

  async function refreshPayloads(jobId) {
    const answer = await api("/api/jobs/" + encodeURIComponent(jobId) + "/payloads");
    if (jobId !== view.jobId) return;
    showPayload("args", jobId, answer.args, "none");
    showPayload("result", jobId, answer.result, answer.state === "succeeded" ? "none" : "no result (" + answer.state + ")");
  }

  // -- actions, each after a confirmation --------------------------------------------------

  function confirmAction(text) {
    const dialog = $("confirm");
    $("confirm-text").textContent = text;
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
      dialog.returnValue = "";
      dialog.showModal();
    });
  }

  async function act(question, path, body, done) {
    if (!(await confirmAction(question))) return;
    try {
      const answer = await api(path, "POST", body);
      notify(done(answer), false);
    } catch (e) {
      notify(e.message, true);
    }
    await refreshAll();
  }

  function wireButtons() {
    $("retry").addEventListener("click", () => {
      const id = view.jobId;
      act("Retry job " + id + "? It is queued again with its stored arguments.", "/api/jobs/" + encodeURIComponent(id) + "/retry", {}, (a) => "job " + id + " queued again (attempt " + (a.attempt ?? "?") + ")");
    });
    $("cancel").addEventListener("click", () => {
      const id = view.jobId;
      act("Cancel job " + id + "?", "/api/jobs/" + encodeURIComponent(id) + "/cancel", {}, (a) => a.cancel_requested ? "job " + id + " running: cancel requested" : "job " + id + " " + a.state);
    });
    $("redrive").addEventListener("click", () => {
      const queue = view.queue;
      act("Retry the failed jobs of queue " + queue + " (up to 100, newest first)?", "/api/queues/" + encodeURIComponent(queue) + "/redrive", {}, (a) => "queue " + queue + " redriven: " + countsText(a));
    });
    $("purge").addEventListener("click", () => {
      const queue = view.queue;
      act("Cancel every queued job of queue " + queue + "? They will never run.", "/api/queues/" + encodeURIComponent(queue) + "/purge", {}, (a) => "queue " + queue + " purged: " + countsText(a) + (a.remaining > 0 ? " (some are still queued: purge again)" : ""));
    });
    $("next-page").addEventListener("click", () => {
      if (!view.nextCursor) return;
      view.cursor = view.nextCursor;
      refreshJobs().catch((e) => notify(e.message, true));
    });
    $("first-page").addEventListener("click", () => {
      view.cursor = null;
      refreshJobs().catch((e) => notify(e.message, true));
    });
  }

  function countsText(answer) {
    return Object.entries(answer || {})
      .filter(([, v]) => typeof v === "number")
      .map(([k, v]) => k + "=" + v)
      .join(" ") || "done";
  }

  // -- refresh loop -----------------------------------------------------------------------

  async function refreshAll() {
    try {
      await Promise.all([refreshQueues(), refreshJobs(), refreshJob(), refreshThroughput()]);
      $("refreshed").textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC";
    } catch (e) {
      $("refreshed").textContent = "refresh failed: " + e.message;
    }
  }

  function showPolicy(policy) {
    const known = policy && typeof policy === "object";
    $("policy-retention").textContent = known ? policy.retention : "?";
    $("policy-kms").textContent = known ? policy.kms_key : "?";
    $("policy-inline").textContent = known ? policy.inline : "?";
  }

  async function start() {
    try {
      const info = await api("/api/info");
      $("namespace").textContent = info.namespace;
      $("endpoint").textContent = info.endpoint;
      showPolicy(info.policy);
    } catch (e) {
      notify(e.message, true);
    }
    wireButtons();
    loadView();
    await refreshAll();
    setInterval(refreshAll, refreshMs);
  }

  start();
})();
