"""Server-rendered HTML of the key pages: the key search on a snapshot's page and a key's
history (a table of where its value changed, and an SVG of a numeric field by batch).
Lookups run in the API server itself (engine/lookup: no Spark, milliseconds). Every value is
escaped. Stable hooks for tests: `form#key-search`, `#key-result[data-found]`,
`#key-history` rows with `data-batch`, `svg#key-chart` points with `data-batch`."""

from __future__ import annotations

import decimal
import json
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.lookup import KeyBisect, KeyHistory, KeyLookup, KeyVersion
from airflow_provider_streamstate.engine.lookup.encodings.values import to_jsonable
from airflow_provider_streamstate.engine.overview.snapshot import SnapshotDetail
from airflow_provider_streamstate.plugins.pages import Urls, e, human_bytes, page

TIMERS = "$timers"


@dataclass(frozen=True)
class KeyQuery:
    """A key and the state it is looked up in, as a page's or the API's query parameters give
    them (text; engine/lookup/encodings/keytext.py reads the key)."""

    key: str = ""
    operator: str = "0"
    state_var: str = ""
    join_side: str = ""
    store_name: str = ""

    def lookup_args(self) -> dict[str, Any]:
        return {"operator": self.operator or "0", "state_var": self.state_var or None,
                "join_side": self.join_side or None, "store_name": self.store_name or None}

    def params(self, store: str | None = None) -> dict[str, Any]:
        return {"key": self.key, "operator": self.operator if self.operator not in ("", "0") else None,
                "state_var": self.state_var, "join_side": self.join_side, "store_name": self.store_name,
                "store": store}


def _show(value: Any) -> str:
    return json.dumps(to_jsonable(value), ensure_ascii=False)


def _option(value: str, label: str, selected: str) -> str:
    return f"<option value='{e(value)}'{' selected' if value == selected else ''}>{e(label)}</option>"


def lookup_section(urls: Urls, d: SnapshotDetail, store: str | None, q: KeyQuery, hit: KeyLookup | None,
                   error: str | None) -> str:
    """The snapshot page's "Look up a key" section: a form (GET to the same page) and, after a
    search, the key's value (or why it could not be looked up) and a link to its history."""
    if not d.operators:
        return "<h2 id=lookup>Look up a key</h2><p class=none>A stateless query: no key to look up.</p>"
    ops = "".join(_option(str(o["operator_id"]), f"{o['operator_id']} {o['name']}", q.operator or "0")
                  for o in d.operators)
    variables = sorted({v for o in d.operators for v in o.get("state_variables") or [] if v and not v.startswith("$")})
    timers = any(v and v.startswith("$") and "Timers" in v for o in d.operators for v in o.get("state_variables") or [])
    var_field = ""
    if variables or timers:
        choices = [("", "(state variable)")] + [(v, v) for v in variables] + ([(TIMERS, "timers")] if timers else [])
        var_field = ("<select name=state_var>" + "".join(_option(v, label, q.state_var) for v, label in choices)
                     + "</select>")
    side_field = ""
    if any(o["name"] == "symmetricHashJoin" for o in d.operators):
        side_field = ("<select name=join_side>" + "".join(_option(v, label, q.join_side) for v, label in
                                                          (("", "(join side)"), ("left", "left"), ("right", "right")))
                      + "</select>")
    hidden = f"<input type=hidden name=store value='{e(store)}'>" if store else ""
    out = ["<h2 id=lookup>Look up a key</h2>",
           "<form id=key-search method=get action='#lookup' class=small>"
           f"<input name=key size=48 placeholder='column=value[,column2=value2]' value='{e(q.key)}' required> "
           f"<select name=operator>{ops}</select> {var_field} {side_field}{hidden} <button type=submit>Look up</button>"
           "<div class=muted>Read from this snapshot's blobs of the key's partition only, without Spark. Values as "
           "text: <code>account=a-17</code>, several columns <code>k=5,s=eu</code>, a window "
           "<code>window={\"start\": \"2026-01-01T00:00:00Z\", \"end\": \"2026-01-01T00:10:00Z\"}</code>.</div></form>"]
    if error:
        out.append(f"<div id=key-result class=problems data-found=error>{e(error)}</div>")
    elif hit is not None:
        found = "found" if hit.found else "not found"
        body = ""
        if hit.found and hit.kind == "value":
            body = f"<pre>{e(_show(hit.value))}</pre>"
        elif hit.found:
            body = "<pre>" + e("\n".join(_show(v) for v in hit.value)) + "</pre>"
        what = hit.state_var or (f"{hit.join_side} side" if hit.join_side else f"store {hit.store}")
        history = urls.keys(d.stream, q.params(store))
        out.append(f"<div id=key-result data-found='{str(hit.found).lower()}'><b class={'good' if hit.found else 'none'}>"
                   f"{found}</b> <code>{e(_show(hit.key))}</code>{body}<div class='muted small'>operator "
                   f"{hit.operator_id} {e(hit.operator_name)}, {e(what)}, partition {hit.partition}; read "
                   f"{len(hit.files_read)} file(s), {human_bytes(hit.bytes_read)} in {hit.elapsed_ms:.1f} ms"
                   f"{' (from the cache)' if hit.cached else ''} &middot; <a href='{e(history)}'>history of this key</a>"
                   "</div></div>")
    return "".join(out)


# --- a key's history -----------------------------------------------------------------------

CHART_W, CHART_H, CHART_PAD = 900, 220, 48


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, decimal.Decimal)):
        return float(value)
    return None


def numeric_fields(versions: tuple[KeyVersion, ...]) -> list[str]:
    """Dotted paths of the numeric fields of the key's value rows (for the chart)."""
    fields: list[str] = []

    def walk(row: Any, prefix: str) -> None:
        if isinstance(row, dict):
            for k, v in row.items():
                path = f"{prefix}{k}"
                if _number(v) is not None and path not in fields:
                    fields.append(path)
                elif isinstance(v, dict):
                    walk(v, f"{path}.")

    for v in versions:
        if v.found and isinstance(v.value, dict):
            walk(v.value, "")
    return fields


def _field_value(v: KeyVersion, field: str) -> float | None:
    if not v.found:
        return None
    if field == "len()":
        return float(len(v.value)) if isinstance(v.value, (list, dict)) else None
    value: Any = v.value
    for name in field.split("."):
        value = value.get(name) if isinstance(value, dict) else None
    return _number(value)


def chart_svg(urls: Urls, stream: str, store: str | None, versions: tuple[KeyVersion, ...], field: str) -> str:
    """`field` of the key's value by batch: a step line (the value holds from one snapshot to
    the next), a dot per snapshot (hollow where the key is absent), each linking to it."""
    points = [(v, _field_value(v, field)) for v in versions]
    numbers = [y for _, y in points if y is not None]
    if not numbers:
        return "<p class=none>No numeric value to draw.</p>"
    b0, b1 = versions[0].batch_id, versions[-1].batch_id
    y0, y1 = min(numbers), max(numbers)
    if y0 == y1:
        y0, y1 = y0 - 1, y1 + 1

    def x_of(b: int) -> float:
        return round(CHART_PAD + (b - b0) / max(1, b1 - b0) * (CHART_W - 2 * CHART_PAD), 1)

    def y_of(y: float) -> float:
        return round(CHART_H - CHART_PAD / 2 - (y - y0) / (y1 - y0) * (CHART_H - CHART_PAD), 1)

    base = CHART_H - CHART_PAD / 2
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' id=key-chart width={CHART_W} height={CHART_H + 14} role=img "
           f"aria-label='{e(field)} by batch'>",
           f"<line x1={CHART_PAD} x2={CHART_W - CHART_PAD} y1={base} y2={base} style='stroke:var(--line)'/>",
           f"<text x=4 y={y_of(y1) + 4} font-size=10 fill='currentColor'>{e(_fmt(y1))}</text>",
           f"<text x=4 y={y_of(y0) + 4} font-size=10 fill='currentColor'>{e(_fmt(y0))}</text>",
           f"<text x={CHART_PAD} y={CHART_H + 10} font-size=10 fill='currentColor'>batch {b0}</text>",
           f"<text x={CHART_W - CHART_PAD} y={CHART_H + 10} font-size=10 fill='currentColor' "
           f"text-anchor=end>batch {b1}</text>"]
    path: list[str] = []
    drawing = False
    for v, y in points:
        if y is None:
            drawing = False  # absent: the line stops
            continue
        x = x_of(v.batch_id)
        path.append(f"H{x} V{y_of(y)}" if drawing else f"M{x},{y_of(y)}")
        drawing = True
    if path:
        out.append(f"<path d='{' '.join(path)}' fill=none style='stroke:var(--info)' stroke-width=1.5/>")
    for v, y in points:
        x = x_of(v.batch_id)
        tip = f"batch {v.batch_id} ({v.snapshot_id}): " + (_show(v.value) if v.found else "absent")
        dot = (f"<circle cx={x} cy={y_of(y)} r={4 if v.changed else 2.5} style='fill:var(--info)'/>" if y is not None
               else f"<circle cx={x} cy={base} r=3.5 style='fill:var(--bg);stroke:var(--muted)'/>")
        out.append(f"<a href='{e(urls.snapshot(stream, v.snapshot_id, store))}' class=point data-batch='{v.batch_id}'>"
                   f"<title>{e(tip)}</title>{dot}</a>")
    out.append("</svg>")
    return "".join(out)


def _fmt(y: float) -> str:
    return str(int(y)) if y == int(y) else f"{y:.4g}"


def key_history_page(urls: Urls, stream: str, store: str | None, q: KeyQuery, history: KeyHistory | None,
                     bisect: KeyBisect | None, error: str | None, *, field: str = "", show_all: bool = False,
                     limit: int = 100, start: str = "", end: str = "", first_where: str = "") -> str:
    """A key across the stream's snapshots: the form, the chart, the table of changes."""
    crumbs = (f"<div class=crumbs><a href='{e(urls.streams())}'>Streams</a> / "
              f"<a href='{e(urls.stream(stream, store))}'>{e(stream)}</a> / key history</div>")
    hidden = "".join(f"<input type=hidden name={k} value='{e(v)}'>" for k, v in
                     (("operator", q.operator), ("state_var", q.state_var), ("join_side", q.join_side),
                      ("store_name", q.store_name), ("store", store)) if v and not (k == "operator" and v == "0"))
    form = ("<form id=key-history-form method=get class=small>"
            f"<input name=key size=40 placeholder='column=value' value='{e(q.key)}' required> "
            f"from <input name=from size=14 placeholder='batch or snapshot' value='{e(start)}'> "
            f"to <input name=to size=14 placeholder='(newest)' value='{e(end)}'> "
            f"newest <input name=limit size=4 value='{limit}'> snapshots "
            f"first where <input name=first_where size=20 placeholder='total > 100' value='{e(first_where)}'>"
            f"{hidden} <button type=submit>Show</button></form>")
    body = [crumbs, f"<h1>Key history <code>{e(q.key)}</code></h1>", form]
    if error:
        body.append(f"<div class=problems id=key-error>{e(error)}</div>")
    if bisect is not None:
        body.append(f"<p id=key-bisect>{e(bisect.summary())}</p>")
        if bisect.first is not None:
            body.append(f"<p><a href='{e(urls.snapshot(stream, bisect.first.snapshot_id, store))}'>the first "
                        f"snapshot where it holds</a></p>")
    if history is not None:
        h = history
        what = f", {h.state_var}" if h.state_var else f", {h.join_side} side" if h.join_side else ""
        body.append(f"<div class=muted>{e(_show(h.key))} of operator {h.operator_id} ({e(h.operator_name)}{e(what)}), "
                    f"{len(h.versions)} snapshots on timeline t{h.timeline}, {len(h.changes)} change(s); read "
                    f"{h.blobs_read} blob(s) ({human_bytes(h.bytes_read)}) of its partition and {h.manifests_read} "
                    f"manifests in {h.elapsed_ms / 1000:.2f} s</div>")
        fields = numeric_fields(h.versions) or (["len()"] if h.kind != "value" else [])
        chosen = field if field in fields else (fields[0] if fields else "")
        if chosen:
            picks = " ".join(f"<a href='{e(urls.keys(stream, {**q.params(store), 'field': f}))}'"
                             f"{' class=current' if f == chosen else ''}>{e(f)}</a>" for f in fields)
            body.append(f"<h2>{e(chosen)} by batch</h2><div class=small>{picks}</div>"
                        f"<div class=svgwrap>{chart_svg(urls, stream, store, h.versions, chosen)}</div>")
        rows = h.versions if show_all else tuple(h.changes)
        toggle = urls.keys(stream, {**q.params(store), "all": "" if show_all else "1", "field": field or None})
        body.append(f"<h2>{'Every snapshot' if show_all else 'Where it changed'}</h2><div class=small>"
                    f"<a href='{e(toggle)}'>{'only the changes' if show_all else 'every snapshot'}</a></div>"
                    "<table id=key-history class=small><thead><tr><th>Batch</th><th>Changed in batches</th>"
                    "<th>Snapshot</th><th>Value</th><th>Read</th></tr></thead><tbody>")
        for v in reversed(rows):
            span = (str(v.batch_id) if v.previous_batch_id is None or v.previous_batch_id + 1 == v.batch_id
                    else f"{v.previous_batch_id + 1}..{v.batch_id}")
            value = f"<code>{e(_show(v.value))}</code>" if v.found else "<span class=none>absent</span>"
            read = "unchanged" if v.reused else f"{v.blobs_read} blob(s)"
            body.append(f"<tr data-batch='{v.batch_id}'{' class=changed' if v.changed else ''}><td>{v.batch_id}</td>"
                        f"<td>{span if v.changed else '='}</td><td><a href='{e(urls.snapshot(stream, v.snapshot_id, store))}'>"
                        f"<code>{e(v.snapshot_id)}</code></a></td><td>{value}</td><td class=muted>{read}</td></tr>")
        body.append("</tbody></table>")
    return page(f"{stream}: key history", "".join(body))
