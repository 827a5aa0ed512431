"""Reports people and programs read: an HTML page per run, JUnit XML, Prometheus metrics, history.

Each format is one module that reads a run record (``report.json``'s
document) and writes one file; none of them prints or exits.
"""
