"""Each benchmark's picture, drawn from its result as the JSON file holds it (pure functions:
result -> matplotlib Figure; bench/harness/plots.py saves it beside the JSON).

- ``figure``: what every picture shares (the figure, its title, None as a gap).
- ``relay_pps``, ``sessions``, ``recovery``: one benchmark's picture each.
- ``cli``: ``rtcedge bench plot FILE.json``, which re-draws a result's picture.
"""
