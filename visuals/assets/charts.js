/* Hand-written SVG charts for the trio-batcher pages: line/step charts and grouped bars,
 * with axes, units, reference lines, a legend and a hover read-out. No dependencies, so
 * the pages work offline. Exposes the global `Charts`. */
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";

  function svgEl(tag, attrs, parent) {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
    if (parent) parent.appendChild(el);
    return el;
  }

  /** Round tick values covering [min, max], about `count` of them. */
  function niceTicks(min, max, count) {
    if (!(max > min)) max = min + 1;
    const span = max - min;
    const raw = span / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const step = (norm >= 5 ? 10 : norm >= 2 ? 5 : norm >= 1 ? 2 : 1) * mag;
    const first = Math.ceil(min / step - 1e-9) * step;
    const ticks = [];
    for (let v = first; v <= max + step * 1e-9; v += step) ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return { ticks, step };
  }

  function niceMax(max) {
    if (!(max > 0)) return 1;
    const { ticks, step } = niceTicks(0, max, 5);
    const last = ticks[ticks.length - 1];
    return last >= max ? last : last + step;
  }

  function tickFormat(step) {
    const digits = step >= 1 ? 0 : Math.min(4, Math.ceil(-Math.log10(step)));
    return (v) => Number(v).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  const color = (i) => "var(--c" + (i % 6) + ")";

  function legend(container, series) {
    const box = document.createElement("div");
    box.className = "legend";
    series.forEach((s, i) => {
      if (s.legend === false) return;
      const item = document.createElement("span");
      const sw = document.createElement("span");
      sw.className = "sw" + (s.dash ? " dash" : "") + (s.dotted ? " dot" : "");
      sw.style.borderTopColor = s.color || color(i);
      item.appendChild(sw);
      item.appendChild(document.createTextNode(s.name));
      box.appendChild(item);
    });
    container.appendChild(box);
  }

  /** The y value of a series at x: a step series holds its last value; a line series
   * gives its nearest point. */
  function valueAt(s, x) {
    const pts = s.points;
    if (!pts.length) return null;
    if (s.step) {
      let lo = 0;
      let hi = pts.length - 1;
      if (x < pts[0][0]) return null;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (pts[mid][0] <= x) lo = mid;
        else hi = mid - 1;
      }
      return pts[lo][1];
    }
    let best = pts[0];
    for (const p of pts) if (Math.abs(p[0] - x) < Math.abs(best[0] - x)) best = p;
    return best[1];
  }

  /**
   * Line / step chart.
   * opts: {height, x: {label, min, max, format}, y: {label, min, max, format},
   *        series: [{name, points: [[x, y]...], step, dash, dotted, width, color, dots, fill, legend}],
   *        hlines: [{y, label, color, dash}], vlines: [{x, label, color}],
   *        bands: [{x0, x1, color, opacity}], tooltip: bool, testid}
   * Returns {setPlayhead(x)}.
   */
  function line(container, opts) {
    container.innerHTML = "";
    container.classList.add("chart");
    const series = opts.series || [];
    if (opts.legend !== false) legend(container, series);
    const width = Math.max(320, container.clientWidth || 640);
    const height = opts.height || 260;
    const m = { l: 58, r: 18, t: 10, b: 40 };
    const pw = width - m.l - m.r;
    const ph = height - m.t - m.b;
    const xs = series.flatMap((s) => s.points.map((p) => p[0]));
    const ys = series.flatMap((s) => s.points.map((p) => p[1])).filter((v) => v !== null && Number.isFinite(v));
    for (const hl of opts.hlines || []) if (Number.isFinite(hl.y)) ys.push(hl.y);
    const xo = opts.x || {};
    const yo = opts.y || {};
    const xmin = xo.min !== undefined ? xo.min : Math.min(...xs, 0);
    const xmax = xo.max !== undefined ? xo.max : Math.max(...xs, xmin + 1);
    const ymin = yo.min !== undefined ? yo.min : 0;
    const ymax = yo.max !== undefined ? yo.max : niceMax(Math.max(...ys, ymin + 1e-9) * 1.04);
    const sx = (x) => m.l + ((x - xmin) / (xmax - xmin || 1)) * pw;
    const sy = (y) => m.t + ph - ((y - ymin) / (ymax - ymin || 1)) * ph;
    const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": opts.title || "chart" });
    if (opts.testid) svg.setAttribute("data-testid", opts.testid);
    container.appendChild(svg);
    const defs = svgEl("defs", {}, svg);
    const clipId = "clip" + Math.random().toString(36).slice(2);
    svgEl("rect", { x: m.l, y: m.t - 2, width: pw, height: ph + 4 }, svgEl("clipPath", { id: clipId }, defs));

    // grid + axes
    const yt = niceTicks(ymin, ymax, Math.max(3, Math.round(ph / 45)));
    const yfmt = yo.format || tickFormat(yt.step);
    const ax = svgEl("g", { class: "axis" }, svg);
    for (const v of yt.ticks) {
      if (v < ymin - 1e-9 || v > ymax + 1e-9) continue;
      svgEl("line", { class: "gridline", x1: m.l, x2: m.l + pw, y1: sy(v), y2: sy(v) }, ax);
      svgEl("text", { x: m.l - 6, y: sy(v) + 4, "text-anchor": "end" }, ax).textContent = yfmt(v);
    }
    const xt = niceTicks(xmin, xmax, Math.max(3, Math.round(pw / 90)));
    const xfmt = xo.format || tickFormat(xt.step);
    for (const v of xt.ticks) {
      if (v < xmin - 1e-9 || v > xmax + 1e-9) continue;
      svgEl("line", { class: "axis-line", x1: sx(v), x2: sx(v), y1: m.t + ph, y2: m.t + ph + 4 }, ax);
      svgEl("text", { x: sx(v), y: m.t + ph + 16, "text-anchor": "middle" }, ax).textContent = xfmt(v);
    }
    svgEl("line", { class: "axis-line", x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph }, ax);
    svgEl("line", { class: "axis-line", x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph }, ax);
    if (xo.label) svgEl("text", { class: "axis-label", x: m.l + pw / 2, y: height - 4, "text-anchor": "middle" }, svg).textContent = xo.label;
    if (yo.label) {
      svgEl("text", { class: "axis-label", x: 0, y: 0, "text-anchor": "middle", transform: `translate(13 ${m.t + ph / 2}) rotate(-90)` }, svg).textContent = yo.label;
    }

    const plot = svgEl("g", { "clip-path": `url(#${clipId})` }, svg);
    for (const b of opts.bands || []) {
      svgEl("rect", { x: sx(b.x0), y: m.t, width: Math.max(1, sx(b.x1) - sx(b.x0)), height: ph, fill: b.color || "var(--c5)", opacity: b.opacity || 0.12 }, plot);
    }
    series.forEach((s, i) => {
      const c = s.color || color(i);
      const pts = s.points.filter((p) => p[1] !== null && Number.isFinite(p[1]));
      if (!pts.length) return;
      let d = "";
      pts.forEach((p, j) => {
        const X = sx(p[0]);
        const Y = sy(p[1]);
        if (j === 0) d += `M${X},${Y}`;
        else if (s.step) d += `H${X}V${Y}`;
        else d += `L${X},${Y}`;
      });
      if (s.step && s.extendTo !== undefined) d += `H${sx(s.extendTo)}`;
      if (s.fill) {
        const last = s.step && s.extendTo !== undefined ? sx(s.extendTo) : sx(pts[pts.length - 1][0]);
        svgEl("path", { d: `${d}V${sy(ymin)}H${sx(pts[0][0])}Z`, fill: c, opacity: s.fillOpacity || 0.14, stroke: "none" }, plot);
        void last;
      }
      svgEl("path", { d, fill: "none", stroke: c, "stroke-width": s.width || 2, "stroke-dasharray": s.dash ? "6 4" : s.dotted ? "2 3" : null, "stroke-linejoin": "round" }, plot);
      if (s.dots) for (const p of pts) svgEl("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 3.5, fill: c }, plot);
    });
    for (const hl of opts.hlines || []) {
      if (!Number.isFinite(hl.y)) continue;
      const c = hl.color || "var(--c5)";
      svgEl("line", { x1: m.l, x2: m.l + pw, y1: sy(hl.y), y2: sy(hl.y), stroke: c, "stroke-width": 1.3, "stroke-dasharray": hl.dash === false ? null : "5 4" }, svg);
      if (hl.label) svgEl("text", { class: "ref-label", x: m.l + pw - 4, y: sy(hl.y) - 4, "text-anchor": "end", fill: c }, svg).textContent = hl.label;
    }
    for (const vl of opts.vlines || []) {
      const c = vl.color || "var(--c5)";
      svgEl("line", { x1: sx(vl.x), x2: sx(vl.x), y1: m.t, y2: m.t + ph, stroke: c, "stroke-width": 1.2, "stroke-dasharray": "4 3" }, svg);
      if (vl.label) svgEl("text", { class: "ref-label", x: sx(vl.x) + 4, y: m.t + 11, fill: c }, svg).textContent = vl.label;
    }
    const playhead = svgEl("line", { x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph, stroke: "var(--ink)", "stroke-width": 1, opacity: 0, "data-role": "playhead" }, svg);

    if (opts.tooltip !== false && series.length) {
      const tip = document.createElement("div");
      tip.className = "tooltip";
      container.appendChild(tip);
      const cross = svgEl("line", { y1: m.t, y2: m.t + ph, stroke: "var(--faint)", "stroke-width": 1, opacity: 0 }, svg);
      const hit = svgEl("rect", { x: m.l, y: m.t, width: pw, height: ph, fill: "transparent" }, svg);
      const xf = xo.tipFormat || ((v) => Number(v).toLocaleString("en-US", { maximumFractionDigits: 1 }));
      const yf = yo.tipFormat || ((v) => Number(v).toLocaleString("en-US", { maximumFractionDigits: 2 }));
      hit.addEventListener("mousemove", (ev) => {
        const rect = svg.getBoundingClientRect();
        const px = ((ev.clientX - rect.left) / rect.width) * width;
        const x = xmin + ((px - m.l) / pw) * (xmax - xmin);
        cross.setAttribute("x1", px);
        cross.setAttribute("x2", px);
        cross.setAttribute("opacity", 1);
        const lines = [`<b>${xo.tipLabel || xo.label || "x"}: ${xf(x)}</b>`];
        series.forEach((s, i) => {
          const v = valueAt(s, x);
          if (v === null || v === undefined) return;
          lines.push(`<span style="color:${s.color || color(i)}">■</span> ${s.name}: ${yf(v)}`);
        });
        tip.innerHTML = lines.join("<br>");
        tip.style.display = "block";
        const left = (px / width) * rect.width;
        tip.style.left = Math.min(left + 12, rect.width - tip.offsetWidth - 4) + "px";
        tip.style.top = (m.t / height) * rect.height + 30 + "px";
      });
      hit.addEventListener("mouseleave", () => {
        tip.style.display = "none";
        cross.setAttribute("opacity", 0);
      });
    }
    return {
      setPlayhead(x) {
        if (x === null || x === undefined) {
          playhead.setAttribute("opacity", 0);
          return;
        }
        const X = Math.max(m.l, Math.min(m.l + pw, sx(x)));
        playhead.setAttribute("x1", X);
        playhead.setAttribute("x2", X);
        playhead.setAttribute("opacity", 0.55);
      },
      sx,
      sy,
      svg,
      plot: { left: m.l, top: m.t, width: pw, height: ph },
    };
  }

  /**
   * Grouped vertical bars.
   * opts: {height, categories: [...], series: [{name, values: [...], color}],
   *        y: {label, format}, valueFormat, hlines, testid}
   */
  function bars(container, opts) {
    container.innerHTML = "";
    container.classList.add("chart");
    const series = opts.series;
    if (opts.legend !== false) legend(container, series);
    const width = Math.max(320, container.clientWidth || 640);
    const height = opts.height || 240;
    const m = { l: 58, r: 12, t: 16, b: 40 };
    const pw = width - m.l - m.r;
    const ph = height - m.t - m.b;
    const all = series.flatMap((s) => s.values).filter((v) => v !== null && Number.isFinite(v));
    for (const hl of opts.hlines || []) all.push(hl.y);
    const ymin = Math.min(0, ...all);
    const ymax = niceMax(Math.max(...all, 1e-9) * 1.08);
    const sy = (y) => m.t + ph - ((y - ymin) / (ymax - ymin)) * ph;
    const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img" });
    if (opts.testid) svg.setAttribute("data-testid", opts.testid);
    container.appendChild(svg);
    const yt = niceTicks(ymin, ymax, 5);
    const yfmt = (opts.y && opts.y.format) || tickFormat(yt.step);
    const ax = svgEl("g", { class: "axis" }, svg);
    for (const v of yt.ticks) {
      svgEl("line", { class: "gridline", x1: m.l, x2: m.l + pw, y1: sy(v), y2: sy(v) }, ax);
      svgEl("text", { x: m.l - 6, y: sy(v) + 4, "text-anchor": "end" }, ax).textContent = yfmt(v);
    }
    svgEl("line", { class: "axis-line", x1: m.l, x2: m.l + pw, y1: sy(0), y2: sy(0) }, ax);
    if (opts.y && opts.y.label) {
      svgEl("text", { class: "axis-label", x: 0, y: 0, "text-anchor": "middle", transform: `translate(13 ${m.t + ph / 2}) rotate(-90)` }, svg).textContent = opts.y.label;
    }
    const n = opts.categories.length;
    const groupW = pw / n;
    const barW = Math.min(46, (groupW * 0.76) / series.length);
    const vf = opts.valueFormat || ((v) => Number(v).toLocaleString("en-US", { maximumFractionDigits: Math.abs(v) >= 100 ? 0 : 1 }));
    const labels = opts.labels !== false && barW >= 26;
    opts.categories.forEach((cat, ci) => {
      const gx = m.l + groupW * ci + (groupW - barW * series.length) / 2;
      series.forEach((s, si) => {
        const v = s.values[ci];
        if (v === null || v === undefined || !Number.isFinite(v)) return;
        const y0 = sy(Math.max(0, v));
        const y1 = sy(Math.min(0, v));
        const rect = svgEl("rect", { x: gx + si * barW + 1, y: y0, width: barW - 2, height: Math.max(1, y1 - y0), fill: s.color || color(si), rx: 2 }, svg);
        svgEl("title", {}, rect).textContent = `${s.name} · ${cat}: ${vf(v)}`;
        if (labels) svgEl("text", { x: gx + si * barW + barW / 2, y: y0 - 3, "text-anchor": "middle", class: "tick" }, svg).textContent = vf(v);
      });
      svgEl("text", { x: m.l + groupW * ci + groupW / 2, y: m.t + ph + 16, "text-anchor": "middle", class: "tick" }, svg).textContent = cat;
    });
    for (const hl of opts.hlines || []) {
      const c = hl.color || "var(--c5)";
      svgEl("line", { x1: m.l, x2: m.l + pw, y1: sy(hl.y), y2: sy(hl.y), stroke: c, "stroke-dasharray": "5 4", "stroke-width": 1.3 }, svg);
      if (hl.label) svgEl("text", { class: "ref-label", x: m.l + pw - 4, y: sy(hl.y) - 4, "text-anchor": "end", fill: c }, svg).textContent = hl.label;
    }
  }

  window.Charts = { line, bars, niceTicks, valueAt, color };
})();
