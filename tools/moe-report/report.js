// moe-report's page: charts of a training run's metrics (docs/Metrics.md)
// with Chart.js, heatmaps of the expert load on canvases, the plan and the
// events as tables. Each chart is one entry of CHARTS; a numeric metric no
// entry shows gets a chart of its own under "Other metrics", so new
// metrics appear without touching this file.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("moe-data").textContent);
  const steps = data.steps;
  const report = document.getElementById("report");
  const status = document.getElementById("status");
  const colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  let charts = 0, heatmaps = 0;

  const el = (tag, attrs, parent) => {
    const e = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => (k === "text" ? (e.textContent = v) : e.setAttribute(k, v)));
    if (parent) parent.appendChild(e);
    return e;
  };
  const section = (title) => { el("h2", {text: title}, report); return el("div", {class: "grid"}, report); };
  const get = (row, path) => path.split(".").reduce((v, k) => (v == null ? undefined : v[k]), row);
  const sum = (a) => (Array.isArray(a) ? a.reduce((s, x) => s + sum(x), 0) : Number(a) || 0);

  // One line chart: series = [{label, points: [{x, y}]}].
  function chart(grid, title, unit, series, logY) {
    series = series.filter((s) => s.points.some((p) => Number.isFinite(p.y)));
    // Nothing to see (no codec, one rank's collectives): no chart.
    if (!series.some((s) => s.points.some((p) => p.y !== 0))) return;
    const fig = el("figure", {"data-chart": title}, grid);
    el("figcaption", {text: title + (unit ? " (" + unit + ")" : "")}, fig);
    const canvas = el("canvas", {height: "220"}, fig);
    new Chart(canvas, {
      type: "line",
      data: {datasets: series.map((s, i) => ({label: s.label, data: s.points, borderColor: colors[i % colors.length],
                                                backgroundColor: colors[i % colors.length], pointRadius: s.dots ? 3 : 0,
                                                showLine: !s.dots, borderWidth: 1.2}))},
      options: {animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
                scales: {x: {type: "linear", title: {display: true, text: "step"}},
                         y: {type: logY ? "logarithmic" : "linear"}},
                plugins: {legend: {display: series.length > 1}}},
    });
    charts++;
  }
  const perStep = (path, f) => steps.map((r) => ({x: r.step, y: f ? f(r) : get(r, path)}))
                                    .filter((p) => Number.isFinite(p.y));

  // The charts, in order. `keys`: the step fields each one shows.
  const layers = Math.max(0, ...steps.map((r) => (r.expert_tokens || []).length));
  // "MoE layer 0 (l1)": the run line names each MoE layer's model layer.
  const names = (data.run && Array.isArray(data.run.moe_layers)) ? data.run.moe_layers : [];
  const layerName = (l) => "MoE layer " + l + (typeof names[l] === "string" ? " (" + names[l] + ")" : "");
  const CHARTS = [
    {title: "Loss", unit: "nats per token", keys: ["loss"], series: () => [
      {label: "training", points: perStep("loss")},
      {label: "validation", dots: true, points: data.evals.map((r) => ({x: r.step, y: r.val_loss}))}]},
    {title: "Throughput", unit: "tokens/s", keys: ["tokens_per_s"],
     series: () => [{label: "tokens/s", points: perStep("tokens_per_s")}]},
    {title: "Learning rate", keys: ["lr"], series: () => [{label: "lr", points: perStep("lr")}]},
    {title: "Gradient norm", unit: "before clipping", keys: ["grad_norm", "grad_norm_groups"], series: () =>
      [{label: "all", points: perStep("grad_norm")}].concat(
        Object.keys(steps.find((r) => r.grad_norm_groups) ? steps.find((r) => r.grad_norm_groups).grad_norm_groups : {})
          .map((g) => ({label: g, points: perStep("grad_norm_groups." + g)})))},
    {title: "Step time", unit: "s", keys: ["step_seconds", "comm_seconds", "background_comm_seconds", "background_wait_seconds"], series: () => [
      {label: "step", points: perStep("step_seconds")}, {label: "in collectives", points: perStep("comm_seconds")},
      {label: "background all-reduces", points: perStep("background_comm_seconds")},
      {label: "waiting for them", points: perStep("background_wait_seconds")}]},
    {title: "Dropped token-slots", unit: "fraction of the routed", keys: ["dropped_tokens"], series: () => [
      {label: "dropped", points: perStep(null, (r) => (sum(r.expert_tokens) ? r.dropped_tokens / sum(r.expert_tokens) : NaN))}]},
    {title: "Balancedness", unit: "mean / max of the ep ranks' token-slots", keys: ["balancedness"], series: () =>
      Array.from({length: layers}, (_, l) => ({label: layerName(l), points: perStep("balancedness." + l)}))},
    {title: "Router losses", unit: "before their coefficients", keys: ["aux_loss", "z_loss"], series: () =>
      Array.from({length: layers}, (_, l) => [
        {label: "balancing, " + layerName(l), points: perStep("aux_loss." + l)},
        {label: "z-loss, " + layerName(l), points: perStep("z_loss." + l)}]).flat()},
    {title: "Bytes sent per step and rank", unit: "bytes", keys: ["comm_bytes", "comm_bytes_analytical", "comm_bytes_ragged_bound"],
     series: () => [
      {label: "all-reduce, measured", points: perStep("comm_bytes.all_reduce")},
      {label: "all-reduce, analytical", points: perStep("comm_bytes_analytical.all_reduce")},
      {label: "all-to-all, measured", points: perStep("comm_bytes.all_to_all")},
      {label: "all-to-all, analytical", points: perStep("comm_bytes_analytical.all_to_all")},
      {label: "all-to-all, ragged bound", points: perStep("comm_bytes_ragged_bound")}]},
    {title: "Gradient codecs", unit: "bytes per step", keys: ["codec_bytes"], series: () => [
      {label: "sent", points: perStep("codec_bytes.sent")},
      {label: "uncompressed", points: perStep("codec_bytes.uncompressed")},
      {label: "expected", points: perStep("codec_bytes.expected")}]},
  ];

  function summary() {
    const cards = el("div", {class: "cards"}, report);
    const card = (name, value) => { const c = el("div", {class: "card"}, cards); el("b", {text: value}, c); el("span", {text: name}, c); };
    const last = steps[steps.length - 1];
    card("steps", String(last.step));
    card("last training loss", last.loss.toFixed(4));
    if (data.evals.length) card("last validation loss", data.evals[data.evals.length - 1].val_loss.toFixed(4));
    const tps = steps.map((r) => r.tokens_per_s).filter(Number.isFinite).sort((a, b) => a - b);
    if (tps.length) card("median tokens/s", Math.round(tps[tps.length >> 1]).toLocaleString("en"));
    const mem = data.memory || {}, mb = (b) => (b / 1e6).toFixed(1) + " MB";
    const span = (list) => { const lo = mb(Math.min(...list)), hi = mb(Math.max(...list)); return lo === hi ? lo : lo + " to " + hi; };
    // Several ranks: each one's planned buffers; its own peak where each
    // rank is a process (mpirun), the process's where ranks are threads.
    if (mem.peak_rss_bytes) card(mem.rank_processes === false ? "peak resident memory (the process's " + mem.rank_planned_bytes.length + " thread ranks)" : "peak resident memory", mb(mem.peak_rss_bytes));
    if (mem.rank_planned_bytes) card("planned buffers per rank", span(mem.rank_planned_bytes));
    if (mem.rank_processes && mem.rank_peak_rss_bytes) card("peak resident memory per rank", span(mem.rank_peak_rss_bytes));
    card("migrations", String(data.migrations.length));
  }

  // The expert load: one heatmap per MoE layer, steps across, experts down,
  // each step's token-slots as a share of that step's most loaded expert.
  function heatmap(grid, layer) {
    const rows = steps.filter((r) => r.expert_tokens && r.expert_tokens[layer]);
    if (!rows.length) return;
    const experts = Math.max(...rows.map((r) => r.expert_tokens[layer].length));
    const fig = el("figure", {"data-heatmap": String(layer)}, grid);
    el("figcaption", {text: "Expert load, " + layerName(layer) + ", " + experts + " experts x " + rows.length +
                             " steps (darker = more token-slots)"}, fig);
    // Experts down the left edge, the shade's scale below.
    const body = el("div", {class: "heatbody"}, fig);
    const axis = el("div", {class: "heataxis"}, body);
    el("span", {text: "expert 0"}, axis);
    el("span", {text: "expert " + (experts - 1)}, axis);
    const canvas = el("canvas", {class: "heat", width: String(rows.length), height: String(experts)}, body);
    const ctx = canvas.getContext("2d");
    const image = ctx.createImageData(rows.length, experts);
    rows.forEach((r, x) => {
      const load = r.expert_tokens[layer], most = Math.max(1, ...load);
      load.forEach((n, y) => {
        const shade = Math.round(255 * (1 - n / most)), i = 4 * (y * rows.length + x);
        image.data.set([shade, shade, 255, 255], i);
      });
    });
    ctx.putImageData(image, 0, 0);
    el("div", {class: "note", text: "steps " + rows[0].step + " (left) to " + rows[rows.length - 1].step + " (right)"}, fig);
    const peak = Math.max(...rows.map((r) => Math.max(0, ...r.expert_tokens[layer])));
    const scale = el("div", {class: "heatscale"}, fig);
    el("span", {text: "0 token-slots"}, scale);
    el("span", {class: "heatbar"}, scale);
    el("span", {text: "the step's most loaded expert (" + peak + " token-slots at most)"}, scale);
    heatmaps++;
  }

  function table(parent, header, body) {
    const t = el("table", {}, parent), head = el("tr", {}, t);
    header.forEach((h) => el("th", {text: h}, head));
    body.forEach((row) => { const tr = el("tr", {}, t); row.forEach((v) => el("td", {text: String(v)}, tr)); });
    return t;
  }

  function plan() {
    const p = data.plan;
    if (!p) return;
    el("h2", {text: "Plan"}, report);
    const c = p.chosen || {};
    el("p", {text: "Cluster " + p.cluster + ", " + p.devices + " devices, " + (p.precision || "f32") +
                   ": chosen dp " + c.dp + " x ep " + c.ep + " x tp " + c.tp + (c.zero_stage ? ", ZeRO-" + c.zero_stage : "") +
                   ". " + (p.why || "")}, report);
    if (Array.isArray(p.token_share))
      table(report, ["device", "kind", "token share"],
            p.token_share.map((s, i) => [i, (p.device_kinds || [])[i] || "", (100 * s).toFixed(1) + "%"]));
    if (Array.isArray(p.placement))
      table(report, ["MoE layer", "ep rank", "experts"], p.placement.flatMap((ranks, l) => ranks.map((e, r) => [l, r, e.join(", ")])));
    if (Array.isArray(p.candidates))
      table(report, ["dp", "ep", "tp", "ZeRO", "step (ms)", "memory/device (GB)", "fits"],
            p.candidates.map((k) => [k.dp, k.ep, k.tp, k.zero_stage, (1e3 * k.step_s).toFixed(3),
                                     (k.max_memory_bytes / 1e9).toFixed(3), k.fits ? "yes" : "no"]));
  }

  function events() {
    el("h2", {text: "Events"}, report);
    if (!data.migrations.length) { el("p", {class: "note", text: "no migrations"}, report); return; }
    table(report, ["after step", "layers", "experts moved", "bytes", "seconds"],
          data.migrations.map((m) => [m.step, (m.migration.layers || []).join(", "), m.migration.experts_moved,
                                      m.migration.bytes, Number(m.migration.seconds).toFixed(4)]));
  }

  try {
    if (!steps.length) throw new Error("no training steps in the metrics");
    document.getElementById("source").textContent = data.source + ": " + steps.length + " steps, " +
      data.evals.length + " evaluations";
    summary();
    let grid = section("Training");
    const shown = new Set(["step"]);
    CHARTS.forEach((c) => { c.keys.forEach((k) => shown.add(k)); chart(grid, c.title, c.unit, c.series()); });
    grid = section("Expert load");
    for (let l = 0; l < layers; ++l) heatmap(grid, l);
    const other = [...new Set(steps.flatMap(Object.keys))].filter((k) => !shown.has(k) &&
                                                                       steps.some((r) => typeof r[k] === "number"));
    if (other.length) {
      grid = section("Other metrics");
      other.forEach((k) => chart(grid, k, "", [{label: k, points: perStep(k)}]));
    }
    plan();
    events();
    status.textContent = "rendered " + charts + " charts and " + heatmaps + " heatmaps from " + steps.length + " steps";
    document.body.setAttribute("data-rendered", "yes");
  } catch (e) {
    status.textContent = "error: " + e.message;
  }
})();
