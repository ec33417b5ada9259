"""Sphinx configuration of the documentation site (`make docs`): Markdown pages via MyST, the CLI reference from
the click commands (sphinx-click), the Python API from docstrings (autodoc)."""

project = "evalctl"
author = "the evalctl authors"
extensions = ["myst_parser", "sphinx_click", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "tools", "images/*.md"]
myst_heading_anchors = 3  # `[...](retrieval.md#serving-latency)` links to a section
myst_enable_extensions = ["colon_fence"]
autodoc_typehints = "description"
autodoc_member_order = "bysource"
html_theme = "furo"
html_title = "evalctl"
