"""jinja2 templates and the style sheet of ``jim serve`` (package data, see jim.web)."""
