"""The grids shipped with mlvp, one YAML file each (`mlvp grids` lists them). In a checkout this is the top-level
grids/; pyproject.toml installs it as the package `orchestrator.grids`, whose files orchestrator/config/shipped.py
reads. A package (this file) rather than a namespace, so that an editable install maps it too."""
