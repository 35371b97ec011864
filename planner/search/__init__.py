"""The planner search: best plans for an objective on a mixed cluster, with baselines.

    from planner.search import search, SearchOptions, SearchResult, ScoredPlan, PLANNERS
"""
from planner.search.planners import PLANNERS, SearchOptions
from planner.search.search import ScoredPlan, SearchResult, search

__all__ = ["search", "SearchOptions", "SearchResult", "ScoredPlan", "PLANNERS"]
