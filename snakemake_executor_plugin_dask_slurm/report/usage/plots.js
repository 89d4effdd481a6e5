// The five plots of report.html, built with BokehJS's API (Bokeh.Plotting) from the
// run's data. A part of the page's script: report/usage/page.py puts this file and
// page.js (the data, the tables, the page) in one function, in that order, so each sees
// the other's names; page.js's build() calls these once both are read.

const Plotting = Bokeh.Plotting;
const WIDTH = 1200;
const TOOLS = "xpan,xwheel_zoom,box_zoom,reset,save";
const SINCE = "seconds since the run's start";
// How attempts that did not succeed are marked over their rule's colour (hatched, with
// an outline); the rules' palette leaves these colours out.
const MARKS = {failed: "#d62728", lost: "#000000", stopped: "#7f7f7f"};
// Bokeh's Category20.
const CATEGORY20 = [
  "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
  "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
  "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
];

// -- the plots' helpers ------------------------------------------------------------

// n colours for rules: Category20's strong ones first, then its light ones, without
// its reds and greys (they mark failed and stopped attempts).
function palette(n) {
  const marks = ["#d62728", "#ff9896", "#7f7f7f", "#c7c7c7"];
  const strong = CATEGORY20.filter((_, i) => i % 2 === 0);
  const light = CATEGORY20.filter((_, i) => i % 2 === 1);
  const colors = strong.concat(light).filter((c) => !marks.includes(c));
  return Array.from({length: Math.max(n, 1)}, (_, i) => colors[i % colors.length]);
}

// Shows a categorical column's integer as its name (hover).
function namesFormatter(names) {
  return new Bokeh.CustomJSHover({args: {names: names}, code: "return names[value] ?? String(value)"});
}

// A view of the given rows of a source.
function only(rows) {
  return new Bokeh.CDSView({filter: new Bokeh.IndexFilter({indices: rows})});
}

function f(name) {
  return {field: name};
}

// Bokeh.Plotting.figure, its grids and axes as Bokeh's Python figure makes them: each
// grid follows its axis (BokehJS's copies the axis's ticker), no axis label is "".
function figure(attrs) {
  const plot = Plotting.figure(attrs);
  for (const grid of plot.grids) {
    grid.axis = grid.dimension === 0 ? plot.xaxes[0] : plot.yaxes[0];
    grid.ticker = null;
  }
  for (const axis of plot.axes) {
    axis.axis_label = axis.axis_label === "" ? null : axis.axis_label;
  }
  return plot;
}

// A glyph's renderer as Bokeh's Python figure makes it: no hover glyph, the selection
// glyph "auto" (BokehJS's figure makes both, copies of the glyph).
function glyph(renderer) {
  renderer.hover_glyph = null;
  renderer.selection_glyph = "auto";
  return renderer;
}

function hasLegend(plot) {
  return plot.center.some((r) => r instanceof Bokeh.Legend);
}

// -- the plots --------------------------------------------------------------------

function jobTooltips() {
  return [
    ["rule", "@rule{custom}"],
    ["job", "@jobid (attempt @attempt)"],
    ["wildcards", "@wildcards"],
    ["outcome", "@outcome{custom}"],
    ["wall", "@wall{0.000} s"],
    ["cores used", "@cores{0.00} of @threads"],
    ["peak RSS", "@rss{0,0} MB (at most @rss_at_most{0,0})"],
  ];
}

function timeline(jobs, bars) {
  const labels = data.lanes;
  const rules = data.rules;
  const plot = figure({
    title: "Every worker slot: which rule ran when" +
      " (failed, lost, stopped and rerun attempts marked)",
    height: Math.min(900, Math.max(250, 14 * labels.length + 80)),
    width: WIDTH,
    sizing_mode: "stretch_width",
    x_axis_label: SINCE,
    y_range: new Bokeh.Range1d({start: Math.max(labels.length, 1) - 0.5, end: -0.5}),
    tools: TOOLS,
    active_scroll: "xwheel_zoom",
    output_backend: "canvas",
  });
  const colors = new Bokeh.LinearColorMapper({
    palette: palette(rules.length), low: -0.5, high: Math.max(rules.length, 1) - 0.5,
  });
  const ruleNames = namesFormatter(rules);
  const bar = {y: f("lane"), left: f("start"), right: f("end"), height: 0.8};
  let main;
  if (bars !== null) {
    main = glyph(plot.hbar({
      ...bar, source: source(bars),
      fill_color: {field: "rule", transform: colors}, line_color: null,
    }));
    const tips = [["rule", "@rule{custom}"], ["jobs", "@jobs"], ["from", "@start{0.0} s"], ["to", "@end{0.0} s"]];
    plot.add_tools(new Bokeh.HoverTool({renderers: [main], tooltips: tips, formatters: {"@rule": ruleNames}}));
  } else {
    main = glyph(plot.hbar({...bar, source: jobs, fill_color: {field: "rule", transform: colors}, line_color: null}));
    plot.add_tools(new Bokeh.HoverTool({
      renderers: [main],
      tooltips: jobTooltips(),
      formatters: {"@rule": ruleNames, "@outcome": namesFormatter(data.outcomes)},
    }));
  }
  for (const [outcome, rows] of Object.entries(data.marked)) {
    const color = MARKS[outcome];
    glyph(plot.hbar({
      ...bar, source: jobs, view: only(rows), fill_color: null,
      line_color: color, line_width: 2, hatch_pattern: "/", hatch_color: color,
      legend_label: outcome,
    }));
  }
  if (data.reruns.length > 0) {
    glyph(plot.hbar({
      ...bar, source: jobs, view: only(data.reruns), fill_color: null,
      line_color: "black", line_dash: "dashed", line_width: 2, legend_label: "rerun",
    }));
  }
  const ticks = labels.flatMap((label, i) => (label.endsWith(" #0") ? [i] : []));
  plot.yaxis.ticker = new Bokeh.FixedTicker({ticks: ticks});
  plot.yaxis.major_label_overrides = new Map(ticks.map((i) => [i, labels[i].slice(0, -3)]));
  plot.ygrid.ticker = new Bokeh.FixedTicker({ticks: ticks.map((t) => t - 0.5)});
  if (hasLegend(plot)) {
    plot.legend.location = "top_right";
    plot.legend.click_policy = "hide";
  }
  // The rules' colours beside the plot: each item shows the glyph of one row of its rule.
  const items = data.legend.items.map(
    ([rule, row]) => new Bokeh.LegendItem({label: rules[rule], renderers: [main], index: row}),
  );
  if (items.length > 0) {
    plot.add_layout(new Bokeh.Legend({items: items, click_policy: "none", title: data.legend.title}), "right");
  }
  return plot;
}

function overTime(xRange) {
  const plot = figure({
    title: "CPUs over time: granted (the workers'), reserved by running jobs (threads)," +
      " used (CPU time)",
    height: 260,
    width: WIDTH,
    sizing_mode: "stretch_width",
    x_range: xRange,
    x_axis_label: SINCE,
    y_axis_label: "CPUs",
    tools: TOOLS,
  });
  const s = source(Object.fromEntries(Object.entries(data.over_time).map(([k, v]) => [k, numbers(v)])));
  glyph(plot.varea({x: f("x"), y1: 0, y2: f("granted"), source: s, fill_color: "#dddddd", legend_label: "granted"}));
  glyph(plot.line({x: f("x"), y: f("reserved"), source: s, line_width: 2, color: "#1f77b4", legend_label: "reserved"}));
  glyph(plot.line({x: f("x"), y: f("used"), source: s, line_width: 2, color: "#2ca02c", legend_label: "used"}));
  plot.add_tools(new Bokeh.HoverTool({
    tooltips: [
      ["granted", "@granted{0.0}"],
      ["reserved", "@reserved{0.0}"],
      ["used", "@used{0.0}"],
      ["jobs running", "@running{0.0}"],
    ],
    mode: "vline",
  }));
  plot.legend.location = "top_right";
  return plot;
}

function workers(xRange) {
  const spans = data.spans;
  const n = spans.name.length;
  const groups = [...new Set(spans.group)].sort();
  const colors = palette(groups.length);
  const s = source({
    y: Array.from({length: n}, (_, i) => i),
    name: spans.name,
    joined: numbers(spans.joined),
    left: numbers(spans.left),
    cpus: numbers(spans.cpus),
    host: spans.host,
    group: spans.group,
    color: spans.group.map((g) => colors[groups.indexOf(g)]),
    gone: spans.gone,
  });
  const plot = figure({
    title: "Workers joining and leaving, coloured by the SLURM job their CPUs came from",
    height: Math.min(500, Math.max(160, 18 * n + 80)),
    width: WIDTH,
    sizing_mode: "stretch_width",
    x_range: xRange,
    y_range: new Bokeh.Range1d({start: Math.max(n, 1) - 0.5, end: -0.5}),
    x_axis_label: SINCE,
    tools: TOOLS,
  });
  const bars = glyph(plot.hbar({
    y: f("y"), left: f("joined"), right: f("left"), height: 0.7, color: f("color"),
    source: s, legend_field: "group",
  }));
  glyph(plot.scatter({x: f("joined"), y: f("y"), marker: "triangle", size: 8, color: "black", source: s}));
  glyph(plot.scatter({x: f("left"), y: f("y"), marker: "x", size: 8, color: "black", source: s}));
  plot.add_tools(new Bokeh.HoverTool({
    renderers: [bars],
    tooltips: [
      ["worker", "@name on @host"],
      ["CPUs", "@cpus"],
      ["from", "@group"],
      ["joined", "@joined{0.0} s"],
      ["left", "@left{0.0} s (@gone)"],
    ],
  }));
  plot.yaxis.visible = false;
  plot.legend.location = "top_right";
  return plot;
}

function ruleFigure(title, xLabel) {
  const rules = data.per_rule.rule;
  return figure({
    title: title,
    y_range: new Bokeh.FactorRange({factors: [...rules].reverse()}),
    height: Math.min(1200, Math.max(200, 22 * rules.length + 90)),
    width: WIDTH,
    sizing_mode: "stretch_width",
    x_axis_label: xLabel,
    tools: "xpan,xwheel_zoom,reset,save",
  });
}

function rulesThreads() {
  const r = data.per_rule;
  const plot = ruleFigure(
    "Per rule: threads asked (light) against cores used on average (dark) and at p90 (tick)",
    "cores",
  );
  const s = source({
    rule: r.rule,
    asked: r.threads,
    mean: numbers(r.cores),
    p90: numbers(r.p90),
    eff: numbers(r.eff),
    suggested: numbers(r.s_threads),
  });
  glyph(plot.hbar({y: f("rule"), right: f("asked"), height: 0.8, source: s, color: "#aec7e8"}));
  const used = glyph(plot.hbar({y: f("rule"), right: f("mean"), height: 0.5, source: s, color: "#1f77b4"}));
  glyph(plot.scatter({x: f("p90"), y: f("rule"), marker: "dash", size: 14, angle: 1.5708, color: "black", source: s}));
  plot.add_tools(new Bokeh.HoverTool({
    renderers: [used],
    tooltips: [
      ["rule", "@rule"],
      ["threads asked", "@asked"],
      ["cores used", "@mean{0.00} (p90 @p90{0.00})"],
      ["CPU efficiency", "@eff{0} %"],
      ["suggested", "@suggested"],
    ],
  }));
  return plot;
}

function rulesMemory() {
  const r = data.per_rule;
  const plot = ruleFigure(
    "Per rule: mem_mb asked (light; none: no bar) against peak RSS: largest (dark)," +
      " median (dot), at most (hatched: jobs that stayed below their worker's own peak);" +
      " all in MB (10^6 bytes, the unit of Snakemake's mem_mb)",
    "MB (10^6 bytes)",
  );
  const s = source({
    rule: r.rule,
    asked: numbers(r.mem),
    peak: numbers(r.rss),
    at_most: numbers(r.at_most),
    median: numbers(r.median),
    suggested: numbers(r.s_mem),
  });
  glyph(plot.hbar({y: f("rule"), right: f("asked"), height: 0.8, source: s, color: "#ffbb78"}));
  const atMost = glyph(plot.hbar({
    y: f("rule"), right: f("at_most"), height: 0.5, source: s, fill_color: null,
    line_color: "#ff7f0e", hatch_pattern: "/", hatch_color: "#ff7f0e",
  }));
  const peak = glyph(plot.hbar({y: f("rule"), right: f("peak"), height: 0.5, source: s, color: "#ff7f0e"}));
  glyph(plot.scatter({x: f("median"), y: f("rule"), size: 7, color: "black", source: s}));
  plot.add_tools(new Bokeh.HoverTool({
    renderers: [peak, atMost],
    tooltips: [
      ["rule", "@rule"],
      ["mem_mb asked", "@asked{0,0}"],
      ["peak RSS", "@peak{0,0} MB (median @median{0,0})"],
      ["peak at most", "@at_most{0,0} MB (jobs below their worker's own peak)"],
      ["suggested", "@suggested"],
    ],
  }));
  return plot;
}
