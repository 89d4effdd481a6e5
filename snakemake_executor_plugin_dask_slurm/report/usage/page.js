// report.html's script: the run's data (the JSON block "usage-data" that
// report/usage/page_data.py writes: see its docstring), the two tables, and the page,
// with BokehJS's own API; the plots are in plots.js, which report/usage/page.py puts
// before this file in one function. BokehJS (bokeh, widgets, tables, api) is inlined
// before. Sets data-report-ready on <html> once every view is rendered, after
// data-report-rendered: what was rendered, read back from the views
// (window.usageReport.rendered(); the browser test compares it with the data).

const root = document.documentElement;
const data = JSON.parse(document.getElementById("usage-data").textContent);
const Tables = Bokeh.Tables;
// The tables' columns: field, title, and how a cell shows its value: a number format, or
// the names of a categorical column's integers (none: as it is).
const RULE_COLUMNS = [
  ["rule", "rule"], ["attempts", "attempts"], ["failed", "not done"], ["threads", "threads"],
  ["cores", "cores used", "0.00"], ["eff", "CPU eff. %", "0,0"], ["mem", "mem_mb", "0,0"],
  ["rss", "peak MB", "0,0"], ["at_most", "or at most", "0,0"], ["p50", "wall p50 s", "0.00"],
  ["p95", "p95 s", "0.00"], ["max", "max s", "0.00"], ["unused", "unused CPU-s", "0,0"],
  ["s_threads", "→ threads", "0,0"], ["s_mem", "→ mem_mb", "0,0"],
  ["s_runtime", "→ runtime min", "0,0"], ["varies", "varies widely"],
];
const JOB_COLUMNS = [
  ["rule", "rule", data.rules], ["jobid", "job"], ["attempt", "attempt"], ["rerun", "rerun"],
  ["wildcards", "wildcards"], ["way", "way", data.ways],
  ["outcome", "outcome", data.outcomes], ["worker", "worker", data.workers],
  ["threads", "threads"], ["mem_mb", "mem_mb", "0,0"], ["start", "start s", "0.00"],
  ["wait", "wait s", "0.000"], ["wall", "wall s", "0.000"], ["cpu", "CPU s", "0.000"],
  ["cores", "cores", "0.00"], ["efficiency", "CPU eff. %", "0,0"], ["rss", "peak MB", "0,0"],
  ["rss_at_most", "peak at most MB", "0,0"],
];

// -- the data -------------------------------------------------------------------

// A column: a JSON list as it is, a packed one ({dtype, gzip}: little-endian bytes,
// gzipped, in base64) as a typed array.
async function unpack(column) {
  if (Array.isArray(column)) {
    return column;
  }
  const bytes = Uint8Array.from(atob(column.gzip), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const buffer = await new Response(stream).arrayBuffer();
  return column.dtype === "float32" ? new Float32Array(buffer) : new Int32Array(buffer);
}

async function unpacked(columns) {
  const out = {};
  for (const [name, column] of Object.entries(columns)) {
    out[name] = await unpack(column);
  }
  return out;
}

// Figures that may be missing (JSON's null) as numbers (NaN).
function numbers(values) {
  return values.map((v) => (v === null ? NaN : v));
}

function source(columns) {
  return new Bokeh.ColumnDataSource({data: columns});
}

// A table cell showing a categorical integer as its (escaped) name.
function template(names) {
  const list = "[" + names.map((n) => JSON.stringify(n)).join(", ") + "]";
  return new Tables.HTMLTemplateFormatter({template: "<%- " + list + "[value] %>"});
}

// -- the tables -----------------------------------------------------------------

function header() {
  return new Bokeh.Widgets.Div({text: data.header, sizing_mode: "stretch_width"});
}

// A table's columns (RULE_COLUMNS, JOB_COLUMNS), one number formatter per format.
function columns(specs) {
  const formats = new Map();
  return specs.map(([field, title, shown]) => {
    if (shown === undefined) {
      return new Tables.TableColumn({field, title});
    }
    if (Array.isArray(shown)) {
      return new Tables.TableColumn({field, title, formatter: template(shown)});
    }
    if (!formats.has(shown)) {
      formats.set(shown, new Tables.NumberFormatter({format: shown}));
    }
    return new Tables.TableColumn({field, title, formatter: formats.get(shown)});
  });
}

function titled(text, table) {
  return new Bokeh.Column({
    children: [new Bokeh.Widgets.Div({text: text}), table],
    sizing_mode: "stretch_width",
  });
}

function rulesTable() {
  const r = data.per_rule;
  const s = source(Object.fromEntries(RULE_COLUMNS.map(([field]) => [field, numbers(r[field])])));
  const table = new Tables.DataTable({
    source: s, columns: columns(RULE_COLUMNS), height: Math.min(600, 28 * r.rule.length + 40),
    sizing_mode: "stretch_width", index_position: null,
  });
  return titled(`<h3>Rules (${r.rule.length}), as in ${data.files.rules}</h3>`, table);
}

function jobsTable(jobs) {
  const table = new Tables.DataTable({
    source: jobs, columns: columns(JOB_COLUMNS), height: 500, sizing_mode: "stretch_width",
    index_position: null,
  });
  const count = data.jobs.jobid.length;
  return titled(`<h3>Every attempt (${count}), as in ${data.files.jobs}; click a title to sort</h3>`, table);
}

// -- what was rendered ---------------------------------------------------------------

// Read back from the rendered views: each plot's title, size and glyphs (their rows,
// and how many of them the glyph draws), each table's rows in its source and its grid.
function rendered() {
  const plots = [];
  const tables = [];
  for (const view of Bokeh.index.all_views()) {
    const model = view.model;
    if (model instanceof Bokeh.Plot) {
      plots.push({
        title: model.title.text,
        width: view.bbox.width,
        height: view.bbox.height,
        glyphs: model.renderers.map((r) => ({
          glyph: r.glyph.type,
          rows: r.data_source.get_length(),
          drawn: view.renderer_views.get(r).glyph.data_size,
        })),
        legends: model.panels.filter((p) => p instanceof Bokeh.Legend).map((l) => l.items.length),
      });
    } else if (model instanceof Tables.DataTable) {
      tables.push({
        rows: model.source.get_length(),
        shown: view.grid.getDataLength(),
        columns: model.columns.length,
        height: view.bbox.height,
      });
    }
  }
  return {plots, tables};
}

// -- the page ------------------------------------------------------------------------

// The page: the plots and tables in one column, rendered into #usage-report.
async function build() {
  const jobs = source(await unpacked(data.jobs));
  const plot = timeline(jobs, data.bars === null ? null : await unpacked(data.bars));
  const doc = new Bokeh.Document();
  doc.add_root(new Bokeh.Column({
    children: [
      header(),
      plot,
      overTime(plot.x_range),
      workers(plot.x_range),
      rulesThreads(),
      rulesMemory(),
      rulesTable(),
      jobsTable(jobs),
    ],
    sizing_mode: "stretch_width",
  }));
  window.usageReport = {data, rendered};
  doc.on_event("document_ready", () => {
    root.setAttribute("data-report-rendered", JSON.stringify(rendered()));
    root.setAttribute("data-report-ready", "1");
  });
  await Plotting.show(doc, "#usage-report");
}

build();
