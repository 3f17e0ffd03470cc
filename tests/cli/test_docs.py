"""The docs preview: every notebook becomes a page, pages load in a real headless browser without JavaScript
errors, and every plotly figure draws (skipped when Debian's chromium is absent)."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hierbench.cli.docs import build_docs_preview, check_docs, localize_scripts, sanitize_proc_notebook

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _expected_pages():
    nbs = ROOT / "nbs"
    return [p for p in nbs.rglob("*.ipynb") if not any(s.startswith(("_", ".")) for s in p.relative_to(nbs).parts)]


@pytest.fixture(scope="module")
def docs_dir(tmp_path_factory):
    "A built preview: `HIERBENCH_DOCS_DIR` when CI has just built one, else a fresh build."
    given = os.environ.get("HIERBENCH_DOCS_DIR")
    if given and (Path(given) / "index.html").exists():
        return Path(given)
    out = tmp_path_factory.mktemp("docs")
    build_docs_preview(ROOT, out=out)
    return out


def test_every_notebook_has_a_page(docs_dir):
    pages = sorted(p.name for p in docs_dir.glob("*.html"))
    assert "index.html" in pages
    assert len(pages) == len(_expected_pages()), (pages, [p.name for p in _expected_pages()])
    assert check_docs(docs_dir, pages) == []
    index = (docs_dir / "index.html").read_text()
    for p in pages:
        assert f'href="{p}"' in index, f"index does not link {p}"


def test_sanitized_notebook_is_valid_and_tags_directives():
    raw = {
        "cells": [
            {
                "cell_type": "code",
                "id": "x",
                "metadata": {"execution": {"total": 0.5}},
                "has_sd": True,
                "source": ["#| hide\n", "secret()"],
                "outputs": [],
                "execution_count": 1,
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    nb = sanitize_proc_notebook(raw)
    assert nb.cells[0].metadata["tags"] == ["remove_cell"] and "has_sd" not in nb.cells[0]


def test_localize_scripts_leaves_no_remote_script():
    page = (
        '<head></head><script src="https://cdn.plot.ly/plotly-9.9.9.min.js"></script><script type="module">import '
        '"https://cdn.plot.ly/plotly-9.9.9.min"</script>'
    )
    out = localize_scripts(page)
    assert "https://" not in out and out.count("plotly.min.js") == 1


_PROBE = """<script>
window.__hbErrors = [];
window.addEventListener('error', e => window.__hbErrors.push(String(e.message || e)));
window.addEventListener('unhandledrejection', e => window.__hbErrors.push('unhandled: ' + String(e.reason)));
window.addEventListener('load', () => setTimeout(() => {
  const figs = document.querySelectorAll('.plotly-graph-div');
  const drawn = Array.from(figs).filter(d => d.querySelector('.main-svg')).length;
  const m = document.createElement('pre'); m.id = 'hb-probe';
  m.textContent = JSON.stringify({errors: window.__hbErrors, figures: figs.length, drawn: drawn,
    sections: document.querySelectorAll('#hb-sidebar .hb-section-title').length,
    links: document.querySelectorAll('#hb-sidebar nav a').length, search: !!document.getElementById('hb-search'),
    outline: !!document.getElementById('hb-outline'),
    results: Array.from(document.querySelectorAll('#hb-results a')).map(a => a.getAttribute('href')),
    math: document.querySelectorAll('.MathJax, .MathJax_Display').length,
    math_errors: document.querySelectorAll('.MathJax_Error, .MathJax_Preview:not(:empty)').length,
    prompts: Array.from(document.querySelectorAll('.jp-InputPrompt')).filter(p => p.offsetWidth > 0 &&
    p.textContent.trim()).length});
  document.body.appendChild(m);
}, 4000));
</script>"""


def _chromium(url: str, virtual_ms: int, timeout: int) -> subprocess.CompletedProcess:
    "Headless chromium on `url` until `virtual_ms` of virtual time have passed; the page's DOM on stdout."
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            f"--virtual-time-budget={virtual_ms}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _probe(site: Path, page: str, query: str = "") -> dict:
    "Open `page` of `site` in headless chromium and return what the injected probe saw after load."
    import html as _html

    res = _chromium((site / page).as_uri() + query, 20_000, 120)
    m = re.search(r'<pre id="hb-probe">(.*?)</pre>', res.stdout, re.S)
    if not m:
        raise AssertionError(f"{page}: page did not finish loading ({res.stderr[-300:]})")
    return json.loads(_html.unescape(m.group(1)))


@pytest.fixture(scope="module")
def probed_site(docs_dir, tmp_path_factory):
    site = tmp_path_factory.mktemp("site") / "site"
    shutil.copytree(docs_dir, site)
    for page in site.glob("*.html"):
        page.write_text(re.sub(r"(<head[^>]*>)", lambda m: m.group(1) + _PROBE, page.read_text(), count=1))
    return site


# One browser for every page: a harness page opens the pages one after another in an iframe (same folder, file URLs
# readable with --allow-file-access-from-files) and collects what each page's probe saw; a browser started per page
# cost about 2 s each, 137 pages in 4.5 minutes of CI
_HARNESS = """<!doctype html><html><head><meta charset="utf-8"></head><body><pre id="hb-all"></pre><script>
const pages = PAGES, out = {};
function next(i) {
  if (i >= pages.length) { document.getElementById('hb-all').textContent = JSON.stringify(out); return; }
  const f = document.createElement('iframe');
  f.style.width = '1280px'; f.style.height = '900px'; f.src = pages[i];
  const started = Date.now();
  const poll = () => {
    let probe = null;
    try { probe = f.contentDocument && f.contentDocument.getElementById('hb-probe'); }
    catch (e) { out[pages[i]] = {unreadable: String(e)}; }
    if (probe) out[pages[i]] = JSON.parse(probe.textContent);
    else if (!out[pages[i]] && Date.now() - started > 60000) out[pages[i]] = {unreadable: 'did not finish loading'};
    if (out[pages[i]]) { f.remove(); next(i + 1); } else setTimeout(poll, 100);
  };
  document.body.appendChild(f); setTimeout(poll, 100);
}
next(0);
</script></body></html>"""


def _probe_all(site: Path, pages: list[str]) -> dict:
    "What the injected probe saw on each of `pages`, all opened by one headless chromium (see `_HARNESS`)."
    import html as _html

    harness = site / "_harness.html"
    harness.write_text(_HARNESS.replace("PAGES", json.dumps(pages)))
    # virtual ms: each page's 60 s limit and some; real seconds: about 1 a page here, ten times that allowed
    res = _chromium(harness.as_uri(), 70_000 * len(pages), 60 + 10 * len(pages))
    m = re.search(r'<pre id="hb-all">(.*?)</pre>', res.stdout, re.S)
    if not m or not m.group(1):
        raise AssertionError(f"the harness did not finish ({res.stderr[-300:]})")
    return json.loads(_html.unescape(m.group(1)))


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_pages_load_in_headless_chromium(probed_site):
    """Every page: no JavaScript error, every plotly figure drawn, the sectioned sidebar with search, the outline, no
    prompts."""
    failures = []
    pages = sorted(p.name for p in probed_site.glob("*.html") if not p.name.startswith("_"))
    probes = _probe_all(probed_site, pages)
    assert sorted(probes) == pages
    for name in pages:
        probe = probes[name]
        if "unreadable" in probe:
            failures.append(f"{name}: {probe['unreadable']}")
            continue
        if probe["errors"]:
            failures.append(f"{name}: JavaScript errors {probe['errors']}")
        if probe["drawn"] != probe["figures"]:
            failures.append(
                f"{name}: {probe['figures'] - probe['drawn']} of {probe['figures']} plotly figures not drawn"
            )
        if probe["sections"] < 5 or probe["links"] != len(pages) or not probe["search"] or not probe["outline"]:
            failures.append(f"{name}: site frame incomplete {probe}")
        if probe["prompts"] or probe["math_errors"]:
            failures.append(f"{name}: prompts or math errors {probe}")
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_the_harness_sees_what_a_browser_of_its_own_sees(probed_site):
    "The one-browser harness reads a page as a browser opened on that page alone does (a page with figures and math)."
    broken = probed_site / "_broken.html"  # and it hears a page's error
    broken.write_text(f"<html><head>{_PROBE}</head><body><script>throw new Error('boom')</script></body></html>")
    pages = ["geometry.html", "index.html", "figures.html", broken.name]
    probes = _probe_all(probed_site, pages)
    for name in pages[:-1]:
        assert probes[name] == _probe(probed_site, name), name
    assert probes["figures.html"]["figures"] > 0 and probes["geometry.html"]["math"] > 0
    assert any("boom" in e for e in probes[broken.name]["errors"]), probes[broken.name]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_search_finds_a_symbol_of_another_page_and_math_is_typeset(probed_site):
    hits = _probe(probed_site, "index.html", "?q=DualEncoder")["results"]
    assert hits and hits[0] == "dual_encoder.html#DualEncoder", hits
    assert "geometry.html#exterior_angle" in _probe(probed_site, "scenes.html", "?q=exterior_angle")["results"]
    geometry = _probe(probed_site, "geometry.html")
    assert geometry["math"] > 20 and geometry["math_errors"] == 0, geometry  # the conventions section's $…$ typeset


def test_class_cross_links_resolve(docs_dir):
    "nbdev links classes in lower case (`dual_encoder.html#dualencoder`); every such link lands on its class's heading."
    from hierbench.cli.docs import broken_links

    bad = broken_links(docs_dir)
    public = [b for b in bad if not b[2].startswith("_") and "." not in b[2]]
    classes = [
        b
        for b in public
        if b[2] != b[2].lower()
        or any(c.isupper() for c in b[2])
        or re.search(rf'id="{re.escape(b[2])}"', (docs_dir / b[1]).read_text(), re.I)
    ]
    assert classes == [], classes
    assert bad == [], bad  # 83 before the aliases; links to private helpers and attributes become plain code


def test_source_links_stay_local(docs_dir):
    "show_doc's source links point at the preview's own highlighted module pages, at an anchor that exists."
    remote, bad = [], []
    anchors = {}
    for page in sorted(docs_dir.glob("*.html")):
        text = page.read_text()
        remote += [(page.name, h) for h in re.findall(r'href="(https://github\.com/[^"]*/blob/[^"]*)"', text)]
        for target, anchor in re.findall(r'href="source/([\w.]+\.html)(?:#([^"]*))?"', text):
            src = docs_dir / "source" / target
            if target not in anchors:
                anchors[target] = set(re.findall(r'id="([^"]+)"', src.read_text())) if src.exists() else None
            if anchors[target] is None or (anchor and anchor not in anchors[target]):
                bad.append((page.name, target, anchor))
    assert remote == [] and bad == [], (remote[:5], bad[:5])
    assert len(anchors) > 10


def test_a_widget_output_becomes_a_note_on_the_static_page():
    "No kernel on a docs page: a widget view is replaced by a note, never left as its `VBox(children=…` repr."
    view = {
        "output_type": "execute_result",
        "execution_count": 3,
        "metadata": {},
        "data": {
            "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2, "version_minor": 0},
            "text/plain": "VBox(children=(HBox(children=(Dropdown(…",
        },
    }
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "id": "x",
                "metadata": {},
                "source": "explorer",
                "outputs": [view],
                "execution_count": 3,
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    data = sanitize_proc_notebook(nb).cells[0].outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" not in data and "VBox" not in json.dumps(data)
    assert "interactive widget" in data["text/html"]


def test_links_between_pages_and_images_resolve(docs_dir):
    """Notebooks link each other by `.ipynb` path (results pages, tutorials, the tour): in the flat preview every
    relative
    link lands on a page or a file that exists (the README's forest plot included), and none is left as `.ipynb`."""
    bad = []
    for page in sorted(docs_dir.glob("*.html")):
        tags = re.findall(r"<[A-Za-z][^<>]*>", page.read_text())  # real tags (code showing a link is escaped)
        for kind, target in re.findall(r'\b(href|src)="(?![A-Za-z][A-Za-z0-9+.-]*:|#|/)([^"#?]+)', " ".join(tags)):
            if target.endswith(".ipynb") or not (docs_dir / target).exists():
                bad.append((page.name, kind, target))
    assert bad == [], bad[:10]
    index = (docs_dir / "index.html").read_text()
    assert 'src="images/claims_forest.png"' in index and 'href="results__index.html"' in index
    results = (docs_dir / "results__index.html").read_text()  # the results index, beside (not over) the tour
    assert 'href="2026-12-02_claims-ledger.html"' in results and "<title>hierbench" in index


def test_localize_relative_links_points_notebook_links_at_pages(tmp_path):
    from hierbench.cli.docs import localize_relative_links

    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "f.png").write_bytes(b"png")
    pages = {"index.ipynb": "index.html", "results/a.ipynb": "results__a.html"}
    body, files = localize_relative_links(
        '<a href="../index.ipynb#x">i</a><img src="../images/f.png"><img src="gone.png">',
        "results/a.ipynb",
        pages,
        tmp_path,
    )
    assert body == '<a href="index.html#x">i</a><img src="images/f.png"><img src="gone.png">' and files == [
        "images/f.png"
    ]
