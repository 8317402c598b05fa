/* Shared helpers for the trio-batcher pages: loading data (served or from file://),
 * number formatting and small DOM builders. Classic script (no ES modules: Chromium
 * refuses module scripts from file://), exposes one global, `TB`. */
(function () {
  "use strict";

  const served = location.protocol === "http:" || location.protocol === "https:";

  /** Load a classic script (a data/*.js file that sets a global). Works from file://. */
  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = src;
      s.onload = () => resolve();
      s.onerror = () => reject(new Error("could not load " + src));
      document.head.appendChild(s);
    });
  }

  /**
   * The data a page shows. When the page is served over HTTP, `data/<name>.json` is
   * fetched (it may be newer than the bundled script); otherwise, or when that fails,
   * `data/<name>.js` is loaded, which sets `window[globalName]`.
   * Resolves to {data, from} where `from` names the file actually used. When neither file
   * is there -- an installed wheel carries no recorded runs, they stay in the repository's
   * visuals/data/ -- rejects with an error marked `noData`, which showError words as such.
   */
  async function loadData(name, globalName) {
    if (served) {
      try {
        const r = await fetch("data/" + name + ".json", { cache: "no-store" });
        if (r.ok) return { data: await r.json(), from: "data/" + name + ".json" };
      } catch (e) {
        /* fall back to the bundled script below */
      }
    }
    if (window[globalName] === undefined) {
      try {
        await loadScript("data/" + name + ".js");
      } catch (e) {
        throw Object.assign(
          new Error(
            "No recorded data (data/" + name + "): recorded runs stay in the " +
              "repository's visuals/data/ (a checkout, or an editable install, serves them); " +
              "an installed package carries none. `trio-batcher bench` records a run there " +
              "(the lab: pip install -e ./bench).",
          ),
          { noData: true },
        );
      }
    }
    if (window[globalName] === undefined) throw new Error("data/" + name + ".js did not set " + globalName);
    return { data: window[globalName], from: "data/" + name + ".js" };
  }

  /** Fixed-decimal number with thousands separators; "–" for null/undefined/NaN. */
  function fmt(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    const d = digits === undefined ? 1 : digits;
    return Number(v).toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
  }

  /** A number with its unit, e.g. fmtU(12.34, "ms", 1) → "12.3 ms". */
  function fmtU(v, unit, digits) {
    const s = fmt(v, digits);
    return s === "–" ? s : s + (unit ? " " + unit : "");
  }

  function fmtUsd(v) {
    if (v === null || v === undefined) return "–";
    if (v === 0) return "$0";
    if (Math.abs(v) < 0.01) return "$" + Number(v).toPrecision(3);
    return "$" + fmt(v, 4);
  }

  /** Element builder: h("td", {class: "num", "data-testid": "x"}, "text", child, ...). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") el.textContent = v;
      else if (k === "html") el.innerHTML = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return el;
  }

  /** A KPI tile. `value` is preformatted text; `testid` marks it for the browser tests. */
  function tile(label, value, unit, sub, testid) {
    return h(
      "div",
      { class: "tile" },
      h("div", { class: "label" }, label),
      h("div", { class: "value" }, h("span", { "data-testid": testid }, value), unit ? h("span", { class: "unit" }, unit) : null),
      sub ? h("div", { class: "sub" }, sub) : null,
    );
  }

  /** <table> from column specs [{label, num}] and rows of cells (strings or nodes). */
  function table(columns, rows, opts) {
    const o = opts || {};
    const thead = h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : null }, c.label))));
    const tbody = h(
      "tbody",
      {},
      rows.map((r, i) =>
        h(
          "tr",
          { class: o.rowClass ? o.rowClass(i) : null, "data-testid": o.rowTestid ? o.rowTestid(i) : null },
          r.map((cell, j) => {
            const c = columns[j];
            const attrs = { class: c.num ? "num" : null };
            if (cell && typeof cell === "object" && !(cell instanceof Node)) {
              Object.assign(attrs, cell.attrs || {});
              return h("td", attrs, cell.node !== undefined ? cell.node : cell.text);
            }
            return h("td", attrs, cell);
          }),
        ),
      ),
    );
    return h("div", { class: "table-scroll" }, h("table", { class: o.compact ? "compact" : null }, thead, tbody));
  }

  function badge(met) {
    if (met === true) return h("span", { class: "badge met" }, "met");
    if (met === false) return h("span", { class: "badge missed" }, "MISSED");
    return h("span", { class: "badge na" }, "n/a");
  }

  function showError(where, err) {
    const text = String(err && err.message ? err.message : err);
    const box =
      err && err.noData
        ? h("div", { class: "banner saved", "data-testid": "no-data" }, text)
        : h("div", { class: "banner error", "data-testid": "load-error" }, h("span", { class: "dot error" }), text);
    where.prepend(box);
  }

  /** Re-run `fn` when the window is resized (debounced), so SVG charts fit their boxes. */
  function onResize(fn) {
    let timer = null;
    let lastWidth = window.innerWidth;
    window.addEventListener("resize", () => {
      if (window.innerWidth === lastWidth) return;
      lastWidth = window.innerWidth;
      clearTimeout(timer);
      timer = setTimeout(fn, 150);
    });
  }

  window.TB = { served, loadScript, loadData, fmt, fmtU, fmtUsd, h, tile, table, badge, showError, onResize };
})();
