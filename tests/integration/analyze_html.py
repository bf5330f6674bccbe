"""analyze_html.py DOM JSON - checks the DOM Chromium built from `onnxq analyze --html`
against the same run's --json (an independent reading of the page: the browser's parse,
not onnxq's text). Prints one "ok"/"FAIL" line per check; exit 1 when one failed.

What the page must show (issue 16, analyze --html):
  - the fully quantized model's fold SQNR per output (table#outputs);
  - every point, ranked worst first, with its kind and SQNR (table#points);
  - an error plot along the graph order: one mark per point (svg line.a / line.w, titled
    "NAME SQNR dB"), left to right in the points' node order, each mark reaching the SQNR
    its title states on the plot's own dB axis (read from the tick labels "N dB");
  - what a fallback would buy: a "share" column summing to 100 % over the points.
"""
import json
import math
import sys
from html.parser import HTMLParser

fails = 0


def check(cond, msg):
    global fails
    print(("ok    " if cond else "FAIL  ") + msg)
    fails += 0 if cond else 1


class Dom(HTMLParser):
    """Collects table rows (by table id), svg lines and svg texts, with attributes."""

    def __init__(self):
        super().__init__()
        self.tables = {}
        self.table = None
        self.row = None
        self.cell = None
        self.lines = []
        self.texts = []
        self.text = None
        self.title_of = None
        self.links = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("src", "href"):
            if k in a:
                self.links.append(a[k])
        if tag == "table":
            self.table = a.get("id", "")
            self.tables[self.table] = []
        elif tag == "tr" and self.table is not None:
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = ""
        elif tag == "line":
            self.lines.append(dict(a, title=""))
        elif tag == "text":
            self.text = [a, ""]
        elif tag == "title" and self.lines:
            self.title_of = self.lines[-1]

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.row.append(self.cell.strip())
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.tables[self.table].append(self.row)
            self.row = None
        elif tag == "table":
            self.table = None
        elif tag == "text" and self.text:
            self.texts.append(self.text)
            self.text = None
        elif tag == "title":
            self.title_of = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
        if self.text is not None:
            self.text[1] += data
        if self.title_of is not None:
            self.title_of["title"] += data


def num(s):
    return math.inf if s.strip() in ("inf", "+inf") else float(s)


dom = Dom()
dom.feed(open(sys.argv[1], encoding="utf-8").read())
js = json.load(open(sys.argv[2]))
pts = sorted(js["points"], key=lambda p: p["rank"])

check(not dom.links, "self-contained: no src/href in the page (%s)" % dom.links[:3])

outs = dom.tables.get("outputs", [])[1:]
check(len(outs) == len(js["outputs"]), "outputs table: %d rows for %d outputs" % (len(outs), len(js["outputs"])))
for row, o in zip(outs, js["outputs"]):
    v = o["quantized_sqnr_db"]
    same = num(row[1]) == v if not math.isfinite(v) else abs(num(row[1]) - v) < 0.06
    check(row[0] == o["name"] and same, "output %s: %s dB in the page, %s in the JSON" % (o["name"], row[1], v))

rows = dom.tables.get("points", [])
head, rows = (rows[0], rows[1:]) if rows else ([], [])
check(len(rows) == len(pts) and len(pts) > 0, "points table: %d rows for %d points" % (len(rows), len(pts)))
col = {h: i for i, h in enumerate(head)}
order_ok = all(r[col["point"]] == p["name"] and r[col["kind"]] == p["kind"] and
               abs(num(r[col["SQNR (dB)"]]) - p["sqnr_db"]) < 0.06 for r, p in zip(rows, pts))
check(order_ok, "points table: names, kinds and SQNR in rank order, as the JSON")
dbs = [num(r[col["SQNR (dB)"]]) for r in rows]
check(dbs == sorted(dbs), "points table: worst (lowest SQNR) first")
if "share" in col:
    share = sum(float(r[col["share"]].rstrip("% ")) for r in rows)
    # The page's definition: a point's noise power is 10^(-SQNR/10) of the output's power;
    # its share is that over the sum of all points' (from the JSON's SQNR).
    noise = [10 ** (-p["sqnr_db"] / 10) for p in pts]
    want = [100 * x / sum(noise) for x in noise]
    got = [float(r[col["share"]].rstrip("% ")) for r in rows]
    check(all(abs(g - w) <= 0.051 for g, w in zip(got, want)),
          "share column = each point's noise over all points' noise (first %.1f %%, by hand %.2f %%)" % (got[0], want[0]))
    # each row is rounded to 0.1 %
    check(abs(share - 100) <= 0.05 * len(rows) + 1e-9, "share column sums to %.1f %%" % share)
else:
    check(False, "points table has a share column")

# The plot's dB axis from its tick labels: "N dB" text at y, grid line at y - 3.
ticks = []
for a, t in dom.texts:
    t = t.strip()
    if t.endswith(" dB") and t[:-3].lstrip("-").isdigit():
        ticks.append((float(t[:-3]), float(a["y"]) - 3))
check(len(ticks) >= 2, "plot: %d dB tick labels" % len(ticks))
(d0, y0), (d1, y1) = min(ticks), max(ticks)
top = min(y for _, y in ticks)
marks = [m for m in dom.lines if m.get("class") in ("a", "w")]
check(len(marks) == len(pts), "plot: %d marks for %d points" % (len(marks), len(pts)))
by_name = {p["name"]: p for p in pts}
good_kind = good_level = True
for m in marks:
    name, _, db = m["title"].rpartition(" ")[0].rpartition(" ")
    p = by_name.get(name)
    if p is None:
        good_kind = False
        continue
    good_kind &= m["class"] == ("a" if p["kind"] == "activation" else "w")
    want = y0 + (min(max(p["sqnr_db"], d0), d1) - d0) * (y1 - y0) / (d1 - d0)
    good_level &= abs(float(m["y2"]) - want) < 1.0 and abs(float(m["y1"]) - top) < 1.0
check(good_kind, "plot: one mark per point, activations class a, weights class w")
check(good_level, "plot: each mark spans from the top to its SQNR on the dB axis")
xs = [(by_name[m["title"].rpartition(" ")[0].rpartition(" ")[0]]["node_order"], float(m["x1"]))
      for m in marks if m["title"].rpartition(" ")[0].rpartition(" ")[0] in by_name]
xs.sort()
check(all(a[1] <= b[1] for a, b in zip(xs, xs[1:])), "plot: marks left to right in graph order")
sys.exit(1 if fails else 0)
