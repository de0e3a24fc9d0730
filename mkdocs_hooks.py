"""MkDocs hooks for the docs site (mkdocs.yml names this file).

The repository's own policy files live at its root, where GitHub shows them, and docs/ pages link to them there
(`../SECURITY.md`). The site builds them as pages of their own under repository/, so those links work in the built
site too and `mkdocs build --strict` still fails on every other link that leaves docs/.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel

ROOT_PAGES = ("SECURITY.md",)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = Path(config.docs_dir).parent
    for name in ROOT_PAGES:
        page = File.generated(config, f"../{name}", abs_src_path=str(root / name), inclusion=InclusionLevel.NOT_IN_NAV)
        page.dest_uri = f"repository/{Path(name).with_suffix('.html')}"
        files.append(page)
    return files
