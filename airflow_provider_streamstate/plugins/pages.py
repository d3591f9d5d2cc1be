"""Server-rendered HTML of the Streams pages: plain HTML and one inline SVG (the history's
timelines), no build step. Every value from a store, a record or a DAG run is escaped.
Elements a browser test looks for carry stable ids and classes: `#streams` rows with
`data-stream`, `.state-<state>`, `.timeline[data-timeline][data-current]` in the picture,
`.validation.failed` on a snapshot page."""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import UTC, datetime
from html import escape
from typing import Any, NamedTuple
from urllib.parse import quote, urlencode

from airflow_provider_streamstate.engine.overview.history import HistoryEntry, SnapshotBrief, StreamHistory
from airflow_provider_streamstate.engine.overview.snapshot import SnapshotDetail
from airflow_provider_streamstate.engine.overview.streams import StreamRow
from airflow_provider_streamstate.plugins.commands import RecoveryCalls
from airflow_provider_streamstate.plugins.sources import ConfiguredStream, RunRef

CSS = """
:root { --fg:#1f2933; --muted:#616e7c; --line:#d9e2ec; --bg:#fff; --head:#f5f7fa; --ok:#1f7a3f; --bad:#b42318;
        --warn:#b54708; --info:#175cd3; --cur:#6941c6; }
@media (prefers-color-scheme: dark) { :root { --fg:#e4e7eb; --muted:#9aa5b1; --line:#323f4b; --bg:#1a1d21;
        --head:#22262b; --ok:#4ade80; --bad:#f87171; --warn:#fbbf24; --info:#60a5fa; --cur:#a78bfa; } }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg);
       margin: 0; padding: 16px 24px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
a { color: var(--info); text-decoration: none; } a:hover { text-decoration: underline; }
.crumbs { color: var(--muted); margin-bottom: 12px; } .muted { color: var(--muted); }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: 6px 8px;
        border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--head); font-weight: 600; position: sticky; top: 0; }
code, pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; } h1 code { font-size: 17px; }
pre { background: var(--head); padding: 8px 10px; border-radius: 6px; overflow-x: auto; margin: 4px 0 12px;
      white-space: pre-wrap; overflow-wrap: anywhere; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
         border: 1px solid currentColor; white-space: nowrap; }
.state-running, .state-starting, .passed, .good { color: var(--ok); }
.state-dead, .state-failed, .failed { color: var(--bad); }
.state-stopped, .state-absent, .state-unknown, .none { color: var(--muted); }
.warn { color: var(--warn); } .current { color: var(--cur); }
.problems { color: var(--warn); margin: 8px 0; } .kv td:first-child { color: var(--muted); width: 220px; }
.svgwrap { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; padding: 4px; }
.legend span { margin-right: 14px; } .small { font-size: 12px; }
"""


def e(value: Any) -> str:
    return escape("" if value is None else str(value))


def watermark(ms: int | None) -> str:
    """A batch's event-time watermark; Spark records 0 for a query that defines none (or
    whose watermark has not advanced yet): that is no watermark, not the epoch."""
    if not ms:
        return "<span class=none>none</span> <span class='muted small'>(no watermark defined, or not advanced yet)</span>"
    when = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"{e(when)} <span class='muted small'>({ms} ms)</span>"


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m {s % 60}s ago"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m ago"
    return f"{s // 86400}d {s % 86400 // 3600}h ago"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


class Urls:
    """The pages' URLs below the app's mount point (`root`, e.g. `/streamstate`)."""

    def __init__(self, root: str, airflow_root: str = "") -> None:
        self.root = root.rstrip("/")
        self.airflow_root = airflow_root.rstrip("/")

    @staticmethod
    def _q(store: str | None) -> str:
        return f"?{urlencode({'store': store})}" if store else ""

    def streams(self) -> str:
        return f"{self.root}/streams"

    def stream(self, stream: str, store: str | None = None, page: int | None = None) -> str:
        params = {k: v for k, v in (("store", store), ("page", page)) if v}
        return f"{self.root}/streams/{quote(stream, safe='')}" + (f"?{urlencode(params)}" if params else "")

    def snapshot(self, stream: str, snapshot_id: str, store: str | None = None) -> str:
        return f"{self.root}/streams/{quote(stream, safe='')}/snapshots/{quote(snapshot_id, safe='')}{self._q(store)}"

    def snapshot_hrefs(self, stream: str, store: str | None = None) -> tuple[str, str]:
        """What comes before and after a quoted snapshot id in `e(snapshot(stream, id, store))`,
        escaped once: a history draws a link per snapshot (a quoted id holds nothing HTML escapes)."""
        return e(f"{self.root}/streams/{quote(stream, safe='')}/snapshots/"), e(self._q(store))

    def diff(self, stream: str, snapshot_id: str, store: str | None = None) -> str:
        return (f"{self.root}/streams/{quote(stream, safe='')}/snapshots/{quote(snapshot_id, safe='')}/diff"
                f"{self._q(store)}")

    def data_docs(self, stream: str, snapshot_id: str, suite: str, store: str | None = None) -> str:
        return (f"{self.root}/streams/{quote(stream, safe='')}/snapshots/{quote(snapshot_id, safe='')}/data-docs/"
                f"{quote(suite, safe='')}/index.html{self._q(store)}")

    def keys(self, stream: str, params: dict[str, Any]) -> str:
        """A key's history page; `params`: key, operator, state_var, ... (empty ones left out)."""
        shown = {k: v for k, v in params.items() if v not in (None, "")}
        return f"{self.root}/streams/{quote(stream, safe='')}/keys" + (f"?{urlencode(shown)}" if shown else "")

    def lag_api(self, stream: str) -> str:
        return f"{self.root}/api/streams/{quote(stream, safe='')}/lag"

    def run(self, run: RunRef) -> str:
        return f"{self.airflow_root}/dags/{quote(run.dag_id, safe='')}/runs/{quote(run.run_id, safe='')}"


def page(title: str, body: str, *, script: str = "") -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{e(title)}</title>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'><style>{CSS}</style></head>"
            f"<body>{body}{f'<script>{script}</script>' if script else ''}</body></html>")


def _snap_cell(urls: Urls, stream: str, brief: SnapshotBrief | None, store: str | None = None) -> str:
    if brief is None:
        return "<span class=none>none</span>"
    return (f"<a href='{e(urls.snapshot(stream, brief.snapshot_id, store))}' title='{e(brief.snapshot_id)}'>"
            f"batch {brief.batch_id}</a>{' <span class=current>t' + str(brief.timeline) + '</span>' if brief.timeline > 1 else ''}"
            f"<div class='muted small'>{age(brief.age_s)}</div>")


def _problems(lines: list[str]) -> str:
    return "".join(f"<div class=problems>&#9888; {e(p)}</div>" for p in lines)


LAG_SCRIPT = """
for (const cell of document.querySelectorAll('td[data-lag-url]')) {
  fetch(cell.dataset.lagUrl, {credentials: 'same-origin'}).then(r => r.json()).then(d => {
    cell.textContent = d.available ? (d.total_lag + ' records') : 'n/a';
    cell.title = d.message || ''; cell.className = d.available ? (d.total_lag > 0 ? 'warn' : 'good') : 'none';
  }).catch(() => { cell.textContent = 'n/a'; });
}
"""


def streams_page(urls: Urls, rows: list[tuple[ConfiguredStream, StreamRow]], problems: list[str]) -> str:
    body = ["<h1>Streams</h1><div class=crumbs>Every stream of the Variable <code>streamstate_streams</code> "
            "and of recent DAG runs; state from the records beside each checkpoint, snapshots from its store.</div>",
            _problems(problems)]
    if not rows:
        body.append("<p class=muted>No stream configured: set the Variable <code>streamstate_streams</code> "
                    "or run a streamstate DAG with a <code>streams</code> param.</p>")
    else:
        body.append("<table id=streams><thead><tr><th>Stream</th><th>State</th><th>Last batch</th>"
                    "<th>Kafka lag</th><th>Newest snapshot</th><th>Newest known-good</th><th>DR replica</th>"
                    "<th>Retention</th><th>DAG runs</th></tr></thead><tbody>")
        for cs, row in rows:
            st = row.state
            last = "-" if st.last_batch is None else f"{st.last_batch}<div class='muted small'>{age(st.last_batch_age_s)}</div>"
            if row.dr is None:
                dr = "<span class=none>no DR store</span>"
            else:
                cls = "good" if row.dr.snapshots_behind == 0 else "warn"
                dr = f"<span class={cls}>{e(row.dr.message)}</span><div class='muted small'>{e(row.dr.store)}</div>"
            r = row.retention
            ret = ("-" if r is None else
                   f"{r.snapshots} snapshots<div class='muted small'>{r.pinned} pinned, {r.abandoned} abandoned, "
                   f"{r.deleted_awaiting_gc} awaiting GC</div>")
            runs = "".join(f"<div class=small><a target=_top href='{e(urls.run(run))}'>{e(run.dag_id)}</a> "
                           f"<span class='state-{e(run.state)}'>{e(run.state)}</span></div>" for run in cs.runs) or "-"
            body.append(
                f"<tr data-stream='{e(row.stream)}'><td><a href='{e(urls.stream(row.stream))}'><b>{e(row.stream)}</b></a>"
                f"<div class='muted small'>{e(row.store)}</div>{_problems(row.problems)}</td>"
                f"<td><span class='badge state state-{e(st.state)}' title='{e(st.message)}'>{e(st.state)}</span>"
                f"<div class='muted small'>{e(st.message)}</div></td><td>{last}</td>"
                f"<td data-lag-url='{e(urls.lag_api(row.stream))}' class=none>…</td>"
                f"<td class=newest>{_snap_cell(urls, row.stream, row.newest)}</td>"
                f"<td>{_snap_cell(urls, row.stream, row.newest_known_good)}</td><td>{dr}</td><td>{ret}</td>"
                f"<td>{runs}</td></tr>")
        body.append("</tbody></table>")
    return page("Streams", "".join(body), script=LAG_SCRIPT)


# --- the history picture -------------------------------------------------------------------

X_STEP, LANE, PAD_X, PAD_Y, R = 18, 46, 110, 28, 6  # PAD_X: room for the lane labels
X_STEP_MAX, X_SPAN = 56, 900  # a short history is spread over about X_SPAN pixels, not squeezed
PIN = "&#9873;"  # a flag: every system's fonts have it; an emoji pin is a blank box without an emoji font


def _color(s: HistoryEntry) -> str:
    if not s.validations:
        return "var(--muted)"
    if s.failed:
        return "var(--bad)"
    if s.known_good:
        return "var(--ok)"
    return "var(--muted)"


def timeline_svg(urls: Urls, h: StreamHistory, store: str | None) -> str:
    """Snapshots left to right in creation order, one lane per timeline (the current one
    highlighted); a line from each snapshot to its parent, so a branch leaves its lane. A long
    history (more than DOTS_MAX snapshots) is drawn by time instead (`time_svg`)."""
    if len(h.snapshots) > DOTS_MAX:
        return time_svg(urls, h, store)
    lanes = {t.timeline: i for i, t in enumerate(sorted(h.timelines, key=lambda t: t.timeline))}
    step = max(X_STEP, min(X_STEP_MAX, X_SPAN // max(1, len(h.snapshots))))
    pos = {s.snapshot_id: (PAD_X + i * step, PAD_Y + lanes.get(s.timeline, 0) * LANE) for i, s in enumerate(h.snapshots)}
    width = PAD_X + max(1, len(h.snapshots)) * step + 40
    height = PAD_Y + max(1, len(lanes)) * LANE
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' id=history width={width} height={height} role=img "
           f"aria-label='snapshots of {e(h.stream)} on {len(lanes)} timelines'>"]
    out += _lanes(h, lanes, width)
    for s in h.snapshots:
        if s.parent in pos:
            (x1, y1), (x2, y2) = pos[s.parent], pos[s.snapshot_id]
            out.append(f"<path d='M{x1},{y1} C{x1 + 8},{y2} {x2 - 8},{y2} {x2},{y2}' fill=none "
                       f"style='stroke:var(--muted)' stroke-width='1.2' opacity='.7'/>")
    for s in h.snapshots:
        x, y = pos[s.snapshot_id]
        ring = "stroke:var(--cur);stroke-width:2" if s.on_current_timeline else "stroke:var(--bg)"
        out.append(f"<a href='{e(urls.snapshot(h.stream, s.snapshot_id, store))}' class=snapshot "
                   f"data-snapshot='{e(s.snapshot_id)}'><title>{e(_tip(s))}</title>"
                   f"<circle cx={x} cy={y} r={R} style='fill:{_color(s)};{ring}'/>")
        out += _marks(s, x, y)
        out.append("</a>")
    out.append("</svg>")
    return "".join(out)


def _tip(s: HistoryEntry) -> str:
    tip = (f"{s.snapshot_id}\nbatch {s.batch_id}, timeline {s.timeline}"
           f"{'' if s.on_current_timeline else ' (abandoned)'}\n{s.created_at}")
    if s.validations or s.pinned or s.in_dr or s.clones:
        tip += ("".join(f"\n{suite}: {'passed' if ok else 'FAILED' if ok is False else 'unreadable'}"
                        for suite, ok in s.validations.items())
                + ("\npinned" if s.pinned else "") + ("\nin the DR store" if s.in_dr else "")
                + "".join(f"\nclone {c}" for c in s.clones))
    return tip


def _lanes(h: StreamHistory, lanes: dict[int, int], width: int) -> list[str]:
    out = []
    for t in h.timelines:
        y = PAD_Y + lanes[t.timeline] * LANE
        cls = "current" if t.current else "muted"
        label = f"t{t.timeline}{' (current)' if t.current else ''}"
        out.append(f"<g class=timeline data-timeline='{t.timeline}' data-current='{str(t.current).lower()}'>"
                   f"<line x1={PAD_X - 10} x2={width - 20} y1={y} y2={y} style='stroke:var(--line)' "
                   f"stroke-width='{3 if t.current else 1}'/><text x=4 y={y + 4} class={cls} fill='currentColor' "
                   f"font-size=12>{e(label)}</text></g>")
    return out


def _marks(s: HistoryEntry, x: float, y: float) -> list[str]:
    out = []
    if s.pinned:
        out.append(f"<text x={x - 4} y={y - 9} font-size=11 fill='currentColor'>{PIN}</text>")
    if s.in_dr:
        out.append(f"<rect x={x - 3} y={y + 9} width=6 height=6 style='fill:var(--info)'/>")
    if s.clones:
        out.append(f"<path d='M{x},{y + 17} l4,4 l-4,4 l-4,-4 z' style='fill:var(--warn)'/>")
    return out


DOTS_MAX = 120  # snapshots drawn one dot each; more are drawn on a time axis
TIME_SPAN = 1000  # pixels of a time axis, whatever the number of snapshots


class TimeLayout(NamedTuple):
    """Where `time_svg` puts a history's snapshots: the picture up to the first snapshot (the
    lanes, the time axis, the branch lines), each snapshot's place, the branch points (drawn
    as dots) and what comes before and after a snapshot id in its link."""

    head: str
    pos: dict[str, tuple[float, int]]
    branch_points: set[str]
    hrefs: tuple[str, str]


def time_layout(urls: Urls, h: StreamHistory, store: str | None) -> TimeLayout:
    from airflow_provider_streamstate.engine.overview.history import parse_time

    lanes = {t.timeline: i for i, t in enumerate(sorted(h.timelines, key=lambda t: t.timeline))}
    times = [parse_time(s.created_at).timestamp() for s in h.snapshots]
    t0, t1 = min(times), max(times)
    span = max(t1 - t0, 1.0)
    width = PAD_X + TIME_SPAN + 40
    height = PAD_Y + max(1, len(lanes)) * LANE + 18

    def x_of(t: float) -> float:
        return round(PAD_X + (t - t0) / span * TIME_SPAN, 1)

    pos = {s.snapshot_id: (x_of(t), PAD_Y + lanes.get(s.timeline, 0) * LANE) for s, t in zip(h.snapshots, times, strict=True)}
    branch_points = {t.branch_snapshot for t in h.timelines if t.branch_snapshot}
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' id=history class=by-time width={width} height={height} role=img "
           f"aria-label='{len(h.snapshots)} snapshots of {e(h.stream)} by time on {len(lanes)} timelines'>"]
    out += _lanes(h, lanes, width)
    for i in range(5):  # the time axis, in UTC as the snapshots' times are
        at = t0 + span * i / 4
        x = x_of(at)
        when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M") + (" UTC" if i == 4 else "")
        out.append(f"<text x={x} y={height - 4} font-size=10 fill='currentColor' class=muted "
                   f"text-anchor='{'start' if i == 0 else 'end' if i == 4 else 'middle'}'>{e(when)}</text>")
    for line in h.timelines:
        if line.branch_snapshot in pos:
            (x1, y1) = pos[line.branch_snapshot]
            y2 = PAD_Y + lanes[line.timeline] * LANE
            out.append(f"<path d='M{x1},{y1} L{x1 + 6},{y2}' fill=none style='stroke:var(--muted)' stroke-width='1.2'/>")
    return TimeLayout("".join(out), pos, branch_points, urls.snapshot_hrefs(h.stream, store))


def time_tick(layout: TimeLayout, s: HistoryEntry) -> str:
    """One snapshot on the time axis: a tick, or a dot with its marks when it is worth finding."""
    x, y = layout.pos[s.snapshot_id]
    marked = s.validations or s.pinned or s.clones or s.snapshot_id in layout.branch_points
    sid = quote(s.snapshot_id, safe="")  # a valid id as it is, and nothing HTML escapes
    before, after = layout.hrefs
    out = [f"<a href='{before}{sid}{after}' class='snapshot{' marked' if marked else ''}' "
           f"data-snapshot='{sid}'><title>{e(_tip(s))}</title>"]
    if marked:
        out.append(f"<circle cx={x} cy={y} r=5 style='fill:{_color(s)};stroke:var(--bg)'/>")
        out += _marks(s, x, y)
    else:
        out.append(f"<line x1={x} x2={x} y1={y - 6} y2={y + 6} style='stroke:{_color(s)}' stroke-width=1.5/>")
    out.append("</a>")
    return "".join(out)


def time_svg(urls: Urls, h: StreamHistory, store: str | None) -> str:
    """A long history on a time axis of fixed width: each snapshot a thin tick at its creation
    time in its timeline's lane, the ones worth finding (failed or passed a validation, pinned,
    cloned, a branch point) a dot on top, and the timelines' branch points joined."""
    layout = time_layout(urls, h, store)
    return layout.head + "".join(time_tick(layout, s) for s in h.snapshots) + "</svg>"


def same_layout(a: StreamHistory, b: StreamHistory) -> bool:
    """Whether two histories put every snapshot at the same place on the time axis: the same
    timelines, and the same snapshots (ids, times, timelines) in the same order."""
    return (a.stream == b.stream and a.timelines == b.timelines and len(a.snapshots) == len(b.snapshots)
            and all(x is y or (x.snapshot_id, x.created_at, x.timeline) == (y.snapshot_id, y.created_at, y.timeline)
                    for x, y in zip(a.snapshots, b.snapshots, strict=True)))


class _Drawn(NamedTuple):
    history: StreamHistory
    svg: str
    layout: TimeLayout | None  # a picture by time: its layout and each snapshot's part, to draw again in part
    ticks: list[str]


SVG_KEPT = 16  # pictures kept drawn: a history unchanged since (the same object) is not drawn again
_SVGS: OrderedDict[tuple[str, str, str | None], _Drawn] = OrderedDict()
_SVGS_LOCK = threading.Lock()


def drawn_svg(urls: Urls, h: StreamHistory, store: str | None) -> str:
    """`timeline_svg`, kept for the history it was drawn from: the pages' server gets the same
    `StreamHistory` again while nothing in the store changed (overview.history.stream_history),
    and a 1,000-snapshot picture costs more to draw than the rest of its page. When the history
    changed but its snapshots stay where they were (a validation, pin, clone or replica since),
    only the snapshots whose entry changed are drawn again: the same picture as drawn whole."""
    key = (urls.root, f"{h.store}\n{h.stream}\n{h.dr_store}", store)
    with _SVGS_LOCK:
        kept = _SVGS.get(key)
    if kept is not None and kept.history is h:
        return kept.svg
    if len(h.snapshots) <= DOTS_MAX:
        drawn = _Drawn(h, timeline_svg(urls, h, store), None, [])
    elif kept is not None and kept.layout is not None and same_layout(kept.history, h):
        layout = kept.layout
        ticks = [tick if old is s or old == s else time_tick(layout, s)
                 for old, s, tick in zip(kept.history.snapshots, h.snapshots, kept.ticks, strict=True)]
        drawn = _Drawn(h, layout.head + "".join(ticks) + "</svg>", layout, ticks)
    else:
        layout = time_layout(urls, h, store)
        ticks = [time_tick(layout, s) for s in h.snapshots]
        drawn = _Drawn(h, layout.head + "".join(ticks) + "</svg>", layout, ticks)
    with _SVGS_LOCK:
        _SVGS[key] = drawn
        _SVGS.move_to_end(key)
        while len(_SVGS) > SVG_KEPT:
            _SVGS.popitem(last=False)
    return drawn.svg


PAGE_SIZE = 50  # rows of a history's snapshot table per page


def history_page(urls: Urls, h: StreamHistory, cs: ConfiguredStream | None, store_param: str | None,
                 page_no: int = 1) -> str:
    """`page_no`: which PAGE_SIZE rows of the snapshot table (newest first) to show."""
    store = store_param
    pages = max(1, -(-len(h.snapshots) // PAGE_SIZE))
    page_no = min(max(1, page_no), pages)
    good = sum(1 for s in h.snapshots if s.known_good)
    failed = sum(1 for s in h.snapshots if s.failed)
    body = [f"<div class=crumbs><a href='{e(urls.streams())}'>Streams</a> / {e(h.stream)}</div>",
            f"<h1>{e(h.stream)}</h1><div class=muted>{len(h.snapshots)} snapshots in <code>{e(h.store)}</code>"
            f"{f' &middot; DR store <code>{e(h.dr_store)}</code>' if h.dr_store else ''} &middot; "
            f"{len(h.timelines)} timeline(s), current <span class=current>t{h.current_timeline}</span>"
            f" &middot; {good} known-good, {failed} failed validation</div>", _problems(h.problems)]
    if cs and cs.other_stores:
        body.append("<div class='muted small'>Earlier runs used other stores too: " + ", ".join(
            f"<a href='{e(urls.stream(h.stream, s))}'>{e(s)}</a>" for s in cs.other_stores) + "</div>")
    if cs and cs.dr_store and store != cs.dr_store:
        body.append(f"<div class=small><a href='{e(urls.stream(h.stream, cs.dr_store))}'>the DR store's copy</a></div>")
    body.append("<h2>Timelines</h2><div class='legend small'><span class=good>&#9679; known-good</span>"
                "<span class=failed>&#9679; failed validation</span><span class=none>&#9679; not validated</span>"
                "<span class=current>&#9711; on the current timeline</span><span>" + PIN + " pinned</span>"
                "<span style='color:var(--info)'>&#9632; in the DR store</span>"
                "<span class=warn>&#9670; clone taken</span></div>")
    body.append(f"<div class=svgwrap id=svgwrap>{drawn_svg(urls, h, store)}</div>")
    body.append("<table class=small><thead><tr><th>Timeline</th><th>Branched from</th><th>Why</th>"
                "<th>Snapshots</th></tr></thead><tbody>")
    for t in h.timelines:
        frm = ("root" if t.branch_snapshot is None else
               f"<a href='{e(urls.snapshot(h.stream, t.branch_snapshot, store))}'>batch {t.branch_batch} of t{t.parent_timeline}</a>")
        body.append(f"<tr class='timeline-row{' current' if t.current else ''}' data-timeline='{t.timeline}'>"
                    f"<td>t{t.timeline}{' (current)' if t.current else ''}</td><td>{frm}</td><td>{e(t.reason)}</td>"
                    f"<td>{t.snapshots}</td></tr>")
    body.append("</tbody></table>")
    if h.clones:
        body.append("<h2>Clones</h2><table class=small><thead><tr><th>Clone</th><th>From snapshot</th>"
                    "<th>Checkpoint</th><th>Expires</th></tr></thead><tbody>")
        for c in h.clones:
            body.append(f"<tr><td><a href='{e(urls.stream(c.clone, h.store))}'>{e(c.clone)}</a></td>"
                        f"<td><a href='{e(urls.snapshot(h.stream, c.snapshot_id, store))}'>{e(c.snapshot_id)}</a></td>"
                        f"<td><code>{e(c.checkpoint)}</code></td><td>{e(c.expires_at)}</td></tr>")
        body.append("</tbody></table>")
    newest_first = list(reversed(h.snapshots))
    shown = newest_first[(page_no - 1) * PAGE_SIZE: page_no * PAGE_SIZE]
    nav = _pager(urls, h.stream, store, page_no, pages, len(h.snapshots))
    body.append(f"<h2>Snapshots (newest first)</h2>{nav}<table id=snapshots class=small data-page='{page_no}' "
                f"data-pages='{pages}'><thead><tr><th>Snapshot</th>"
                "<th>Batch</th><th>Timeline</th><th>Created</th><th>Validation</th><th>Size</th><th>Pinned</th>"
                "<th>DR</th><th>Clones</th></tr></thead><tbody>")
    for s in shown:
        checks = " ".join(f"<span class='badge {'passed' if ok else 'failed' if ok is False else 'none'}'>"
                          f"{e(suite)}: {'passed' if ok else 'FAILED' if ok is False else 'unreadable'}</span>"
                          for suite, ok in s.validations.items()) or "<span class=none>-</span>"
        tl = f"t{s.timeline}" + ("" if s.on_current_timeline else " <span class=muted>(abandoned)</span>")
        dr = "-" if s.in_dr is None else ("yes" if s.in_dr else "<span class=warn>no</span>")
        body.append(f"<tr data-snapshot='{e(s.snapshot_id)}'><td><a href='{e(urls.snapshot(h.stream, s.snapshot_id, store))}'>"
                    f"<code>{e(s.snapshot_id)}</code></a></td><td>{s.batch_id}</td><td>{tl}</td><td>{e(s.created_at)}</td>"
                    f"<td>{checks}</td><td>{human_bytes(s.bytes_total)}</td><td>{PIN if s.pinned else ''}</td>"
                    f"<td>{dr}</td><td>{e(', '.join(s.clones))}</td></tr>")
    body.append(f"</tbody></table>{nav}")
    script = "const w = document.getElementById('svgwrap'); if (w) w.scrollLeft = w.scrollWidth;"
    return page(f"{h.stream}: history", "".join(body), script=script)


def snapshot_page(urls: Urls, d: SnapshotDetail, calls: RecoveryCalls, store_param: str | None,
                  data_docs: dict[str, str], lookup: str = "") -> str:
    """`lookup`: the key search section (plugins/key_pages.py), shown after the operators."""
    store = store_param
    status = ("<span class='badge good'>known-good</span>" if d.known_good else
              "<span class='badge failed'>FAILED validation</span>" if any(v.success is False for v in d.validations)
              else "<span class='badge none'>not validated</span>")
    tl = (f"t{d.timeline}" + (" (current)" if d.on_current_timeline and d.timeline == d.current_timeline else "")
          + ("" if d.on_current_timeline else f" <span class=warn>abandoned: the current timeline is t{d.current_timeline}</span>"))
    parent = (f"<a href='{e(urls.snapshot(d.stream, d.parent, store))}'><code>{e(d.parent)}</code></a>" if d.parent else "none")
    offsets = "".join(f"<tr><td>{e(t)}</td><td>{e(p)}</td><td>{o}</td></tr>"
                      for t, parts in sorted(d.kafka_offsets.items()) for p, o in sorted(parts.items(), key=lambda x: int(x[0]) if x[0].isdigit() else 0))
    ops = "".join(f"<tr><td>{o['operator_id']}</td><td>{e(o['name'])}</td><td>{e(', '.join(o['stores']))}</td>"
                  f"<td>{o['partitions']}</td><td>{o['state_version']}</td></tr>" for o in d.operators)
    rows = [("Batch", str(d.batch_id)), ("Timeline", tl), ("Created", f"{e(d.created_at)} ({age(d.age_s)})"),
            ("Parent", parent),
            ("Watermark", watermark(d.watermark_ms)),
            ("Files / blobs / bytes", f"{d.files} / {d.blobs} / {human_bytes(d.bytes_total)} ({d.bytes_total} bytes)"),
            ("State store", e(d.state_store)), ("Spark", e(d.spark_version or "-")), ("Query id", f"<code>{e(d.query_id)}</code>"),
            ("Taken from", f"<code>{e(d.checkpoint)}</code>"),
            ("Labels", e(", ".join(f"{k}={v}" for k, v in sorted(d.labels.items())) or "-")),
            ("Pinned", (f"yes {PIN}" + (f" <span class=pin-reason>{e(d.pin_reason)}</span>" if d.pin_reason else "")
                        + (f" <span class='muted small'>since {e(d.pinned_at)}</span>" if d.pinned_at else ""))
             if d.pinned else "no"),
            ("In the DR store", "-" if d.in_dr is None else f"{'yes' if d.in_dr else 'no'} ({e(d.dr_store)})"),
            ("Clones taken from it", e(", ".join(d.clones) or "none"))]
    body = [f"<div class=crumbs><a href='{e(urls.streams())}'>Streams</a> / "
            f"<a href='{e(urls.stream(d.stream, store))}'>{e(d.stream)}</a> / {e(d.snapshot_id)}</div>",
            f"<h1><code>{e(d.snapshot_id)}</code> {status}</h1><div class=muted>in <code>{e(d.store)}</code></div>",
            "<h2>Manifest</h2><table class=kv>" + "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows) + "</table>",
            "<h2>Kafka offsets (next to read)</h2><table class=small><thead><tr><th>Topic</th><th>Partition</th>"
            f"<th>Offset</th></tr></thead><tbody>{offsets or '<tr><td colspan=3 class=none>none</td></tr>'}</tbody></table>",
            "<h2>State operators</h2><table class=small><thead><tr><th>Id</th><th>Operator</th><th>Stores</th>"
            f"<th>Partitions</th><th>State version</th></tr></thead><tbody>{ops or '<tr><td colspan=5 class=none>stateless</td></tr>'}"
            "</tbody></table>", lookup, "<h2>Validation</h2>"]
    if not d.validations:
        body.append("<p class=none>No validation record: validate it with ValidateSnapshotOperator or "
                    "<code>streamstate validate</code>.</p>")
    for v in d.validations:
        cls = "passed" if v.success else "failed" if v.success is False else "none"
        word = "passed" if v.success else "FAILED" if v.success is False else "unreadable"
        docs = v.data_docs or data_docs.get(v.suite)
        href = (docs if docs and docs.startswith(("http://", "https://"))
                else urls.data_docs(d.stream, d.snapshot_id, v.suite, store) if v.data_docs else None)
        docs_link = f" &middot; <a class=data-docs target=_blank href='{e(href)}'>GX Data Docs</a>" if href else ""
        body.append(f"<div class='validation {cls}' data-suite='{e(v.suite)}'><b>{e(v.suite)}</b>: "
                    f"<span class='badge {cls}'>{word}</span> <span class='muted small'>{v.evaluated} expectation(s), "
                    f"{e(v.validated_at)}, GX {e(v.gx_version)}</span>{docs_link}"
                    + (f"<div class=small>Data Docs: <code>{e(docs)}</code></div>" if docs else "")
                    + (f"<div class=problems>{e(v.error)}</div>" if v.error else "")
                    + "".join(f"<div class='small failed'>&#10007; {e(f)}</div>" for f in v.failed) + "</div>")
    body.append("<h2>Compared with its parent</h2>")
    if d.parent:
        body.append(f"<p><a href='{e(urls.diff(d.stream, d.snapshot_id, store))}'>Compute the state diff against the "
                    "parent</a> <span class='muted small'>(runs a Spark job: may take a minute)</span></p>")
    else:
        body.append("<p class=none>No parent: the first snapshot of its line.</p>")
    body.append("<h2>Restore or clone it</h2><div class=small>Roll the stream back to it (stop the stream first; "
                "a new timeline starts):</div>"
                f"<pre>{e(calls.restore_cli)}</pre><pre>{e(calls.restore_operator)}</pre>"
                "<div class=small>Clone it into a new stream (its own checkpoint and query id):</div>"
                f"<pre>{e(calls.clone_cli)}</pre><pre>{e(calls.clone_operator)}</pre>")
    return page(f"{d.stream}: {d.snapshot_id}", "".join(body))


def _pager(urls: Urls, stream: str, store: str | None, page_no: int, pages: int, total: int) -> str:
    if pages == 1:
        return ""
    first = (page_no - 1) * PAGE_SIZE + 1
    links = [f"<a class=newer href='{e(urls.stream(stream, store, page_no - 1))}'>&larr; newer</a>" if page_no > 1 else "",
             f"<span class=muted>snapshots {first}-{min(total, page_no * PAGE_SIZE)} of {total}, "
             f"page {page_no} of {pages}</span>",
             f"<a class=older href='{e(urls.stream(stream, store, page_no + 1))}'>older &rarr;</a>" if page_no < pages else ""]
    return "<div class='pager small'>" + " &middot; ".join(x for x in links if x) + "</div>"


def diff_page(urls: Urls, stream: str, snapshot_id: str, parent: str | None, store: str | None,
              result: dict[str, Any] | None, error: str | None) -> str:
    body = [f"<div class=crumbs><a href='{e(urls.streams())}'>Streams</a> / "
            f"<a href='{e(urls.stream(stream, store))}'>{e(stream)}</a> / "
            f"<a href='{e(urls.snapshot(stream, snapshot_id, store))}'>{e(snapshot_id)}</a> / diff</div>",
            f"<h1>State diff: parent &rarr; <code>{e(snapshot_id)}</code></h1>"]
    if error:
        body.append(f"<div class=problems>{e(error)}</div>")
    if result:
        body.append("<table class=kv>" + "".join(
            f"<tr><td>{k}</td><td>{e(result.get(k))}</td></tr>" for k in ("a", "b", "added", "removed", "changed", "unchanged", "identical"))
            + "</table>")
        for kind in ("added", "removed", "changed"):
            sample = (result.get("samples") or {}).get(kind) or []
            if sample:
                body.append(f"<h2>{kind} (sample)</h2><pre>" + e("\n".join(str(x) for x in sample)) + "</pre>")
    return page(f"{stream}: diff of {snapshot_id}", "".join(body))


def message_page(urls: Urls, title: str, message: str) -> str:
    return page(title, f"<div class=crumbs><a href='{e(urls.streams())}'>Streams</a></div><h1>{e(title)}</h1>"
                       f"<p>{e(message)}</p>")
