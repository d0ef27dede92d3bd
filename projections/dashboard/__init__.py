"""What the dashboard reads from the read model.

- ``queries``: the figures and lists of its pages;
- ``charts``: the series its charts draw.
"""
