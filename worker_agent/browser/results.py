"""Reading a search results page: by selectors, by SearXNG's JSON, or by the generic extractor.

The generic extractor finds the results of a page it has never seen: the main repeated list of
links. Every link outside navigation, headers, footers, asides and forms makes each of its
ancestors a candidate result; candidates are grouped by parent and by their tag and classes
(the siblings a results template repeats). A group scores by how many distinct links it holds,
how much text each item carries (a title and a snippet, not a menu word) and how many of its
links leave the search site; the best group is the results (a single result counts when it is
a list item or an element whose class names a result). A link through the engine's own
redirect (`/l/?uddg=https://...`) is unwrapped to its target.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SELECTORS_JS = """([r, l, s, n]) => Array.from(document.querySelectorAll(r))
    .map(e => ({url: e.querySelector(l)?.href || "",
                title: (e.querySelector(l)?.innerText || "").trim(),
                snippet: (e.querySelector(s || ':scope > :not(*)')?.innerText || "").trim()}))
    .filter(x => x.url).slice(0, n)"""

GENERIC_JS = """([limit]) => {
  const here = location.hostname;
  const skip = 'nav, header, footer, aside, form, [role=navigation], [role=banner],'
             + ' [role=contentinfo], [role=search]';
  const squash = s => (s || '').replace(/\\s+/g, ' ').trim();
  const text = e => squash(e.innerText || e.textContent);
  const target = a => {
    let u;
    try { u = new URL(a.href); } catch (e) { return ''; }
    if (!/^https?:$/.test(u.protocol)) return '';
    // The engine's own redirect (`/l/?uddg=https://...`): the target is a parameter.
    const hop = u.hostname === here || u.pathname.length <= 6;
    for (const [k, v] of u.searchParams) {
      if (hop && /^(uddg|url|u|q|target|dest)$/.test(k) && /^https?:\\/\\//i.test(v)) return v;
    }
    u.hash = '';
    return u.href;
  };
  const sig = e => e.tagName + '.' + Array.from(e.classList).sort().join('.');
  const groups = new Map();
  for (const a of document.querySelectorAll('a[href]')) {
    if (a.closest(skip)) continue;
    const url = target(a), title = text(a);
    if (!url || title.length < 3) continue;
    for (let item = a; item.parentElement && item !== document.body; item = item.parentElement) {
      const key = item.parentElement;
      let bySig = groups.get(key);
      if (!bySig) groups.set(key, bySig = new Map());
      const s = sig(item);
      let items = bySig.get(s);
      if (!items) bySig.set(s, items = new Map());
      if (!items.has(item)) items.set(item, []);
      items.get(item).push({a, url, title});
    }
  }
  let best = null, bestScore = 0;
  for (const bySig of groups.values()) for (const items of bySig.values()) {
    // A lone result counts only as a list item or an element named as a result.
    const [first] = items.keys();
    const lone = items.size === 1;
    if (lone && !(first.tagName === 'LI' || /result/i.test(first.className))) continue;
    const urls = new Set();
    let chars = 0, external = 0;
    for (const [item, links] of items) {
      urls.add(links[0].url);
      chars += Math.min(text(item).length, 300);
      try { if (new URL(links[0].url).hostname !== here) external++; } catch (e) {}
    }
    const n = items.size;
    const score = urls.size * (1 + chars / n / 60) * (1 + external / n) * (urls.size / n)
                * (lone ? 0.5 : 1);
    if (score > bestScore) { best = items; bestScore = score; }
  }
  if (!best) return {found: 0, results: []};
  const seen = new Set(), results = [];
  for (const [item, links] of best) {
    const link = links.find(l => l.a.closest('h1,h2,h3,h4') || l.a.querySelector('h1,h2,h3,h4'))
              || links[0];
    if (seen.has(link.url)) continue;
    seen.add(link.url);
    let snippet = text(item);
    snippet = squash(snippet.replace(link.title, ' '));
    results.push({url: link.url, title: link.title.slice(0, 300), snippet: snippet.slice(0, 500)});
  }
  return {found: results.length, results: results.slice(0, limit)};
}"""


def searxng_url(url: str) -> str:
    """The instance's search URL asking for JSON (`format=json` added or replaced)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "format"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("format", "json")])))


def searxng_results(body: str, limit: int) -> tuple[list[dict[str, str]], str]:
    """The results of a SearXNG JSON answer, and why there are none when there are none."""
    try:
        doc = json.loads(body)
    except ValueError:
        return [], "the answer is not JSON: is format=json enabled (search.formats)?"
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        return [], "the answer has no results list: not a SearXNG search answer"
    results = []
    for item in doc["results"]:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        results.append(
            {
                "url": item["url"],
                "title": str(item.get("title") or "")[:300],
                "snippet": str(item.get("content") or "")[:500],
                "engines": [str(e) for e in item.get("engines") or []][:10],
            }
        )
    why = ""
    if not results:
        down = [
            str(e[0]) if isinstance(e, list) and e else str(e)
            for e in doc.get("unresponsive_engines") or []
        ]
        why = "SearXNG found no results" + (
            f" (unresponsive engines: {', '.join(down[:5])})" if down else ""
        )
    return results[:limit], why


def results_of(found: Any, limit: int) -> list[dict[str, str]]:
    """Results as the page script returned them, checked for shape."""
    out = []
    for item in found if isinstance(found, list) else []:
        if isinstance(item, dict) and isinstance(item.get("url"), str) and item["url"]:
            out.append(
                {
                    "url": item["url"],
                    "title": str(item.get("title") or ""),
                    "snippet": str(item.get("snippet") or ""),
                }
            )
    return out[:limit]


__all__ = ["GENERIC_JS", "SELECTORS_JS", "results_of", "searxng_results", "searxng_url"]
