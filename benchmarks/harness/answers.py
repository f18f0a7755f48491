"""What an HTTP answer said, for an error message or a report: its text on one line and cut short,
and never a whole web page (a 404 page of a proxy or a web server in front of the service)."""

from __future__ import annotations

HTML_PAGE = "(an HTML page, not an answer of the service's API: is the URL the service's base URL?)"


def body_text(text: str, limit: int = 300) -> str:
    if text.lstrip()[:1] == "<":
        return HTML_PAGE
    return " ".join(text.split())[:limit]
