"""Simulator data: highway-env scenarios driven by its own IDM/MOBIL expert, a multi-camera
pinhole renderer of the world state, driving-schema labels, bags and data sets.

Everything here speaks REP-103 (x forward, y left, z up). highway-env's own frame has +y to
the driver's right at heading 0 (and headings grow clockwise seen from above); `world.py`
converts at the boundary and nothing else in this package sees highway-env coordinates.
Needs the optional `sim` dependencies (highway-env) only for `scenarios.py`/`episode.py`.
"""
