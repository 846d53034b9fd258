"""The engines a sweep can be exported to (see the package docstring); a module of its own so that the CLI's --help
can name them without importing the exporters."""

FORMATS = ("verl", "openrlhf", "openrlhf-legacy")
