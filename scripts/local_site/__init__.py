"""A small local web site for the offline demo and the browser tests.

Pages on one topic (the lighthouses of the fictional Isle of Varn) with known facts, a search
page, binary files, an access challenge, a captcha-like page, a redirect loop, a page that
never finishes loading, a large page, a non-UTF-8 page and a page whose text JavaScript writes.
Run `python -m scripts.local_site [--port N]`; it prints `SITE http://127.0.0.1:PORT`.
"""
