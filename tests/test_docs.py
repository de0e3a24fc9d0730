"""The documentation stays whole: every link leads somewhere in the repository, nothing cites a document the
repository does not have, and the reference pages name everything the code reads."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from checkpoints.registry.detectors import DETECTORS, defaults, thresholds
from checkpoints.registry.formats import FORMATS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

# Documents that were never in the repository: a contributor cannot open them. Spelled in pieces so that this
# file does not match itself.
OUTSIDE = re.compile("DESIGN" + r"(\.md|\s+section)" + "|" + "TOOL" + "CHAIN" + "|" + r"\.\./" + "shared")

CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# Where the code reads the environment: os.environ.get("X"), os.environ["X"] (not assigned), os.getenv("X"),
# and settings.py's env_int / env_bool / env_list.
ENV_READS = re.compile(
    r"""os\.environ\.get\(\s*["'](\w+)|os\.environ\[\s*["'](\w+)["']\s*\](?!\s*=[^=])|os\.getenv\(\s*["'](\w+)"""
    r"""|\benv_(?:int|bool|list)\(\s*["'](\w+)"""
)
CODE_DIRS = ["config", "checkpoints", "dashboard", "clients/python/checkpoint_console"]


def tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout  # noqa: S607 - whichever git is on PATH
    return [ROOT / name for name in listed.decode().split("\0") if name]


def links(page: Path) -> list[str]:
    """Relative link targets of a markdown page, without their anchors; links inside code are not links."""
    text = CODE.sub("", page.read_text(encoding="utf-8"))
    targets = [target.split("#", 1)[0] for target in LINK.findall(text)]
    return [target for target in targets if target and not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def environment_reads() -> set[str]:
    sources = [ROOT / "manage.py", *(path for folder in CODE_DIRS for path in (ROOT / folder).rglob("*.py"))]
    names = set()
    for path in sources:
        for match in ENV_READS.finditer(path.read_text(encoding="utf-8")):
            names.add(next(group for group in match.groups() if group))
    return names | set(defaults())  # config/settings.py reads each threshold a detector declares


def table_names(text: str) -> set[str]:
    """The names in the first column of the page's tables (`| `NAME` | …`)."""
    return set(re.findall(r"^\| `(\w+)`", text, re.MULTILINE))


def test_no_tracked_file_cites_a_document_the_repository_does_not_have():
    citing = []
    for path in tracked_files():
        if not path.is_file():
            continue  # deleted in the work tree, not yet in the index
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary fixtures
        citing += [f"{path.relative_to(ROOT)}: {match.group(0)}" for match in OUTSIDE.finditer(text)]
    assert citing == []


def test_every_relative_link_in_the_readme_and_the_docs_leads_to_a_file():
    broken = [
        f"{page.relative_to(ROOT)} → {target}"
        for page in PAGES
        for target in links(page)
        if not (page.parent / target).resolve().exists()
    ]
    assert broken == []
    assert "docs/getting-started.md" in links(ROOT / "README.md")  # the check reads the README's links at all


def test_the_readme_still_states_the_test_command_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.DOTALL)
    assert any(line.split("#")[0].strip() == "make test" for block in blocks for line in block.splitlines())
    assert re.search(r"^test:", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)


def test_the_configuration_page_names_every_environment_variable_the_code_reads():
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    read = environment_reads()
    assert {"DATABASE_URL", "SECRET_KEY", "DRIFT_WINDOW", "PORT"} <= read  # the scan finds them at all
    assert sorted(read - table_names(page)) == []


def test_the_configuration_page_names_no_setting_the_code_does_not_read():
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    settings_part = page.split("## Outside the settings")[0]  # the last table: what tools and compose read
    assert sorted(table_names(settings_part) - environment_reads()) == []


def test_the_formats_page_lists_every_registered_format():
    page = (DOCS / "formats.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    assert [spec.name for spec in FORMATS if not any(f"(`{spec.name}`)" in row for row in rows)] == []
    assert f"--format auto|{'|'.join(FORMATS.names())}]" in page  # the import command's synopsis


def drift_setting_rows() -> list[str]:
    """docs/configuration.md's drift table as the detectors' declarations make it."""
    rows = []
    for spec, threshold in thresholds():
        who = "" if spec is None else f"`{spec.name}`{f' ({spec.origin})' if spec.origin else ''}: "
        rows.append(f"| `{threshold.setting}` | {threshold.shown_default} | {who}{threshold.meaning} |")
    return rows


def test_the_configuration_page_lists_each_drift_threshold_as_declared():
    """The table is the registry's (checkpoints/registry/detectors.py): a detector declared with a threshold
    fails this until its row is in, and the expected rows are printed to paste."""
    section = (DOCS / "configuration.md").read_text(encoding="utf-8").split("## Drift detection", 1)[1]
    section = section.split("\n## ", 1)[0]
    assert [line for line in section.splitlines() if line.startswith("| `")] == drift_setting_rows()


def test_the_drift_page_describes_every_detector_and_its_thresholds():
    page = (DOCS / "drift.md").read_text(encoding="utf-8")
    rows = [line.split(" | ")[0] for line in page.splitlines() if line.startswith("| `")]
    assert [spec.name for spec in DETECTORS if not any(f"`{spec.name}`" in row for row in rows)] == []
    missing = [
        f"`{threshold.setting}` ({threshold.shown_default})"
        for spec, threshold in thresholds()
        if spec is not None and f"`{threshold.setting}` ({threshold.shown_default})" not in page
    ]
    assert missing == []


def test_commands_in_the_docs_run_with_the_projects_interpreter():
    """The system Python has no Django: a command a reader copies names .venv/bin/python (or runs in compose)."""
    bare = re.compile(r"(?<![\w/.])python (manage\.py|bench/)")
    found = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in PAGES
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for match in bare.finditer(line)
        if not line[: match.start()].rstrip().endswith(("exec web", "exec worker", "exec beat"))
    ]
    assert found == []


IMAGES = DOCS / "images"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
GUIDE_SHOT_MAX_BYTES = 150_000  # a window-sized 256-colour PNG is 20-65 KB; a full page or true colour is not


def guide_shots() -> dict[str, str]:
    """The names the browser tests shoot for the guide (`screenshot("name", guide=True)`), with where."""
    shots: dict[str, str] = {}
    for path in sorted((ROOT / "tests" / "browser").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "screenshot"):
                continue
            guide = next((kw.value for kw in node.keywords if kw.arg == "guide"), None)
            if isinstance(guide, ast.Constant) and guide.value is True:
                name = node.args[0]
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                assert isinstance(name, ast.Constant) and isinstance(name.value, str), f"{where}: name it literally"
                assert name.value not in shots, f"{where}: {name.value} is shot at {shots.get(name.value)} too"
                shots[name.value] = where
    return shots


def referenced_images() -> set[Path]:
    return {
        (page.parent / target).resolve()
        for page in PAGES
        for target in IMAGE.findall(CODE.sub("", page.read_text(encoding="utf-8")))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)
    }


def test_every_image_the_docs_show_is_in_the_repository():
    shown = referenced_images()
    assert (IMAGES / "overview.png").resolve() in shown  # the scan finds the guide's pictures at all
    assert sorted(str(path) for path in shown if not path.is_file()) == []


def test_every_guide_screenshot_the_browser_tests_take_is_committed_and_shown():
    shots = guide_shots()
    assert {"overview", "sessions-phone", "overview-dark", "audit-log"} <= set(shots)  # the scan finds them
    shown = referenced_images()
    missing = [f"{name} ({where})" for name, where in shots.items() if not (IMAGES / f"{name}.png").is_file()]
    unshown = [name for name in shots if (IMAGES / f"{name}.png").resolve() not in shown]
    assert missing == [], "run the browser tests once with UPDATE_SCREENSHOTS=1"
    assert unshown == []


def test_the_guide_holds_no_picture_that_no_test_takes_and_none_too_big():
    shots = guide_shots()
    assert sorted(path.name for path in IMAGES.glob("*") if path.stem not in shots) == []
    big = {path.name: path.stat().st_size for path in IMAGES.glob("*.png")}
    assert {name: size for name, size in big.items() if size > GUIDE_SHOT_MAX_BYTES} == {}
