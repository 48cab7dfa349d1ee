"""The `memory` dialect: episodes, facts and rules, as the butlers memory
module's tools. ``tools.py``: the dialect and its tools."""
