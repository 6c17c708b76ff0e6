// gputopo's live topology map: polls /api/map and redraws when the cluster's picture changes. Plain JS, no
// libraries: regions are nested boxes, each node a small SVG of its GPUs coloured by the gang that holds them.
"use strict";

const POLL_MS = 1000;
const CELL = 10;
let last = null;
let doc = null;

// Gang colours: distinct, and none of them the red that marks a fault.
const PALETTE = ["#2f6fd0", "#2a9d5c", "#8a4fc7", "#e08a1e", "#1b9aaa", "#8c6d31", "#d45d9e", "#5b6fa8",
  "#6aa121", "#b07ad8", "#c49a00", "#3c8f8f"];

function colour(i) {
  const base = PALETTE[i % PALETTE.length];
  const round = Math.floor(i / PALETTE.length) % 3;
  // Further rounds darken: lighter tints would read as free GPUs.
  return round === 0 ? base : `color-mix(in srgb, ${base} ${100 - round * 25}%, #000)`;
}

function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function nodeSvg(node) {
  const n = node.gpus.length;
  const cols = Math.min(n, 4) || 1;
  const rows = Math.max(1, Math.ceil(n / 4));
  const w = cols * (CELL + 1) + 13;
  const h = rows * (CELL + 1) + 5;
  const sick = new Set(node.faults.filter((f) => f.startsWith("gpu ")).map((f) => Number(f.split(" ")[1])));
  let out = `<svg width="${w}" height="${h}"><rect class="frame" x="0.5" y="0.5" width="${w - 1}" height="${h - 1}" rx="2"/>`;
  node.gpus.forEach((g, i) => {
    const x = 3 + (i % 4) * (CELL + 1);
    const y = 3 + Math.floor(i / 4) * (CELL + 1);
    let cls = g >= 0 ? "gpu held" : g === -2 ? "gpu other" : "gpu free";
    if (sick.has(i)) cls = "gpu sick";
    const fill = g >= 0 && !sick.has(i) ? ` style="fill:${colour(g)}"` : "";
    out += `<rect class="${cls}" data-gpu="${i}" data-gang="${g >= 0 ? esc(doc.gangs[g].id) : ""}" x="${x}" y="${y}" width="${CELL}" height="${CELL}"${fill}/>`;
  });
  const links = node.faults.filter((f) => f.startsWith("link "));
  const nics = node.faults.filter((f) => f.startsWith("nic "));
  if (links.length) out += `<path class="fault link" data-fault="${esc(links.join("; "))}" d="M${w - 9} 2 l4 7 l4 -7 z"/>`;
  if (nics.length) out += `<rect class="fault nic" data-fault="${esc(nics.join("; "))}" x="${w - 8}" y="${h - 6}" width="6" height="4"/>`;
  return out + "</svg>";
}

function nodeHtml(node) {
  const cls = ["node", node.ready ? "" : "notready", node.schedulable ? "" : "cordoned"].join(" ");
  return `<div class="${cls}" data-node="${esc(node.name)}" data-faults="${esc(node.faults.join("; "))}">${nodeSvg(node)}<span class="name">${esc(node.name)}</span></div>`;
}

function regionHtml(region, byName) {
  const kids = region.children.map((c) => regionHtml(c, byName)).join("");
  const nodes = region.nodes.length ? `<div class="nodes">${region.nodes.map((n) => nodeHtml(byName[n])).join("")}</div>` : "";
  if (region.level === "cluster") return kids + nodes;
  const label = region.level === "nvlink" ? `NVLink domain ${region.name}` : `${region.level} ${region.name}`;
  return `<div class="region ${region.level}" data-region="${esc(region.name)}"><div class="label">${esc(label)}</div>${kids}${nodes}</div>`;
}

function gangTip(gang) {
  return `${gang.kind} ${gang.id}\n${gang.gpus} GPUs on ${gang.nodes.length} node(s)\n` +
    `estimated bus bandwidth ${gang.busBandwidthGBps} GB/s\nbottleneck: ${gang.bottleneck || "none named"}` +
    (gang.restarts ? `\nrestarts: ${gang.restarts}` : "");
}

function draw() {
  const byName = Object.fromEntries(doc.nodes.map((n) => [n.name, n]));
  document.getElementById("map").innerHTML = regionHtml(doc.regions, byName);
  document.getElementById("gangs").innerHTML = doc.gangs.map((g, i) =>
    `<li data-gang-id="${esc(g.id)}"><span class="swatch" style="background:${colour(i)}"></span>${esc(g.id)} · ${g.gpus} GPUs · ${g.busBandwidthGBps} GB/s</li>`).join("");
  document.getElementById("pending").innerHTML = doc.pending.map((p) =>
    `<li data-pending="${esc(p.name)}"><span class="reason">${esc(p.reason)}</span> ${esc(p.kind)} ${esc(p.name)}` +
    `<pre>${esc((p.explanation || [p.message]).join("\n"))}</pre></li>`).join("") || "<li>none</li>";
  const gpus = doc.nodes.reduce((s, n) => s + n.gpus.length, 0);
  const used = doc.nodes.reduce((s, n) => s + n.gpus.filter((g) => g !== -1).length, 0);
  const faults = doc.nodes.reduce((s, n) => s + n.faults.length, 0);
  document.getElementById("summary").textContent =
    `${doc.nodes.length} nodes · ${used}/${gpus} GPUs used · ${doc.gangs.length} gangs · ${doc.pending.length} pending · ${faults} faults`;
}

function showTip(event) {
  const tip = document.getElementById("tip");
  const target = event.target;
  let text = "";
  const gangId = target.dataset ? (target.dataset.gang || (target.closest("[data-gang-id]") || {}).dataset?.gangId) : "";
  const map = document.getElementById("map");
  map.classList.toggle("dim", Boolean(gangId));
  document.querySelectorAll(".gpu.hi").forEach((e) => e.classList.remove("hi"));
  if (gangId) {
    const gang = doc.gangs.find((g) => g.id === gangId);
    if (gang) text = gangTip(gang);
    document.querySelectorAll(`.gpu[data-gang="${CSS.escape(gangId)}"]`).forEach((e) => e.classList.add("hi"));
  } else if (target.dataset && target.dataset.fault) {
    text = target.dataset.fault;
  } else {
    const node = target.closest && target.closest("[data-node]");
    if (node) {
      const n = doc.nodes.find((x) => x.name === node.dataset.node);
      text = `${n.name} (${n.model})\n${n.gpus.filter((g) => g === -1).length} of ${n.gpus.length} GPUs free` +
        `\nNICs: ${n.nics.map((x) => `${x[0]} ${x[1]}`).join(", ") || "none"}` +
        (n.faults.length ? `\nfaults: ${n.faults.join("; ")}` : "") +
        (n.ready ? "" : "\nnot ready") + (n.schedulable ? "" : "\ncordoned");
    }
  }
  tip.hidden = !text;
  tip.textContent = text;
  tip.style.left = `${event.clientX + 14}px`;
  tip.style.top = `${event.clientY + 14}px`;
}

async function poll() {
  try {
    const response = await fetch("api/map", { cache: "no-store" });
    const body = await response.json();
    if (!response.ok) {
      document.getElementById("summary").textContent = `cannot read the cluster: ${body.error}`;
    } else if (body.version && body.version !== last) {
      last = body.version;
      doc = body;
      draw();
      document.body.dataset.version = last;
    }
    if (response.ok && body.observedAt) {
      document.getElementById("observed").textContent = `as of ${body.observedAt}`;
      document.body.dataset.observedAt = body.observedAt;
    }
  } catch (error) {
    document.getElementById("summary").textContent = `map server unreachable: ${error}`;
  }
  setTimeout(poll, POLL_MS);
}

document.addEventListener("mousemove", (e) => { if (doc) showTip(e); });
poll();
