"""The Streamlit app's pieces: state <-> URL, widget groups, chart builders, views, report.

Nothing here is imported by `planner` or `catalog`; the app only calls them.
"""
